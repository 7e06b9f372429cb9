"""Three kinds of statement, each printed with its own mark so the reader can tell them apart.

    check(...)      "✓ <claim> — measured: <value>"            a measurement: evidence, which would fail if the
                                                               claim were false (and raises ClaimFailed if so)
    identity(...)   "≡ identity: <claim> — checked: <value>"   a derivation or a property true by construction,
                                                               checked numerically: it guards the code, it is not
                                                               evidence, and it is never counted as such
    quote(...)      "❝ quoted: <figure> — <source>"            a figure from a paper, with its table or section

A claim about one checkpoint's own numbers takes holds_for="all-MiniLM-L6-v2": on that model it is an ordinary
check; when $QALIB_MODEL loads another one it prints "⊘ skipped: ..." instead (neither evidence nor failure).

A measurement says how far it is from failing, its margin: positive when it holds, in the measurement's own units.
A threshold comparison gives both the verdict and the margin, so that the threshold is written once:
    check("every seed at 0.95 or above", at_least(acc.min(), 0.95), acc)     margin: acc.min() - 0.95
    above(x, t): x > t    at_least(x, t): x >= t    below(x, t): x < t    at_most(x, t): x <= t    between(x, lo, hi)
An array or tensor holds when every element does (its margin is the worst element's), and `a & b` holds when both
do (the smaller margin). A condition that is no such comparison stays a bool, and may give check(..., margin=...).
Nothing is printed for the margin; the robustness sweep (`python -m qalib.tools.robustness`) reads it from the log
below and reports the worst margin over seed sets and CPU kernels.

Two environment variables, both unset by default (and then nothing here behaves differently):
    QALIB_CLAIMS_LOG=<path.jsonl>   every check and identity appends one JSON line (claim, kind, holds, measured,
                                    margin, the cell it ran in and its order there)
    QALIB_CLAIMS_KEEP_GOING=1       a claim that does not hold prints "✘ <claim> — measured: <value>" (and is logged)
                                    instead of raising ClaimFailed, so the notebook's later claims still run

Executing the notebooks in the test suite verifies every measurement and identity they print; the ✓ lines of an
executed notebook, and only they, count its measurements. notebooks/REVIEWING.md says which kind a statement is.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

TICK = "\u2713"       # ✓ a measurement
IDENTITY = "\u2261"   # ≡ an identity, checked numerically
QUOTE = "\u275d"      # ❝ a quoted figure
SKIP = "\u2298"       # ⊘ a model-specific claim skipped on another model
FAILED = "\u2718"     # ✘ a claim that did not hold, printed only in keep-going mode
MARKS = (TICK, IDENTITY, QUOTE)
LOG_ENV = "QALIB_CLAIMS_LOG"
KEEP_GOING_ENV = "QALIB_CLAIMS_KEEP_GOING"


class ClaimFailed(AssertionError):
    """A claim made in a notebook did not hold for the measured value."""


@dataclass(frozen=True)
class CheckedClaim:
    claim: str
    measured: object
    kind: str = "measurement"  # or "identity"
    holds: bool = True         # False only in keep-going mode, where a failed claim is printed instead of raised

    def __str__(self) -> str:
        if self.kind == "identity":
            mark = IDENTITY if self.holds else FAILED
            return f"{mark} identity: {self.claim} — checked: {format_value(self.measured)}"
        return f"{TICK if self.holds else FAILED} {self.claim} — measured: {format_value(self.measured)}"

    def _ipython_display_(self) -> None:
        """The tick line was already printed; a check at the end of a cell adds no Out[] echo."""


def format_value(value: object) -> str:
    """Readable numbers: 4 significant digits, arrays shortened, tensors as lists."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.size == 1:
            value = value.item()
        else:
            with np.printoptions(precision=4, suppress=False, threshold=12, edgeitems=4):
                return np.array2string(value, separator=", ")
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float, np.number)) for v in value):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (np.ndarray, torch.Tensor, dict)) for v in value):
        return "[" + ", ".join(format_value(v) for v in value) + "]"  # not the arrays' repr ("array([...])")
    return str(value)


@dataclass(frozen=True)
class Condition:
    """A threshold comparison worked out once: whether it holds, and its margin (how far the value is from failing,
    in the value's own units, >= 0 when it holds; None where it is undefined, as for a NaN). Made by above,
    at_least, below, at_most and between; `a & b` holds when both do, with the smaller margin. It is no bool
    (`a and b` would drop a's verdict): check takes it in place of one."""
    holds: bool
    margin: float | None

    def __post_init__(self) -> None:
        if not isinstance(self.holds, bool):
            raise TypeError(f"Condition.holds must be a bool, got {type(self.holds).__name__}")
        if self.margin is not None and not isinstance(self.margin, float):
            raise TypeError(f"Condition.margin must be a float or None, got {type(self.margin).__name__}")

    def __and__(self, other: Condition) -> Condition:
        if not isinstance(other, Condition):
            raise TypeError(_NOT_A_CONDITION.format(type(other).__name__))
        margin = None if self.margin is None or other.margin is None else min(self.margin, other.margin)
        return Condition(self.holds and other.holds, margin)

    def __rand__(self, other: object) -> Condition:
        raise TypeError(_NOT_A_CONDITION.format(type(other).__name__))

    def __bool__(self) -> bool:
        raise TypeError("a Condition is not a bool: combine two with & (not `and`), and pass it to check as it is")


_NOT_A_CONDITION = "& combines two Conditions (above, at_least, below, at_most, between), got {}; a bool has no margin"


def above(value, threshold) -> Condition:
    """value > threshold, for every element of an array or tensor; margin: the smallest value - threshold."""
    return _compare("above", value, threshold, operator.gt, operator.sub)


def at_least(value, threshold) -> Condition:
    """value >= threshold, for every element; margin: the smallest value - threshold (0 at equality, which holds)."""
    return _compare("at_least", value, threshold, operator.ge, operator.sub)


def below(value, threshold) -> Condition:
    """value < threshold, for every element of an array or tensor; margin: the smallest threshold - value."""
    return _compare("below", value, threshold, operator.lt, _distance_below)


def at_most(value, threshold) -> Condition:
    """value <= threshold, for every element; margin: the smallest threshold - value (0 at equality, which holds)."""
    return _compare("at_most", value, threshold, operator.le, _distance_below)


def between(value, low, high) -> Condition:
    """low < value < high, for every element; margin: the smaller of the distances to the two bounds."""
    low, high = _operand("between", "low", low), _operand("between", "high", high)
    with np.errstate(invalid="ignore"):  # a NaN bound is no error here: nothing lies between it, so the claim fails
        inverted = bool(np.any(_as_numpy(low) >= _as_numpy(high)))
    if inverted:
        raise ValueError(f"between: low must be below high, got low={format_value(low)}, high={format_value(high)}")
    return (_compare("between", value, low, operator.gt, operator.sub)
            & _compare("between", value, high, operator.lt, _distance_below))


def _distance_below(value, threshold):
    return threshold - value


def _compare(name: str, value, threshold, holds: Callable, distance: Callable) -> Condition:
    """The comparison and the distance, element-wise in the value's own type (a float32 tensor compares and subtracts
    in float32, as `acc > 0.95` and `acc - 0.95` do), reduced to all() and the smallest distance. A NaN compares
    False, so it never holds, and its distance is NaN, so its margin is None."""
    value = _operand(name, "value", value)
    threshold = _operand(name, "threshold", threshold)
    if isinstance(value, torch.Tensor) and isinstance(threshold, np.ndarray):
        threshold = torch.as_tensor(threshold, device=value.device)
    elif isinstance(threshold, torch.Tensor) and isinstance(value, np.ndarray):
        threshold = threshold.detach().cpu().numpy()
    try:
        with np.errstate(invalid="ignore"):
            ok, gap = holds(value, threshold), distance(value, threshold)
    except (ValueError, RuntimeError) as err:  # shapes that do not broadcast (numpy: ValueError, torch: RuntimeError)
        raise ValueError(f"{name}: value shape {tuple(np.shape(value))} and threshold shape "
                         f"{tuple(np.shape(threshold))} do not match") from err
    if isinstance(ok, torch.Tensor):
        return Condition(bool(ok.all()), _margin(gap.min()))
    return Condition(bool(np.all(ok)), _margin(np.min(gap)))


def _operand(name: str, what: str, x):
    """A real number, a numpy array of them (a list or tuple becomes one) or a tensor; never a bool, never empty."""
    if isinstance(x, (list, tuple)):
        try:
            x = np.asarray(x)
        except ValueError as err:
            raise TypeError(f"{name}: {what} must be a number, a numpy array or a tensor; this list is ragged") from err
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating, np.ndarray,
                                                            torch.Tensor)):
        hint = " (a comparison already made? pass the number it compares)" if isinstance(x, (bool, np.bool_)) else ""
        raise TypeError(f"{name}: {what} must be a number, a numpy array or a tensor, got {type(x).__name__}{hint}")
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bool or x.is_complex():
            raise TypeError(f"{name}: {what} must hold real numbers, got a {x.dtype} tensor")
        if x.numel() == 0:
            raise ValueError(f"{name}: {what} is empty; a comparison needs at least one number")
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "iuf":
            raise TypeError(f"{name}: {what} must hold real numbers, got an array of dtype {x.dtype}")
        if x.size == 0:
            raise ValueError(f"{name}: {what} is empty; a comparison needs at least one number")
    return x


def _as_numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def check(claim: str, holds: bool | Condition, measured: object = None, *, holds_for: str | None = None,
          margin: float | None = None) -> CheckedClaim | None:
    """A measurement: print a tick line if `holds`, otherwise raise ClaimFailed naming the claim and the value.
    Use it only where `holds` could come out False if the claim about the world (BERT, training, the paper) were
    false; an identity or arithmetic goes through `identity`. holds_for: see `skipped`.
    holds: a bool, or a Condition (`at_least(acc.min(), 0.95)`), which gives the margin too.
    margin: with a bool only, how far the measured statistic is from failing, > 0 when it holds, in its own units
    (e.g. `acc.min() - 0.95`); only logged (QALIB_CLAIMS_LOG), never printed."""
    holds, margin = _verdict(holds, margin)
    if skipped(claim, holds_for):
        return None
    return _verify(claim, holds, measured, "measurement", _margin(margin))


def _verdict(holds, margin) -> tuple[object, object]:
    """(holds, margin) from a Condition; a bool and its margin as they are."""
    if not isinstance(holds, Condition):
        return holds, margin
    if margin is not None:
        raise TypeError("margin= given with a Condition: the condition already gives the margin")
    return holds.holds, holds.margin


def identity(claim: str, holds: bool, checked: object = None, *, holds_for: str | None = None) -> CheckedClaim | None:
    """A derivation checked numerically (an identity, arithmetic, a property true by construction): printed with
    "≡ identity:", not a tick, and not counted as a measurement. It still raises ClaimFailed if it does not hold,
    which means the code, not the world, is wrong."""
    return None if skipped(claim, holds_for) else _verify(claim, holds, checked, "identity")


def quote(figure: str, source: str) -> str:
    """A figure taken from a paper, printed as quoted with its source (paper, table or section); nothing is checked."""
    for name, text in (("figure", figure), ("source", source)):
        if not isinstance(text, str) or not text.strip():
            raise TypeError(f"{name} must be a non-empty string (a quote names its paper and table or section)")
    line = f"{QUOTE} quoted: {figure} — {source}"
    print(line)
    return line


def _verify(claim: str, holds: bool, measured: object, kind: str, margin: float | None = None) -> CheckedClaim:
    if not isinstance(claim, str) or not claim.strip():
        raise TypeError("claim must be a non-empty string describing what is being checked")
    if isinstance(holds, torch.Tensor):
        if holds.numel() != 1:
            raise TypeError("holds must be a single boolean; reduce the tensor with .all() or .any() first")
        holds = bool(holds.item())
    if isinstance(holds, np.ndarray):
        if holds.size != 1:
            raise TypeError("holds must be a single boolean; reduce the array with .all() or .any() first")
        holds = bool(holds.item())
    if not isinstance(holds, (bool, np.bool_)):
        raise TypeError(f"holds must be a bool, got {type(holds).__name__}")
    result = CheckedClaim(claim, measured, kind, bool(holds))
    log = os.environ.get(LOG_ENV)
    if log:
        _log(Path(log), result, margin)
    if not holds and not _keep_going():
        what = "claim does not hold" if kind == "measurement" else "identity does not hold (a bug in the code)"
        raise ClaimFailed(f"{what}: {claim} — measured: {format_value(measured)}")
    from qalib.notebook.quiet import show  # here: quiet imports this module's marks

    show(result)
    return result


def _keep_going() -> bool:
    value = os.environ.get(KEEP_GOING_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{KEEP_GOING_ENV} must be 0 or 1 (or unset), got {value!r}")
    return value == "1"


def _margin(margin) -> float | None:
    """A margin as a float; NaN or inf (from a NaN measurement, whose claim then fails anyway) is kept as None,
    so that an undefined margin never stops a notebook that would otherwise run."""
    if margin is None:
        return None
    if isinstance(margin, torch.Tensor):
        margin = margin.detach().cpu().numpy()
    if isinstance(margin, np.ndarray):
        if margin.size != 1:
            raise TypeError("margin must be a single number; reduce the tensor (e.g. acc.min() - 0.95) first")
        margin = margin.item()
    if not isinstance(margin, (int, float, np.integer, np.floating)) or isinstance(margin, (bool, np.bool_)):
        raise TypeError(f"margin must be a number (how far the measurement is from failing), got {margin!r}")
    margin = float(margin)
    return margin if math.isfinite(margin) else None


# The order of the statements in this process, per cell: the key by which a sweep matches a claim across runs.
_order: dict[object, int] = {}


def _cell() -> int | None:
    """The number n of the running IPython cell, In [n] (in a top-to-bottom run, the n-th code cell), or None
    outside IPython. IPython (7 and later, run_cell_async) counts up before it runs the cell, hence the - 1."""
    try:
        from IPython import get_ipython  # here: only logging needs it, and IPython is not a core dependency
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else int(shell.execution_count) - 1


def _log(path: Path, result: CheckedClaim, margin: float | None) -> None:
    cell = _cell()
    order = _order.get(cell, 0)
    _order[cell] = order + 1
    record = {"claim": result.claim, "kind": result.kind, "holds": result.holds,
              "measured": jsonable(result.measured), "printed": format_value(result.measured),
              "margin": margin, "cell": cell, "order": order}
    with path.open("a", encoding="utf-8") as f:  # one write per line: a killed kernel leaves whole lines behind
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def jsonable(value: object, max_items: int = 64) -> object:
    """value as JSON: numbers, bools, strings, lists and dicts as they are; tensors and arrays as (nested) lists of
    numbers up to max_items elements, larger ones as their printed form; NaN and inf as the strings "nan", "inf"
    and "-inf" (strict JSON has no such numbers); anything else as format_value prints it."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.size > max_items:
            return format_value(value)
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, max_items) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and len(value) <= max_items:
        return [jsonable(v, max_items) for v in value]
    return format_value(value)


def check_close(claim: str, measured, expected, *, rtol: float = 1e-5, atol: float = 0.0,
                holds_for: str | None = None) -> CheckedClaim | None:
    """Claim that `measured` equals `expected` within rtol/atol (element-wise for arrays).

    NaN never counts as close: a NaN measurement fails the claim.
    """
    return None if skipped(claim, holds_for) else _close(claim, measured, expected, rtol, atol, check)


def identity_close(claim: str, value, expected, *, rtol: float = 1e-5, atol: float = 0.0,
                   holds_for: str | None = None) -> CheckedClaim | None:
    """An identity checked numerically to rtol/atol (two ways of computing the same thing agree)."""
    return None if skipped(claim, holds_for) else _close(claim, value, expected, rtol, atol, identity)


def _close(claim, measured, expected, rtol, atol, report) -> CheckedClaim:
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    m = _as_array(measured)
    e = _as_array(expected)
    try:
        ok = bool(np.all(np.isfinite(m)) and np.allclose(m, e, rtol=rtol, atol=atol))
    except ValueError as err:  # shapes do not broadcast
        raise ValueError(f"check_close: measured shape {m.shape} and expected shape {e.shape} do not match") from err
    shown = measured if m.size > 1 else float(m.reshape(-1)[0])
    tol = f"rtol={rtol:g}" + (f", atol={atol:g}" if atol else "")
    return report(f"{claim} (expected {format_value(expected)}, {tol})", ok, shown)


def check_all(claim: str, conditions: Iterable[bool | Condition], measured: object = None, *,
              holds_for: str | None = None, margin: float | None = None) -> CheckedClaim | None:
    """Claim that every one of several conditions holds (e.g. one per d_k or per seed): all bools, or all
    Conditions, whose margin is the worst one's. margin: with bools only, as in `check`, for the worst condition
    (e.g. `min(accs) - 0.9`)."""
    if isinstance(conditions, Condition):
        raise TypeError("check_all takes a list of conditions; one Condition (over every element of an array too) "
                        "goes to check")
    conditions = list(conditions)
    if not conditions:
        raise ValueError("check_all needs at least one condition")
    given = [isinstance(c, Condition) for c in conditions]
    if any(given):
        if not all(given):
            raise TypeError("check_all: give every condition as a Condition (above, below, ...) or none of them; "
                            "a bool has no margin")
        return check(claim, functools.reduce(operator.and_, conditions), measured, holds_for=holds_for, margin=margin)
    return check(claim, all([bool(c) for c in conditions]), measured, holds_for=holds_for, margin=margin)


def skipped(claim: str, holds_for: str | None) -> bool:
    """For a claim about one checkpoint's own weights (holds_for names it): when the real model is another one
    ($QALIB_MODEL), print a "⊘ skipped" line and return True (the caller returns None, checking nothing);
    otherwise (or with holds_for=None) return False, and the caller checks the claim as usual. The MiniLM run prints exactly the lines it would without holds_for."""
    if holds_for is None:
        return False
    if not isinstance(holds_for, str) or not holds_for.strip():
        raise TypeError("holds_for must name the model the claim is about, e.g. 'all-MiniLM-L6-v2'")
    from qalib.nn.pretrained import ENV_VAR, real_model_name  # here: only model-specific claims need the loader

    if real_model_name() == holds_for:
        return False
    print(f"{SKIP} skipped: {claim} — this claim is about {holds_for}'s weights "
          f"({ENV_VAR}={os.environ.get(ENV_VAR)} loads {real_model_name()})")
    return True


def _as_array(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float)
    if arr.size == 0:
        raise ValueError("check_close got an empty value")
    return arr

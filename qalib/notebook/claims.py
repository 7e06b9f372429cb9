"""Three kinds of statement, each printed with its own mark so the reader can tell them apart.

    check(...)      "✓ <claim> — measured: <value>"            a measurement: evidence, which would fail if the
                                                               claim were false (and raises ClaimFailed if so)
    identity(...)   "≡ identity: <claim> — checked: <value>"   a derivation or a property true by construction,
                                                               checked numerically: it guards the code, it is not
                                                               evidence, and it is never counted as such
    quote(...)      "❝ quoted: <figure> — <source>"            a figure from a paper, with its table or section

A claim about one checkpoint's own numbers takes holds_for="all-MiniLM-L6-v2": on that model it is an ordinary
check; when $QALIB_MODEL loads another one it prints "⊘ skipped: ..." instead (neither evidence nor failure).

A measurement may say how far it is from failing: check(..., margin=acc.min() - 0.95), positive when it holds, in
the measurement's own units. Nothing is printed for it; the robustness sweep (`python -m qalib.tools.robustness`)
reads it from the log below and reports the worst margin over seed sets and CPU kernels.

Two environment variables, both unset by default (and then nothing here behaves differently):
    QALIB_CLAIMS_LOG=<path.jsonl>   every check and identity appends one JSON line (claim, kind, holds, measured,
                                    margin, the cell it ran in and its order there)
    QALIB_CLAIMS_KEEP_GOING=1       a claim that does not hold prints "✘ <claim> — measured: <value>" (and is logged)
                                    instead of raising ClaimFailed, so the notebook's later claims still run

Executing the notebooks in the test suite verifies every measurement and identity they print; the ✓ lines of an
executed notebook, and only they, count its measurements. notebooks/REVIEWING.md says which kind a statement is.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
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
    return str(value)


def check(claim: str, holds: bool, measured: object = None, *, holds_for: str | None = None,
          margin: float | None = None) -> CheckedClaim | None:
    """A measurement: print a tick line if `holds`, otherwise raise ClaimFailed naming the claim and the value.
    Use it only where `holds` could come out False if the claim about the world (BERT, training, the paper) were
    false; an identity or arithmetic goes through `identity`. holds_for: see `skipped`.
    margin: how far the measured statistic is from failing, > 0 when it holds, in its own units (e.g.
    `acc.min() - 0.95`); only logged (QALIB_CLAIMS_LOG), never printed."""
    if skipped(claim, holds_for):
        return None
    return _verify(claim, holds, measured, "measurement", _margin(margin))


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
    print(result)
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


def check_all(claim: str, conditions: Iterable[bool], measured: object = None, *,
              holds_for: str | None = None, margin: float | None = None) -> CheckedClaim | None:
    """Claim that every one of several conditions holds (e.g. one per d_k or per seed). margin: as in `check`, for
    the worst condition (e.g. `min(accs) - 0.9`)."""
    conditions = [bool(c) for c in conditions]
    if not conditions:
        raise ValueError("check_all needs at least one condition")
    return check(claim, all(conditions), measured, holds_for=holds_for, margin=margin)


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

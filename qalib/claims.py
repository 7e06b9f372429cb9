"""Claim checks: a notebook states a claim, the next cell measures it and calls `check`.

`check` prints one line, "✓ <claim> — measured: <value>", and raises ClaimFailed if the claim does
not hold. Executing the notebooks in the test suite therefore verifies every claim they make, and
counting the ✓ lines in an executed notebook counts its verified claims.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

TICK = "\u2713"


class ClaimFailed(AssertionError):
    """A claim made in a notebook did not hold for the measured value."""


@dataclass(frozen=True)
class CheckedClaim:
    claim: str
    measured: object

    def __str__(self) -> str:
        return f"{TICK} {self.claim} — measured: {format_value(self.measured)}"

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


def check(claim: str, holds: bool, measured: object = None) -> CheckedClaim:
    """Print a tick line if `holds`, otherwise raise ClaimFailed naming the claim and the measurement."""
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
    result = CheckedClaim(claim, measured)
    if not holds:
        raise ClaimFailed(f"claim does not hold: {claim} — measured: {format_value(measured)}")
    print(result)
    return result


def check_close(claim: str, measured, expected, *, rtol: float = 1e-5, atol: float = 0.0) -> CheckedClaim:
    """Claim that `measured` equals `expected` within rtol/atol (element-wise for arrays).

    NaN never counts as close: a NaN measurement fails the claim.
    """
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
    return check(f"{claim} (expected {format_value(expected)}, {tol})", ok, shown)


def check_all(claim: str, conditions: Iterable[bool], measured: object = None) -> CheckedClaim:
    """Claim that every one of several conditions holds (e.g. one per d_k or per seed)."""
    conditions = [bool(c) for c in conditions]
    if not conditions:
        raise ValueError("check_all needs at least one condition")
    return check(claim, all(conditions), measured)


def _as_array(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float)
    if arr.size == 0:
        raise ValueError("check_close got an empty value")
    return arr

"""Argument checks shared by the topic modules: a bad value raises ValueError naming the argument and its range."""

from __future__ import annotations

import numpy as np


def int_in(name: str, value, lo: int, hi: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")
    return int(value)


def float_in(name: str, value, lo: float, hi: float) -> float:
    if not isinstance(value, (int, float, np.floating)) or isinstance(value, bool) or not lo <= float(value) <= hi:
        raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def int_at_least(name: str, value, lo: int) -> int:
    """An int >= lo with no upper bound (a count such as max_new_tokens)."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
    return int(value)


def float_above(name: str, value, lo: float, hi: float = float("inf")) -> float:
    """A finite number in (lo, hi]: lo itself excluded (a temperature > 0, a top_p in (0, 1])."""
    if (not isinstance(value, (int, float, np.floating)) or isinstance(value, bool) or not np.isfinite(value)
            or not lo < float(value) <= hi):
        allowed = f"in ({lo}, {hi}]" if np.isfinite(hi) else f"> {lo}"
        raise ValueError(f"{name} must be a finite number {allowed}, got {value!r}")
    return float(value)

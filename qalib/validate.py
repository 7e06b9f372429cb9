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

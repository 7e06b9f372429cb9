"""Helpers for the tests and the benchmark: is every number of a compute result finite, and which values can a
user give a demo's control."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ipywidgets as W
import numpy as np


def finite_values(result: Any) -> bool:
    """True if every number inside a compute result (nested dicts, lists, arrays, tensors) is finite."""
    import torch

    if isinstance(result, torch.Tensor):
        return bool(torch.isfinite(result.float()).all()) if result.is_floating_point() else True
    if isinstance(result, np.ndarray):
        return bool(np.isfinite(result).all()) if np.issubdtype(result.dtype, np.number) else True
    if isinstance(result, (float, int, np.number)) and not isinstance(result, bool):
        return bool(np.isfinite(result))
    if isinstance(result, Mapping):
        return all(finite_values(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return all(finite_values(v) for v in result)
    if hasattr(result, "__dataclass_fields__"):
        return all(finite_values(getattr(result, f)) for f in result.__dataclass_fields__)
    return True


def sweep_values(control: W.ValueWidget, n: int = 6) -> list[Any]:
    """Values a user could give a control: both ends of its range and points between (for tests and the benchmark)."""
    if isinstance(control, (W.Dropdown, W.RadioButtons, W.ToggleButtons, W.SelectionSlider, W.Select)):
        values = [v if not isinstance(v, tuple) else v[1] for v in control.options]
        return [values[i % len(values)] for i in range(max(n, len(values)))]
    if isinstance(control, (W.Checkbox, W.ToggleButton)):
        return [not control.value, control.value] * max(1, n // 2)
    if isinstance(control, (W.FloatLogSlider,)):
        exps = np.linspace(control.min, control.max, n)
        return [float(control.base ** e) for e in exps]
    if isinstance(control, (W.IntSlider, W.BoundedIntText)):
        return sorted({int(round(v)) for v in np.linspace(control.min, control.max, n)})
    if isinstance(control, (W.FloatSlider, W.BoundedFloatText)):
        return [float(v) for v in np.linspace(control.min, control.max, n)]
    if isinstance(control, (W.IntRangeSlider, W.FloatRangeSlider)):
        lo, hi = control.min, control.max
        return [(lo, hi), (lo, lo + (hi - lo) / 2), (lo + (hi - lo) / 2, hi)]
    if isinstance(control, (W.Text, W.Textarea)):  # typing on: a short and a long clause added, then the text again
        text = control.value
        return [f"{text} Then it rained.", f"{text} It was late, and the long road home was dark.", text]
    return [control.value]

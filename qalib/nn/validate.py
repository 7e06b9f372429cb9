"""The one place that checks function arguments.

A bad value raises ValueError in one format, "{name} must be {what} {range}, got {value!r}", for example
"d_k must be an int in [1, 4096], got 0" or "factor must be a finite number > 0, got nan". An int is a Python
or numpy integer, never a bool (True is not a size); a number is an int or a float (numpy too), never a bool,
never NaN or inf. Each check returns the value as a plain int or float. `choice` and `choices` check named
options ("init must be one of ['t2t', 'xavier'], got 'kaiming'").

Quantities that several modules take have one rule here: `sinusoid_base`, `sinusoid_width`, `seed_int` and
`seed_list`. Slider values become ints in one place, `slider_int`, before a demo passes them to a compute
function, which itself takes ints only.
"""

from __future__ import annotations

import math

import numpy as np

SEED_MAX = 2**32 - 1  # the largest seed: numpy's legacy generator's limit, so that every seed also works in seed_everything


def int_in(name: str, value, lo: int, hi: int | None = None, *, even: bool = False) -> int:
    """value as an int in [lo, hi] (hi None: no upper bound); even=True also requires an even value."""
    if (not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < lo
            or (hi is not None and value > hi) or (even and value % 2)):
        raise ValueError(f"{name} must be {'an even' if even else 'an'} int {_allowed(lo, hi, False)}, got {value!r}")
    return int(value)


def float_in(name: str, value, lo: float, hi: float | None = None, *, lo_open: bool = False) -> float:
    """value as a finite float in [lo, hi] (hi None: no upper bound); lo_open=True excludes lo itself."""
    return _number(name, value, "a finite number", lo, hi, lo_open)


def positive(name: str, value) -> float:
    """value as a finite float > 0."""
    return float_in(name, value, 0, lo_open=True)


def probability(name: str, value) -> float:
    """value as a float in [0, 1]."""
    return _number(name, value, "a probability", 0, 1, False)


def choice(name: str, value, options):
    """value, one of options (any collection of the allowed values: a tuple, or a dict's keys)."""
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def choices(name: str, values, options) -> list:
    """values as a list, non-empty and each one of options."""
    values = list(values)
    if not values or any(v not in options for v in values):
        raise ValueError(f"{name} must be a non-empty list drawn from {list(options)}, got {values!r}")
    return values


def sinusoid_base(name: str, value) -> float:
    """The sinusoid's base (positions, rotary, the notebooks' sweeps): a finite number >= 1. The paper uses
    10000; base 1 is allowed on purpose, every frequency is then 1 (the degenerate table notebook 02 shows)."""
    return _number(name, value, "a finite number", 1, None, False)


def sinusoid_width(name: str, value) -> int:
    """The width of a sinusoid table (d_model) or of rotary's rotated vectors (d_head): an even int >= 2, one
    sin and one cos per frequency."""
    return int_in(name, value, 2, even=True)


def seed_int(name: str, value) -> int:
    """A random seed: an int in [0, SEED_MAX], so that the same seed also works in seed_everything."""
    return int_in(name, value, 0, SEED_MAX)


def seed_list(name: str, values) -> list[int]:
    """A non-empty sequence of seeds (one run each) as a list of ints."""
    values = list(values)
    if not values:
        raise ValueError(f"{name} must be a non-empty sequence of ints in [0, {SEED_MAX}], got {values!r}")
    return [seed_int(f"{name}[{i}]", v) for i, v in enumerate(values)]


def slider_int(name: str, value) -> int:
    """A slider's value as the int it stands for, rounded to the nearest: a FloatLogSlider of base 2 gives
    d_k = 2.0 ** k as a float, and a log slider's float arithmetic may give 63.99999999 for 64."""
    if not _is_finite_number(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return int(round(value))


def _is_finite_number(value) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, np.integer)) or (isinstance(value, (float, np.floating)) and math.isfinite(value))


def _number(name: str, value, what: str, lo, hi, lo_open: bool) -> float:
    if (not _is_finite_number(value) or value < lo or (lo_open and value == lo)
            or (hi is not None and value > hi)):
        raise ValueError(f"{name} must be {what} {_allowed(lo, hi, lo_open)}, got {value!r}")
    return float(value)


def _allowed(lo, hi, lo_open: bool) -> str:
    if hi is None:
        return f"> {lo}" if lo_open else f">= {lo}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}]"

"""qalib.validate: one message format, bools never ints, numpy scalars accepted, NaN and inf rejected, bounds
inclusive."""

import math
import re

import numpy as np
import pytest

from qalib import validate as V


# -- int_in --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1, 5, 9, np.int64(5), np.int32(9), np.uint8(1)])
def test_int_in_accepts_ints_and_numpy_ints_as_plain_ints(value):
    out = V.int_in("n", value, 1, 9)
    assert out == value and type(out) is int


@pytest.mark.parametrize("value", [0, 10, True, False, np.bool_(True), 5.0, np.float64(5.0), "5", None])
def test_int_in_rejects_out_of_range_bools_floats_and_others(value):
    with pytest.raises(ValueError, match=re.escape(f"n must be an int in [1, 9], got {value!r}")):
        V.int_in("n", value, 1, 9)


def test_int_in_without_upper_bound_and_even():
    assert V.int_in("n", 10**30, 1) == 10**30
    with pytest.raises(ValueError, match=re.escape("n must be an int >= 1, got 0")):
        V.int_in("n", 0, 1)
    assert V.int_in("d", 4, 2, 8, even=True) == 4
    with pytest.raises(ValueError, match=re.escape("d must be an even int in [2, 8], got 5")):
        V.int_in("d", 5, 2, 8, even=True)
    with pytest.raises(ValueError, match=re.escape("d must be an even int >= 2, got 3")):
        V.int_in("d", 3, 2, even=True)


# -- float_in, positive, probability --------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1, 1.0, np.float32(0.25), np.float64(1.0), np.int64(1)])
def test_float_in_accepts_numbers_and_numpy_scalars_with_inclusive_bounds(value):
    out = V.float_in("x", value, 0, 1)
    assert out == float(value) and type(out) is float


@pytest.mark.parametrize("value", [-0.001, 1.001, True, math.nan, math.inf, -math.inf, np.float64("nan"), "0.5", None])
def test_float_in_rejects_out_of_range_bools_nan_inf_and_others(value):
    with pytest.raises(ValueError, match=re.escape(f"x must be a finite number in [0, 1], got {value!r}")):
        V.float_in("x", value, 0, 1)


def test_float_in_open_lower_bound_and_no_upper_bound():
    assert V.float_in("t", 1.0, 0, 1, lo_open=True) == 1.0
    with pytest.raises(ValueError, match=re.escape("t must be a finite number in (0, 1], got 0")):
        V.float_in("t", 0, 0, 1, lo_open=True)
    assert V.float_in("g", 1e300, 0) == 1e300
    with pytest.raises(ValueError, match=re.escape("g must be a finite number >= 0, got inf")):
        V.float_in("g", math.inf, 0)


def test_positive_and_probability():
    assert V.positive("f", 1e-300) == 1e-300
    for bad in (0, -1.0, math.nan, math.inf, True):
        with pytest.raises(ValueError, match=re.escape(f"f must be a finite number > 0, got {bad!r}")):
            V.positive("f", bad)
    assert V.probability("p", 0) == 0.0 and V.probability("p", np.float32(1.0)) == 1.0
    for bad in (1.5, -0.1, math.nan, False):
        with pytest.raises(ValueError, match=re.escape(f"p must be a probability in [0, 1], got {bad!r}")):
            V.probability("p", bad)


# -- the shared quantities ------------------------------------------------------------------------------------
def test_sinusoid_base_allows_one_and_rejects_below():
    assert V.sinusoid_base("base", 1) == 1.0 and V.sinusoid_base("base", np.float32(10000.0)) == 10000.0
    for bad in (0.999, 0, math.inf, math.nan, True):
        with pytest.raises(ValueError, match=re.escape(f"base must be a finite number >= 1, got {bad!r}")):
            V.sinusoid_base("base", bad)


def test_sinusoid_width_is_an_even_int_from_two():
    assert V.sinusoid_width("d_model", np.int64(2)) == 2
    for bad in (0, 3, 4.0, True):
        with pytest.raises(ValueError, match=re.escape(f"d_model must be an even int >= 2, got {bad!r}")):
            V.sinusoid_width("d_model", bad)


def test_seed_int_and_seed_list():
    assert V.seed_int("seed", V.SEED_MAX) == 2**32 - 1
    with pytest.raises(ValueError, match=re.escape("seed must be an int in [0, 4294967295], got 4294967296")):
        V.seed_int("seed", 2**32)
    assert V.seed_list("seeds", range(3)) == [0, 1, 2]
    assert V.seed_list("seeds", np.arange(2)) == [0, 1]
    with pytest.raises(ValueError, match=re.escape("seeds must be a non-empty sequence of ints in [0, 4294967295], got []")):
        V.seed_list("seeds", ())
    with pytest.raises(ValueError, match=re.escape("seeds[1] must be an int in [0, 4294967295], got -1")):
        V.seed_list("seeds", (0, -1))


def test_slider_int_rounds_float_noise_and_rejects_non_numbers():
    assert V.slider_int("d_k", 2.0 ** 6) == 64 and V.slider_int("d_k", 63.99999999) == 64
    assert V.slider_int("d_k", np.float32(2.4)) == 2 and V.slider_int("d_k", 7) == 7
    for bad in (math.nan, math.inf, True, "64"):
        with pytest.raises(ValueError, match=re.escape(f"d_k must be a finite number, got {bad!r}")):
            V.slider_int("d_k", bad)

"""qalib.nn.validate: one message format, bools never ints, numpy scalars accepted, NaN and inf rejected, bounds
inclusive; and the modules that had private copies of these checks now follow the same rule."""

import math
import re

import numpy as np
import pytest
import torch

from qalib.lab import data
from qalib.nn import positions
from qalib.nn import validate as V
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
# each topic module under the name of what it holds
from qalib.topics.nb01_scaled_attention import compute as scaled_attention, experiment as scaled_attention_experiment
from qalib.topics.nb02_sin_cos_positions import compute as sin_cos_positions, experiment as sin_cos_positions_experiment
from qalib.topics.nb03_embedding_scale import experiment as embedding_scale_experiment
from qalib.topics.nb04_bert_embedding_sum import compute as embedding_sum, experiment as embedding_sum_experiment
from qalib.topics.nb05_shared_qk import compute as shared_qk, experiment as shared_qk_experiment
from qalib.topics.nb06_layernorm_vs_batchnorm import experiment as normalization_experiment
from qalib.topics.nb07_multi_head import compute as multi_head, experiment as multi_head_experiment
from qalib.topics.nb08_relative_positions import compute as relative_positions, experiment as relative_positions_experiment
from qalib.topics.nb09_attention_random_walk import compute as random_walk, experiment as random_walk_experiment
from qalib.topics.nb10_residuals_ffn_masks import compute as block_parts, experiment as block_parts_experiment
from qalib.topics.nb11_mlm_and_nsp import compute as pretraining, experiment as pretraining_experiment


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


# -- choice, choices ---------------------------------------------------------------------------------------
def test_choice_and_choices():
    assert V.choice("init", "b", ("a", "b")) == "b" and V.choice("init", "b", {"a": 1, "b": 2}) == "b"
    with pytest.raises(ValueError, match=re.escape("init must be one of ['a', 'b'], got 'c'")):
        V.choice("init", "c", {"a": 1, "b": 2})
    assert V.choices("variants", ("b", "a"), ("a", "b")) == ["b", "a"]
    for bad in ((), ("a", "c")):
        with pytest.raises(ValueError, match=re.escape(f"variants must be a non-empty list drawn from ['a', 'b'], "
                                                       f"got {list(bad)!r}")):
            V.choices("variants", bad, ("a", "b"))


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


# -- the modules that had private copies follow the same rule --------------------------------------------------
SEEDED = {  # every function that takes `seeds`, with its other required arguments
    "block_parts.init_gradients": lambda s: block_parts.init_gradients(seeds=s),
    "block_parts_experiment.run_residual_experiment": lambda s: block_parts_experiment.run_residual_experiment(seeds=s),
    "embedding_scale_experiment.run_experiment": lambda s: embedding_scale_experiment.run_experiment(seeds=s),
    "embedding_sum.probe_curve": lambda s: embedding_sum.probe_curve([4], seeds=s),
    "embedding_sum_experiment.run_experiment": lambda s: embedding_sum_experiment.run_experiment(seeds=s),
    "multi_head_experiment.run_heads_experiment": lambda s: multi_head_experiment.run_heads_experiment(seeds=s),
    "normalization_experiment.run_norm_experiment": lambda s: normalization_experiment.run_norm_experiment(seeds=s),
    "normalization_experiment.prepost_gradients": lambda s: normalization_experiment.prepost_gradients(seeds=s),
    "pretraining_experiment.run_experiment": lambda s: pretraining_experiment.run_experiment(seeds=s),
    "random_walk.collapse_sweep": lambda s: random_walk.collapse_sweep(seeds=s, plain={}),
    "random_walk_experiment.run_residual_experiment": lambda s: random_walk_experiment.run_residual_experiment(seeds=s),
    "relative_positions_experiment.run_variants": lambda s: relative_positions_experiment.run_variants([("shaw", 2)], s),
    "relative_positions_experiment.train_mlm_runs": lambda s: relative_positions_experiment.train_mlm_runs(seeds=s),
    "scaled_attention_experiment.scale_ablation": lambda s: scaled_attention_experiment.scale_ablation(seeds=s),
    "shared_qk.diagonal_sweep": lambda s: shared_qk.diagonal_sweep([4], [4], seeds=s),
    "shared_qk_experiment.run_probe_experiment": lambda s: shared_qk_experiment.run_probe_experiment(
        data.ProbeTask(), seeds=s),
    "sin_cos_positions_experiment.run_position_experiment": lambda s: sin_cos_positions_experiment.run_position_experiment(
        seeds=s),
}


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_every_seeds_argument_has_one_rule(name):
    """Checked before any training starts: an empty list, and a seed seed_everything would refuse."""
    with pytest.raises(ValueError, match=re.escape("seeds must be a non-empty sequence of ints in [0, 4294967295], got []")):
        SEEDED[name](())
    with pytest.raises(ValueError, match=re.escape("seeds[1] must be an int in [0, 4294967295], got -1")):
        SEEDED[name]((0, -1))


REJECTED = [  # (call, message): values the private copies let through (or rejected under another rule)
    (lambda: data.SyntheticLanguage(vocab_size=8, branching=4), "branching must be an int in [1, 3], got 4"),
    (lambda: data.mask_tokens(torch.full((1, 4), 7), 16, None, 0.15, 0.8, 0.3),
     "mask_frac + random_frac must be <= 1 (the rest stays unchanged), got 0.8 + 0.3"),
    (lambda: pretraining.expected_fractions(0.15, 0.8, 0.3),
     "mask_frac + random_frac must be <= 1 (the rest stays unchanged), got 0.8 + 0.3"),
    (lambda: scaled_attention.scale_factor("none", 64.0), "d_k must be an int in [1, 1048576], got 64.0"),
    (lambda: scaled_attention.attention_stats(5.3), "d_k must be an int in [1, 4096], got 5.3"),
    (lambda: scaled_attention.saturation(True), "a must be a finite number in [0, 10000.0], got True"),
    (lambda: scaled_attention.ce_vs_mse((1.0, math.nan)), "gaps must be a finite number >= 0, got nan"),
    (lambda: shared_qk.directed_scores(sharpness=True), "sharpness must be a finite number > 0, got True"),
    (lambda: multi_head.classify_heads(np.zeros((1, 1, 5)), threshold=True),
     "threshold must be a finite number in (0, 1], got True"),
    (lambda: multi_head.pair_readout(left_weight=True), "left_weight must be a finite number in [0, 1], got True"),
    (lambda: multi_head_experiment.prune_heads(MiniBert(multi_head_experiment.heads_config(2)), 0, [1.5]),
     "heads must be an int in [0, 1], got 1.5"),
    (lambda: relative_positions_experiment.ProbeSetup().scaled(True), "scale must be an int >= 1, got True"),
    (lambda: normalization_experiment.experiment_setup(True), "scale must be an int >= 1, got True"),
    (lambda: normalization_experiment.PaddedMLMTask(data.SyntheticLanguage(32, 2), seq_len=8, min_len=1.5),
     "PaddedMLMTask.min_len must be an int in [1, 8], got 1.5"),
    (lambda: embedding_sum_experiment.MarkerSegmentTask(min_len=True), "MarkerSegmentTask.min_len must be an int >= 1"),
    (lambda: embedding_sum.probe_curve([4.5], seeds=(0,)), "d_model must be an int in [1, 4096], got 4.5"),
    (lambda: pretraining.mask_sentence("hi", seed=2**32), "seed must be an int in [0, 4294967295], got 4294967296"),
]


@pytest.mark.parametrize("i", range(len(REJECTED)))
def test_former_private_checks_reject_what_the_rule_rejects(i):
    call, message = REJECTED[i]
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


ACCEPTED = [  # numpy scalars (what a numpy sweep hands over) that the private copies refused
    lambda: data.SyntheticLanguage(np.int64(16), np.int64(2), np.int64(2), np.float32(0.5)).sample(np.int64(2), np.int64(3)),
    lambda: data.ProbeTask(vocab_size=np.int64(16), seq_len=np.int64(4)),
    lambda: scaled_attention.saturation(np.float32(2.0), np.float32(1.0)),
    lambda: scaled_attention_experiment.RecallTask(np.int64(3), np.int64(4)),
    lambda: shared_qk.directed_scores(sharpness=np.float32(2.0)),
    lambda: relative_positions.rotary_profile(d_head=np.int64(8)),
    lambda: relative_positions.bias_matrix("rotary", d_head=np.int64(8)),
    lambda: positions.sinusoidal_concat(np.int64(4), np.int64(8)),
]


@pytest.mark.parametrize("i", range(len(ACCEPTED)))
def test_former_private_checks_accept_numpy_scalars(i):
    ACCEPTED[i]()


BASE_USERS = {  # every function that takes the sinusoid's base
    "positions.frequencies": lambda b: positions.frequencies(8, b),
    "positions.sinusoidal": lambda b: positions.sinusoidal(4, 8, b),
    "positions.offset_matrix": lambda b: positions.offset_matrix(1, 8, b),
    "positions.Rotary": lambda b: positions.Rotary(8, b),
    "MiniBertConfig.pos_base": lambda b: MiniBertConfig(pos="rotary", pos_base=b),
    "sin_cos_positions.pe_table": lambda b: sin_cos_positions.pe_table(4, 8, b),
    "sin_cos_positions.wavelengths": lambda b: sin_cos_positions.wavelengths(8, b),
    "sin_cos_positions.base_sweep": lambda b: sin_cos_positions.base_sweep((b,), d_model=8, lengths=(8,)),
    "relative_positions.rotary_profile": lambda b: relative_positions.rotary_profile(8, b, t=8),
    "shared_qk.directed_scores": lambda b: shared_qk.directed_scores(n=8, d=8, base=b),
}


@pytest.mark.parametrize("name", sorted(BASE_USERS))
def test_every_sinusoid_base_has_one_rule(name):
    """Base 1 (every frequency 1, notebook 02's degenerate table) is allowed everywhere; below 1 nowhere."""
    BASE_USERS[name](1.0)
    with pytest.raises(ValueError, match=r"base must be a finite number >= 1, got 0\.5"):
        BASE_USERS[name](0.5)


def test_base_one_gives_the_omega_one_pair():
    assert torch.equal(positions.frequencies(8, 1.0), torch.ones(4, dtype=torch.float64))
    assert torch.equal(positions.frequencies(8, 1.0, spacing="t2t"), torch.ones(4, dtype=torch.float64))
    assert torch.equal(positions.sinusoidal(5, 8, 1.0), positions.sinusoidal(5, 2).repeat(1, 4))


VARIANT_LISTS = {  # every function that takes a list of named variants: (the argument's name, the call)
    "embedding_sum_experiment.run_experiment": ("variants", lambda v: embedding_sum_experiment.run_experiment(v, (0,))),
    "normalization_experiment.run_norm_experiment": ("norms", lambda v: normalization_experiment.run_norm_experiment(
        v, (0,))),
    "pretraining_experiment.run_experiment": ("variants", lambda v: pretraining_experiment.run_experiment((0,), variants=v)),
    "scaled_attention_experiment.scale_ablation": ("scales", lambda v: scaled_attention_experiment.scale_ablation(v, (0,))),
    "shared_qk_experiment.run_probe_experiment": ("variants", lambda v: shared_qk_experiment.run_probe_experiment(
        data.ProbeTask(), v)),
    "sin_cos_positions_experiment.run_position_experiment": ("variants", lambda v: (
        sin_cos_positions_experiment.run_position_experiment(v, (0,)))),
}


@pytest.mark.parametrize("name", sorted(VARIANT_LISTS))
def test_every_variant_list_has_one_rule(name):
    """Checked before any training: an empty list (some ran nothing before) and an unknown name."""
    arg, call = VARIANT_LISTS[name]
    for bad in ((), ("no such variant",)):
        with pytest.raises(ValueError, match=re.escape(f"{arg} must be a non-empty list drawn from [")):
            call(bad)

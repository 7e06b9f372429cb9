"""Tests for notebook 01 (qalib.topics.nb01_scaled_attention.compute and its experiment module)."""

import math

import numpy as np
import pytest
import torch

from qalib.lab.data import IGNORE, N_SPECIAL
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.tools.testing import finite_values
from qalib.topics.nb01_scaled_attention import compute as sa
from qalib.topics.nb01_scaled_attention import experiment as ex
from qalib.topics.nb01_scaled_attention import demos as demos


def test_scale_factor_values():
    assert sa.scale_factor("inv_sqrt_dk", 64) == pytest.approx(1 / 8)
    assert sa.scale_factor("inv_dk", 64) == pytest.approx(1 / 64)
    assert sa.scale_factor("none", 64) == 1.0
    with pytest.raises(ValueError, match="scaling"):
        sa.scale_factor("sqrt", 64)
    with pytest.raises(ValueError, match="d_k"):
        sa.scale_factor("none", 0)


def test_dot_product_variance_is_d_k():
    r = sa.dot_product_variance((4, 256), n=20000, seed=1)
    np.testing.assert_allclose(r["var_raw"], [4, 256], rtol=0.05)
    np.testing.assert_allclose(r["var_scaled"], 1.0, rtol=0.05)
    with pytest.raises(ValueError, match="n must"):
        sa.dot_product_variance(n=10)


def test_projected_score_variance_matches_prediction():
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(0))
    r = sa.projected_score_variance(x, 16, "bert_0.02")
    assert r["std"] == 0.02
    assert r["var_scaled"] == pytest.approx(r["predicted_var_scaled"], rel=0.3)
    assert r["var_scaled"] < 0.01  # (64 * 0.0004)^2 = 6.6e-4: far below 1
    with pytest.raises(ValueError, match="init"):
        sa.projected_score_variance(x, 16, "he")
    with pytest.raises(ValueError, match="x must"):
        sa.projected_score_variance(torch.randn(5), 16)


def test_saturation_matches_closed_form():
    for a, want in ((1, 0.5761168847658291), (10, 0.999909208384341)):
        assert sa.saturation(a)["probs"][2] == pytest.approx(want, rel=1e-12)
    r = sa.saturation(2.0)
    y = r["probs"]
    np.testing.assert_allclose(r["jacobian"], np.diag(y) - np.outer(y, y), atol=1e-15)
    assert sa.saturation(1000.0)["jac_norm"] < 1e-6 and "note" in sa.saturation(1000.0)
    # temperature divides the logits
    assert sa.saturation(10.0, temperature=10.0)["probs"][2] == pytest.approx(sa.saturation(1.0)["probs"][2])
    with pytest.raises(ValueError, match="a must"):
        sa.saturation(-1.0)
    with pytest.raises(ValueError, match="temperature"):
        sa.saturation(1.0, temperature=0.0)


def test_attention_stats_extremes():
    sharp = sa.attention_stats(1024, "none", n_queries=64)
    flat = sa.attention_stats(1024, "inv_dk", n_queries=64)
    paper = sa.attention_stats(1024, "inv_sqrt_dk", n_queries=64)
    assert sharp["max_prob"] > 0.9 and sharp["jac_norm"] < 0.1
    assert flat["entropy"] > 0.99 * math.log(16)
    assert 0.8 < paper["score_std"] < 1.2
    np.testing.assert_allclose(paper["probs"].sum(-1), 1.0)
    with pytest.raises(ValueError, match="n_keys"):
        sa.attention_stats(16, n_keys=1)


def test_attention_sweep_shapes():
    r = sa.attention_sweep((4, 64), n_queries=32)
    assert r["none"]["entropy"].shape == (2,)
    assert r["none"]["entropy"][1] < r["none"]["entropy"][0]


def test_additive_scores_stay_bounded_while_dot_products_grow():
    r = sa.additive_vs_dot(d_ks=(4, 256), n_queries=64, seed=1)
    assert r["dot"][1] / r["dot"][0] == pytest.approx(8, rel=0.2)           # sqrt(256 / 4)
    assert np.allclose(r["scaled"], 1, atol=0.2)
    assert (r["additive_max"] <= r["bound"]).all() and r["bound"][0] == r["bound"][1]  # one v for every d_k
    with pytest.raises(ValueError, match="d_a"):
        sa.additive_vs_dot(d_a=0)


def test_a_layernorm_after_a_saturated_softmax_gets_no_gradient_to_the_scores_either():
    r = sa.layernorm_after_saturation(scales=(1.0, 100.0), seed=2)
    assert r["grad_plain"][0] > 1e-2 and r["grad_ln"][0] > 1e-2
    assert r["grad_plain"][1] < 1e-8 and r["grad_ln"][1] < 1e-8
    assert r["max_prob"][1] > 0.999 and r["ln_gap"][1] < 1e-6
    with pytest.raises(ValueError, match="n_keys"):
        sa.layernorm_after_saturation(n_keys=1)


def test_component_dependence_compares_with_a_shuffled_baseline():
    torch.manual_seed(0)
    model = MiniBert(MiniBertConfig(vocab_size=40, d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=64)).eval()
    enc = {"input_ids": torch.randint(5, 40, (1, 60)), "attention_mask": torch.ones(1, 60, dtype=torch.long)}
    r = sa.component_dependence(model, enc, seed=1)
    assert r["corr"].shape == r["corr_shuffled"].shape == (2,) and r["n_tokens"] == 60
    assert (r["corr_shuffled"] > 0).all() and (r["corr_shuffled"] < 0.3).all()
    enc["attention_mask"][0, -1] = 0
    with pytest.raises(ValueError, match="unpadded"):
        sa.component_dependence(model, enc)


def test_ce_vs_mse_closed_forms():
    r = sa.ce_vs_mse((10.0, 20.0))
    np.testing.assert_allclose(r["grad_ce"], math.sqrt(2), rtol=1e-3)
    np.testing.assert_allclose(r["grad_mse"], r["grad_mse_closed"], rtol=1e-6)
    e = math.exp(-10) / (1 + 9 * math.exp(-10))
    assert r["grad_mse"][0] == pytest.approx(math.sqrt(112) * e, rel=1e-3)  # (10, -2, -1 x 8) * e
    with pytest.raises(ValueError, match="gaps"):
        sa.ce_vs_mse((-1.0,))
    with pytest.raises(ValueError, match="n_classes"):
        sa.ce_vs_mse(n_classes=1)


def test_real_score_stats_on_a_tiny_model():
    torch.manual_seed(0)
    model = MiniBert(MiniBertConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=2)).eval()
    ids = torch.randint(5, 16, (1, 7))
    enc = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    r = sa.real_score_stats(model, enc)
    assert r["head_std"].shape == (2, 2)
    np.testing.assert_allclose(r["var_unscaled"], r["var_scaled"] * 8, rtol=1e-9)  # d_head 8
    bad = dict(enc, attention_mask=torch.tensor([[1, 1, 1, 1, 1, 1, 0]]))
    with pytest.raises(ValueError, match="unpadded"):
        sa.real_score_stats(model, bad)


def test_recall_task_labels_are_the_matching_pair():
    task = ex.RecallTask(n_keys=4, n_values=3)
    b = task.batch(50, torch.Generator().manual_seed(0))
    assert b.input_ids.shape == (50, 6) and int(b.input_ids.max()) < task.vocab_size
    label = b.labels[:, -1]
    query_key = b.input_ids[:, -1] - N_SPECIAL - 12
    assert ((label - N_SPECIAL) // 3 == query_key).all()           # the label carries the asked key
    assert (b.input_ids[:, 1:-1] == label[:, None]).any(1).all()  # and is one of the pair tokens
    assert (b.labels[:, :-1] == IGNORE).all()
    with pytest.raises(ValueError, match="n_keys"):
        ex.RecallTask(n_keys=1)


def test_scale_ablation_runs_and_validates():
    r = ex.scale_ablation(scales=("inv_sqrt_dk", "none"), seeds=(0,), steps=20, d_model=16)
    assert r["runs"]["none"]["loss"].shape[0] == 1
    assert finite_values(r["final_loss"]) and finite_values(r["initial_qk_grad"])
    with pytest.raises(ValueError, match="scales"):
        ex.scale_ablation(scales=("half",), steps=20)
    with pytest.raises(ValueError, match="steps"):
        ex.scale_ablation(steps=5)


def test_initial_qk_grads_is_the_first_training_step_gradient():
    g0 = ex.initial_qk_grads(scales=("none", "inv_dk"), seeds=(3, 4), d_model=16)
    assert g0["none"].shape == (2,) and finite_values(g0)
    for scale in ("none", "inv_dk"):
        assert g0[scale][1] == pytest.approx(ex.train_variant(scale, 4, steps=20, d_model=16)["qk_grad"][0], rel=1e-5)
    with pytest.raises(ValueError, match="scales"):
        ex.initial_qk_grads(scales=("half",))




def test_attention_demo_rounds_its_log_slider_to_an_int_d_k():
    """The demo rounds the FloatLogSlider's float once (qalib.nn.validate.slider_int); attention_stats takes ints only."""
    demo = demos.attention_demo()
    demo.controls["d_k"].value = 2.0 ** 5.99999  # a log slider's float arithmetic near 64
    assert demo.error is None and demo.result["d_k"] == 64
    with pytest.raises(ValueError, match=r"d_k must be an int in \[1, 4096\], got 63\.9"):
        sa.attention_stats(2.0 ** 5.99999)


# -- the reference: read from a stored file (here a small synthetic one) --------------------------------------------
def _fake_reference(n=6):
    from qalib.lab.reference import Reference, RungResult

    rng = np.random.default_rng(0)

    def run(seed, shift):
        return {s: {"final_loss": float(abs(rng.normal(1.0 + shift[s], 0.1))), "final_accuracy": 0.5,
                    "initial_entropy": 1.0, "solved_step": 100 if s == "inv_dk" else None, "steps": [0, 10],
                    "loss": [2.0, 1.0]} for s in ex.SCALES}

    shift = {"inv_sqrt_dk": 0.0, "none": 0.3, "inv_dk": -0.5}
    rungs = {"live": RungResult("live", {"steps": 200}, list(range(n)), [run(i, shift) for i in range(n)]),
             "reference": RungResult("reference", {"steps": 3200}, list(range(n)), [run(i, shift) for i in range(n)]),
             "reference, init 0.02": RungResult("reference, init 0.02", {"steps": 3200, "init_std": 0.02},
                                                list(range(n)), [run(i, shift) for i in range(n)])}
    return Reference("01_scaled_attention", "ablation", {}, rungs, {})


def test_the_reference_summary_pairs_seeds_and_gates_runs():
    ref = _fake_reference()
    rungs = ex.summarize_reference(ref)
    assert [r.name for r in rungs] == ["live", "reference", "reference, init 0.02"]
    assert [r.init for r in rungs] == ["d^-1/2", "d^-1/2", "0.02"] and rungs[1].steps == 3200
    r = rungs[0]
    assert r.solved("inv_dk").all() and not r.solved("none").any()
    d = ex.paired(r, "inv_dk", "inv_sqrt_dk")
    assert d.n == 6 and d.n_left_out == 0 and d.low < d.mean < d.high < 0
    assert np.mean(r.final_loss["inv_dk"] - r.final_loss["inv_sqrt_dk"]) == pytest.approx(d.mean)
    assert "1/d_k minus 1/sqrt(d_k)" in str(d)


def test_a_run_that_did_not_learn_is_left_out_of_a_comparison():
    ref = _fake_reference()
    ref.rungs["live"].runs[2]["none"]["final_loss"] = 2.5  # worse than knowing the key (ln 4 + 0.2)
    r = ex.summarize_reference(ref)[0]
    assert not r.gates["none"][2].passed and r.learned_share("none") == pytest.approx(5 / 6)
    d = ex.paired(r, "none", "inv_sqrt_dk")
    assert (d.n, d.n_left_out) == (5, 1) and "1 seed(s) left out" in str(d)
    assert ex.key_part_gate(math.log(4) + 0.19).passed and not ex.key_part_gate(math.log(4) + 0.21).passed


def test_the_reference_figure_draws_every_scaling():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(10, 3.5))
    ex.plot_reference(fig, _fake_reference())
    left, right = fig.axes
    assert len(left.lines) >= 3 and right.get_ylim()[1] > 1
    plt.close(fig)

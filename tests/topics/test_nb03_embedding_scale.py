"""Notebook 03 (embedding scale): compute functions against closed forms, bad inputs, demos driven end to end."""

import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from qalib.tools.testing import finite_values  # noqa: E402
from qalib.topics.nb03_embedding_scale import compute as es  # noqa: E402
from qalib.topics.nb03_embedding_scale import experiment as ex  # noqa: E402


# -- tables and norms ------------------------------------------------------------------------------
def test_init_std_closed_forms():
    assert es.init_std("t2t", 1000, 256) == pytest.approx(1 / 16)
    assert es.init_std("xavier", 1000, 24) == pytest.approx(math.sqrt(2 / 1024))
    assert es.init_std("bert", 10, 64) == 0.02
    assert es.init_std("torch", 10, 64) == 1.0


@pytest.mark.parametrize("init", list(es.INITS))
def test_init_table_has_the_stated_std(init):
    table = es.init_table(init, 500, 128, seed=3)
    assert table.shape == (500, 128)
    assert float(table.std()) == pytest.approx(es.init_std(init, 500, 128), rel=0.02)
    assert float(table.norm(dim=1).pow(2).mean().sqrt()) == pytest.approx(es.expected_row_norm(init, 500, 128), rel=0.02)


def test_xavier_table_is_uniform_within_its_bound():
    table = es.init_table("xavier", 300, 100)
    bound = math.sqrt(6 / 400)
    assert float(table.abs().max()) <= bound
    assert float(table.abs().max()) > 0.98 * bound


def test_norm_table_ratios():
    r = es.norm_table([16, 256], "t2t", vocab_size=2000, n_positions=64)
    np.testing.assert_allclose(r["position"], np.sqrt([8, 128]), rtol=1e-5)
    np.testing.assert_allclose(r["token"], 1.0, rtol=0.03)
    np.testing.assert_allclose(r["token_scaled"], np.sqrt([16, 256]) * r["token"], rtol=1e-6)
    np.testing.assert_allclose(r["ratio_scaled"], math.sqrt(2), rtol=0.03)


def test_scale_factor():
    assert es.scale_factor(512, True) == pytest.approx(22.627417)
    assert es.scale_factor(512, False) == 1.0


# -- recovery ----------------------------------------------------------------------------------------
def test_recovery_without_factor_is_poor_and_with_factor_perfect():
    off = es.recovery(256, "t2t", 1.0, vocab_size=500, n_samples=200)
    on = es.recovery(256, "t2t", 16.0, vocab_size=500, n_samples=200)
    assert off["token_accuracy"] < 0.15 and off["position_accuracy"] == 1.0
    assert on["token_accuracy"] == 1.0
    assert off["ratio"] == pytest.approx(math.sqrt(2 / 256), rel=0.05)
    assert float(on["cos_token"].mean()) == pytest.approx(math.sqrt(2 / 3), rel=0.03)  # a / sqrt(1 + a^2), a = sqrt 2


def test_huge_factor_drowns_the_position():
    r = es.recovery(256, "torch", 16.0, vocab_size=200, n_samples=200)
    assert r["token_accuracy"] == 1.0 and r["position_accuracy"] < 0.1


def test_predicted_accuracy_limits_and_agreement():
    assert es.predicted_token_accuracy(100.0, 512, 1000) == pytest.approx(1.0, abs=1e-6)
    assert es.predicted_token_accuracy(1e-6, 64, 100) == pytest.approx(0.01, rel=0.05)  # chance 1/V
    # two candidates, independent noise: P(a sqrt(d) + z > sqrt(1 + a^2) z') = Phi(a sqrt(d) / sqrt(2 + a^2))
    a, d = 0.3, 16
    closed = 0.5 * (1 + math.erf(a * math.sqrt(d) / math.sqrt(2 + a * a) / math.sqrt(2)))
    assert es.predicted_token_accuracy(a, d, 2) == pytest.approx(closed, abs=1e-4)
    measured = es.recovery(128, "t2t", 1.0, vocab_size=1000, n_samples=512)["token_accuracy"]
    assert measured == pytest.approx(es.predicted_token_accuracy(math.sqrt(2 / 128), 128, 1000), abs=0.05)


def test_recovery_vs_factor_matches_direct_recovery():
    sweep = es.recovery_vs_factor(64, "t2t", [0.5, 8.0, 500.0], vocab_size=300, n_positions=64, n_samples=100)
    for f, tok, pos in zip(sweep["factors"], sweep["token"], sweep["position"]):
        direct = es.recovery(64, "t2t", float(f), vocab_size=300, n_positions=64, n_samples=100)
        assert tok == pytest.approx(direct["token_accuracy"]) and pos == pytest.approx(direct["position_accuracy"])
    assert sweep["token"][0] < sweep["token"][2] and sweep["position"][0] > sweep["position"][2]


def test_recovery_vs_d_shapes():
    r = es.recovery_vs_d("t2t", [32, 64], vocab_size=100, n_samples=50, seeds=(0, 1))
    assert r["token_scaled"].shape == (2,) and (r["token_scaled"] == 1.0).all()


# -- tied output -------------------------------------------------------------------------------------
def test_tied_logits_std_and_loss():
    small = es.tied_logits(256, "t2t", 2000, n_samples=128)
    assert small["logit_std"] == pytest.approx(1.0, rel=0.05)
    assert small["loss"] == pytest.approx(math.log(2000) + 0.5, abs=0.2)
    big = es.tied_logits(256, "torch", 2000, n_samples=128)
    assert big["logit_std"] == pytest.approx(16.0, rel=0.05)
    assert big["loss"] > 3 * math.log(2000)


def test_component_variance():
    assert es.component_variance("t2t", 128, 1000) == pytest.approx(1.0, rel=0.02)
    assert es.component_variance("bert", 128, 1000) == pytest.approx(128 * 0.0004, rel=0.02)
    assert es.component_variance("xavier", 128, 1000, scaled=False) == pytest.approx(2 / 1128, rel=0.03)


# -- bad inputs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: es.init_table("kaiming", 10, 8), "init"),
    (lambda: es.init_table("t2t", 10, 7), "d_model"),
    (lambda: es.init_table("t2t", 1, 8), "vocab_size"),
    (lambda: es.recovery(8, "t2t", 0.0), "factor"),
    (lambda: es.recovery(8, "t2t", float("nan")), "factor"),
    (lambda: es.recovery(8, "t2t", 1.0, n_samples=0), "n_samples"),
    (lambda: es.recovery(8, "t2t", 1.0, n_positions=1), "n_positions"),
    (lambda: es.norm_table([], "t2t"), "d_models"),
    (lambda: es.predicted_token_accuracy(-1.0, 8, 10), "ratio must be a finite number > 0"),
    (lambda: es.tied_logits(8, "t2t", n_samples=0), "n_samples"),
    (lambda: ex.variant_config("post-ln"), "variant"),
    (lambda: ex.run_experiment(steps=1), "steps"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- experiment (tiny) --------------------------------------------------------------------------------
def test_variant_configs():
    assert ex.variant_config("sqrt_d", 64).embed_scale == "sqrt_d"
    none = ex.variant_config("none", 64)
    assert none.embed_scale == "none" and not none.embed_norm and none.embed_init_std == pytest.approx(1 / 8)
    bert = ex.variant_config("bert", 64)
    assert bert.pos == "learned" and bert.embed_norm and bert.embed_init_std is None


def test_run_experiment_tiny():
    res = ex.run_experiment(steps=3, seeds=(0, 1), d_model=16, vocab_size=32, batch_size=4, eval_batch_size=8)
    assert set(res.accuracy) == set(ex.VARIANTS)
    assert res.loss["sqrt_d"].shape == (2, len(res.steps))
    assert res.token_to_position["sqrt_d"][0, 0] == pytest.approx(math.sqrt(2), rel=0.1)   # sqrt(d) * 1 vs sqrt(d/2)
    assert res.token_to_position["none"][0, 0] == pytest.approx(math.sqrt(2 / 16), rel=0.1)
    assert finite_values(res.loss) and finite_values(res.accuracy)
    fig = matplotlib.pyplot.figure()
    ex.plot_experiment(fig, res)
    matplotlib.pyplot.close(fig)


def test_pretrained_helpers_on_a_small_model():
    from qalib.nn.model import MiniBert

    model = MiniBert(ex.variant_config("bert", 32, vocab_size=1100)).eval()
    r = ex.pretrained_norms(model)
    assert r["word"].shape == (1100 - 999,) and r["position_mean"] == pytest.approx(0.02 * math.sqrt(32), rel=0.1)
    rec = ex.pretrained_recovery(model, 1.0, n_samples=32, max_position=16)
    assert 0 <= rec["token_accuracy"] <= 1 and 0 < rec["word_share"] < 1
    fig = matplotlib.pyplot.figure()
    ex.plot_pretrained_norms(fig, r)
    matplotlib.pyplot.close(fig)


# -- demos -----------------------------------------------------------------------------------------------


def test_setting_demo_notes_extremes():
    r = es.setting(1024, "t2t", False)
    assert "position" in r["note"]
    r = es.setting(1024, "torch", True)
    assert "drowned" in r["note"]
    torch.manual_seed(0)


def test_projected_recovery_removes_the_positions_and_finds_every_token():
    from qalib.topics.nb03_embedding_scale.compute import projected_recovery, recovery

    r = projected_recovery(64, factor=1.0, vocab_size=1000, n_samples=128, seed=0)
    assert r["rank"] < 64 and r["token_accuracy"] == 1.0
    assert recovery(64, factor=1.0, vocab_size=1000, n_samples=128, seed=0)["token_accuracy"] < 0.2  # nearest row alone


def test_the_reference_reads_into_budgets_and_draws():
    import matplotlib.figure

    from qalib.lab.reference import load
    from qalib.topics.nb03_embedding_scale import experiment as E

    ref = load("03_embedding_scale", "factor")
    rungs = E.summarize_reference(ref)
    assert [r.steps for r in rungs] == [100, 400, 1600, 6400]
    assert all(r.accuracy[v].shape == (8,) for r in rungs for v in E.VARIANTS)
    assert rungs[0].learned("none").dtype == bool
    fig = matplotlib.figure.Figure()
    E.plot_reference(fig, ref)
    assert len(fig.axes) == 1

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from qalib.lab.data import IGNORE, PAD, SEP, SyntheticLanguage  # noqa: E402
from qalib.topics.nb06_layernorm_vs_batchnorm import compute as nz  # noqa: E402
from qalib.topics.nb06_layernorm_vs_batchnorm import experiment as ne  # noqa: E402


# -- axes ---------------------------------------------------------------------------------
def test_normalize_matches_torch_layer_and_batch_norm():
    x = torch.randn(3, 5, 8)
    assert torch.allclose(nz.normalize(x, (2,), eps=1e-5), F.layer_norm(x, (8,), eps=1e-5), atol=1e-5)
    bn = F.batch_norm(x.reshape(-1, 8), None, None, training=True, eps=1e-5).reshape(x.shape)
    assert torch.allclose(nz.normalize(x, (0, 1), eps=1e-5), bn, atol=1e-5)
    img = torch.randn(4, 3, 5, 5)
    bn2d = torch.nn.BatchNorm2d(3, affine=False)(img)
    assert torch.allclose(nz.normalize(img, nz.AXES["image"]["batch"], eps=1e-5), bn2d, atol=1e-4)


def test_normalize_rejects_bad_input():
    with pytest.raises(TypeError, match="x must be"):
        nz.normalize(torch.ones(2, 3, dtype=torch.long), (1,))
    with pytest.raises(ValueError, match="dims"):
        nz.normalize(torch.ones(2, 3), (2,))
    with pytest.raises(ValueError, match="dims"):
        nz.normalize(torch.ones(2, 3), ())


def test_stat_groups_and_axes_summary_count_statistics():
    g = nz.stat_groups((3, 4, 6), (2,))
    assert g.shape == (3, 4, 6) and int(g.max()) + 1 == 12 and (g[1, 2] == g[1, 2, 0]).all()
    s = nz.axes_summary("image", (2, 3, 4, 5))
    assert s["batch"] == {"dims": (0, 2, 3), "n_stats": 3, "per_stat": 40}
    assert s["layer"]["n_stats"] == 2 and s["layer"]["per_stat"] == 60
    with pytest.raises(ValueError, match="layout"):
        nz.axes_summary("audio", (2, 3))
    with pytest.raises(ValueError, match="shape"):
        nz.axes_summary("text", (2, 3))
    with pytest.raises(ValueError, match="dims"):
        nz.stat_groups((2, 3), (5,))


# -- padding ------------------------------------------------------------------------------
def test_padded_batch_layout():
    x, keep = nz.padded_batch(6, 0.5, 3.0, d=4, length=10)
    assert x.shape == (6, 20, 4) and keep[0, :10].all() and not keep[:, 10:].any()
    pads = x[~keep]
    assert torch.allclose(pads, pads[0].expand_as(pads))  # one [PAD] vector everywhere
    with pytest.raises(ValueError, match="pad_frac"):
        nz.padded_batch(4, 0.95, 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        nz.padded_batch(0, 0.1, 1.0)


def test_padding_effect_layernorm_is_batch_independent():
    r = nz.padding_effect(batch_size=8, pad_frac=0.3)
    assert r["change"]["LayerNorm"] == 0.0 and r["change"]["BatchNorm (pads included)"] > 0.1
    masked = [nz.padding_effect(8, p)["change"]["BatchNorm (pads masked)"] for p in (0.0, 0.6)]
    included = [nz.padding_effect(8, p)["change"]["BatchNorm (pads included)"] for p in (0.0, 0.6)]
    assert masked[0] == pytest.approx(masked[1], abs=1e-6) and included[1] > included[0]
    # masked mean is the mean over real tokens only
    x, keep = nz.padded_batch(8, 0.3, 1.0)
    assert np.allclose(r["bn_mean_masked"], x[keep].mean(0).numpy(), atol=1e-6)
    one = nz.padding_effect(batch_size=1, pad_frac=0.0)
    assert "note" in one and all(v == 0 for v in one["change"].values())
    one_padded = nz.padding_effect(batch_size=1, pad_frac=0.5)["change"]  # alone, but padded: only pads-included moves
    assert one_padded["BatchNorm (pads masked)"] == 0 and one_padded["BatchNorm (pads included)"] > 0.1


# -- sphere and running statistics -------------------------------------------------------------
def test_sphere_geometry_closed_forms():
    r = nz.sphere_geometry(d=16, n=32)
    assert np.allclose(r["ln_norm"], 4.0) and np.allclose(r["rms_norm"], 4.0, rtol=1e-6)
    assert np.abs(r["ln_mean"]).max() < 1e-9 and np.abs(r["rms_mean"]).max() > 0.1
    assert r["ln_scale_shift_change"] < 1e-9 and r["rms_scale_change"] < 1e-6 and r["rms_shift_change"] > 0.1
    with pytest.raises(ValueError, match="d must"):
        nz.sphere_geometry(d=1)


def test_running_stats_trace_momentum_limits():
    r1 = nz.running_stats_trace(momentum=1.0, steps=20)
    assert r1["running_mean"][-1] == pytest.approx(r1["batch_mean"][-1], rel=1e-5)
    r0 = nz.running_stats_trace(momentum=0.0, steps=20)
    assert np.all(r0["running_mean"] == 0.0) and "note" in r0
    # eval mode with momentum 0 uses mean 0, var 1: the output is the input itself (gamma 1, beta 0)
    r = nz.running_stats_trace(momentum=0.1, steps=30)
    assert r["gap"] > 0 and r["running_mean"][-1] < r["true_mean"][-1]  # the running mean lags the drift
    with pytest.raises(ValueError, match="momentum"):
        nz.running_stats_trace(momentum=1.5)


# -- experiment -------------------------------------------------------------------------------
def test_padded_mlm_task_masks_pads():
    task = ne.PaddedMLMTask(SyntheticLanguage(32, branching=2, p_lag=0.0), seq_len=8, min_len=2)
    b = task.batch(16, torch.Generator().manual_seed(0))
    real = b.attention_mask.bool()
    assert (b.input_ids[~real] == PAD).all() and (b.labels[~real] == IGNORE).all()
    n = real.sum(1)
    assert (b.input_ids[torch.arange(16), n - 1] == SEP).all() and (n >= 4).all() and (n <= 10).all()
    bp = task.batch(16, torch.Generator().manual_seed(0), extra_pad=3)
    assert bp.input_ids.shape == (16, 13) and torch.equal(bp.input_ids[:, :10], b.input_ids)
    with pytest.raises(ValueError, match="min_len"):
        ne.PaddedMLMTask(task.language, seq_len=4, min_len=5)


def test_run_norm_experiment_small():
    exp = ne.run_norm_experiment(norms=("layer", "batch"), seeds=(0,), steps=6)
    assert exp.loss["layer"].shape == (1, len(exp.step)) and np.isfinite(exp.loss["batch"]).all()
    assert set(exp.fluct_mean) == {"batch"} and exp.fluct_mean["batch"].shape == (1, 6)
    assert exp.gap("layer", "train_mode")[0] == 0.0 and exp.gaps["layer"][0]["hidden_change_extra_pad"] < 1e-4
    assert exp.gaps["batch"][0]["hidden_change_extra_pad"] > 1e-3
    fig = plt.figure()
    ne.plot_loss_curves(fig, exp)
    ne.plot_fluctuation(plt.figure(), exp)
    plt.close("all")
    with pytest.raises(ValueError, match="norms"):
        ne.run_norm_experiment(norms=("group",), seeds=(0,), steps=1)
    with pytest.raises(ValueError, match="scale"):
        ne.experiment_setup(0)


def test_prepost_gradients_shapes_and_bad_depth():
    r = ne.prepost_gradients(n_layers=2, d_model=16, seeds=(0,), batch_size=4)
    assert r["post"]["ffn_w2"].shape == (1, 2) and (r["pre"]["layer"] > 0).all() and r["init_std"] == 0.25
    ne.plot_prepost(plt.figure(), [r])
    plt.close("all")
    with pytest.raises(ValueError, match="n_layers"):
        ne.prepost_gradients(n_layers=0)


def test_minilm_layernorms_on_the_sphere(minilm):
    model, tok = minilm
    res = ne.minilm_layernorms(model, tok("A short test sentence."))
    z = [r["z_norm"] for r in res.values() if r["z_norm"] is not None]
    assert len(res) == 13 and len(z) >= 12 and np.allclose(np.concatenate(z), math.sqrt(384), rtol=1e-4)
    ind = ne.batch_independence(model, tok, "Hi.", "A much longer second sentence here.")
    assert ind["max_diff"] < 1e-4 and not ind["has_running_stats"]
    with pytest.raises(ValueError, match="second"):
        ne.batch_independence(model, tok, "A much longer first sentence here.", "Hi.")
    ne.plot_minilm_gammas(plt.figure(), res)
    nz.plot_axes(plt.figure())
    nz.plot_sphere(plt.figure(), nz.sphere_geometry(8, 16))
    plt.close("all")


# -- demos ----------------------------------------------------------------------------------


def test_sentence_zero_is_the_same_in_any_batch():
    """The demo's claim that no control moves sentence 0 on its own needs sentence 0 itself to stay put."""
    x1, keep1 = nz.padded_batch(1, 0.0, 1.0)
    for batch_size, pad_frac in ((2, 0.0), (17, 0.3), (64, 0.6)):
        x, keep = nz.padded_batch(batch_size, pad_frac, 5.0)
        assert torch.equal(x[0, :10], x1[0, :10]) and keep[0, :10].all() and not keep[0, 10:].any()


def test_checkpoint_norm_tensors_reads_layernorms_and_finds_batchnorm_state(tmp_path):
    from safetensors.torch import save_file
    path = tmp_path / "model.safetensors"
    save_file({"encoder.layer.0.output.LayerNorm.weight": torch.ones(4), "encoder.layer.0.output.LayerNorm.bias": torch.zeros(4),
               "encoder.layer.0.bn.running_mean": torch.zeros(4), "encoder.layer.0.bn.num_batches_tracked": torch.zeros(1)},
              str(path))
    r = ne.checkpoint_norm_tensors(path)
    assert r["layer_norms"] == ["encoder.layer.0.output.LayerNorm"] and r["ln_shapes"] == [(4,)]
    assert r["running_stats"] == ["encoder.layer.0.bn.num_batches_tracked", "encoder.layer.0.bn.running_mean"]
    assert r["n_tensors"] == 4


def test_the_unigram_level_and_the_gate_of_the_norm_experiment():
    from qalib.topics.nb06_layernorm_vs_batchnorm.experiment import (GATE_MARGIN, context_gate, experiment_setup,
                                                                     unigram_level)
    level = unigram_level(experiment_setup(1)[2], n_sentences=2048)
    assert 2.9 < level < 3.33  # below ln 28 (28 content tokens, uniform), above what a skewed chain could reach
    assert context_gate(level - GATE_MARGIN - 0.01, level).passed
    assert not context_gate(level - GATE_MARGIN + 0.01, level).passed


def test_one_reference_seed_of_the_norms_and_its_summary(tmp_path):
    from qalib.lab.reference import Reference, RungResult
    from qalib.topics.nb06_layernorm_vs_batchnorm.experiment import NORM_LABELS, reference_seed, summarize_reference
    runs = [reference_seed(seed, steps=6, lr=6e-3) for seed in (0, 1)]
    assert set(runs[0]) == set(NORM_LABELS) and runs[0]["layer"]["fluctuation"] is None
    assert runs[0]["batch"]["fluctuation"] > 0 and runs[0]["layer"]["batch_size_1_gap"] == pytest.approx(0, abs=1e-5)
    ref = Reference("06_layernorm_vs_batchnorm", "norms", {}, {"live": RungResult("live", {"steps": 6, "lr": 6e-3},
                                                                                   [0, 1], runs)}, {})
    (rung,) = summarize_reference(ref)
    assert rung.values("layer", "held_out_loss").shape == (2,) and rung.curves["none"].shape[0] == 2
    assert rung.learned_share("layer") == 0.0  # six steps learn nothing: the gate says so


def test_minilm_logit_sizes_decomposes_every_logit_into_norms_and_a_cosine():
    from qalib.nn.config import MiniBertConfig
    from qalib.nn.model import MiniBert

    torch.manual_seed(0)
    model = MiniBert(MiniBertConfig(vocab_size=30, d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=32)).eval()
    enc = {"input_ids": torch.randint(5, 30, (1, 12)), "attention_mask": torch.ones(1, 12, dtype=torch.long)}
    r = ne.minilm_logit_sizes(model, enc)
    assert r["max_logit"].shape == (2,) and (r["decomposition_error"] < 1e-6).all()
    assert (r["max_logit"] <= r["max_bound"] * r["max_cos"] + 1e-9).all() and (r["q_norm_spread"] >= 1).all()
    enc["attention_mask"][0, -1] = 0
    with pytest.raises(ValueError, match="unpadded"):
        ne.minilm_logit_sizes(model, enc)


def test_per_channel_batchnorm_keeps_a_shifted_image_equivariant_and_per_location_statistics_do_not():
    from qalib.topics.nb06_layernorm_vs_batchnorm.compute import conv_norm_shift, per_location_norm
    r = conv_norm_shift(batch=4, channels=2, size=8, shift=(1, 2), seed=3)
    assert r.equivariance_error["per channel"] < 1e-12
    assert r.equivariance_error["per location"] > 0.1
    assert r.values_per_statistic == {"per channel": 4 * 8 * 8, "per location": 4}
    y = torch.randn(5, 3, 4, 4, dtype=torch.float64)
    z = per_location_norm(y)
    assert torch.allclose(z.mean(0), torch.zeros(3, 4, 4, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(z.var(0, unbiased=False), torch.ones(3, 4, 4, dtype=torch.float64), atol=1e-3)  # eps 1e-5
    with pytest.raises(ValueError):
        conv_norm_shift(batch=1)


def test_stream_growth_reads_norm_ratios_and_attention_peaks_per_layer():
    from qalib.nn.model import MiniBert
    from qalib.topics.nb06_layernorm_vs_batchnorm.experiment import experiment_setup, stream_growth
    cfg, _, task = experiment_setup()
    torch.manual_seed(0)
    models = [MiniBert(cfg.replace(norm=n)) for n in ("layer", "none")]
    g = stream_growth(models, task, n_sentences=16)
    assert g.growth.shape == g.peak.shape == (2, cfg.n_layers)
    assert np.all(g.growth > 0) and np.all((g.peak > 0) & (g.peak <= 1))
    t = 14   # the padded length: a query's largest weight is at least 1 / (its real keys) >= 1 / t
    assert np.all(g.peak >= 1 / t - 1e-6)

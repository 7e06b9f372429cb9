import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from qalib.lab.data import CLS, IGNORE, N_SPECIAL  # noqa: E402
from qalib.nn.attention import attention  # noqa: E402
from qalib.nn.config import MiniBertConfig  # noqa: E402
from qalib.nn.model import MiniBert  # noqa: E402
from qalib.tools.testing import finite_values  # noqa: E402
from qalib.topics.nb10_residuals_ffn_masks import compute as bp  # noqa: E402
from qalib.topics.nb10_residuals_ffn_masks import experiment as be  # noqa: E402
from qalib.topics.nb10_residuals_ffn_masks import demos as demos  # noqa: E402


# -- residuals ------------------------------------------------------------------------------
def test_init_gradients_shapes_and_the_two_failure_modes():
    r = bp.init_gradients(4, residual=True, norm="layer", seeds=(0, 1), batch_size=4, seq_len=6)
    assert r["param"].shape == (2, 4) and r["act"].shape == (2, 5) and r["share"].shape == (2, 5)
    assert r["share"].min() > 0.8 and (r["param"].max(1) / r["param"].min(1)).max() < 1.2
    plain = bp.init_gradients(4, residual=False, norm="layer", seeds=(0,), batch_size=4, seq_len=6)
    assert plain["share"][0, 1:-1].max() < 0.01 and plain["share"][0, -1] > 0.5  # collapsed below the top
    bare = bp.init_gradients(6, residual=False, norm="none", seeds=(0,), batch_size=4, seq_len=6)
    assert bare["act"][0, 0] < 1e-6 * bare["act"][0, -1]  # the textbook vanishing gradient
    assert finite_values(bare)


def test_init_gradients_rejects_bad_input():
    with pytest.raises(ValueError, match="n_layers"):
        bp.init_gradients(0)
    with pytest.raises(ValueError, match="norm"):
        bp.init_gradients(2, norm="batch")
    with pytest.raises(ValueError, match="seeds"):
        bp.init_gradients(2, seeds=())


def test_the_residual_demo_cuts_fresh_stacks_that_share_their_weights_across_wirings():
    wirings = [(r, n) for r in (True, False) for n in ("layer", "none")]
    stacks = {w: bp.seeded_stacks(*w) for w in wirings}
    for i, _seed in enumerate(bp.RESIDUAL_DEMO_SEEDS):
        ref = dict(stacks[(True, "layer")][i].named_parameters())
        for w in wirings:  # "none" has no norm parameters; every random one matches
            for name, p in stacks[w][i].named_parameters():
                assert torch.equal(p, ref[name]), (w, name)
    full = bp.RESIDUAL_DEMO_LAYERS
    for residual, norm in wirings:  # at full depth the demo's stacks are init_gradients' fresh models
        (view,) = bp.residual_view(full, residual, norm).values()
        fresh = bp.init_gradients(full, residual, norm, seeds=bp.RESIDUAL_DEMO_SEEDS, batch_size=4, seq_len=8)
        # equal up to float32 rounding: backward() also sums the parameters' gradients, in another order
        assert np.allclose(view["act"], fresh["act"], rtol=1e-4, atol=1e-7)
        assert np.allclose(view["share"], fresh["share"], rtol=0, atol=1e-6)
    (cut,) = bp.residual_view(3, False, "none").values()
    assert cut["act"].shape == (3, 4) and cut["share"].shape == (3, 4)
    assert all(p.grad is None for m in stacks[(False, "none")] for p in m.parameters()), "the demo never trains"
    with pytest.raises(ValueError, match="n_layers"):
        bp.residual_view(full + 1)
    with pytest.raises(ValueError, match="norm"):
        bp.residual_view(4, norm="rms")


def test_identity_at_zero():
    kept, erased = bp.identity_at_zero(True), bp.identity_at_zero(False)
    assert kept["max_change"] < 1e-5 and kept["output_norm"] == pytest.approx(math.sqrt(32), rel=1e-5)
    assert erased["output_norm"] == 0.0


# -- nonlinearity -----------------------------------------------------------------------------
def test_superposition_linear_and_nonlinear_parts():
    e = bp.superposition(a=0.3, b=2.0, seq_len=5)["error"]
    assert e["value path, probs frozen"] < 1e-13 and e["attention, one token"] < 1e-13
    assert e["FFN"] > 0.1 and e["attention, probs from X"] > 0.05
    e_affine = bp.superposition(a=0.5, b=0.5)["error"]  # a + b = 1: the f(0) term vanishes, still linear
    assert e_affine["value path, probs frozen"] < 1e-13
    with pytest.raises(ValueError, match="seq_len"):
        bp.superposition(seq_len=1)
    with pytest.raises(ValueError, match="a must"):
        bp.superposition(a=float("nan"))


def test_superposition_on_a_given_layer_does_not_modify_it():
    layer = bp.MiniBert(bp.block_config(1)).layers[0]
    w = layer.ffn.intermediate.weight.clone()
    bp.superposition(layer=layer)
    assert layer.ffn.intermediate.weight.dtype == torch.float32 and torch.equal(layer.ffn.intermediate.weight, w)


# -- masks ------------------------------------------------------------------------------------
def test_leak_map_causal_and_padding():
    c = bp.leak_map("causal", position=6)
    assert (c["diff"][:, :6] == 0).all() and (c["diff"][-1, 6:] > 0).all() and c["earlier_changed"] == 0
    n = bp.leak_map("none", position=6)
    assert n["earlier_changed"] == 6 and (n["diff"][0, np.arange(12) != 6] == 0).all()  # embeddings: per token
    p = bp.leak_map("padding", position=11, n_pad=4)
    assert p["unmasked_changed"] == 0 and (p["diff"][:, :8] == 0).all() and "note" in p
    open_pad = bp.leak_map("none", position=11, n_pad=4)
    assert open_pad["unmasked_changed"] == 8
    both = bp.leak_map("causal + padding", position=3, n_pad=2)
    assert both["earlier_changed"] == 0 and both["unmasked_changed"] > 0


def test_leak_map_rejects_bad_input():
    with pytest.raises(ValueError, match="mask"):
        bp.leak_map("future")
    with pytest.raises(ValueError, match="position"):
        bp.leak_map("causal", position=12)
    with pytest.raises(ValueError, match="n_pad"):
        bp.leak_map("padding", n_pad=12)


# -- cost -------------------------------------------------------------------------------------
def test_linformer_identity_projection_is_exact_attention():
    q, k, v = (torch.randn(2, 3, 10, 4) for _ in range(3))
    eye = torch.eye(10)
    res = bp.linformer_attention(q, k, v, eye, eye)
    assert torch.allclose(res.out, attention(q, k, v).out, atol=1e-6) and res.scores.shape == (2, 3, 10, 10)
    E = torch.randn(3, 10)
    assert bp.linformer_attention(q, k, v, E, E).scores.shape == (2, 3, 10, 3)
    # averaging projection: one row that averages all keys and values -> output = mean of v for every query
    avg = torch.full((1, 10), 0.1)
    out = bp.linformer_attention(q, k, v, avg, avg).out
    assert torch.allclose(out, v.mean(-2, keepdim=True).expand_as(out), atol=1e-6)
    with pytest.raises(ValueError, match="E and F"):
        bp.linformer_attention(q, k, v, torch.randn(3, 9), torch.randn(3, 9))


def test_linformer_layer_shapes_and_length_limit():
    layer = bp.LinformerSelfAttention(16, 2, max_len=20, k_proj=5)
    out, scores = layer(torch.randn(3, 12, 16))
    assert out.shape == (3, 12, 16) and scores.shape == (3, 2, 12, 5)
    with pytest.raises(ValueError, match="max_len"):
        layer(torch.randn(1, 21, 16))
    with pytest.raises(ValueError, match="n_heads"):
        bp.LinformerSelfAttention(16, 3, 20, 5)
    with pytest.raises(ValueError, match="k_proj"):
        bp.LinformerSelfAttention(16, 2, 20, 0)


def test_fit_exponent_and_cost_curve_bytes():
    x = np.array([2.0, 4.0, 8.0, 16.0])
    assert bp.fit_exponent(x, 3 * x ** 2.5) == pytest.approx(2.5)
    noisy = 3 * x ** 2.0
    noisy[-1] *= 10  # one disturbed point
    assert bp.fit_exponent(x, noisy, robust=True) == pytest.approx(2.0, abs=0.6)
    with pytest.raises(ValueError, match="positive"):
        bp.fit_exponent([1, 2], [0, 1])
    c = bp.cost_curve((16, 32, 64), batch=2, heads=3, d_head=4, k_proj=8, repeats=1)
    assert list(c["bytes_full"]) == [2 * 3 * t * t * 4 for t in (16, 32, 64)]
    assert list(c["bytes_lin"]) == [2 * 3 * t * 8 * 4 for t in (16, 32, 64)]
    assert c["exp_bytes_full"] == pytest.approx(2.0) and c["exp_bytes_lin"] == pytest.approx(1.0)
    s = bp.cost_curve((16, 64, 256), heads=1, d_head=4, k_proj=lambda t: int(t ** 0.5), repeats=1)
    assert s["exp_bytes_lin"] == pytest.approx(1.5) and list(s["k"]) == [4, 8, 16]
    with pytest.raises(ValueError, match="length"):
        bp.cost_curve((1, 8))
    with pytest.raises(ValueError, match="repeats"):
        bp.cost_curve((8, 16), repeats=0)


def test_cost_view_memory_is_analytic():
    r = bp.cost_view(T=256, k=32)
    assert np.allclose(r["mb_full"], 12 * r["grid"] ** 2 * 4 / 1e6) and r["ms_full"] > 0 and "note" not in r
    assert "note" in bp.cost_view(T=32, k=64)
    with pytest.raises(ValueError, match="T must"):
        bp.cost_view(T=8)


# -- experiment and pretrained helpers ------------------------------------------------------------
def test_lookup_task_labels_are_a_permutation_of_the_token():
    task = be.LookupTask(seq_len=5)
    b = task.batch(64, torch.Generator().manual_seed(0))
    assert b.input_ids.shape == (64, 6) and (b.input_ids[:, 0] == CLS).all() and (b.labels[:, 0] == IGNORE).all()
    x, y = b.input_ids[:, 1:] - N_SPECIAL, b.labels[:, 1:] - N_SPECIAL
    assert torch.equal(y, task.perm[x]) and sorted(task.perm.tolist()) == list(range(27))
    with pytest.raises(ValueError, match="seq_len"):
        be.LookupTask(seq_len=0)


def test_residual_experiment_runs_and_plots():
    res = be.run_residual_experiment(n_layers=2, seeds=(0,), steps=2, batch_size=8, device="cpu")
    assert res.accuracy.shape == (2, 1) and res.init_grad.shape == (2, 1, 2) and res.curves.shape[:2] == (2, 1)
    assert finite_values(res.accuracy) and (res.init_grad > 0).all()
    fig = plt.figure()
    be.plot_residual_experiment(fig, res)
    plt.close(fig)
    with pytest.raises(ValueError, match="steps"):
        be.run_residual_experiment(steps=0)


def test_plots_draw():
    for plot, result in ((bp.plot_superposition, bp.superposition()), (bp.plot_leak_map, bp.leak_map()),
                         (bp.plot_cost, bp.cost_curve((16, 32), repeats=1))):
        fig = plt.figure()
        plot(fig, result)
        plt.close(fig)


# -- demos ------------------------------------------------------------------------------------


def test_cost_demo_returns_the_same_figure_for_the_same_setting():
    demo = demos.cost_demo()
    first = demo.image.value
    demo.set(T=1024)
    demo.set(T=512)
    assert demo.image.value == first


def test_the_reference_reads_into_rungs_gates_at_twice_chance_and_draws():
    import matplotlib.figure

    from qalib.lab.reference import load
    from qalib.topics.nb10_residuals_ffn_masks import experiment as E

    rungs = E.summarize_reference(load("10_residuals_ffn_masks", "no_residual"))
    assert [r.steps for r in rungs] == [30, 120, E.REFERENCE_STEPS, E.REFERENCE_STEPS]
    assert {r.init_std for r in rungs} == {0.02, 0.2}
    assert all(r.accuracy[v].shape == (10,) for r in rungs for v in E.VARIANTS)
    assert not E.reference_gate(2 * E.CHANCE).passed and E.reference_gate(2 * E.CHANCE + 1e-3).passed
    fig = matplotlib.figure.Figure()
    E.plot_reference(fig, load("10_residuals_ffn_masks", "no_residual"))
    assert len(fig.axes) == 1


def test_a_reference_seed_trains_both_variants_on_its_own_held_out_batches():
    from qalib.topics.nb10_residuals_ffn_masks import experiment as E

    out = E.reference_seed(0, steps=2, init_std=0.02, lr=1e-2)
    assert set(out) == set(E.VARIANTS)
    assert all(0 <= out[v]["accuracy"] <= 1 and out[v]["eval_loss"] > 0 for v in E.VARIANTS)


def test_stream_contributions_split_a_post_norm_output_exactly_and_refuse_other_layouts():
    torch.manual_seed(0)
    model = MiniBert(bp.block_config(n_layers=3, init_std=0.2)).eval()
    with torch.no_grad():                                   # gammas away from 1, so the gains differ
        for layer in model.layers:
            layer.attention_norm.weight.uniform_(0.2, 3.0)
            layer.ffn_norm.bias.normal_()
    ids = torch.randint(N_SPECIAL, 32, (1, 9))
    r = bp.stream_contributions(model, ids)
    assert r.names[0] == "embeddings" and r.names[-1] == "LayerNorm biases" and len(r.names) == 2 + 2 * 3
    assert r.components.shape == (8, 9, 32) and r.gains.shape == (8, 32)
    assert torch.allclose(r.components.sum(0), model(ids).last_hidden_state[0], atol=1e-5)
    assert torch.allclose(r.shares.sum(0), torch.ones(9), atol=1e-5)
    assert torch.allclose(r.gains[-2], model.layers[-1].ffn_norm.weight.abs())   # the last FFN: one norm after it
    assert r.gain_spread("attention 0") > r.gain_spread("FFN 2") >= 1
    with pytest.raises(ValueError, match="one sentence"):
        bp.stream_contributions(model, ids.expand(2, -1))
    pre = MiniBert(MiniBertConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=4, d_ff=64, max_len=32,
                                  norm_placement="pre")).eval()
    with pytest.raises(ValueError, match="post-norm"):
        bp.stream_contributions(pre, ids)

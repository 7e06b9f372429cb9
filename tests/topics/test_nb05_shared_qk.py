import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from qalib.lab.data import ProbeTask
from qalib.lab.presets import TINY
from qalib.nn.model import MiniBert
from qalib.nn.positions import frequencies, offset_matrix
from qalib.tools.testing import finite_values
from qalib.topics.nb05_shared_qk import compute as S
from qalib.topics.nb05_shared_qk import experiment as E


# -- inputs and diagonal statistics ----------------------------------------------------------------
def test_make_inputs_shapes_and_layernorm_norms():
    x = S.make_inputs("gaussian", 10, 16, seed=1)
    assert x.shape == (10, 16)
    ln = S.make_inputs("layernorm", 10, 16, seed=1)
    assert torch.allclose(ln.norm(dim=-1), torch.full((10,), math.sqrt(16)), atol=1e-4)  # LN: ||x|| = sqrt(d)
    assert torch.equal(S.make_inputs("gaussian", 10, 16, seed=1), x)  # seeded


def test_make_inputs_pretrained_uses_the_checkpoint_width():
    x = S.make_inputs("pretrained", 8, 3)
    assert x.shape == (8, 384) and torch.isfinite(x).all()
    with pytest.raises(ValueError, match="n must be <="):
        S.make_inputs("pretrained", 10_000 // 3, 3)


@pytest.mark.parametrize("kwargs, match", [({"kind": "uniform"}, "kind"), ({"n": 1}, "n must"), ({"d": 0}, "d must")])
def test_make_inputs_rejects_bad_arguments(kwargs, match):
    args = {"kind": "gaussian", "n": 4, "d": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        S.make_inputs(**args)


def test_tied_scores_are_symmetric_psd_and_separate_are_not():
    x = S.make_inputs("gaussian", 12, 8, seed=3)
    s = S.random_scores(x, tied=True, d_head=4).double()
    assert torch.allclose(s, s.T, atol=1e-5)
    assert torch.linalg.eigvalsh(s).min() > -1e-5
    assert torch.linalg.matrix_rank(s, atol=1e-4) <= 4  # rank <= d_head
    sep = S.random_scores(x, tied=False, d_head=4)
    assert (sep - sep.T).abs().max() > 0.1


def test_random_scores_rejects_bad_input():
    with pytest.raises(ValueError, match="x must be"):
        S.random_scores(torch.zeros(3), tied=True)
    with pytest.raises(ValueError, match="d_head"):
        S.random_scores(torch.zeros(3, 4), tied=True, d_head=0)


def test_diagonal_stats_closed_form():
    n, a = 5, 3.0
    r = S.diagonal_stats(a * torch.eye(n))
    assert r["argmax_diag"] == 1.0 and r["chance"] == pytest.approx(1 / n)
    assert r["p_diag"] == pytest.approx(math.exp(a) / (math.exp(a) + n - 1), rel=1e-6)
    off = torch.roll(torch.eye(n), 1, dims=1) * a  # every row peaks off the diagonal
    assert S.diagonal_stats(off)["argmax_diag"] == 0.0
    with pytest.raises(ValueError, match="scores"):
        S.diagonal_stats(torch.zeros(2, 3))


def test_diagonal_sweep_trends():
    r = S.diagonal_sweep([4, 128], [8], "gaussian", seeds=range(4))
    assert r["shared"].shape == (2, 1) and r["shared"][1, 0] == 1.0  # wide: the diagonal always wins
    assert r["shared"][0, 0] < r["shared"][1, 0]
    assert r["separate"].max() < 0.5
    with pytest.raises(ValueError, match="non-empty"):
        S.diagonal_sweep([], [8])


# -- directed relations -----------------------------------------------------------------------------
def test_offset_forms():
    m = S.offset_form(2, 8, "separate", base=100.0)
    assert torch.equal(m, offset_matrix(2, 8, 100.0))
    sym = S.offset_form(2, 8, "symmetric part", base=100.0)
    assert torch.allclose(sym, sym.T)
    psd = S.offset_form(5, 8, "shared (PSD)", base=100.0)
    assert torch.linalg.eigvalsh(psd).min() > -1e-10
    # eigenvalues of the symmetric part are cos(k w_i) (each twice); the PSD form keeps the positive ones
    expected = torch.cos(5 * frequencies(8, 100.0)).clamp(min=0).repeat_interleave(2).sort().values
    assert torch.allclose(torch.linalg.eigvalsh(psd), expected, atol=1e-10)
    with pytest.raises(ValueError, match="form"):
        S.offset_form(1, 8, "antisymmetric")


def test_directed_margin_closed_form():
    n, k, d, s = 12, 2, 16, 1.5
    r = S.directed_scores(n, k, "separate", sharpness=s, d=d, base=100.0)
    w = frequencies(d, 100.0)
    expected = s / math.sqrt(d) * float((1 - torch.cos(2 * k * w)).sum())  # sum cos(0) - sum cos(2kw)
    assert np.allclose(r["margin"], expected, rtol=1e-6)
    for form in S.FORMS[1:]:
        r = S.directed_scores(n, k, form, sharpness=s, d=d)
        assert np.abs(r["margin"]).max() < 1e-6 and r["asymmetry"] < 1e-10


def test_directed_masks():
    r = S.directed_scores(10, 1, "shared + mask self")
    assert np.allclose(np.diag(r["probs"]), 0)
    r = S.directed_scores(10, 1, "shared + causal + mask self")
    assert np.allclose(np.triu(r["probs"]), 0) and np.allclose(r["probs"][1:].sum(-1), 1)
    assert r["probs"][1, 0] == pytest.approx(1.0)  # token 1 can only see token 0


@pytest.mark.parametrize("kwargs, match", [({"n": 2}, "n must"), ({"k": 0}, "k must"), ({"k": 9}, "k must"),
                                           ({"sharpness": 0.0}, "sharpness"), ({"form": "x"}, "form")])
def test_directed_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.directed_scores(**{"n": 9, **kwargs})


# -- the real model's forms ------------------------------------------------------------------------
def test_qk_forms_reproduce_the_bilinear_part_of_the_scores():
    torch.manual_seed(0)
    model = MiniBert(TINY.replace(n_layers=1, d_model=16, n_heads=2, d_ff=32)).eval()
    for layer in model.layers:
        torch.nn.init.zeros_(layer.attention.qkv.bias)  # leave only x^T A x'
    ids = torch.randint(5, 32, (1, 6))
    internals = model(ids, return_internals=True).internals
    x = internals["embeddings.out"][0].double()  # (T, d)
    a = S.qk_forms(model)  # (1, H, d, d)
    expected = torch.einsum("id,hde,je->hij", x, a[0], x) * model.cfg.scale
    assert torch.allclose(internals["layer0.scores"][0].double(), expected, atol=1e-5)
    with pytest.raises(ValueError, match="qk"):
        S.qk_forms(MiniBert(TINY.replace(qk="shared")))


def test_asymmetry_and_self_preference():
    a = torch.randn(6, 6, dtype=torch.float64)
    assert S.asymmetry(a + a.T) < 1e-12
    assert S.asymmetry(a - a.T) == pytest.approx(2.0)
    w = torch.randn(50, 5, dtype=torch.float64)
    assert S.self_preference(w @ w.T) >= 1.0  # tr(WW^T) = ||W||_F^2 >= ||WW^T||_F
    assert S.self_preference(-(w @ w.T)) <= -1.0
    with pytest.raises(ValueError, match="square"):
        S.asymmetry(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="square"):
        S.self_preference(torch.zeros(2, 3))


def test_pretrained_asymmetry_on_a_tiny_model():
    model = MiniBert(TINY)
    r = S.pretrained_asymmetry(model)
    assert r["asym"].shape == (2, 4) and finite_values(r)
    assert np.all(r["random"] > 1.0) and np.all(r["random"] < 1.8)  # independent factors: about sqrt(2)
    assert np.all(r["random_shared_self_z"] >= 1.0)


def test_pretrained_diagonal_matches_the_models_own_scores(minilm):
    model, tok = minilm
    r = S.pretrained_diagonal(model, tok, "a short sentence about attention heads")
    with torch.no_grad():
        scores = model(**tok("a short sentence about attention heads"), return_internals=True).internals["layer0.scores"][0]
    t = scores.shape[-1]
    assert r["n_tokens"] == t
    assert np.allclose(r["separate"], (scores.argmax(-1) == torch.arange(t)).double().mean(-1).numpy())
    with pytest.raises(ValueError, match="text"):
        S.pretrained_diagonal(model, tok, "  ")


# -- the experiment --------------------------------------------------------------------------------
def test_probe_experiment_shapes_and_masks():
    task = ProbeTask("previous", vocab_size=12, seq_len=6)
    r = E.run_probe_experiment(task, seeds=[0], steps=3, d_model=16, batch_size=8, log_every=1, pos="rotary")
    assert set(r["curves"]) == set(E.VARIANTS) and r["curves"]["shared"].shape == (1, 3)
    assert r["final"]["separate"].shape == (1,) and finite_values(r)
    assert np.all(r["attention"]["shared + mask self"]["self"] == 0)  # Reformer's mask: never itself
    for name in E.VARIANTS:
        m = r["attention"][name]
        assert np.all(m["target"] + m["self"] + m["mirror"] <= 1 + 1e-6)
        assert 0 <= m["margin_positive"][0] <= 1 and m["margin_std"][0] >= 0
    fig = plt.figure()
    E.plot_curves(fig, [r])
    E.plot_attention_masses(plt.figure(), [r])
    plt.close("all")


def test_probe_experiment_rejects_bad_arguments():
    task = ProbeTask("previous", vocab_size=12, seq_len=6)
    with pytest.raises(ValueError, match="variants"):
        E.run_probe_experiment(task, variants=("tied",))
    with pytest.raises(ValueError, match="seeds"):
        E.run_probe_experiment(task, seeds=[])
    with pytest.raises(ValueError, match="steps"):
        E.run_probe_experiment(task, steps=0)
    with pytest.raises(TypeError, match="task"):
        E.probe_config("previous")


def test_plots_draw():
    S.plot_diagonal_sweep(plt.figure(), S.diagonal_sweep([4, 8], [4], seeds=range(2)))
    S.plot_pretrained_asymmetry(plt.figure(), S.pretrained_asymmetry(MiniBert(TINY)))
    plt.close("all")


# -- demos -----------------------------------------------------------------------------------------


def test_attention_masses_margin_is_pinned_for_a_shared_model():
    # symmetric scores: the back-over-forward margins telescope, so their sum over rows 2..T-2 of each sequence
    # is S[2,1] - S[T-1,T-2]; the mean over rows is therefore bounded by 2 max|S| / (number of rows)
    torch.manual_seed(0)
    task = ProbeTask("previous", vocab_size=12, seq_len=10)
    model = MiniBert(E.probe_config(task, 16, 1, pos="rotary", qk="shared", init_std=0.3)).eval()
    m = E.attention_masses(model, task, batch_size=16)
    batch = task.batch(16, torch.Generator().manual_seed(999))
    with torch.no_grad():
        s = model(**batch.model_inputs(), return_internals=True).internals["layer0.scores"][:, 0]
    bound = 2 * float(s.abs().max()) / (s.shape[-1] - 3)
    assert abs(m["margin_mean"]) <= bound


@pytest.mark.parametrize("n,k", [(3, 2), (5, 3), (7, 4)])
def test_directed_scores_too_short_for_k_gives_a_note_not_an_error(n, k):
    r = S.directed_scores(n=n, k=k)  # n < 2k: no row has a token k back and k forward
    assert len(r["margin"]) == 0 and "too short" in r["note"]

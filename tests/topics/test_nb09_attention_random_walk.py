import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from qalib.topics.nb09_attention_random_walk import compute as R
from qalib.topics.nb09_attention_random_walk import experiment as E


# -- tokens, kernel identity, transition matrices --------------------------------------------------
def test_sphere_tokens_have_norm_sqrt_d_and_zero_mean():
    x = R.sphere_tokens(12, 9, 3, 0.5, seed=2)
    assert x.shape == (12, 9) and x.dtype == torch.float64
    assert torch.allclose(x.norm(dim=-1), torch.full((12,), 3.0, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(x.mean(-1), torch.zeros(12, dtype=torch.float64), atol=1e-12)
    assert torch.equal(R.sphere_tokens(12, 9, 3, 0.5, seed=2), x)  # seeded


@pytest.mark.parametrize("kwargs, match", [({"n": 1}, "n must"), ({"d": 1}, "d must"), ({"n_clusters": 0}, "n_clusters"),
                                           ({"spread": -1.0}, "spread")])
def test_sphere_tokens_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        R.sphere_tokens(**{"n": 6, "d": 4, **kwargs})


def test_kernel_identity_is_exact_and_query_factor_cancels_in_softmax():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64)
    r = R.kernel_identity(q, k, s=2.0)
    assert torch.allclose(r["lhs"], r["rhs"], rtol=1e-12)
    assert r["gauss"][0, 0] == pytest.approx(math.exp(-float((q[0] - k[0]).pow(2).sum()) / 4.0), rel=1e-12)
    # softmax of the log of gauss * key factor equals softmax(q.k/s): the query factor is a row constant
    p = torch.softmax(q @ k.T / 2.0, -1)
    alt = r["gauss"] * r["k_factor"][None, :]
    assert torch.allclose(p, alt / alt.sum(-1, keepdim=True), atol=1e-12)
    with pytest.raises(ValueError, match="s must"):
        R.kernel_identity(q, k, s=0.0)
    with pytest.raises(ValueError, match="q must"):
        R.kernel_identity(torch.zeros(3), k, s=1.0)


def test_transition_matrix_is_stochastic_and_tied_is_reversible():
    x = R.sphere_tokens(10, 8, 2, 0.5, seed=1)
    for tied in (True, False):
        p = R.transition_matrix(x, 0.7, tied=tied)
        assert torch.allclose(p.sum(-1), torch.ones(10, dtype=torch.float64), atol=1e-12) and p.min() > 0
    p = R.transition_matrix(x, 1.0, tied=True)
    kern = torch.exp(x @ x.T / math.sqrt(8))
    pi = R.stationary(p)
    assert torch.allclose(pi, kern.sum(-1) / kern.sum(), rtol=1e-9)  # pi proportional to the degree
    assert torch.allclose(pi @ p, pi, atol=1e-12)
    with pytest.raises(ValueError, match="temperature"):
        R.transition_matrix(x, 0.0)


def test_temperature_limits_identity_and_uniform():
    x = R.sphere_tokens(6, 16, 6, 0.1, seed=0)
    cold, hot = R.transition_matrix(x, 0.01), R.transition_matrix(x, 1000.0)
    assert torch.allclose(cold, torch.eye(6, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(hot, torch.full((6, 6), 1 / 6, dtype=torch.float64), atol=1e-2)


def test_stationary_closed_form_two_states_and_bad_input():
    a, b = 0.3, 0.1
    p = torch.tensor([[1 - a, a], [b, 1 - b]], dtype=torch.float64)
    assert torch.allclose(R.stationary(p), torch.tensor([b / (a + b), a / (a + b)], dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError, match="row-stochastic"):
        R.stationary(torch.ones(3, 3))
    with pytest.raises(ValueError, match="square"):
        R.stationary(torch.ones(2, 3))


def test_markov_summary_two_state_rate():
    a, b = 0.3, 0.1  # eigenvalues 1 and 1 - a - b
    p = torch.tensor([[1 - a, a], [b, 1 - b]], dtype=torch.float64)
    m = R.markov_summary(p, t_max=10)
    assert m["lam2"] == pytest.approx(1 - a - b, rel=1e-9)
    assert m["tv"][5] / m["tv"][4] == pytest.approx(1 - a - b, rel=1e-9)  # exact geometric decay for 2 states
    assert m["tv"][0] == pytest.approx(max(1 - b / (a + b), 1 - a / (a + b)))
    assert m["entropy"][0] == 0.0
    pi = m["pi"]  # from state 0 (the worse start here, since pi_0 = 1/4 < pi_1): KL(e_0 || pi) = -ln pi_0
    assert m["kl"][0] == pytest.approx(-np.log(min(pi)), rel=1e-9) and m["kl"][-1] < m["kl"][0]
    with pytest.raises(ValueError, match="t_max"):
        R.markov_summary(p, t_max=-1)


# -- collapse measures -------------------------------------------------------------------------------
def test_collapse_ratio_and_effective_rank_closed_forms():
    same = torch.ones(5, 3) * torch.tensor([1.0, 2.0, 3.0])
    assert R.collapse_ratio(same) == pytest.approx(0.0, abs=1e-12)
    assert R.effective_rank(same) == pytest.approx(1.0, abs=1e-9)
    centred = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    assert R.collapse_ratio(centred) == pytest.approx(1.0)
    assert R.effective_rank(centred) == pytest.approx(2.0)  # two equal singular values
    batch = torch.stack([centred, torch.ones(4, 2)])  # (B, T, d): the mean of 1 and 0
    assert R.collapse_ratio(batch) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="h must"):
        R.collapse_ratio(torch.zeros(3))
    with pytest.raises(ValueError, match="h must"):
        R.effective_rank(torch.zeros(3))


def test_attention_stack_collapses_without_residual_only():
    plain = R.attention_stack(depth=4, n=16, d=16, n_heads=2, seed=0)
    res = R.attention_stack(depth=4, residual=True, n=16, d=16, n_heads=2, seed=0)
    assert plain["ratio"].shape == (5,) and plain["ratio"][0] == pytest.approx(res["ratio"][0])
    assert plain["ratio"][4] < 1e-6 and res["ratio"][4] > 0.3
    drops = R.log_drops(plain["ratio"])
    assert drops[2] > 2 * drops[1]  # faster than exponential
    uniform = R.attention_stack(depth=1, qk_gain=0.0, n=8, d=8, n_heads=1)
    assert uniform["ratio"][1] < 1e-12  # uniform attention: every output row is the same mean
    # deeper stacks start with the same layers
    assert np.allclose(R.attention_stack(depth=6, n=16, d=16, n_heads=2)["ratio"][:5], plain["ratio"])


@pytest.mark.parametrize("kwargs, match", [({"depth": 0}, "depth"), ({"d": 10, "n_heads": 3}, "divisible"),
                                           ({"qk_gain": -1.0}, "qk_gain"), ({"n": 1}, "n must")])
def test_attention_stack_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        R.attention_stack(**kwargs)


def test_log_drops_constant_for_exponential_decay():
    assert np.allclose(R.log_drops(0.5 ** np.arange(6)), math.log(2))


def test_collapse_sweep_shapes_and_errors():
    sw = R.collapse_sweep(3, seeds=range(2), a={"n": 8, "d": 8, "n_heads": 2})
    assert sw["variants"]["a"]["ratio"].shape == (2, 4)
    with pytest.raises(ValueError, match="non-empty"):
        R.collapse_sweep(3, seeds=[])


def test_averaging_walk_contracts_spread_and_spreads_distribution():
    x = R.sphere_tokens(8, 4, 2, 0.5)
    w = R.averaging_walk(R.transition_matrix(x), x, t_max=20)
    assert w["spread"][20] < w["spread"][0] and np.all(np.diff(w["kl"]) <= 1e-12)
    with pytest.raises(ValueError, match="t_max"):
        R.averaging_walk(R.transition_matrix(x), x, t_max=0)


def test_row_entropy_can_fall_while_kl_to_pi_never_rises():
    # Two rows spread evenly, one sticky state: after one step the rows' mean entropy is high, then it falls towards
    # the low entropy of pi (almost all mass on state 1), while every row's KL to pi keeps falling.
    p = torch.tensor([[1 / 3, 1 / 3, 1 / 3], [0.01, 0.98, 0.01], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    m = R.markov_summary(p, t_max=30)
    assert np.any(np.diff(m["entropy"]) < -1e-3)
    assert np.all(np.diff(m["kl"]) <= 1e-12)


# -- demos -------------------------------------------------------------------------------------------


def test_markov_demo_extremes_give_notes():
    cold = R.markov_demo_compute(temperature=0.05, t=0)
    assert "barely" in cold["note"] and np.allclose(cold["pt"], np.eye(24))
    hot = R.markov_demo_compute(temperature=20.0, t=128)
    assert hot["tv"][-1] < 1e-10


def test_plots_draw():
    fig = plt.figure()
    R.plot_markov_powers(fig, R.transition_matrix(R.sphere_tokens(6, 4, 2, 0.5)), ts=(1, 2))
    fig = plt.figure()
    R.plot_collapse(fig, R.collapse_sweep(2, seeds=range(2), a={"n": 8, "d": 8, "n_heads": 2}))
    plt.close("all")


# -- experiment and real model ------------------------------------------------------------------------
def test_best_constant_accuracy_matches_label_counts():
    task = E.mlm_task(seq_len=8)
    acc = E.best_constant_accuracy(task, n_batches=1, batch_size=16, seed=3)
    labels = task.batch(16, torch.Generator().manual_seed(3)).labels
    labels = labels[labels != -100]
    assert acc == pytest.approx(float(torch.bincount(labels).max()) / len(labels))


def test_residual_experiment_tiny_run():
    res = E.run_residual_experiment(seeds=range(2), steps=3, d_model=16, seq_len=6, log_every=1, eval_batches=1,
                                    eval_batch_size=16)
    assert res["final"]["residual"].shape == (2,) and res["ratio"]["no residual"].shape == (2, 3)
    assert res["ratio_init"]["no residual"][:, 1].max() < 0.05  # collapsed from layer 0 on at init
    assert res["ratio_init"]["residual"][:, 1].min() > 0.3
    fig = plt.figure()
    E.plot_experiment(fig, res)
    plt.close("all")
    with pytest.raises(ValueError, match="seeds"):
        E.run_residual_experiment(seeds=[])
    with pytest.raises(ValueError, match="steps"):
        E.run_residual_experiment(steps=0)


def test_minilm_measurements(minilm):
    model, tok = minilm
    text = "The cat sat on the mat."
    prof = E.minilm_profiles(model, tok, text)
    assert prof["real"].shape == (7,) and prof["attention only"][6] < 1e-6 < prof["real"].min()
    kr = E.minilm_kernel(model, tok, text)
    assert kr["tv"].shape == (6, 12) and kr["tv_sphere_tied"].max() < 1e-9
    st = E.minilm_stationary(model, tok, text)
    assert st["special_mass"].shape == (6, 12) and np.all((st["lam2"] >= 0) & (st["lam2"] < 1))
    # attention_only equals the model's attention sublayer output (the model adds the residual before its norm)
    with torch.no_grad():
        inner = model(**tok(text), return_internals=True).internals
        x = inner["embeddings.out"][0]
        mine = E.attention_only(model.layers[0], x, model.cfg)
        ref = model.layers[0].attention(x[None], None)[0]
    assert torch.allclose(mine, ref, atol=1e-4)


def test_the_reference_reads_into_rungs_gates_on_the_constant_and_draws():
    import matplotlib.figure

    from qalib.lab.reference import load
    from qalib.topics.nb09_attention_random_walk import experiment as E

    ref = load("09_attention_random_walk", "no_residual")
    rungs = E.summarize_reference(ref)
    assert [r.steps for r in rungs] == [150, 600, E.REFERENCE_STEPS, E.REFERENCE_STEPS]
    assert all(r.ratio[v].shape == (10, 3) for r in rungs for v in E.VARIANTS)
    assert not E.constant_gate(0.069, 0.06).passed and E.constant_gate(0.071, 0.06).passed
    fig = matplotlib.figure.Figure()
    E.plot_reference(fig, ref)
    assert len(fig.axes) == 1


def test_a_reference_seed_reads_both_variants_and_the_constant_on_its_own_batches():
    from qalib.topics.nb09_attention_random_walk import experiment as E

    a, b = E.reference_seed(0, steps=2, init_std=0.02, lr=1e-2), E.reference_seed(1, steps=2, init_std=0.02, lr=1e-2)
    assert 0 < a["best_constant"] < 1 and a["best_constant"] != b["best_constant"]  # held-out batches move with the seed
    assert all(len(a[v]["ratio"]) == 3 for v in E.VARIANTS)


def test_the_fisher_is_the_kl_hessian_and_kfac_is_exact_for_one_input_only():
    r = R.fisher_vs_kl_hessian(n=32, d=3, c=3, seed=1)
    assert r.fisher.shape == r.kl_hessian.shape == r.kfac.shape == (9, 9)
    assert torch.allclose(r.fisher, r.kl_hessian, atol=1e-12)
    assert torch.allclose(r.fisher, r.fisher.T)
    assert torch.linalg.eigvalsh(r.fisher).min() > -1e-12        # a covariance: positive semi-definite
    assert r.kfac_error > 0.01                                   # inputs and output curvature vary together
    one = R.fisher_vs_kl_hessian(n=1, d=3, c=3, seed=1)
    assert one.kfac_error < 1e-12
    assert R.kfac_storage(768, 3072) == {"full": (768 * 3072) ** 2, "kfac": 768 ** 2 + 3072 ** 2}
    with pytest.raises(ValueError):
        R.fisher_vs_kl_hessian(c=1)

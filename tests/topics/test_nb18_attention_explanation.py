import math

import matplotlib
import numpy as np
import pytest
import torch

from qalib.lab.data import CLS, N_SPECIAL, SEP
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.topics.nb18_attention_explanation import compute as A
from qalib.topics.nb18_attention_explanation import experiment as E

matplotlib.use("Agg")


def _model(seed=0):
    task = A.KeyTokenTask()
    torch.manual_seed(seed)
    return MiniBert(E.explanation_config(task)).eval(), task


# -- the task ---------------------------------------------------------------------------------------------------
def test_key_token_task_places_exactly_one_key_and_labels_by_its_class():
    task = A.KeyTokenTask(vocab_size=20, seq_len=9, n_keys=2)
    batch, pos = task.sample(500, torch.Generator().manual_seed(0))
    ids = batch.input_ids
    assert ids.shape == (500, 11) and (ids[:, 0] == CLS).all() and (ids[:, -1] == SEP).all()
    is_key = torch.isin(ids, task.keys)
    assert (is_key.sum(1) == 1).all()
    assert torch.equal(is_key.float().argmax(1), pos)
    key = ids[torch.arange(500), pos]
    assert torch.equal(batch.labels, (key >= N_SPECIAL + task.n_keys).long())
    assert 0.4 < batch.labels.float().mean() < 0.6 and pos.min() == 1 and pos.max() == 9
    assert torch.equal(task.sample(5, torch.Generator().manual_seed(3))[0].input_ids,
                       task.sample(5, torch.Generator().manual_seed(3))[0].input_ids)


@pytest.mark.parametrize("kwargs", [{"seq_len": 1}, {"n_keys": 0}, {"vocab_size": 9}])
def test_key_token_task_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        A.KeyTokenTask(**kwargs)


# -- attention methods ------------------------------------------------------------------------------------------
def test_rollout_is_the_product_of_half_identity_half_attention_and_stays_stochastic():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 2, 4, 5, 5, generator=g), -1)  # (L, B, H, T, T)
    r = A.rollout(probs)
    a = 0.5 * probs.mean(2) + 0.5 * torch.eye(5)
    assert torch.allclose(r, a[2] @ a[1] @ a[0], atol=1e-6)
    assert torch.allclose(r.sum(-1), torch.ones(2, 5), atol=1e-6)
    one = A.rollout(probs[:1])
    assert torch.allclose(one, a[0])


def test_attention_attributions_read_the_readout_row():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(2, 3, 2, 4, 4, generator=g), -1)
    out = A.attention_attributions(probs, A.cls_readout(4))
    assert torch.allclose(out["attention (last layer)"], probs[-1].mean(1)[:, 0])
    assert torch.allclose(out["attention (mean of layers)"], probs.mean((0, 2))[:, 0])
    mean = A.attention_attributions(probs, A.mean_readout(torch.ones(3, 4, dtype=torch.bool)))
    assert torch.allclose(mean["attention (last layer)"], probs[-1].mean(1).mean(1), atol=1e-6)


# -- gradients, erasure, scores ---------------------------------------------------------------------------------
def test_integrated_gradients_complete_and_erasure_matches_single_forwards():
    model, task = _model()
    batch, _ = task.sample(3, torch.Generator().manual_seed(0))
    inputs = batch.model_inputs()
    pred = torch.tensor([0, 1, 0])
    attr = A.attributions(model, inputs, A.cls_readout(inputs["input_ids"].shape[1]), A.class_margin, pred,
                          ig_steps=64)
    assert set(attr) == set(A.METHODS) and all(a.shape == (3, 14) for a in attr.values())
    # completeness (Sundararajan et al. 2017, prop. 1): IG sums to f(x) - f(baseline)
    ids = inputs["input_ids"]
    base = torch.where((ids == CLS) | (ids == SEP), ids, torch.zeros_like(ids))
    with torch.no_grad():
        fx = A.class_margin(model, ids, inputs["token_type_ids"], inputs["attention_mask"]).gather(1, pred[:, None])
        fb = A.class_margin(model, base, inputs["token_type_ids"], inputs["attention_mask"]).gather(1, pred[:, None])
    assert torch.allclose(attr["integrated gradients"].sum(1), (fx - fb).squeeze(1), atol=2e-3)
    # erasure of token 4 of example 1, done by hand
    mask = inputs["attention_mask"][1:2].clone()
    mask[0, 4] = 0
    with torch.no_grad():
        f_erased = A.class_margin(model, ids[1:2], inputs["token_type_ids"][1:2], mask)[0, 1]
    assert float(attr["leave-one-out"][1, 4]) == pytest.approx(float(fx[1, 0] - f_erased), abs=1e-5)
    assert float(attr["leave-one-out"][:, 0].abs().max()) == 0.0


def test_fused_path_equals_captum_and_the_erasures():
    model, task = _model(2)
    batch, _ = task.sample(1, torch.Generator().manual_seed(4))
    inputs = batch.model_inputs()
    target = lambda m, i, t, a: A.class_margin(m, i, t, a)[:, 1]  # noqa: E731  a scalar per sentence
    readout = A.cls_readout(inputs["input_ids"].shape[1])
    fused = A.fused_attributions(model, inputs, readout, target, ig_steps=5)
    slow = A.attributions(model, inputs, readout, target, None, ig_steps=5)
    for m in A.METHODS:
        assert torch.allclose(fused[m], slow[m], atol=1e-5), m
    with torch.no_grad():
        assert torch.allclose(fused["target"], target(model, *inputs.values()), atol=1e-6)
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="one sentence"):
        A.fused_attributions(model, task.sample(2)[0].model_inputs(), readout, target)


def test_rank_scores_and_ties():
    attr = torch.tensor([[9.0, 3.0, -5.0, 1.0], [9.0, 2.0, 2.0, 0.0]])
    content = torch.tensor([[False, True, True, True], [False, True, True, True]])
    s = A.rank_scores(attr, torch.tensor([2, 1]), content)
    assert s["hit"].tolist() == [1.0, 0.0]  # |-5| is largest; a tie counts against the key
    assert s["rr"].tolist() == [1.0, 0.5]


def test_kendall_tau_extremes():
    content = torch.tensor([[False, True, True, True, True]])
    a = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0]])
    assert float(A.kendall_tau(a, a, content)) == pytest.approx(1.0)
    assert float(A.kendall_tau(a, torch.tensor([[0.0, 4.0, 3.0, 2.0, 1.0]]), content)) == pytest.approx(-1.0)
    assert float(A.kendall_tau(a, torch.zeros(1, 5), content)) == 0.0  # no order at all: 0, not NaN
    m = A.agreement_matrix({"rollout": a, "leave-one-out": -a}, content)
    assert m.shape == (2, 2) and np.allclose(m, 1.0)


# -- the adversarial search -------------------------------------------------------------------------------------
def test_last_layer_cls_logits_reproduce_the_model_and_adversary_keeps_the_bound():
    model, task = _model(1)
    batch, _ = task.sample(6, torch.Generator().manual_seed(2))
    inputs = batch.model_inputs()
    with torch.no_grad():
        out = model(**inputs, return_internals=True)
        own = A.last_layer_cls_logits(model, out.internals, out.internals["layer1.probs"][:, :, 0])
    assert torch.allclose(own, model.class_logits(out.last_hidden_state), atol=1e-5)
    adv = A.adversarial_attention(model, inputs, bound=0.01, steps=30)
    assert (adv["delta_p"] < 0.01).all() and (adv["jsd"] >= 0).all() and (adv["jsd"] <= math.log(2) + 1e-6).all()
    assert torch.allclose(adv["adversarial"].sum(-1), torch.ones(6, 2), atol=1e-5)
    assert all(p.requires_grad for p in model.parameters())  # the search gives the weights back as it found them


def test_js_divergence_bounds():
    p = torch.tensor([1.0, 0.0])
    assert float(A.js_divergence(p, p)) == 0.0
    assert float(A.js_divergence(p, torch.tensor([0.0, 1.0]))) == pytest.approx(math.log(2))


def test_residual_share_is_a_fraction_per_layer():
    model, task = _model()
    batch, _ = task.sample(4, torch.Generator().manual_seed(0))
    r = A.residual_share(model, batch.model_inputs())
    assert r.shape == (2,) and ((r > 0) & (r < 1)).all()


# -- demos' compute and plot ------------------------------------------------------------------------------------
def test_adversarial_demo_compute_and_bad_values():
    model, task = _model()
    batch, _ = task.sample(4, torch.Generator().manual_seed(0))
    res = A.adversarial_demo_compute(model, batch, 0.05, 3)
    assert res["delta_p"] < 0.05 and np.isclose(res["adversarial"].sum(), 1.0, atol=1e-5)
    fig = matplotlib.figure.Figure()
    A.plot_adversarial_demo(fig, res)
    for bad in ({"bound": 0.0}, {"bound": float("nan")}, {"example": 4}):
        with pytest.raises(ValueError):
            A.adversarial_demo_compute(model, batch, **{"bound": 0.05, "example": 0, **bad})


def test_normalised_rows_and_safe_labels():
    attr = {m: np.array([5.0, -2.0, 1.0, 7.0]) for m in A.METHODS}
    rows = A.normalised_rows(attr, np.array([False, True, True, False]))
    assert rows.shape == (len(A.METHODS), 4) and np.allclose(rows[:, [0, 3]], 0.0) and np.allclose(rows[:, 1:3], [1.0, 0.5])
    zero = A.normalised_rows({m: np.zeros(3) for m in A.METHODS}, np.array([False, True, False]))
    assert np.allclose(zero[:, 1], 0.0)
    assert A.safe_label("$5 $x$") == r"\$5 \$x\$"


def test_real_demo_on_minilm_escapes_and_explains(minilm):
    model, tok = minilm
    res = A.real_demo_compute(model, tok, "the price is $5 <b>cheap</b>", "money")
    assert np.isfinite(res["rows"]).all() and res["tokens"][0] == "[CLS]"
    fig = matplotlib.figure.Figure()
    A.plot_real_demo(fig, res)
    fig.canvas.draw() if fig.canvas else None
    long = A.real_demo_compute(model, tok, "word " * 200, "word")
    assert len(long["tokens"]) == A.MAX_PIECES and "cut to" in long["note"]
    for text in ("", "   ", "?!..."):
        try:
            r = A.real_demo_compute(model, tok, text, "money")
            assert np.isfinite(r["rows"]).all()
        except ValueError as err:
            assert "word pieces" in str(err)
    with pytest.raises(ValueError, match="reference"):
        A.real_demo_compute(model, tok, "hello", "")


# -- label noise and the truth by intervention ------------------------------------------------------------------
def test_label_noise_flips_training_labels_only_and_sets_the_best_log_odds():
    task = A.KeyTokenTask(label_noise=0.2)
    clean, pos = task.sample(4000, torch.Generator().manual_seed(0))
    noisy, pos2 = task.sample(4000, torch.Generator().manual_seed(0), noisy=True)
    assert torch.equal(clean.input_ids, noisy.input_ids) and torch.equal(pos, pos2)
    key = clean.input_ids[torch.arange(4000), pos]
    assert torch.equal(clean.labels, (key >= N_SPECIAL + task.n_keys).long())
    flipped = float((clean.labels != noisy.labels).float().mean())
    assert 0.17 < flipped < 0.23
    assert torch.equal(task.batch(50, torch.Generator().manual_seed(1)).labels,
                       task.sample(50, torch.Generator().manual_seed(1), noisy=True)[0].labels)
    assert task.best_log_odds == pytest.approx(math.log(4))
    assert A.KeyTokenTask().best_log_odds == math.inf
    assert torch.equal(task.distractors, torch.arange(N_SPECIAL + 4, 32))
    for bad in (-0.1, 0.5, "x"):
        with pytest.raises(ValueError):
            A.KeyTokenTask(label_noise=bad)


def test_key_intervention_matches_single_forwards_and_flags_decisive_keys():
    model, task = _model(3)
    batch, key = task.sample(5, torch.Generator().manual_seed(5))
    inputs = batch.model_inputs()
    reps = task.distractors[:3]
    out = A.key_intervention(model, inputs, key, reps)
    with torch.no_grad():
        f = A.class_margin(model, **inputs)
        pred = f.argmax(-1)
        flips, drops = [], []
        for r in reps:
            ids = inputs["input_ids"].clone()
            ids[torch.arange(5), key] = r
            g = A.class_margin(model, ids, inputs["token_type_ids"], inputs["attention_mask"])
            flips.append((g.argmax(-1) != pred).float())
            drops.append(f.gather(1, pred[:, None])[:, 0] - g.gather(1, pred[:, None])[:, 0])
    assert torch.equal(out["pred"], pred)
    assert torch.allclose(out["flip"], torch.stack(flips).mean(0))
    assert torch.allclose(out["delta"], torch.stack(drops).mean(0), atol=1e-5)
    # replacing the key by the same key token changes nothing: no flip, no drop
    ids = inputs["input_ids"].clone()
    ids[torch.arange(5), key] = task.keys[0]
    one = {**inputs, "input_ids": ids}
    same = A.key_intervention(model, one, key, task.keys[:1])
    assert float(same["flip"].max()) == 0.0 and float(same["delta"].abs().max()) < 1e-5
    with pytest.raises(ValueError):
        A.key_intervention(model, inputs, key[:2], reps)


def test_split_hits_and_special_mass():
    hit = torch.tensor([1.0, 0.0, 1.0, 1.0])
    assert A.split_hits(hit, torch.tensor([True, True, False, False])) == (0.5, 1.0)
    d, u = A.split_hits(hit, torch.ones(4, dtype=torch.bool))
    assert d == 0.75 and math.isnan(u)
    attr = torch.tensor([[0.5, 0.25, 0.25], [0.0, 0.0, 0.0]])
    special = torch.tensor([[True, False, False], [True, False, True]])
    assert A.special_mass(attr, special).tolist() == [0.5, 0.0]


def test_uniform_last_layer_is_zero_when_the_row_is_already_uniform():
    model, task = _model(4)
    batch, _ = task.sample(6, torch.Generator().manual_seed(6))
    inputs = batch.model_inputs()
    out = A.uniform_last_layer(model, inputs)
    assert out["delta_p"].shape == (6,) and (out["delta_p"] >= 0).all() and set(out["flip"].tolist()) <= {0.0, 1.0}
    with torch.no_grad():  # by hand: the last layer's [CLS] row set uniform through last_layer_cls_logits
        inner = model(**inputs, return_internals=True).internals
        p0 = model.class_logits(model(**inputs).last_hidden_state).softmax(-1)
        uni = torch.full_like(inner["layer1.probs"][:, :, 0], 1 / 14)
        p1 = A.last_layer_cls_logits(model, inner, uni).softmax(-1)
    pred = p0.argmax(-1)
    assert torch.allclose(out["delta_p"], (p1 - p0).gather(1, pred[:, None])[:, 0].abs(), atol=1e-6)


def test_ig_gap():
    assert A.ig_gap(0.5, 0.5) == 0.0 and A.ig_gap(0.408, 0.213) == pytest.approx(0.9155, abs=1e-3)
    assert math.isnan(A.ig_gap(0.1, 0.0))


def test_method_arrays_and_gate():
    s = {"hit_decisive": {m: 1.0 for m in A.METHODS}, "hit_unused": {m: 0.5 for m in A.METHODS},
         "size_decisive": {m: 2.0 for m in A.METHODS}, "size_unused": {m: 0.5 for m in A.METHODS}}
    arr = E.method_arrays([s, s, s])
    assert arr["hit"].shape == (len(A.METHODS), 3) and np.allclose(arr["ratio"], 0.25)
    assert E.accuracy_gate(0.96).passed and not E.accuracy_gate(0.9).passed


def test_seed_pair_distances_are_symmetric_js_divergences_of_every_pair():
    from qalib.topics.nb18_attention_explanation.compute import js_divergence, seed_pair_distances
    a = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    b = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    pairs, d = seed_pair_distances(torch.stack([a, b, a]))
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    assert d.shape == (3, 2)
    assert torch.allclose(d[0], torch.tensor([math.log(2), 0.0]), atol=1e-6)   # disjoint rows: ln 2; equal rows: 0
    assert torch.allclose(d[1], torch.zeros(2))
    assert torch.allclose(d[2], js_divergence(b, a))
    with pytest.raises(ValueError, match="seeds >= 2"):
        seed_pair_distances(a[None])

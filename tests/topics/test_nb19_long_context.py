import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from qalib.lab.data import CLS, IGNORE, N_SPECIAL
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.topics.nb19_long_context import compute as lc
from qalib.topics.nb19_long_context import experiment as lx


def test_pattern_mask_window_global_random():
    full = lc.pattern_mask(10)
    assert full.all() and full.shape == (10, 10)
    w = lc.pattern_mask(10, window=2)
    assert w[5, 3] and w[5, 7] and not w[5, 2] and not w[5, 8] and w.diagonal().all()
    assert lc.score_entries(w) == sum(min(i + 2, 9) - max(i - 2, 0) + 1 for i in range(10))
    g = lc.pattern_mask(10, window=1, n_global=1)
    assert g[0].all() and g[:, 0].all() and not g[9, 1]
    r = lc.pattern_mask(20, window=0, n_random=3, seed=4)
    assert torch.equal(r, lc.pattern_mask(20, window=0, n_random=3, seed=4))  # seeded
    assert ((r.sum(1) >= 3) & (r.sum(1) <= 4)).all()  # 3 distinct keys, maybe self among them
    with pytest.raises(ValueError):
        lc.pattern_mask(0)
    with pytest.raises(ValueError):
        lc.pattern_mask(5, window=1, n_global=6)


def test_reach_and_hops_follow_the_window():
    t = 33
    w = lc.pattern_mask(t, window=4)
    for layers in (1, 2, 3):
        r = lc.reach(w, layers)
        assert r[1 + 4 * layers, 1] and (1 + 4 * layers + 1 >= t or not r[1 + 4 * layers + 1, 1])
    assert lc.hops(w, 1, 32) == math.ceil(31 / 4)
    g = lc.pattern_mask(t, window=4, n_global=1)
    assert lc.hops(g, 1, 32) == 2  # token 1 -> [CLS] -> every position
    assert lc.hops(lc.pattern_mask(t), 1, 32) == 1
    blocked = torch.eye(5, dtype=torch.bool)
    assert math.isinf(lc.hops(blocked, 0, 4))
    with pytest.raises(ValueError, match="square"):
        lc.reach(torch.ones(2, 3, dtype=torch.bool), 1)


def test_sparse_model_masks_keys_and_keeps_weights():
    cfg = MiniBertConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=12)
    torch.manual_seed(0)
    plain = MiniBert(cfg).eval()
    torch.manual_seed(0)
    same = lc.sparse_model(cfg, lc.pattern_mask(12)).eval()  # a full pattern: the plain model
    ids = torch.randint(5, 16, (2, 12))
    assert torch.allclose(plain(ids).last_hidden_state, same(ids).last_hidden_state, atol=1e-6)
    torch.manual_seed(0)
    local = lc.sparse_model(cfg, lc.pattern_mask(12, window=1)).eval()
    with torch.no_grad():
        probs = local(ids, return_internals=True).internals["layer0.probs"]
        fused = local(ids).last_hidden_state
        unfused = local(ids, return_internals=True).last_hidden_state
    assert float(probs[..., 0, 2:].abs().max()) == 0.0 and float(probs[..., 5, 7:].abs().max()) == 0.0
    assert torch.allclose(fused, unfused, atol=1e-5)  # the fused kernel applies the same mask
    with pytest.raises(ValueError, match="covers"):
        lc.sparse_model(cfg.replace(max_len=20), lc.pattern_mask(12, window=1))(torch.randint(5, 16, (1, 14)))


def test_first_token_task_and_influence():
    task = lc.FirstTokenTask(16, 8)
    b = task.batch(4, torch.Generator().manual_seed(0))
    assert (b.input_ids[:, 0] == CLS).all() and b.input_ids.shape == (4, 9)
    assert (b.labels[:, :2] == IGNORE).all() and (b.labels[:, 2:] == b.input_ids[:, 1:2]).all()
    assert (b.input_ids[:, 1:] >= N_SPECIAL).all()
    assert task.chance == pytest.approx(1 / 11)
    cfg = MiniBertConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=9)
    torch.manual_seed(0)
    m = lc.sparse_model(cfg, lc.pattern_mask(9, window=2))
    infl = lc.first_token_influence(m, task)
    assert infl[1] > 0 and infl[3] > 0 and (infl[4:] < 1e-6).all()  # one layer: token 1 reaches 1 + 2 only
    acc = lc.accuracy_by_distance(m, task, n=32)
    assert acc.shape == (7,) and ((acc >= 0) & (acc <= 1)).all()


def test_banded_attention_equals_masked_full_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 20, 8, generator=g) for _ in range(3))
    for r in (1, 3, 7, 25):
        band = lc.banded_attention(q, k, v, r)
        masked = lc.naive_attention(q, k, v, lc.pattern_mask(20, window=r))
        assert torch.allclose(band, masked, atol=1e-5)
    assert torch.allclose(lc.naive_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-5)


def test_attention_costs_and_layer_flops():
    c = lc.attention_costs([16, 32], radius=4, heads=2, d_head=8, repeats=1)
    assert list(c["full_entries"]) == [2 * 16 * 16, 2 * 32 * 32]
    assert (c["band_entries"] < c["full_entries"]).all() and (c["naive_ms"] > 0).all()
    f = lc.layer_flops(512, 768)
    assert f["scores"] / (f["projections"] + f["ffn"]) == pytest.approx(512 / (6 * 768))


def test_pattern_view_and_cost_view_plot():
    v = lc.pattern_view(t=32, window=2, n_global=1, layers=2)
    assert v["reached"].all() and v["needs"] == "2 layers"
    v0 = lc.pattern_view(t=32, window=0, layers=1)
    assert v0["needs"] == "never" and v0["reached"].sum() == 1
    fig = plt.figure()
    update = lc.plot_pattern(fig, v0)
    assert update(lc.pattern_view(t=32, window=3)) is None  # same T: only the live artists change
    assert update(lc.pattern_view(t=64, window=3)) is not None  # a new T moves the limits
    plt.close(fig)
    c = lc.cost_view(d=64, heads=2, window=16)
    assert c["crossover"] == 384 and (c["band"] <= c["full"]).all()
    fig = plt.figure()
    update = lc.plot_costs(fig, c)
    update(lc.cost_view(d=4096, heads=64, window=2048))  # limits move: the panels say so
    plt.close(fig)
    with pytest.raises(ValueError):
        lc.pattern_view(t=2)


def test_setup_and_gate():
    s = lx.LongSetup()
    assert s.mask("full") is None and s.mask("window").shape == (33, 33)
    assert lx.hops_of(s, "window+global") == 2 and lx.hops_of(s, "window") == 8
    assert s.scaled(4).steps == 4 * s.steps
    g = lx.gate(np.array([0.9, 0.1]), 1 / 11)
    assert g.passed and not lx.gate(np.array([0.2, 0.1]), 1 / 11).passed
    with pytest.raises(ValueError):
        s.mask("dilated")

import math

import numpy as np
import pytest
import torch

from qalib.lab.data import IGNORE, N_SPECIAL
from qalib.nn.model import MiniBert
from qalib.topics.nb07_multi_head import compute as mh
from qalib.topics.nb07_multi_head.experiment import (
    NeighbourPairTask, heads_config, offset_profile, prune_heads, pruning_effect, run_heads_experiment)
from qalib.topics.nb07_multi_head import demos as demos


# -- parameters and cost ---------------------------------------------------------------------------
@pytest.mark.parametrize("h", [1, 2, 4, 8])
def test_attention_parameters_do_not_depend_on_heads(h):
    assert mh.attention_parameter_count(64, h) == 4 * 64 * 64 + 4 * 64


def test_attention_flops_closed_form():
    f1, f8 = mh.attention_flops(64, 1, 10), mh.attention_flops(64, 8, 10)
    assert f1["scores"] == f8["scores"] == 2 * 10 * 10 * 64
    assert f1["projections"] == 8 * 10 * 64 * 64
    assert f8["softmax_entries"] == 8 * f1["softmax_entries"] == 800


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="n_heads"):
        mh.attention_parameter_count(64, 3)
    with pytest.raises(ValueError, match="seq_len"):
        mh.attention_flops(64, 2, 0)
    with pytest.raises(ValueError, match="n_heads"):
        mh.split_heads(torch.zeros(1, 2, 6), 4)
    with pytest.raises(ValueError, match="reps"):
        mh.time_attention(2, reps=0)


def test_split_heads_is_a_reshape_and_loop_equals_batched():
    x = torch.arange(2 * 3 * 8.0).view(2, 3, 8)
    s = mh.split_heads(x, 4)
    assert s.shape == (2, 4, 3, 2) and torch.equal(s[1, 2, 0], x[1, 0, 4:6])
    assert mh.loop_vs_batched(4, 16, 5)["max_abs_diff"] < 1e-6
    assert mh.time_attention(2, d_model=16, seq_len=8, batch=1, reps=2) > 0


# -- head statistics on hand-made attention --------------------------------------------------------
def _shifted(t, offset):
    """(T, T) attention that puts all mass on key i + offset (clamped inside the sequence)."""
    p = torch.zeros(t, t)
    p[torch.arange(t), (torch.arange(t) + offset).clamp(0, t - 1)] = 1.0
    return p


def test_head_masses_and_classes():
    t = 6
    uniform = torch.full((t, t), 1 / t)
    probs = torch.stack([_shifted(t, -1), _shifted(t, 1), torch.eye(t), uniform])[None]  # (1, 4, T, T)
    m = mh.head_masses(probs)
    assert m.shape == (1, 4, 5)
    assert m[0, 0, 0] == pytest.approx(1.0) and m[0, 1, 1] == pytest.approx(1.0) and m[0, 2, 2] == pytest.approx(1.0)
    np.testing.assert_allclose(m[0, 3], [1 / t] * 5)
    assert mh.classify_heads(m).tolist() == [["previous", "next", "self", "broad"]]
    with pytest.raises(ValueError, match="threshold"):
        mh.classify_heads(m, threshold=0)
    with pytest.raises(ValueError, match="probs"):
        mh.head_masses(torch.zeros(2, 3, 3))


def test_js_divergence_bounds_and_distances():
    p, q = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert float(mh.js_divergence(p, q)) == pytest.approx(math.log(2))
    assert float(mh.js_divergence(p, p)) == pytest.approx(0.0)
    probs = torch.stack([_shifted(5, -1), _shifted(5, -1), _shifted(5, 2)])[None]  # heads 0 and 1 identical
    d = mh.head_distances(probs)
    assert d.shape == (1, 3, 3) and d[0, 0, 1] == pytest.approx(0.0) and d[0, 0, 2] > 0.5
    # spread: mean over the 6 ordered off-diagonal pairs
    assert mh.layer_spread(d)[0] == pytest.approx((d[0].sum()) / 6)
    with pytest.raises(ValueError, match="2 heads"):
        mh.layer_spread(np.zeros((1, 1, 1)))


def test_minilm_attention_rows_and_validation():
    r = mh.minilm_attention("The cat sat.")
    assert r["tokens"][0] == "[CLS]" and r["tokens"][-1] == "[SEP]"
    np.testing.assert_allclose(r["probs"].sum(-1), 1.0, atol=1e-5)
    assert r["probs"].shape[:2] == (6, 12)
    with pytest.raises(ValueError, match="text"):
        mh.minilm_attention("   ")
    with pytest.raises(ValueError, match="layer"):
        mh.attention_map(6, 0, "hi")
    with pytest.raises(ValueError, match="head"):
        mh.attention_map(0, 12, "hi")


# -- the experiment --------------------------------------------------------------------------------
def test_task_labels_are_the_neighbour_pair():
    task = NeighbourPairTask(m=3, seq_len=5)
    b = task.batch(4, torch.Generator().manual_seed(0))
    x = b.input_ids[:, 1:-1] - N_SPECIAL
    assert b.input_ids.shape == (4, 7) and task.vocab_size == N_SPECIAL + 9
    assert (b.labels[:, :2] == IGNORE).all() and (b.labels[:, -2:] == IGNORE).all()
    assert torch.equal(b.labels[:, 3] - N_SPECIAL, x[:, 1] * 3 + x[:, 3])
    with pytest.raises(ValueError, match="m"):
        NeighbourPairTask(m=1)
    with pytest.raises(ValueError, match="n_heads"):
        heads_config(3, d_model=32)


def test_pruning_zeroes_exactly_one_heads_contribution():
    task = NeighbourPairTask(m=3, seq_len=6)
    torch.manual_seed(0)
    model = MiniBert(heads_config(4, 16, task)).eval()
    pruned = prune_heads(model, 0, [1])
    w, w0 = pruned.layers[0].attention.output.weight, model.layers[0].attention.output.weight
    assert (w[:, 4:8] == 0).all() and torch.equal(w[:, :4], w0[:, :4]) and (w0[:, 4:8] != 0).any()
    e = pruning_effect(model, task, n_batches=1)
    assert e["without"].shape == (4,) and np.allclose(e["drop"], e["full"] - e["without"])
    with pytest.raises(ValueError, match="heads"):
        prune_heads(model, 0, [4])
    with pytest.raises(ValueError, match="layer"):
        prune_heads(model, 1, [0])


def test_experiment_runs_and_profiles_are_distributions():
    task = NeighbourPairTask(m=3, seq_len=6)
    res = run_heads_experiment((1, 2), seeds=(0,), steps=3, d_model=16, task=task, device="cpu")
    assert res.accuracy.shape == (2, 1) and res.curves.shape[:2] == (2, 1)
    prof = offset_profile(res.models[(2, 0)], task)
    assert prof.shape == (2, 5) and (prof.sum(1) <= 1 + 1e-5).all()
    with pytest.raises(ValueError, match="steps"):
        run_heads_experiment((1,), seeds=(0,), steps=0, task=task)


# -- demos -----------------------------------------------------------------------------------------
def test_attention_demo_explains_an_empty_text():
    demo = demos.attention_demo()
    demo.set(text="   ")
    assert "text" in demo.error



def test_the_reference_reads_per_head_count_and_draws():
    import matplotlib.figure

    from qalib.lab.reference import load
    from qalib.topics.nb07_multi_head import experiment as E

    ref = load("07_multi_head", "heads")
    acc = E.reference_accuracy(ref)
    assert list(acc) == ["live", "4x", "8x"]
    assert all(a.shape == (len(E.REFERENCE_HEADS), 8) for a in acc.values())
    assert not E.solved_gate(0.95).passed and E.solved_gate(0.951).passed
    fig = matplotlib.figure.Figure()
    E.plot_reference(fig, ref)
    assert len(fig.axes) == 1

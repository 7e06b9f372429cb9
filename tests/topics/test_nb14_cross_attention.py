import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from qalib.lab.data import N_SPECIAL  # noqa: E402
from qalib.nn.decoder import EncoderDecoder  # noqa: E402
from qalib.tools.testing import finite_values  # noqa: E402
from qalib.topics.nb14_cross_attention import compute as ca  # noqa: E402
from qalib.topics.nb14_cross_attention import experiment as ce  # noqa: E402
from qalib.topics.nb14_cross_attention import demos as demos  # noqa: E402


@pytest.fixture(scope="module")
def small_run():
    """One seed of every variant, a few steps: enough for shapes and for what holds whatever the weights."""
    return ce.run_reversal_experiment(seeds=(0,), steps=3, device="cpu")


# -- the task and the alignment share -----------------------------------------------------------
def test_reversal_task_targets_are_the_source_reversed_and_shifted_by_one():
    task = ca.ReversalTask(vocab_size=12, src_len=5)
    source, decoder_in, labels = task.batch(7, torch.Generator().manual_seed(0))
    assert source.shape == decoder_in.shape == labels.shape == (7, 5)
    assert torch.equal(labels, source.flip(1)) and (source >= N_SPECIAL).all() and (source < 12).all()
    assert (decoder_in[:, 0] == ca.BOS).all() and torch.equal(decoder_in[:, 1:], labels[:, :-1])
    assert task.alignment.tolist() == [4, 3, 2, 1, 0] and task.n_content == 12 - N_SPECIAL
    for i, j in enumerate(task.alignment.tolist()):
        assert torch.equal(labels[:, i], source[:, j])


def test_reversal_task_rejects_bad_sizes():
    with pytest.raises(ValueError, match="src_len"):
        ca.ReversalTask(src_len=1)
    with pytest.raises(ValueError, match="vocab_size"):
        ca.ReversalTask(vocab_size=N_SPECIAL)
    with pytest.raises(ValueError, match="batch_size"):
        ca.ReversalTask().batch(0)


def test_alignment_share_is_one_on_the_alignment_and_one_over_s_when_uniform():
    task = ca.ReversalTask(src_len=6)
    onehot = torch.zeros(2, 3, 6, 6)
    onehot[:, :, torch.arange(6), task.alignment] = 1
    assert torch.allclose(ca.alignment_share(onehot, task.alignment), torch.ones(3))
    uniform = torch.full((2, 3, 6, 6), 1 / 6)
    assert torch.allclose(ca.alignment_share(uniform, task.alignment), torch.full((3,), 1 / 6))


# -- masks, architecture, smoothing --------------------------------------------------------------
def test_attention_masks_counts_and_shapes():
    m = ca.attention_masks(src_len=6, tgt_len=5, n_src_pad=2)
    enc, dec, cross = m["masks"].values()
    assert enc.shape == (6, 6) and dec.shape == (5, 5) and cross.shape == (5, 6)
    assert not enc[:, 4:].any() and enc[:, :4].all() and not cross[:, 4:].any()
    assert (dec == np.tril(np.ones((5, 5), dtype=bool))).all()
    assert m["allowed"] == {"encoder self-attention": 24, "decoder self-attention (masked)": 15, "cross-attention": 20}


def test_attention_masks_reject_bad_input_naming_the_argument():
    with pytest.raises(ValueError, match="n_src_pad"):
        ca.attention_masks(src_len=3, n_src_pad=3)  # no real source token left
    with pytest.raises(ValueError, match="tgt_len"):
        ca.attention_masks(tgt_len=0)


def test_module_rows_find_the_cross_attentions_and_the_architecture_draws():
    model = EncoderDecoder(ca.reversal_config())
    rows = ca.module_rows(model, max_depth=4)
    assert [r["name"] for r in rows if r["cross"]] == ["decoder.layers.0.cross_attention", "decoder.layers.1.cross_attention"]
    top = {r["name"]: r["params"] for r in rows if r["depth"] == 1}
    assert sum(top.values()) == sum(p.numel() for p in model.parameters())
    fig = plt.figure()
    ca.plot_architecture(fig, model)
    assert "2 CrossAttention" in fig.axes[0].get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match="max_depth"):
        ca.module_rows(model, max_depth=0)


def test_smoothing_target_and_its_cost():
    r = ca.smoothing(0.1, 24)
    assert math.isclose(r["p_true"] + 23 * r["p_other"], 1.0)
    assert math.isclose(r["nll_true"], -math.log(0.9 + 0.1 / 24))
    # the smoothed loss is minimised by the smoothed target: torch's label_smoothing agrees with H(q) there
    q = torch.full((24,), r["p_other"])
    q[0] = r["p_true"]
    loss = torch.nn.functional.cross_entropy(q.log()[None], torch.tensor([0]), label_smoothing=0.1)
    assert math.isclose(float(loss), r["entropy"], rel_tol=1e-5)
    assert ca.smoothing(0.0, 24)["nll_true"] == 0.0 and finite_values(ca.smoothing(1.0, 2))
    with pytest.raises(ValueError, match="eps"):
        ca.smoothing(1.5)


# -- the trained models ------------------------------------------------------------------------
def test_run_shapes_and_the_wiring_identities(small_run):
    res = small_run
    assert res.accuracy.shape == res.nll.shape == (3, 1) and res.share.shape == (3, 1, 2, 4)
    assert res.n_params[2] - res.n_params[0] == 24 * 32  # the untied output matrix
    model, task = res.models[("tied", 0)], res.task
    w = ce.memory_wiring(model, task, n=8)
    assert max(w["k_gap"] + w["v_gap"]) == 0.0 and w["layers_k_rel_diff"] > 0.1
    assert w["matching_layer_k_rel_diff"][-1] == 0.0  # the last encoder layer's output is the memory (no final norm)


def test_decoding_with_every_layer_on_the_memory_is_the_normal_decode(small_run):
    model, task = small_run.models[("tied", 0)], small_run.task
    source, decoder_in, _ = ce.held_out(task, 4)
    memory = model.encode(source)
    with torch.no_grad():
        normal = model.decode(decoder_in, memory).logits
        via_cache = ce._decode_with_memories(model, decoder_in, [memory] * model.cfg.n_layers)
    assert torch.allclose(normal, via_cache, atol=1e-5)


def test_ablations_probes_and_cached_decoding_run(small_run):
    model, task = small_run.models[("tied", 0)], small_run.task
    a = ce.memory_ablations(model, task, n=16)
    assert a["permuted_max_change"] < 1e-4 and 0 <= a["zero"] <= 1
    p = ce.memory_probes(model, task, n_train=64, n_test=32)
    assert set(p["memory"]) == {"token", "position", "next token", "previous token"}
    d = ce.cached_decoding(model, task, n=8)
    assert d["cross_reused"] and d["same_as_generate"] and d["self_cache_lengths"] == list(range(1, task.src_len + 1))
    r = ce.reverse_direction_share(model, task, layer=1, n=8)
    assert 0 <= r["backward"] <= 1 and 0 <= r["forward"] <= 1


def test_alignment_view_validates_and_draws(small_run):
    v = ce.alignment_view(small_run, "untied", 0, layer=1, head=3, example=63)
    assert v["probs"].shape == (8, 8) and np.allclose(v["probs"].sum(1), 1, atol=1e-5)
    for bad, match in (({"layer": 2}, "layer"), ({"head": 4}, "head"), ({"seed": 7}, "seed")):
        kwargs = {"variant": "tied", "seed": 0, "layer": 0, "head": "mean"} | bad
        with pytest.raises(ValueError, match=match):
            ce.alignment_view(small_run, **kwargs)
    fig = plt.figure()
    update = ce.plot_alignment(fig, v)
    update(ce.alignment_view(small_run, "tied", 0, layer=0, head="mean"))
    plt.close(fig)


def test_demos_start_without_error(small_run):
    for demo in (demos.masks_demo(), demos.smoothing_demo(), demos.alignment_demo(small_run)):
        assert demo.error is None and finite_values(demo.result)
    demo = demos.masks_demo()
    demo.set(src_len=1, n_src_pad=5)
    assert demo.error is not None and "n_src_pad" in demo.error


def test_memory_probes_read_each_neighbour_from_where_it_is():
    """A stand-in encoder whose memory at j is the one-hot of token j-1 and whose input embedding is token j's: the
    left-neighbour probe on the memory and the token probe on the embeddings read perfectly."""
    import torch.nn.functional as F

    task = ca.ReversalTask()

    class ShiftedMemory:
        def encode(self, source, internals):
            onehot = F.one_hot(source, task.vocab_size).float()            # (B, S, V)
            internals["encoder.embeddings.out"] = onehot
            return torch.cat([torch.zeros_like(onehot[:, :1]), onehot[:, :-1]], dim=1)  # position j holds token j-1

    p = ce.memory_probes(ShiftedMemory(), task, n_train=256, n_test=128)
    assert p["memory"]["previous token"] == 1.0 and p["embeddings"]["token"] == 1.0
    assert p["memory"]["next token"] < 0.2 and p["chance"]["previous token"] == 1 / task.n_content


def test_the_reversal_reference_unit_and_stored_file():
    from qalib.lab.reference import load
    from qalib.topics.nb14_cross_attention import experiment as E

    out = E.reference_seed(0, steps=2)
    assert set(out) == {"accuracy", "best_share", "exact", "right", "left", "donor", "rewired", "forward", "backward"}
    assert all(0 <= x <= 1 for x in out.values())
    ref = load("14_cross_attention", "reversal")
    assert [int(r.kwargs["steps"]) for r in ref.rungs.values()] == [300, 1200, 4800]
    assert ref.rung("16x").values("right").shape == (10,)

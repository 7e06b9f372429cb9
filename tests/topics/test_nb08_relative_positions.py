import math

import numpy as np
import pytest
import torch

from qalib.lab.data import ProbeTask
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.topics.nb08_relative_positions import compute as rp
from qalib.topics.nb08_relative_positions import experiment as rx


def test_clipped_offsets_labels():
    off = rp.clipped_offsets(10, 3)
    assert off[0, 9] == 3 and off[9, 0] == -3 and off[4, 5] == 1
    assert len(torch.unique(off)) == 7  # 2k + 1
    assert torch.equal(rp.clipped_offsets(5, 0), torch.zeros(5, 5, dtype=torch.long))


def test_toeplitz_deviation():
    t = torch.arange(6.0)
    toeplitz = (t[None, :] - t[:, None]) ** 2
    assert rp.toeplitz_deviation(toeplitz) == 0.0
    bumped = toeplitz.clone()
    bumped[2, 3] += 0.5
    assert rp.toeplitz_deviation(bumped) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="square"):
        rp.toeplitz_deviation(torch.zeros(2, 3))


def test_rotary_scores_depend_on_offset_only():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)
    s = rp.rotary_scores(q, k, 40)
    assert rp.toeplitz_deviation(s) < 1e-4
    assert float(s[0, 0]) == pytest.approx(float(q @ k), rel=1e-5)  # no rotation at offset 0
    with pytest.raises(ValueError, match="even"):
        rp.rotary_scores(torch.randn(3), torch.randn(3), 4)


@pytest.mark.parametrize("method", rp.METHODS)
def test_bias_matrix_is_toeplitz_with_same_content(method):
    r = rp.bias_matrix(method, t=12, clip=2)
    assert r["bias"].shape == (12, 12)
    assert rp.toeplitz_deviation(r["bias"]) < 1e-4
    assert torch.allclose(r["probs"].sum(-1), torch.ones(12), atol=1e-5)


def test_bias_matrix_closed_forms():
    # Shaw: beyond the clip every offset shares one vector -> equal bias
    r = rp.bias_matrix("shaw", t=12, clip=2)
    row = r["bias"][0]
    assert torch.allclose(row[2:], row[2].expand(10))
    assert not torch.isclose(row[1], row[2])
    # k = 0: a constant bias (softmax ignores it)
    r0 = rp.bias_matrix("shaw", t=8, clip=0)
    assert torch.allclose(r0["bias"], r0["bias"][0, 0].expand(8, 8))
    # ALiBi: -m |j - i| with m = 2^-2 for head 0 of 4
    ra = rp.bias_matrix("alibi", t=6, n_heads=4, head=0)
    assert float(ra["bias"][0, 5]) == pytest.approx(-5 * 0.25)
    # key_query adds k.a: differs from q.a alone
    assert not torch.allclose(rp.bias_matrix("relative_key_query", t=6)["bias"], rp.bias_matrix("shaw", t=6)["bias"])


def test_bias_matrix_bad_inputs():
    with pytest.raises(ValueError, match="method"):
        rp.bias_matrix("xl")
    with pytest.raises(ValueError, match="clip"):
        rp.bias_matrix("shaw", clip=-1)
    with pytest.raises(ValueError, match="head"):
        rp.bias_matrix("alibi", n_heads=4, head=4)
    with pytest.raises(ValueError, match="d_head"):
        rp.bias_matrix("rotary", d_head=3)


def test_rotary_profile_and_slopes():
    r = rp.rotary_profile(d_head=16, start=5)
    assert r["max_gap"] < 1e-4
    assert r["ones"][0] == pytest.approx(1.0, rel=1e-5)
    s = rp.slopes_and_buckets(8, 32, 128)
    np.testing.assert_allclose(s["slopes"], 2.0 ** (-np.arange(1, 9)), rtol=1e-6)
    assert s["buckets"].max() == 31 and s["buckets"].min() == 0
    with pytest.raises(ValueError, match="n_buckets"):
        rp.slopes_and_buckets(8, 31, 128)
    with pytest.raises(ValueError, match="max_distance"):
        rp.slopes_and_buckets(8, 32, 4)
    with pytest.raises(ValueError, match=r"base must be a finite number >= 1, got 0\.5"):
        rp.rotary_profile(base=0.5)
    flat = rp.rotary_profile(base=1.0)  # every pair turns at one speed: the all-ones score is cos(offset)
    assert flat["max_gap"] < 1e-5 and abs(flat["ones"][6] - math.cos(6)) < 1e-5


def test_su_bound_decays_only_with_spread_frequencies():
    b = rp.su_bound(32, 10000.0, 64)
    assert b[0] == pytest.approx(1.0) and b[63] < 0.5 and b[10] < b[1]
    # one frequency for every pair (base 1): |S_j| = j at every offset, so the bound never decays
    np.testing.assert_allclose(rp.su_bound(32, 1.0, 64), 1.0, rtol=1e-12)
    assert rp.rotary_profile(d_head=16, t=20)["bound"].shape == (20,)
    with pytest.raises(ValueError, match="t"):
        rp.su_bound(32, 10000.0, 0)


def test_position_parameters_and_costs():
    base = MiniBertConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=20)
    costs = rx.position_costs(base, t=24, batch_size=2, repeats=1, clip=3)
    assert costs["learned"]["position_params"] == 24 * 16  # max_len raised to t
    assert costs["shaw"]["position_params"] == 2 * (2 * 3 + 1) * 8  # layers x (2k+1) x d_head
    assert costs["relative_key_query"]["position_params"] == costs["shaw"]["position_params"]
    assert costs["rotary"]["position_params"] == costs["alibi"]["position_params"] == 0
    assert costs["sinusoidal"]["params"] + 24 * 16 == costs["learned"]["params"]
    assert all(c["forward_ms"] > 0 for c in costs.values())


def test_run_variants_tiny_and_length_error():
    setup = rx.ProbeSetup(steps=3, seq_len=6, d_model=8)
    r = rx.run_variants([("learned", 0), ("shaw", 1)], seeds=(0,), setup=setup)
    assert r["acc"].shape == (2, 1)
    assert math.isnan(r["acc_2L"][0, 0]) and "max_len" in r["errors"][("learned", 0)]
    assert np.isfinite(r["acc_2L"][1, 0])
    with pytest.raises(ValueError, match="pos"):
        rx.train_probe("xl", 0, 0, setup)
    with pytest.raises(ValueError, match="scale"):
        setup.scaled(0)


def test_observation_helpers():
    cfg = MiniBertConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, d_ff=16, pos="relative_key_query", rel_clip=2)
    model = MiniBert(cfg)
    with torch.no_grad():
        model.layers[0].attention.position.distance_embedding.weight.copy_(torch.arange(20.0).view(5, 4))
    offs, norms = rx.relative_weight_norms(model)
    assert list(offs) == [-2, -1, 0, 1, 2]
    assert norms[0] == pytest.approx(math.sqrt(0 + 1 + 4 + 9))
    batch = ProbeTask("previous", 16, 7).batch(3, torch.Generator().manual_seed(0))
    o, a = rx.attention_by_offset(model, batch)
    assert len(o) == 2 * 8 - 1
    # mean prob per offset, weighted by the number of pairs at that offset, sums to T rows of 1 / T^2 pairs ... = 1
    counts = 8 - np.abs(o)
    assert float((a * counts).sum()) == pytest.approx(8.0, rel=1e-5)
    with pytest.raises(ValueError, match="relative table"):
        rx.relative_weight_norms(MiniBert(cfg.replace(pos="alibi")))


def test_method4_scores_match_model():
    torch.manual_seed(0)
    cfg = MiniBertConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, d_ff=16, pos="relative_key_query", rel_clip=2)
    model = MiniBert(cfg).eval()
    manual, internal = rx.method4_scores(model, torch.randint(5, 16, (2, 6)))
    assert torch.allclose(manual, internal, atol=1e-6)
    with pytest.raises(ValueError, match="pos"):
        rx.method4_scores(MiniBert(cfg.replace(pos="shaw")), torch.randint(5, 16, (1, 4)))


def test_position_similarity_and_offset_profile():
    table = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    sim, offs, mean = rx.position_similarity(table)
    assert list(offs) == [0, 1, 2]
    assert mean[0] == pytest.approx(1.0) and mean[1] == pytest.approx(1 / math.sqrt(2)) and mean[2] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="table"):
        rx.position_similarity(torch.zeros(1, 4))
    probs = torch.eye(4).expand(2, 3, 4, 4)  # everyone attends to itself
    o, a = rx.offset_profile(probs)
    assert a[3] == pytest.approx(1.0) and a[[0, 1, 2, 4, 5, 6]].sum() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="probs"):
        rx.offset_profile(torch.zeros(4, 4))


def test_t5_buckets_and_alibi_slopes_match_the_reference_implementations():
    """The notebook describes T5's buckets and ALiBi's slopes through qalib's code; here they are compared with
    Hugging Face's T5 and BLOOM code (independent implementations of the papers)."""
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.t5.modeling_t5 import T5Attention

    offsets = torch.arange(-300, 301)  # key minus query, as in T5's memory_position - context_position
    reference = T5Attention._relative_position_bucket(offsets, bidirectional=True, num_buckets=32, max_distance=128)
    assert torch.equal(rp.t5_buckets(offsets), reference)
    for n_heads in (8, 12, 16):  # 12: not a power of 2, where Press et al. interleave two sequences
        slopes = build_alibi_tensor(torch.ones(1, 2), n_heads, torch.float64)[:, 0, 1]  # slope x position 1
        torch.testing.assert_close(rp.alibi_slopes(n_heads).double(), slopes, rtol=1e-6, atol=0)


def test_the_alibi_reference_reads_per_rung():
    from qalib.lab.reference import load
    from qalib.topics.nb08_relative_positions import experiment as E

    t = E.reference_table(load("08_relative_positions", "alibi_layers"))
    assert len(t) == 4 and all(v["acc"].shape == v["acc_2L"].shape == (8,) for v in t.values())
    out = E.reference_seed(0, steps=2, lr=3e-3, n_layers=2)
    assert set(out) == {"acc", "acc_2L"} and all(0 <= x <= 1 for x in out.values())


def test_largest_learned_rate_is_the_highest_rate_index_over_the_bar():
    from qalib.topics.nb08_relative_positions.experiment import largest_learned_rate
    acc = np.array([[1.0, 1.0, 0.5, 0.1],     # learned at the first two rates
                    [1.0, 0.3, 0.95, 0.2],    # not monotone: the highest index that learned counts
                    [0.1, 0.1, 0.1, 0.1]])    # learned at none
    assert largest_learned_rate(acc).tolist() == [1, 2, -1]


def test_scores_by_formula_refuses_schemes_it_does_not_know():
    from qalib.nn.config import MiniBertConfig
    from qalib.nn.model import MiniBert
    from qalib.topics.nb08_relative_positions.experiment import scores_by_formula
    m = MiniBert(MiniBertConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=4, d_ff=64, pos="shaw"))
    with pytest.raises(ValueError, match="Transformer-XL"):
        scores_by_formula(m, torch.randint(5, 32, (1, 6)))

"""Notebook 04 (BERT's summed embeddings): compute functions, bad inputs, the experiment task, and every demo control."""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from qalib.lab.data import CLS, SEP  # noqa: E402
from qalib.nn.config import MiniBertConfig  # noqa: E402
from qalib.nn.model import MiniBert  # noqa: E402
from qalib.tools.testing import finite_values  # noqa: E402
from qalib.topics.nb04_bert_embedding_sum import compute as es  # noqa: E402
from qalib.topics.nb04_bert_embedding_sum import experiment as ex  # noqa: E402
from qalib.topics.nb04_bert_embedding_sum import demos as demos  # noqa: E402


# -- identity, parameter counts, concat folding, gradients ------------------------------------
def test_lookup_identity_matches_onehot_product_and_hand_sum():
    E, S, P = es.random_tables(10, 2, 6, 4, seed=1)
    r = es.lookup_identity(E, S, P, [3, 3, 9], [0, 1, 1], [0, 1, 5])
    assert r["max_abs_diff"] < 1e-14
    assert torch.allclose(r["lookups"][2], E[9] + S[1] + P[5])
    assert (r["ones_per_row"] == 3).all()


def test_lookup_identity_bad_input():
    E, S, P = es.random_tables(10, 2, 6, 4)
    with pytest.raises(ValueError, match="positions"):
        es.lookup_identity(E, S, P, [1], [0], [6])
    with pytest.raises(ValueError, match="equal length"):
        es.lookup_identity(E, S, P, [1, 2], [0], [0])


def test_param_counts_bert_base_closed_form():
    c = es.param_counts(**es.BERT_BASE)
    assert c["sum"] == (30522 + 2 + 512) * 768 == 23_835_648
    assert c["extra"] == 3 * 768 ** 2 + 768
    assert c["concat_project"] - c["sum"] == c["extra"]
    with pytest.raises(ValueError, match="d_model"):
        es.param_counts(10, 2, 5, 0)


def test_param_counts_match_minibert():
    cfg = MiniBertConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=10)
    diff = MiniBert(cfg.replace(embed_combine="concat")).num_parameters() - MiniBert(cfg).num_parameters()
    assert diff == es.param_counts(16, 2, 10, 8)["extra"]


def test_fold_concat_is_exact_and_needs_concat():
    cfg = MiniBertConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=10)
    torch.manual_seed(0)
    m = MiniBert(cfg.replace(embed_combine="concat"))
    ids = torch.randint(5, 16, (2, 7))
    types = (torch.arange(7) >= 3).long().expand(2, -1)
    assert es.fold_concat(m, ids, types)["max_abs_diff"] < 1e-6
    with pytest.raises(ValueError, match="embed_combine"):
        es.fold_concat(MiniBert(cfg), ids, types)


def test_gradient_check_exact():
    g = es.gradient_check(seq_len=5, d_model=6, seed=3)
    assert g["err_position"] == 0 and g["err_word"] < 1e-12 and g["err_segment"] < 1e-12
    assert g["upstream_norm"] > 0 and g["unused_position_grad"] == 0
    with pytest.raises(ValueError, match="seq_len"):
        es.gradient_check(seq_len=0)


# -- near-orthogonality and probes --------------------------------------------------------------
def test_cosine_spread_is_one_over_sqrt_d():
    for d, s in es.cosine_spread([64, 1024]).items():
        assert abs(s * math.sqrt(d) - 1) < 0.1


def test_cosines_within_one_table_leave_out_each_row_with_itself():
    A = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    within, across = es.cosines(A), es.cosines(A, A.clone())
    assert within.shape == (20,) and across.shape == (25,) and (within < 0.999).all()
    # the probe demo's word-word spread is that of distinct random rows, ~1/sqrt(d), with no spike at cos = 1
    r = es.probe_sum(d_model=64)
    assert abs(r["cos_std"]["word-word"] * math.sqrt(64) - 1) < 0.15 and r["cos"]["word-word"].max() < 0.999


def test_probe_sum_exact_when_d_exceeds_rows_and_degrades_when_small():
    big = es.probe_sum(d_model=64, n_tokens=20, n_positions=10, n_segments=2, n_train=600, n_test=200)
    assert all(a == 1.0 for a in big["accuracy"].values()) and "exact" in big["note"]
    small = es.probe_sum(d_model=4, n_tokens=50, n_positions=10, n_segments=2, n_train=600, n_test=200)
    assert small["accuracy"]["token"] < 0.5
    assert small["chance"]["token"] == pytest.approx(1 / 50)
    assert finite_values(small)


def test_probe_sum_bad_input():
    with pytest.raises(ValueError, match="d_model"):
        es.probe_sum(d_model=0)
    with pytest.raises(ValueError, match="n_segments"):
        es.probe_sum(n_segments=100)


def test_probe_curve_shapes():
    r = es.probe_curve([4, 64], seeds=(0, 1), n_tokens=20, n_positions=8, n_segments=2, n_train=400, n_test=100)
    assert r["accuracy"]["token"].shape == (2, 2) and r["rows"] == 30
    assert (r["accuracy"]["token"][:, 1] >= r["accuracy"]["token"][:, 0]).all()


# -- principal angles ------------------------------------------------------------------------
def test_principal_angles_closed_form():
    A = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]])               # the xy-plane
    th = 0.3
    B = torch.tensor([[1.0, 0, 0], [0, math.cos(th), math.sin(th)]])  # tilted by th about x
    c = ex.principal_angles(A, B)
    assert torch.allclose(c, torch.tensor([1.0, math.cos(th)], dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError, match="same space"):
        ex.principal_angles(A, torch.ones(1, 4))


def test_top_directions_finds_the_dominant_axis():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(500, 6, generator=g) * torch.tensor([10.0, 1, 1, 1, 1, 1])
    v, share, rank = ex.top_directions(t, 1)
    assert abs(abs(float(v[0, 0])) - 1) < 1e-3 and share > 0.9 and rank == 6


def test_position_table_stats_on_sinusoid_has_constant_norm():
    from qalib.nn.positions import sinusoidal

    st = ex.position_table_stats(sinusoidal(50, 16, 10000.0))
    assert st["norm_cv"] < 1e-6 and st["norm_mean"] == pytest.approx(math.sqrt(8), rel=1e-5)


# -- the experiment task -------------------------------------------------------------------
def test_marker_task_layout_and_labels():
    task = ex.MarkerSegmentTask(vocab_size=12, total_len=8)
    b = task.batch(64, torch.Generator().manual_seed(0))
    assert b.input_ids.shape == (64, 11) and (b.input_ids[:, 0] == CLS).all() and (b.input_ids[:, -1] == SEP).all()
    assert ((b.input_ids == SEP).sum(1) == 2).all() and ((b.input_ids == ex.MARKER).sum(1) == 1).all()
    for ids, types, label in zip(b.input_ids, b.token_type_ids, b.labels):
        first_sep = int((ids == SEP).nonzero()[0])
        assert (types[: first_sep + 1] == 0).all() and (types[first_sep + 1:] == 1).all()
        assert int(label) == int(int((ids == ex.MARKER).nonzero()[0]) > first_sep)
    nos = ex.MarkerSegmentTask(vocab_size=12, total_len=8, use_segments=False).batch(8, torch.Generator().manual_seed(0))
    assert (nos.token_type_ids == 0).all()
    with pytest.raises(ValueError, match="total_len"):
        ex.MarkerSegmentTask(total_len=3, min_len=2)


def test_run_experiment_tiny():
    r = ex.run_experiment(variants=("sum", "concat + project"), seeds=(0,), steps=3, d_model=8, batch_size=8,
                          eval_batches=1)
    assert r["params"]["concat + project"] - r["params"]["sum"] == 3 * 64 + 8
    assert r["curves"]["sum"].shape == (1, len(r["log_steps"])) and finite_values(r["accuracy"])
    with pytest.raises(ValueError, match="variants"):
        ex.run_experiment(variants=("product",))


# -- the real model (the fixture minilm: tests/conftest.py) ---------------------------------------
def test_real_model_parts_tupe_and_wordpieces(minilm):
    model, tok = minilm
    enc = tok("I love strawberries.", "They are sweet.")
    parts = es.embedding_parts(model, enc)
    assert (parts["word"] + parts["segment"] + parts["position"] - parts["sum"]).abs().max() < 1e-6
    view = es.wordpiece_view(tok, "strawberries", "ok")
    assert view["tokens"][1:3] == ["straw", "##berries"] and view["segments"][-1] == 1
    assert "segment" in es.format_wordpiece(view)
    t = ex.tupe_terms(model, enc)
    assert t["max_abs_diff"] < 1e-4 and t["ln_diff"] < 1e-5
    with pytest.raises(ValueError, match="layer"):
        ex.tupe_terms(model, enc, layer=1)
    with pytest.raises(ValueError, match="text"):
        es.wordpiece_view(tok, "  ")


def test_real_subspaces_and_probe(minilm):
    model, _ = minilm
    s = ex.table_subspaces(model, k=4, n_random=20)
    assert s["rank_word"] == s["rank_position"] == 384 and 0 <= s["cos_word_position"].max() <= 1
    p = ex.real_probe(model, n_seq=24, seq_len=32)
    assert p["segment_acc"] > 0.8 and p["token_acc"] > 0.9 and p["position_acc"] > 4 / 32
    with pytest.raises(ValueError, match="seq_len"):
        ex.real_probe(model, seq_len=1000)


# -- demos -------------------------------------------------------------------------------------


def test_the_pair_demos_size_axis_holds_every_pair(minilm):
    """[CLS] always sits at position 0; at every later position the triangle inequality bounds the sum."""
    model, tok = minilm
    emb = model.embeddings
    rows = {name: table.weight.detach().norm(dim=-1) for name, table in
            (("word", emb.word_embeddings), ("segment", emb.token_type_embeddings), ("position", emb.position_embeddings))}
    later = rows["word"].max() + rows["segment"].max() + rows["position"][1:].max()
    cls = es.pair_parts("Hi.", "", token=0)["norms"]["sum"][0]
    assert later < es.PAIR_NORM_VIEW and cls < es.PAIR_NORM_VIEW, (float(later), float(cls))


def test_pair_demo_messages(minilm):
    r = es.pair_parts("Hello there.", "", token=99)
    assert "past the last token" in r["note"] and r["token"] == len(r["tokens"]) - 1
    with pytest.raises(ValueError, match="sentence A"):
        es.pair_parts("", "x", token=0)
    demo = demos.pair_demo()
    demo.set(text="")
    assert demo.error and "sentence A" in demo.error


# -- nearest-code decoding, the checkpoint's embedding block, the word scale --------------------
def test_nearest_code_identifies_parts_far_below_the_linear_bound_and_fails_with_large_noise():
    clean = es.nearest_code(d_model=8, noise=0.0, n_test=200)
    assert clean["rows"] == 166 and clean["all_three"] == 1.0       # distinct sums: exact without noise at d = 8
    noisy = es.nearest_code(d_model=8, noise=3.0, n_test=200)
    assert noisy["accuracy"]["token"] < 0.5                          # the measurement can fail: margins are finite
    for kwargs, name in (({"noise": -0.1}, "noise"), ({"d_model": 0}, "d_model"),
                         ({"n_tokens": 1000, "n_positions": 1000}, "n_tokens")):
        with pytest.raises(ValueError, match=name):
            es.nearest_code(**kwargs)


def test_checkpoint_embedding_block_reads_the_file_not_the_model(tmp_path):
    from safetensors.torch import save_file
    path = tmp_path / "model.safetensors"
    save_file({"embeddings.word_embeddings.weight": torch.zeros(5, 4), "embeddings.LayerNorm.weight": torch.full((4,), 0.5),
               "encoder.layer.0.x": torch.zeros(1)}, str(path))
    block = ex.checkpoint_embedding_block(path)
    assert block["tensors"] == {"word_embeddings.weight": (5, 4), "LayerNorm.weight": (4,)}
    assert block["gamma_min"] == block["gamma_max"] == 0.5


def test_real_probe_word_scale_drowns_segment_and_position():
    from qalib.nn.pretrained import minilm
    model, _ = minilm()
    plain = ex.real_probe(model, n_seq=16, seq_len=32)
    scaled = ex.real_probe(model, n_seq=16, seq_len=32, word_scale=math.sqrt(384))
    assert scaled["segment_acc"] < plain["segment_acc"] - 0.2 and scaled["position_acc"] < plain["position_acc"]
    with pytest.raises(ValueError, match="word_scale"):
        ex.real_probe(model, word_scale=0)

import math

import matplotlib.pyplot as plt
import pytest
import torch

from qalib.lab.data import ProbeTask
from qalib.nn.positions import sinusoidal
from qalib.tools.testing import finite_values
from qalib.topics.nb02_sin_cos_positions import compute as T
from qalib.topics.nb02_sin_cos_positions import experiment as E


def test_pe_table_matches_library_and_base_one_is_flat():
    assert torch.allclose(T.pe_table(20, 8, 100.0), sinusoidal(20, 8, 100.0).double())
    flat = T.pe_table(30, 6, 1)
    p = torch.arange(30, dtype=torch.float64)
    assert torch.allclose(flat[:, 4], torch.sin(p), atol=1e-6) and torch.allclose(flat[:, 5], torch.cos(p), atol=1e-6)
    assert torch.equal(T.omegas(6, 1), torch.ones(3, dtype=torch.float64))


def test_counter_step_change_is_two_sin_half_omega():
    r = T.counter_vs_sinusoid(64, 16)
    assert torch.allclose(r["step_change"], r["step_change_expected"], atol=1e-6)
    assert r["bits"].shape == (64, 6) and r["bit_flip_rate"][0] == 1.0  # bit 0 flips every step
    assert torch.allclose(r["bits"] @ (2.0 ** torch.arange(6, dtype=torch.float64)), torch.arange(64.0, dtype=torch.float64))


@pytest.mark.parametrize("k", [1, -3, 17])
def test_offset_matrix_shifts_every_position(k):
    r = T.shift_check(k, 32, 100)
    assert r["max_error"] < 1e-6 and r["orthogonality_error"] < 1e-12
    assert len(r["positions"]) == 100 - abs(k)


def test_sin_only_has_no_linear_shift_but_sin_cos_does():
    r = T.sin_only_fit(5, 32, 128)
    assert r["sin_cos"]["relative_residual"] < 1e-6
    assert r["sin_only"]["relative_residual"] > 0.1
    assert T.sin_only_fit(0, 32, 128)["sin_only"]["relative_residual"] < 1e-9  # k = 0: the identity works


def test_dot_product_depends_on_offset_only_and_is_symmetric():
    r = T.dot_product_structure(64, 16)
    assert r["max_diagonal_spread"] < 1e-5
    assert torch.allclose(r["by_offset"], r["closed_form"], atol=1e-5)
    assert torch.allclose(r["norms_sq"], torch.full((64,), 8.0, dtype=torch.float64), atol=1e-5)
    fwd, bwd = r["forward_backward"]
    assert abs(fwd - bwd) < 1e-5 and r["vector_gap"] > 0.1


def test_rotation_blocks_keep_translation_invariance_and_see_the_sign():
    plain = T.rotation_form_scores(32, 16, a=1.0, b=0.0)
    turned = T.rotation_form_scores(32, 16, a=1.0, b=1.0)
    for r in (plain, turned):
        assert r["max_diagonal_spread"] < 1e-5  # a function of p - q only
        assert torch.allclose(r["by_offset"], r["closed_form"], atol=1e-5)
    fwd, bwd = plain["forward_backward"]
    assert abs(fwd - bwd) < 1e-5  # b = 0: the identity form is even in the offset
    fwd, bwd = turned["forward_backward"]
    assert abs(fwd - bwd) > 1.0  # b != 0: left and right differ


def test_wavelengths_paper_and_t2t():
    wl = T.wavelengths(512)
    assert math.isclose(float(wl.min()), 2 * math.pi, rel_tol=1e-12)
    assert math.isclose(float(wl.max()) / (2 * math.pi), 10000 ** (510 / 512), rel_tol=1e-12)
    assert math.isclose(float(T.wavelengths(512, spacing="t2t").max()), 2 * math.pi * 10000, rel_tol=1e-9)


def test_distance_profile_closed_form_matches_table():
    prof = T.distance_profile(16, 100.0, 40)
    pe = T.pe_table(60, 16, 100.0)
    assert torch.allclose(prof, (pe[10:51] - pe[10]).norm(dim=1), atol=1e-5)


def test_base_sweep_collisions_at_base_one_only():
    r = T.base_sweep(bases=(1, 20, 10000), d_model=64, lengths=(64, 1024))
    assert r["per_base"][1.0]["nearest"][0] < 0.2 * r["per_base"][1.0]["neighbour"]
    assert r["per_base"][1.0]["nearest_offset"][0] == 44  # 44 ~ 7 turns of 2 pi
    for b in (20.0, 10000.0):
        assert r["per_base"][b]["nearest_offset"] == [1, 1]
    assert r["per_base"][10000.0]["spearman"] > 0.5 > abs(r["per_base"][20.0]["spearman"])
    assert abs(r["per_base"][20.0]["slowest_turn"] - 2 * math.pi * 20 ** (62 / 64)) < 1e-9


def test_slowest_turn_measured_matches_formula():
    assert T.slowest_turn_measured(400, 64, 20) == math.ceil(2 * math.pi * 20 ** (62 / 64))
    assert T.slowest_turn_measured(50, 64, 10000) == 50  # never turns within the table


def test_layouts_are_a_permutation():
    r = T.layout_check(32, 16)
    assert r["permutation_gap"] == 0.0 and r["raw_gap"] > 0.5 and r["gram_gap"] < 1e-4 and r["t2t_gap"] > 0.01
    assert sorted(r["perm"].tolist()) == list(range(16))


def test_position_similarity_on_sinusoid_and_outlier():
    s = T.position_similarity(sinusoidal(64, 32), max_offset=10)
    assert abs(s["offset_explained"] - 1) < 1e-9 and abs(s["norm0_over_median"] - 1) < 1e-6
    table = sinusoidal(64, 32).clone()
    table[0] *= 5
    assert T.position_similarity(table, 10)["norm0_over_median"] == pytest.approx(5, rel=1e-5)
    g = torch.Generator().manual_seed(0)
    assert T.position_similarity(torch.randn(64, 32, generator=g), 10)["offset_explained"] < 0.3
    assert T.nearest_distinct(torch.tensor([[0.0, 0.0], [3.0, 4.0], [3.0, 5.0]])) == pytest.approx(1.0)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="d_model"):
        T.pe_table(10, 7)
    with pytest.raises(ValueError, match="base"):
        T.pe_table(10, 8, 0.5)
    with pytest.raises(ValueError, match="n_positions"):
        T.pe_table(0, 8)
    with pytest.raises(ValueError, match="k"):
        T.shift_check(200, 8, 100)
    with pytest.raises(ValueError, match="table"):
        T.position_similarity(torch.zeros(5))
    with pytest.raises(ValueError, match="max_offset"):
        T.position_similarity(torch.randn(10, 4), max_offset=20)
    with pytest.raises(ValueError, match="length"):
        T.pe_compute(length=1)
    with pytest.raises(ValueError, match="position"):
        T.rotation_compute(k=10, position=125)
    with pytest.raises(ValueError, match="variants"):
        E.run_position_experiment(variants=("rotary",))
    with pytest.raises(ValueError, match="long_len"):
        E.run_position_experiment(long_len=8, train_len=16)


def test_bag_of_tokens_ceiling_is_above_chance_and_below_one():
    task = ProbeTask("previous", vocab_size=16, seq_len=16)
    c = E.bag_of_tokens_ceiling(task, n=500)
    assert 1 / 11 < c < 0.5
    # length 2: the only other token is the previous one
    assert E.bag_of_tokens_ceiling(ProbeTask("previous", vocab_size=7, seq_len=2), n=50) == 1.0
    # length 3, c = 2 content tokens: the two others agree w.p. 1/c (sure hit), else a coin flip
    assert E.bag_of_tokens_ceiling(ProbeTask("previous", vocab_size=7, seq_len=3), n=4000) == pytest.approx(0.75, abs=0.02)


def test_tiny_experiment_runs_and_learned_cannot_go_longer():
    r = E.run_position_experiment(seeds=(0,), steps=3, train_len=6, long_len=9, d_model=8, batch_size=8)
    assert r.long_accuracy["learned"] is None and "max_len" in r.long_error["learned"]
    assert r.long_accuracy["sinusoidal"].shape == (1, 9) and r.long_error["sinusoidal"] is None
    assert set(r.accuracy) == set(E.VARIANTS) and finite_values(r.curves)
    fig = plt.figure()
    E.plot_experiment(fig, r)
    plt.close(fig)


def test_plots_draw():
    for plot, result in ((T.plot_counter, T.counter_vs_sinusoid(16, 8)), (T.plot_sin_only, T.sin_only_fit(2, 8, 32)),
                         (T.plot_dot, T.dot_product_structure(16, 8)), (T.plot_bases, T.base_sweep(d_model=16, lengths=(8, 16)))):
        fig = plt.figure()
        plot(fig, result)
        plt.close(fig)
    fig = plt.figure()
    s = T.position_similarity(sinusoidal(16, 8), 5)
    T.plot_position_similarity(fig, s, s)
    plt.close(fig)




def test_checkpoint_position_tensors_reads_the_file(tmp_path):
    from safetensors.torch import save_file
    save_file({"embeddings.position_embeddings.weight": torch.zeros(7, 4), "embeddings.word_embeddings.weight":
               torch.zeros(3, 4)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 7}')
    r = T.checkpoint_position_tensors(tmp_path)
    assert r == {"tensors": {"embeddings.position_embeddings.weight": (7, 4)}, "max_position_embeddings": 7,
                 "position_embedding_type": "absolute"}


def test_reference_variants_start_where_they_claim_and_only_the_fixed_rows_stay_put():
    from qalib.lab.data import ProbeTask
    from qalib.topics.nb02_sin_cos_positions import experiment as E

    batch = ProbeTask("previous", vocab_size=16, seq_len=12).batch(4, torch.Generator().manual_seed(1))
    out = lambda m: m.eval()(batch.input_ids, batch.token_type_ids, batch.attention_mask).last_hidden_state  # noqa: E731
    torch.manual_seed(3)
    from_sinusoid = E.reference_model("learned from sinusoid")
    torch.manual_seed(3)
    assert torch.equal(out(from_sinusoid), out(E.reference_model("sinusoidal")))  # the same start, every weight
    torch.manual_seed(3)
    fixed = E.reference_model("fixed random")
    torch.manual_seed(3)
    assert torch.equal(out(fixed), out(E.reference_model("learned")))
    assert not fixed.embeddings.position_embeddings.weight.requires_grad
    assert from_sinusoid.embeddings.position_embeddings.weight.requires_grad
    r = E.reference_seed(0, steps=2, variants=("fixed random", "sinusoidal"))
    assert set(r) == {"fixed random", "sinusoidal"} and r["fixed random"]["unseen"] is None
    assert 0 <= r["sinusoidal"]["unseen"] <= 1 and 0 <= r["fixed random"]["accuracy"] <= 1
    with pytest.raises(ValueError, match="variants"):
        E.reference_seed(0, steps=2, variants=("rotary",))


def test_the_stored_reference_reads_per_rung():
    from qalib.lab.reference import load
    from qalib.topics.nb02_sin_cos_positions import experiment as E

    v = E.reference_view(load("02_sin_cos_positions", "positions"))
    assert set(v["live"]) == set(E.REFERENCE_VARIANTS) and set(v["BERT's init"]) == {"learned", "sinusoidal", "none"}
    assert v["16x"]["sinusoidal"]["unseen"].shape == (10,) and "unseen" not in v["16x"]["learned"]


def test_position_criteria_separate_a_table_that_depends_on_more_than_the_offset():
    g = torch.Generator().manual_seed(0)
    random_rows = torch.randn(64, 16, generator=g)
    crit = {c.scheme: c for c in T.position_criteria(random_rows, d_rotary=8, seed=1)}
    assert crit["sinusoid"].offset_explained > 1 - 1e-9 and crit["rotary (relative)"].offset_explained > 1 - 1e-9
    assert crit["learned table"].offset_explained < 0.2 and crit["learned table"].positions == 64
    assert crit["sinusoid"].positions is None and crit["sinusoid"].nearest_over_norm > 0
    assert T.offset_explained(sinusoidal(32, 8) @ sinusoidal(32, 8).T) > 1 - 1e-9
    with pytest.raises(ValueError, match="even"):
        T.position_criteria(random_rows, d_rotary=7)
    with pytest.raises(ValueError, match="table"):
        T.position_criteria(torch.zeros(2, 4))

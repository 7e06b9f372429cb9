import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from qalib.lab.data import IGNORE, MASK, N_SPECIAL  # noqa: E402
from qalib.topics.nb16_objectives import compute as ob  # noqa: E402
from qalib.topics.nb16_objectives import experiment as oe  # noqa: E402


@pytest.fixture(scope="module")
def small_run():
    """One seed of every objective, a few steps: enough for shapes and for what holds whatever the weights."""
    return oe.run_experiment(seeds=(0,), steps=4, n_probe=16, checkpoints=2, device="cpu")


def ids(n=8, t=ob.SEQ_LEN, seed=0):
    return ob.objectives_language().sample(n, t, torch.Generator().manual_seed(seed))


# -- T5's sampler ---------------------------------------------------------------------------------
@pytest.mark.parametrize("length, expected", [(20, (3, 1)), (40, (6, 2)), (100, (15, 5)), (2, (1, 1))])
def test_span_counts_round_as_t5(length, expected):
    assert ob.span_counts(length) == expected


def test_noise_mask_has_the_counts_and_a_kept_token_on_both_sides_of_every_span():
    for length in (10, 20, 40, 64):
        noise = ob.random_spans_noise_mask(length, torch.Generator().manual_seed(length), n_rows=200)
        n_noise, n_spans = ob.span_counts(length)
        starts = noise & ~torch.nn.functional.pad(noise[:, :-1], (1, 0))
        assert (noise.sum(1) == n_noise).all() and (starts.sum(1) == n_spans).all()
        assert not noise[:, 0].any() and not noise[:, -1].any()
        # the spans move around: more than one start position is used
        assert len(set(starts.float().argmax(1).tolist())) > 1


def test_span_corrupt_keeps_every_token_once_in_input_or_target():
    x = ids(16, 40)
    src, tgt, noise = ob.span_corrupt(x, torch.Generator().manual_seed(1))
    n_noise, n_spans = ob.span_counts(40)
    assert src.shape == (16, 40 - n_noise + n_spans + 1) and tgt.shape == (16, n_noise + n_spans + 2)
    assert (src[:, -1] == ob.EOS).all() and (tgt[:, -1] == ob.EOS).all()
    for row, s, t, m in zip(x, src, tgt, noise):
        assert [int(v) for v in s if v < ob.LANG_VOCAB and v != ob.EOS] == row[~m].tolist()
        assert [int(v) for v in t if v < ob.LANG_VOCAB and v != ob.EOS] == row[m].tolist()
        assert [int(v) for v in t if v >= ob.LANG_VOCAB] == [ob.sentinel(k) for k in range(n_spans + 1)]
        assert [int(v) for v in s if v >= ob.LANG_VOCAB] == [ob.sentinel(k) for k in range(n_spans)]


def test_span_corrupt_rejects_too_many_spans_and_bad_input():
    with pytest.raises(ValueError, match="spans"):
        ob.span_corrupt(ids(2, 64), None, 0.5, 1.5)
    with pytest.raises(ValueError, match="ids"):
        ob.span_corrupt(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="noise_density"):
        ob.span_counts(20, 1.5)


# -- the objectives' batches and models -----------------------------------------------------------
def test_objective_batches_line_up_with_their_models():
    x = ids()
    cfg = ob.model_config()
    for o in ob.OBJECTIVES:
        b = ob.objective_batch(o, x, torch.Generator().manual_seed(0))
        logits = ob.logits_of(ob.build_model(o, cfg), o, b)
        assert logits.shape[:2] == b["labels"].shape and logits.shape[2] == ob.VOCAB
    causal = ob.objective_batch("causal", x)
    assert torch.equal(causal["labels"], x[:, 1:]) and torch.equal(causal["inputs"], x[:, :-1])
    mlm = ob.objective_batch("mlm", x, torch.Generator().manual_seed(0))
    assert ((mlm["labels"] == IGNORE) | (mlm["labels"] == x)).all() and (mlm["inputs"] == MASK).any()
    span = ob.objective_batch("span", x, torch.Generator().manual_seed(0))
    assert torch.equal(span["decoder_in"][:, 1:], span["labels"][:, :-1]) and (span["decoder_in"][:, 0] == ob.DECODER_START).all()
    with pytest.raises(ValueError, match="objective"):
        ob.objective_batch("electra", x)


def test_models_share_width_and_depth_and_differ_by_the_cross_attention():
    cfg = ob.model_config(d_model=16)
    p = {o: ob.n_params(ob.build_model(o, cfg)) for o in ob.OBJECTIVES}
    assert p["mlm"] == p["causal"] and p["span"] - p["causal"] == 4 * 16 * 16 + 8 * 16
    assert ob.build_model("mlm", cfg).cfg.causal is False and ob.build_model("causal", cfg).cfg.causal is True
    with pytest.raises(ValueError, match="n_layers"):
        ob.model_config(n_layers=3)


def test_signals_and_flops():
    s = ob.signals_per_sequence(20)
    assert s["targets"] == {"mlm": 3.0, "causal": 19, "span": 3} and s["decoder targets (span)"] == 6
    cfg = ob.model_config()
    f = {o: ob.step_flops(cfg, o, 20, 2) for o in ob.OBJECTIVES}
    assert f["span"] < f["causal"] and all(v > 0 for v in f.values())
    assert ob.step_flops(cfg, "causal", 20, 2) == 2 * ob.step_flops(cfg, "causal", 20, 1)
    # the causal count by hand: 2 layers of (4 d^2 + 2 d d_ff + 2 d T) MACs per position, the output layer, x 2 x 3
    d, t, v = 32, 19, ob.VOCAB
    assert ob.step_flops(cfg, "causal", 20) == 3 * (2 * 2 * (4 * d * d + 2 * d * 4 * d + 2 * d * t) * t + 2 * d * v * t)
    assert ob.step_flops(cfg, "mlm", 20, rate=0.3) > ob.step_flops(cfg, "mlm", 20, rate=0.15)


# -- views and plots --------------------------------------------------------------------------------
@pytest.mark.parametrize("objective", ob.OBJECTIVES)
@pytest.mark.parametrize("rate, length", [(0.05, 8), (0.5, 20), (0.15, 64)])
def test_corruption_view_counts_and_plots(objective, rate, length):
    r = ob.corruption_view(objective, rate, 3.0, length, 1)
    if objective == "causal":
        assert r["n_signals"] == length - 1
    elif objective == "span":
        assert r["n_signals"] == ob.span_counts(length, rate)[0] and r["target"] is not None
    else:
        assert r["n_signals"] == int((r["input"] > 0).sum())
    fig = plt.figure()
    ob.plot_corruption(fig, r)
    fig.canvas.draw()
    plt.close(fig)


def test_views_reject_bad_values_by_name():
    with pytest.raises(ValueError, match="rate"):
        ob.corruption_view("mlm", 0.9)
    with pytest.raises(ValueError, match="length"):
        ob.signals_view(length=2)
    with pytest.raises(ValueError, match="objective"):
        ob.corruption_view("gpt")


def test_signals_view_is_finite_at_the_ends():
    for length in (4, 64):
        for rate in (0.05, 0.5):
            r = ob.signals_view(length, rate, 1.5, 512)
            assert all(np.isfinite(v) and v > 0 for v in r["flops"].values())
            fig = plt.figure()
            ob.plot_signals(fig, r)
            plt.close(fig)


def test_right_mass():
    assert ob.right_mass(np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]) == 0
    assert ob.right_mass(np.full((4, 4), 0.25)) == pytest.approx((3 + 2 + 1 + 0) * 0.25 / 4)


# -- the experiment on a few steps -------------------------------------------------------------------
def test_small_run_has_every_objective_and_probe(small_run):
    assert set(small_run.models) == {(o, 0) for o in ob.OBJECTIVES}
    assert small_run.probe_steps == [0, 2, 4]
    for key, acc in small_run.probe.items():
        assert acc.shape == (1, 3) and ((acc >= 0) & (acc <= 1)).all()
    assert small_run.final("random").shape == (1,)
    maps = ob.attention_maps({o: small_run.models[(o, 0)] for o in ob.OBJECTIVES}, ids(2))
    assert ob.right_mass(maps["causal LM"]) == 0 and maps["T5 cross: target -> source"].shape == (6, ob.SEQ_LEN - 1)
    fig = plt.figure()
    ob.plot_attention_maps(fig, maps)
    plt.close(fig)


def test_next_token_kl_and_generation(small_run):
    text = ids(4, oe.PROBE_LEN)
    for o in ob.OBJECTIVES:
        m = small_run.models[(o, 0)]
        assert np.isfinite(oe.next_token_kl(m, o, text)) and oe.next_token_kl(m, o, text) >= 0
        p = oe.next_probs(m, o, text[:, :5])
        assert p.shape == (4, ob.VOCAB) and torch.allclose(p.sum(1), torch.ones(4, dtype=p.dtype))
    for o in ("mlm", "causal"):
        out = oe.generate_text(small_run.models[(o, 0)], o, text[:, :4], 5, seed=0)
        assert out.shape == (4, 9) and torch.equal(out[:, :4], text[:, :4])
    with pytest.raises(ValueError, match="objective"):
        oe.generate_text(small_run.models[("span", 0)], "span", text[:, :4], 3)


def test_probe_reads_a_planted_neighbour():
    """The probe machinery: features that are one-hot of the right neighbour give accuracy 1."""
    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.cfg = ob.model_config()

        def embeddings(self, x):
            return torch.nn.functional.one_hot(torch.roll(x, -1, 1), ob.VOCAB).float()

        def decoder(self, h):
            return h, None

    x, y = ids(64, 12, 1), ids(64, 12, 2)
    assert oe.probe_scores(Fake(), "mlm", x, y)["next"] == 1.0
    assert N_SPECIAL == 5


def test_task_floors_are_ordered_and_an_untrained_model_sits_above_them():
    import math

    f = oe.task_floors(n=4000)
    assert f["causal"]["left context"] == pytest.approx(math.log(4))
    assert 0 < f["mlm"]["both neighbours"] < f["mlm"]["left neighbour only"] == pytest.approx(math.log(4))
    span = f["span"]
    assert 0 < span["both neighbours"] < span["left neighbour"] < span["ignores the encoder"] < math.log(27) / 2
    torch.manual_seed(0)
    for o in ob.OBJECTIVES:
        untrained = oe.held_out_loss(ob.build_model(o, ob.model_config()).eval(), o, n=64)
        assert untrained > max(f[o].values()) + 0.5, o


def test_left_from_current_ceiling_matches_a_count_on_sampled_text():
    """The exact Bayes accuracy of guessing x_(t-1) from x_t agrees with the same guess counted on 20,000 sampled
    sentences (the best guess per (position, x_t) read from the counts)."""
    from qalib.topics.nb16_objectives.compute import left_from_current_ceiling, objectives_language

    lang, length = objectives_language(), 17
    exact = left_from_current_ceiling(lang, length)
    x = lang.sample(20_000, length, torch.Generator().manual_seed(0))
    hits = []
    for t in range(1, length - 1):
        counts = torch.zeros(lang.vocab_size, lang.vocab_size)
        counts.index_put_((x[:, t], x[:, t - 1]), torch.ones(len(x)), accumulate=True)  # (x_t, x_(t-1))
        hits.append(float(counts.max(1).values.sum() / len(x)))
    assert abs(exact - sum(hits) / len(hits)) < 0.01
    assert 1 / lang.branching < exact < 1  # better than a blind guess among 4 predecessors, not certain
    with pytest.raises(ValueError, match="length"):
        left_from_current_ceiling(lang, 2)


def test_the_t5_reference_unit_gate_and_stored_file():
    from qalib.lab.reference import load

    floors = oe.task_floors()
    f = floors["span"]
    assert oe.t5_gate(f["ignores the encoder"] - 0.3, floors).passed and not oe.t5_gate(f["ignores the encoder"], floors).passed
    out = oe.t5_reference_seed(0, steps=3)
    assert len(out["per_position"]) == 6 and 0 <= out["left_mass"] <= 1 and out["escape"] is None
    assert out["curve"] == [] and 0 <= out["next"] <= 1
    ref = load("16_objectives", "t5")
    assert ref.rung("5000 steps").values("loss").shape == (8,)
    with pytest.raises(ValueError, match="objectives"):
        oe.run_experiment(seeds=(0,), steps=2, objectives=("bert",))

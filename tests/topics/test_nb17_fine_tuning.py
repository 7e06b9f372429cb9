import math

import matplotlib
import numpy as np
import pytest
import torch
from qalib.lab.train import TrainConfig, lr_factor  # noqa: E402

from qalib.nn.pretrained import minilm
from qalib.topics.nb17_fine_tuning import compute as F
from qalib.topics.nb17_fine_tuning import experiment as E

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def base_and_words():
    base, tok = minilm()
    return base, F.WordIds(tok), tok


# -- the tasks ------------------------------------------------------------------------------------------------
def test_every_task_word_is_one_word_piece_and_a_split_word_is_named(base_and_words, monkeypatch):
    _, words, tok = base_and_words
    for w, i in words.ids.items():
        assert tok.backend.id_to_token(i) == w
    monkeypatch.setitem(F.CATEGORIES, "animal", ("dog", "hedgehog"))
    with pytest.raises(ValueError, match="'hedgehog' is not one word piece"):
        F.WordIds(tok)
    monkeypatch.setitem(F.CATEGORIES, "animal", ("dog", "saw"))  # "saw" is also a template word
    with pytest.raises(ValueError, match=r"\['saw'\] play two roles"):
        F.WordIds(tok)


def test_membership_pairs_are_labelled_by_the_word_lists(base_and_words):
    _, words, _ = base_and_words
    ex = F.MembershipTask().sample(words, 400, torch.Generator().manual_seed(0))
    ids = ex.input_ids
    assert ids.shape == (400, F.MembershipTask().seq_len) == (400, 7) and (ids[:, 0] == words.cls_id).all()
    assert (ids[:, 2] == words.sep_id).all() and (ids[:, -1] == words.sep_id).all()
    assert (ex.token_type_ids[:, :3] == 0).all() and (ex.token_type_ids[:, 3:] == 1).all()
    by_id = {words.ids[c]: set(words.ids[w] for w in F.CATEGORIES[c]) for c in F.CATEGORIES}
    for row, label in zip(ids.tolist(), ex.labels.tolist()):
        nouns = [t for t in row[3:-1] if any(t in s for s in by_id.values())]
        assert len(nouns) == 1
        assert (nouns[0] in by_id[row[1]]) == bool(label)
    assert 0.4 < ex.labels.float().mean() < 0.6
    again = F.MembershipTask().sample(words, 5, torch.Generator().manual_seed(3)).input_ids
    assert torch.equal(again, F.MembershipTask().sample(words, 5, torch.Generator().manual_seed(3)).input_ids)


def test_the_span_task_answer_is_the_phrase_whose_noun_was_asked_for(base_and_words):
    _, words, _ = base_and_words
    task = F.SpanTask()
    ex = task.sample(words, 300, torch.Generator().manual_seed(1))
    assert ex.input_ids.shape == (300, task.seq_len) and ex.labels.shape == (300, 2)
    colours = set(words.colours.tolist())
    for row, (s, e) in zip(ex.input_ids.tolist(), ex.labels.tolist()):
        asked = words.names[words.category_ids.tolist().index(row[1])]
        assert e == s + 1 and row[s] in colours
        assert row[e] in {words.ids[w] for w in F.CATEGORIES[asked]}
        context = row[3:-1]
        assert sum(t in colours for t in context) == 2  # two phrases, one of them the answer
        other = [context[i + 1] for i, t in enumerate(context) if t in colours and i + 3 != s]
        assert len(other) == 1 and other[0] not in {words.ids[w] for w in F.CATEGORIES[asked]}
    starts = ex.labels[:, 0]
    assert starts.min() == 3 and starts.max() == 3 + task.context_len - 2  # every slot is used


# -- heads and the prediction rule ---------------------------------------------------------------------------
def test_heads_give_class_or_start_end_logits():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(5, 9, 16)
    assert F.Head("cls", 16, 9, g)(h).shape == (5, 2)
    assert F.Head("span", 16, 9, g)(h).shape == (5, 2, 9)
    assert F.Head("cls_span", 16, 9, g)(h).shape == (5, 2, 9)
    span = F.Head("span", 16, 9, g)
    assert torch.allclose(span(h)[:, 0], h @ span.linear.weight[0] + span.linear.bias[0], atol=1e-6)  # S . T_i
    with pytest.raises(ValueError, match="head must be one of"):
        F.Head("pooler", 16, 9, g)


def test_best_span_maximises_start_plus_end_with_end_not_before_start_inside_the_context():
    z = torch.full((1, 2, 8), -5.0)
    z[0, 0, 5], z[0, 1, 4] = 3.0, 3.0        # the best start lies after the best end
    z[0, 1, 6] = 2.0
    assert F.best_span(z).tolist() == [[5, 6]]
    z = torch.zeros(1, 2, 8)
    z[0, 0, 0], z[0, 1, 7] = 9.0, 9.0        # [CLS] and the last [SEP] are never picked
    pred = F.best_span(z)[0].tolist()
    assert 3 <= pred[0] <= pred[1] <= 6
    logits = torch.tensor([[[0.0, 1.0, 0, 0, 0, 0, 0, 0], [0.0] * 8]])
    assert F.accuracy(torch.tensor([[2.0, 1.0], [0.0, 3.0]]), torch.tensor([0, 0])) == 0.5
    assert F.accuracy(logits, torch.tensor([[3, 3]])) in (0.0, 1.0)


def test_the_schedule_warms_up_then_decays_to_zero():
    def schedule(steps, warmup):
        cfg = TrainConfig(steps=steps, warmup=F.warmup_steps(warmup, steps), decay="linear")
        return [lr_factor(s, cfg) for s in range(steps)]
    lrs = schedule(20, 0.1)
    assert F.warmup_steps(0.1, 20) == 2 and F.warmup_steps(0.01, 20) == 1 and F.warmup_steps(0.0, 20) == 0
    assert lrs[0] == 0.5 and lrs[1] == 1.0 and lrs[-1] == pytest.approx(1 / 18)
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    assert schedule(4, 0.0) == [1.0, 0.75, 0.5, 0.25]


# -- fine-tuning -----------------------------------------------------------------------------------------------
def _stream(base, words, n=32, seed=0):
    return F.frozen_stream(base, F.MembershipTask().sample(words, n, torch.Generator().manual_seed(seed)))


def test_frozen_stream_holds_the_pretrained_hidden_states(base_and_words):
    base, words, _ = base_and_words
    stream = _stream(base, words, 8)
    ex = stream.examples
    out = base(ex.input_ids, ex.token_type_ids, output_hidden_states=True).hidden_states
    assert len(stream.hidden) == len(base.layers) + 1
    for a, b in zip(stream.hidden, out):
        assert torch.allclose(a, b, atol=1e-5)
    short = F.frozen_stream(base, ex, layers=2)
    assert len(short.hidden) == 3 and all(torch.equal(a, b) for a, b in zip(short.hidden, stream.hidden))


def test_finetune_copies_the_top_layers_leaves_the_rest_and_is_reproducible(base_and_words):
    base, words, _ = base_and_words
    before = {k: v.clone() for k, v in base.state_dict().items()}
    stream = _stream(base, words, 32)
    cfg = F.FineTuneConfig(lr=1e-3, trainable=2, batch_size=16)
    run = F.finetune(base, stream, "cls", cfg, seed=0)
    assert all(torch.equal(v, base.state_dict()[k]) for k, v in before.items())  # the shared model is untouched
    assert len(run.top) == 2 and run.first_tuned == 4 and len(run.losses) == 2
    change = F.relative_weight_change(base, run)
    assert (change[:4] == 0).all() and (change[4:] > 0).all()
    hidden = run.hidden(stream)
    assert all(torch.equal(a, b) for a, b in zip(hidden[:5], stream.hidden[:5]))   # frozen layers: the stream's
    cka = F.layer_cka(stream.hidden, hidden)
    assert np.allclose(cka[:4], 1.0, atol=1e-5) and (cka[4:] < 1).all()
    again = F.finetune(base, stream, "cls", cfg, seed=0)
    assert again.losses == run.losses
    assert torch.equal(run.logits(stream), again.logits(stream))
    head_only = F.finetune(base, stream, "cls", F.FineTuneConfig(lr=1e-3, trainable=0, batch_size=16), seed=0)
    assert len(head_only.top) == 0 and (F.relative_weight_change(base, head_only) == 0).all()


def test_finetune_rejects_what_it_cannot_run(base_and_words):
    base, words, _ = base_and_words
    stream = _stream(base, words, 8)
    with pytest.raises(ValueError, match="fewer than one batch"):
        F.finetune(base, stream, "cls", F.FineTuneConfig(batch_size=16), seed=0)
    with pytest.raises(ValueError, match="trainable"):
        F.finetune(base, stream, "cls", F.FineTuneConfig(trainable=7, batch_size=4), seed=0)
    with pytest.raises(ValueError, match="lr"):
        F.FineTuneConfig(lr=0.0)


# -- what a run moved ----------------------------------------------------------------------------------------
def test_cka_is_one_under_rotation_and_scaling_and_small_for_unrelated_vectors():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 20, generator=g)
    q, _ = torch.linalg.qr(torch.randn(20, 20, generator=g))
    assert F.linear_cka(x, 3.0 * x @ q + 1.0) == pytest.approx(1.0, abs=1e-5)
    assert F.linear_cka(x, torch.randn(500, 20, generator=g)) < 0.1


def test_similarity_structure_is_one_when_every_pair_keeps_its_cosine():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(30, 8, generator=g)
    assert F.similarity_structure(e, 5 * e) == pytest.approx(1.0, abs=1e-9)
    assert abs(F.similarity_structure(e, torch.randn(30, 8, generator=g))) < 0.3


def test_the_ridge_of_a_probe_is_chosen_on_the_training_examples_alone():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g)
    y = (x[:, 0] > 0).long()
    assert E.cv_probe(x[:100], y[:100], x[100:], y[100:]) > 0.9
    assert E.cv_probe(x[:100], y[:100], x[100:], 1 - y[100:]) < 0.1


def test_held_out_text_is_fixed_length_prose_without_padding():
    _, tok = minilm()
    text = E.held_out_text(tok, n=16)
    assert text.input_ids.shape == (16, E.TEXT_PIECES + 2)
    assert (text.input_ids[:, 0] == tok.cls_id).all() and (text.input_ids[:, -1] == tok.sep_id).all()
    assert not (text.input_ids == tok.pad_id).any()
    with pytest.raises(ValueError, match="plain sentences"):
        E.held_out_text(tok, n=100_000)


# -- the demos' compute functions ----------------------------------------------------------------------------
def _grid(s=2):
    rng = np.random.default_rng(0)
    shape = (s, 3, 3)
    return {"lrs": (3e-5, 3e-4, 1e-3), "trainable": (0, 1, 6), "acc": rng.random(shape),
            "similarity": rng.random(shape), "weight_change": rng.random(shape + (6,)) * 0.01,
            "cka": rng.random(shape + (6,))}


def test_movement_demo_picks_one_run_and_names_what_it_cannot_show():
    grid = _grid()
    r = F.movement_demo_compute(grid, 3e-4, 6, seed=1)
    assert np.array_equal(r["change"], grid["weight_change"][1, 1, 2]) and r["acc"] == grid["acc"][1, 1, 2]
    assert np.array_equal(r["shift"], 1 - grid["cka"][1, 1, 2]) and r["note"] == ""
    assert "only the head" in F.movement_demo_compute(grid, 1e-3, 0)["note"]
    with pytest.raises(ValueError, match="learning rates"):
        F.movement_demo_compute(grid, 1e-2, 6)
    with pytest.raises(ValueError, match="trained the top"):
        F.movement_demo_compute(grid, 3e-4, 3)
    with pytest.raises(ValueError, match="seed"):
        F.movement_demo_compute(grid, 3e-4, 6, seed=2)


def test_span_demo_shows_probabilities_and_the_picked_span(base_and_words):
    _, words, _ = base_and_words
    ex = F.SpanTask().sample(words, 3, torch.Generator().manual_seed(0))
    t = ex.input_ids.shape[1]
    logits = {"span": np.zeros((1, 3, 2, t), dtype=np.float32), "cls_span": np.zeros((1, 3, 2, t), dtype=np.float32)}
    s, e = ex.labels[2].tolist()
    logits["span"][0, 2, 0, s] = logits["span"][0, 2, 1, e] = 10.0
    tokens = [[f"t{i}" for i in range(t)] for _ in range(3)]
    r = F.span_demo_compute(logits, ex, tokens, "span", example=2)
    assert r["right"] and r["pred"] == [s, e] and math.isclose(float(r["start"].sum()), 1.0, rel_tol=1e-5)
    assert r["answer"] == f"t{s} t{e}"
    assert not F.span_demo_compute(logits, ex, tokens, "cls_span", example=2)["right"] or s == 3
    with pytest.raises(ValueError, match="example"):
        F.span_demo_compute(logits, ex, tokens, "span", example=3)
    with pytest.raises(ValueError, match="head must be one of"):
        F.span_demo_compute(logits, ex, tokens, "pooler")


def test_the_demo_plots_draw_extreme_values():
    import matplotlib.figure

    fig = matplotlib.figure.Figure()
    update = F.plot_movement_demo(fig, F.movement_demo_compute(_grid(), 3e-5, 0))
    assert update(F.movement_demo_compute(_grid(), 1e-3, 6)) is None
    big = _grid()
    big["weight_change"][0, 2, 2, -1] = 3.0  # a rate that moves a layer by 300% of its norm: its bar still fits
    fig = matplotlib.figure.Figure()
    F.plot_movement_demo(fig, F.movement_demo_compute(big, 1e-3, 6))
    assert fig.axes[0].get_ylim()[1] >= 3.0


def test_the_experiment_returns_every_grid_cell_and_its_figures_draw():
    import matplotlib.figure

    res = E.small_result()  # one seed, four steps: the shapes and plots, not the results
    pair, span = res["pair"], res["span"]
    s, n_lr, n_k, n_layers = 1, len(E.LRS), len(E.TRAINABLE), pair["n_layers"]
    assert pair["acc"].shape == (s, n_lr, n_k) and pair["cka"].shape == (s, n_lr, n_k, n_layers)
    head_only = E.TRAINABLE.index(0)
    assert (pair["weight_change"][:, :, head_only] == 0).all() and (pair["cka"][:, :, head_only] == 1).all()
    assert np.allclose(pair["acc"][:, :, head_only], pair["probe_before"]["cls"][:, None])
    assert span["logits"]["span"].shape == (s, E.N_EVAL, 2, F.SpanTask().seq_len)
    for plot, data in ((E.plot_probes, pair), (E.plot_movement, pair), (E.plot_learning_rates, pair),
                       (E.plot_span, span)):
        fig = matplotlib.figure.Figure()
        plot(fig, data)
        assert fig.axes


def test_the_held_out_prose_is_frozen_in_a_file_with_enough_sentences():
    lines = [ln for ln in E.PROSE_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) >= E.N_TEXT and len(set(lines)) == len(lines)
    assert all(ln == ln.lower() and "`" not in ln and "$" not in ln for ln in lines)


# -- the probe's control and the reference ---------------------------------------------------------------------
def test_random_encoder_has_the_shape_keeps_embeddings_only_when_asked_and_leaves_the_rng(base_and_words):
    base, _, _ = base_and_words
    torch.manual_seed(5)
    expected_next = torch.rand(1)
    torch.manual_seed(5)
    a = F.random_encoder(base, seed=3)
    assert torch.equal(torch.rand(1), expected_next)  # the global random state is untouched
    b = F.random_encoder(base, seed=3, keep_embeddings=True)
    c = F.random_encoder(base, seed=4)
    assert not a.training and a.cfg == base.cfg
    w = lambda m: next(m.layers[0].parameters())  # noqa: E731  (the first layer's first weight)
    assert torch.equal(w(a), w(b)) and not torch.equal(w(a), w(c)) and not torch.equal(w(a), w(base))
    assert torch.equal(b.embeddings.word_embeddings.weight, base.embeddings.word_embeddings.weight)
    assert not torch.equal(a.embeddings.word_embeddings.weight, base.embeddings.word_embeddings.weight)
    with pytest.raises(ValueError, match="seed"):
        F.random_encoder(base, seed=-1)


def test_the_reference_reads_into_typed_runs_and_its_figure_draws():
    import matplotlib.figure
    from qalib.lab.reference import load

    res = E.summarize_reference(load("17_fine_tuning", "pair_task"))
    assert set(res.steps) == {"live", "4x", "reference"} and res.steps["reference"] == E.REFERENCE_STEPS
    run = res.run("reference", 3e-5, 6)
    n = len(res.seeds)
    assert run.acc.shape == (n,) and run.weight_change.shape == run.shift.shape == (n, 6)
    assert run.learned.dtype == bool and np.allclose(run.depth_ratio, run.weight_change[:, -1] / run.weight_change[:, 0])
    assert (res.run("live", 3e-4, 1).weight_change[:, :-1] == 0).all()  # only the top layer trained
    with pytest.raises(KeyError, match="no run"):
        res.run("reference", 5e-5, 6)
    fig = matplotlib.figure.Figure(figsize=(11, 4))
    E.plot_reference(fig, res)
    assert len(fig.axes) == 2


def test_a_run_that_predicts_one_class_is_collapsed_and_fails_the_gate():
    z = np.zeros(3)
    run = E.PairRuns("live", 20, 1e-3, 6, acc=np.array([0.5, 0.95, 0.81]), true_share=np.array([1.0, 0.5, 0.005]),
                     final_loss=z, similarity=z, text_shift=z, weight_change=np.ones((3, 6)), shift=np.ones((3, 6)))
    assert run.collapsed.tolist() == [True, False, True]
    assert run.learned.tolist() == [False, True, True]

import math
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from qalib.lab.data import IGNORE, N_SPECIAL  # noqa: E402
from qalib.tools.testing import finite_values  # noqa: E402
from qalib.topics.nb13_attention_vs_recurrence import compute as rc  # noqa: E402
from qalib.topics.nb13_attention_vs_recurrence import experiment as rx  # noqa: E402


# -- the task and the models ---------------------------------------------------------------
def test_marked_recall_puts_the_answer_d_tokens_before_the_only_label():
    b = rc.MarkedRecall(distance=5).batch(64, torch.Generator().manual_seed(0))
    assert b.input_ids.shape == (64, 6)
    assert (b.labels[:, :-1] == IGNORE).all() and (b.labels[:, -1] == b.input_ids[:, 0]).all()
    marked = range(N_SPECIAL, N_SPECIAL + rc.N_MARKED)
    assert all(int(t) in marked for t in b.input_ids[:, 0])
    assert int(b.input_ids[:, 1:].min()) >= N_SPECIAL + rc.N_MARKED  # distractors never look like an answer
    with pytest.raises(ValueError, match="distance"):
        rc.MarkedRecall(distance=0)


def test_both_models_give_logits_over_the_vocabulary_and_reject_unknown_kinds():
    ids = torch.randint(N_SPECIAL, rc.VOCAB, (2, 9))
    for kind in rc.KINDS:
        model = rc.make_model(kind, max_len=9)
        assert model.mlm_logits(model(ids).last_hidden_state).shape == (2, 9, rc.VOCAB)
    with pytest.raises(ValueError, match="kind"):
        rc.make_model("transformer-xl", max_len=9)


def test_a_recurrent_output_depends_only_on_the_past():
    model = rc.make_model("gru", max_len=10).eval()
    ids = torch.randint(N_SPECIAL, rc.VOCAB, (1, 10), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[0, 7] = N_SPECIAL if ids[0, 7] != N_SPECIAL else N_SPECIAL + 1
    with torch.no_grad():
        a, b = model(ids).last_hidden_state, model(changed).last_hidden_state
    assert torch.equal(a[:, :7], b[:, :7]) and not torch.equal(a[:, 7:], b[:, 7:])


# -- gradients by distance -------------------------------------------------------------------
def test_distance_gradients_decay_for_the_gru_and_not_for_attention():
    gru = rc.distance_gradients("gru", length=65, seeds=(0, 1), batch_size=4)
    att = rc.distance_gradients("attention", length=65, seeds=(0, 1), batch_size=4)
    assert gru["grad"].shape == (2, 65) and (gru["distance"] == np.arange(65)).all()
    assert (gru["grad"][:, 64] < 1e-8 * gru["grad"][:, 1]).all()
    assert (att["grad"][:, 1:].max(1) < 5 * att["grad"][:, 1:].min(1)).all()
    assert (np.abs(rc.decay_per_step(att) - 1) < 1e-2).all() and (rc.decay_per_step(gru) < 0.8).all()
    fig = plt.figure()
    rc.plot_distance_gradients(fig, {"gru": gru, "attention": att})
    plt.close(fig)


def test_embedding_gradients_reads_both_models_through_the_same_hook():
    batch = rc.MarkedRecall(6).batch(3, torch.Generator().manual_seed(0))
    for kind in ("gru", "attention"):
        g = rc.embedding_gradients(rc.make_model(kind, max_len=7), batch)
        assert g.shape == (7,) and torch.isfinite(g).all() and (g > 0).all()


# -- counts ---------------------------------------------------------------------------------
def test_the_gru_runs_one_product_per_position_and_attention_a_fixed_number():
    gru, att = rc.count_products("gru", (8, 24)), rc.count_products("attention", (8, 24))
    assert gru["products"] == [10, 26] and att["products"][0] == att["products"][1]


def test_layer_flops_follow_table_1():
    r = rc.layer_flops(n=48, d=16)
    assert r["attention core"] == 4 * 48 ** 2 * 16 and r["RNN (tanh)"] == 4 * 48 * 16 ** 2
    assert r["GRU"] == 3 * r["RNN (tanh)"] and r["attention projections"] == 8 * 48 * 16 ** 2


def test_teacher_forcing_is_one_call_and_generation_one_call_per_token():
    tf = rc.teacher_forcing(n=6)
    assert tf["training_calls"] == 1 and tf["generation_calls"] == tf["new_tokens"] == 6 and tf["max_diff"] < 1e-5


def test_layer_times_returns_one_positive_time_per_length():
    t = rc.layer_times((8, 16), d=8, repeats=1)
    assert len(t["attention core"]) == len(t["RNN (tanh)"]) == 2 and min(t["attention core"] + t["RNN (tanh)"]) > 0


# -- the soft lookup --------------------------------------------------------------------------
def test_soft_lookup_goes_from_uniform_to_hard():
    cold, hot = rc.soft_lookup(temperature=1e-3), rc.soft_lookup(temperature=1e3)
    assert cold["weights"].max() > 0.999 and abs(cold["output"] - cold["hard"]) < 1e-6
    assert np.allclose(hot["weights"], 1 / rc.N_KEYS, atol=1e-3)
    assert rc.soft_lookup(blend=0.0, target=4)["best"] == 4
    for bad in ({"temperature": 0}, {"target": rc.N_KEYS}, {"blend": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            rc.soft_lookup(**bad)


def test_soft_lookup_stays_finite_at_the_ends_of_its_controls():
    for t in (1e-3, 1e3):
        for blend in (0.0, 1.0):
            assert finite_values(rc.soft_lookup(temperature=t, blend=blend))


def test_one_shared_projection_makes_tokens_match_themselves():
    assert rc.self_match_rate(True, seeds=(0, 1)).min() > 0.8
    assert rc.self_match_rate(False, seeds=(0, 1)).max() < 0.3


def test_cost_view_crosses_at_n_equals_d():
    r = rc.cost_view(n=64, d=64)
    assert r["at_n"]["attention core"] == r["at_n"]["tanh RNN"]
    assert rc.cost_view(n=128, d=64)["at_n"]["attention core"] > rc.cost_view(n=128, d=64)["at_n"]["tanh RNN"]
    with pytest.raises(ValueError, match="n"):
        rc.cost_view(n=0)


def test_the_plots_draw_and_update():
    for compute, plot, change in ((rc.soft_lookup, rc.plot_soft_lookup, {"temperature": 0.01}),
                                  (rc.cost_view, rc.plot_cost_view, {"n": 4096, "d": 16})):
        fig = plt.figure()
        update = plot(fig, compute())
        update(compute(**change))
        fig.canvas.draw()
        plt.close(fig)


# -- the experiment -----------------------------------------------------------------------------
def test_a_tiny_recall_experiment_has_the_documented_shapes():
    res = rx.run_recall_experiment(distances=(2, 3), seeds=(0,), steps=2, device="cpu")
    assert res.accuracy.shape == (2, 2, 1) and res.answer_weight.shape == (2, 1) and res.ms_per_step.shape == (2, 2, 1)
    assert ((0 <= res.answer_weight) & (res.answer_weight <= 1)).all()
    fig = plt.figure()
    rx.plot_recall_experiment(fig, res)
    plt.close(fig)
    with pytest.raises(ValueError, match="models"):
        rx.run_recall_experiment(models=("cnn",))


def test_the_cost_view_keeps_every_curve_the_demo_can_draw_on_its_fixed_axes():
    for d in (16, 1024):
        curves = np.log10(np.concatenate(list(rc.cost_view(n=8, d=d)["curves"].values())))
        assert rc.COST_VIEW[0] <= curves.min() and curves.max() <= rc.COST_VIEW[1]


def test_gate_biases_start_a_cell_holding_its_state():
    from qalib.topics.nb13_attention_vs_recurrence.compute import RecurrentLM
    h = 64
    gru = RecurrentLM("gru", gate_init="chrono", t_max=100).rnn
    z = (gru.bias_ih_l0[h:2 * h] + gru.bias_hh_l0[h:2 * h]).detach()  # the update gate's bias: keep the state
    assert float(z.min()) >= 0 and float(z.max()) <= math.log(99) + 1e-6
    lstm = RecurrentLM("lstm", gate_init="forget_bias_1").rnn
    assert torch.allclose(lstm.bias_ih_l0[h:2 * h] + lstm.bias_hh_l0[h:2 * h], torch.ones(h))
    default = RecurrentLM("gru").rnn
    assert float(default.bias_ih_l0.detach().abs().max()) <= h ** -0.5  # PyTorch's uniform(-1/sqrt(h), 1/sqrt(h))
    with pytest.raises(ValueError, match="for an LSTM"):
        RecurrentLM("gru", gate_init="forget_bias_1")
    with pytest.raises(ValueError, match="gate_init"):
        RecurrentLM("gru", gate_init="warm")


def test_a_recall_curve_stops_once_solved_and_steps_to_solve_reads_the_reference():
    from qalib.lab.reference import Reference, RungResult
    from qalib.topics.nb13_attention_vs_recurrence.experiment import (REFERENCE_DISTANCES, SOLVED, recall_curve,
                                                                      steps_to_solve)
    c = recall_curve("attention", 4, seed=0, steps=400)
    assert c["solved_step"] is not None and c["steps"][-1] == c["solved_step"] and c["accuracy"][-1] > SOLVED
    assert all(a <= SOLVED for a in c["accuracy"][:-1])
    never = recall_curve("gru", 16, seed=0, steps=25)
    assert never["solved_step"] is None and never["steps"] == [25]
    run = {"m": {str(d): (c if d == 4 else never) for d in REFERENCE_DISTANCES}}
    ref = Reference("13_attention_vs_recurrence", "recall", {}, {"r": RungResult("r", {"steps": 400}, [0, 1], [run, run])}, {})
    res = steps_to_solve(ref)
    assert res.solved_step["m"].shape == (len(REFERENCE_DISTANCES), 2) and np.isinf(res.solved_step["m"][1:]).all()
    assert res.solved_within("m", c["solved_step"]).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_counting_products_prints_no_profiler_lines(capfd):
    """The profiler's C++ side logs profiler_start / profiler_stop to file descriptor 2, which a notebook shows."""
    from qalib.topics.nb13_attention_vs_recurrence.compute import count_products

    assert count_products("gru", lengths=(8,))["products"][0] > 0
    out, err = capfd.readouterr()
    assert "profiler" not in out + err

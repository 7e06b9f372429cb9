import pytest
import torch

from qalib.lab.data import MLMTask, ProbeTask
from qalib.lab.presets import TINY, TINY_TRAIN, tiny_language
from qalib.lab.train import History, TrainConfig, evaluate, fit, lr_factor, train
from qalib.nn.model import MiniBert
from qalib.tools.bench_train import plain_training_loop


def test_same_seed_same_loss_curve():
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    curves = []
    for _ in range(2):
        torch.manual_seed(0)
        model = MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64))
        curves.append(train(model, task, TrainConfig(steps=12, batch_size=16, log_every=1, seed=4)).loss)
    assert curves[0] == curves[1]


@pytest.mark.slow
def test_tiny_preset_learns_the_synthetic_language():
    lang = tiny_language()
    task = MLMTask(lang, seq_len=24)
    torch.manual_seed(0)
    model = MiniBert(TINY)
    hist = train(model, task, TINY_TRAIN.replace(entropy_every=50))
    acc = evaluate(model, task)["accuracy"]
    chance = 1 / lang.n_content
    assert acc > 3 * chance, f"MLM accuracy {acc:.3f} is not clearly above chance {chance:.3f}"
    assert hist.loss[-1] < hist.loss[0] and set(hist.grad_norm) == {"embeddings", "layer0", "layer1"}
    assert len(hist.attn_entropy[0]) == 2 and all(0 < h < 3.5 for h in hist.attn_entropy[-1])


def test_train_config_validates():
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=5.0)


def test_train_computes_exactly_the_plain_loop():
    """The lean step (inputs checked on the host, the unchecked forward, losses read only at log steps) changes
    no number: the loss curve is bit for bit the plain loop's."""
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    cfg = TrainConfig(steps=15, batch_size=16, log_every=1, seed=3, warmup=5)
    torch.manual_seed(0)
    hist = train(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task, cfg)
    torch.manual_seed(0)
    reference = plain_training_loop(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task, cfg)
    assert hist.loss == [float(loss) for loss in reference]


def test_non_finite_loss_names_its_step_even_between_log_steps():
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    torch.manual_seed(0)
    model = MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64))
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        train(model, task, TrainConfig(steps=6, batch_size=4, log_every=4))


@pytest.mark.parametrize("field, value", [("kernel", "fast"), ("kernel", True), ("decay", "cosine"), ("eps", 0.0),
                                          ("eps", 2.0)])
def test_the_optimizer_settings_are_validated(field, value):
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("kernel", ["fused", "default"])
def test_every_adam_kernel_trains(kernel):
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    torch.manual_seed(0)
    hist = train(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task,
                 TrainConfig(steps=3, batch_size=8, log_every=1, kernel=kernel))
    assert len(hist.loss) == 3


# -- fit: any model, any loss ---------------------------------------------------------------------------------
def _regression(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3


def test_fit_trains_any_module_with_any_loss_and_records_every_step():
    x, y = _regression()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    mse = lambda m, rows: torch.nn.functional.mse_loss(m(x[rows]).squeeze(-1), y[rows])  # noqa: E731
    batches = (slice(16 * (i % 4), 16 * (i % 4) + 16) for i in range(200))
    hist = fit(model, mse, batches, TrainConfig(steps=200, lr=0.05, warmup=10, weight_decay=0.0, log_every=50))
    assert len(hist.step_loss) == 200 and hist.step == [0, 50, 100, 150, 199] and hist.accuracy == []
    assert hist.loss == [hist.step_loss[s] for s in hist.step]
    assert hist.final_loss() < 0.01 * hist.first_loss            # it learned: the learned-or-not record
    assert hist.final_loss(1.0) == pytest.approx(sum(hist.step_loss) / 200)
    assert not model.training                                     # back in eval mode


def test_fit_runs_on_step_after_each_update_and_reports_short_batches():
    x, y = _regression()
    model = torch.nn.Linear(3, 1)
    mse = lambda m, _: torch.nn.functional.mse_loss(m(x).squeeze(-1), y)  # noqa: E731
    seen = []
    fit(model, mse, iter(range(5)), TrainConfig(steps=5, lr=0.01), on_step=lambda h, s, m, b: seen.append((s, b, m.training)))
    assert seen == [(s, s, True) for s in range(5)]
    with pytest.raises(ValueError, match="batches ran out after 3 of TrainConfig.steps = 5"):
        fit(model, mse, iter(range(3)), TrainConfig(steps=5, lr=0.01))
    with pytest.raises(ValueError, match="share"):
        History(step_loss=[1.0]).final_loss(0.0)


def test_the_learning_rate_warms_up_then_holds_or_decays():
    constant = TrainConfig(steps=10, warmup=4)
    assert [lr_factor(s, constant) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    linear = TrainConfig(steps=10, warmup=2, decay="linear")
    assert [lr_factor(s, linear) for s in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    assert [lr_factor(s, TrainConfig(steps=4, warmup=0, decay="linear")) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]
    assert lr_factor(3, TrainConfig(steps=4, warmup=0)) == 1.0


def test_fit_gives_weight_decay_to_the_named_group_only():
    """With a zero loss only weight decay moves a parameter: by default the 2-d weight decays and the bias does not;
    decay_groups=([], [...]) decays nothing."""
    zero = lambda m, _: (m.weight * 0).sum() + (m.bias * 0).sum()  # noqa: E731
    cfg = TrainConfig(steps=3, lr=0.1, warmup=0, weight_decay=0.5, clip=0.0)
    for groups, weight_moves in ((None, True), (([], None), False)):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        w0, b0 = model.weight.detach().clone(), model.bias.detach().clone()
        if groups is not None:
            groups = ([], [model.weight, model.bias])
        fit(model, zero, iter(range(3)), cfg, decay_groups=groups)
        assert (not torch.equal(model.weight, w0)) == weight_moves and torch.equal(model.bias, b0)


def test_on_step_returning_true_stops_the_run_and_keeps_every_loss():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(64, 3), torch.randn(64, 1)
    loss_fn = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])  # noqa: E731
    cfg = TrainConfig(steps=50, lr=1e-2, warmup=0, log_every=10, device="cpu")
    hist = fit(model, loss_fn, ((x, y) for _ in range(50)), cfg, on_step=lambda h, step, m, b: step == 16)
    assert hist.stopped_early == 17 and len(hist.step_loss) == 17 and not model.training
    full = fit(torch.nn.Linear(3, 1), loss_fn, ((x, y) for _ in range(50)), cfg, on_step=lambda *a: None)
    assert full.stopped_early is None and len(full.step_loss) == 50

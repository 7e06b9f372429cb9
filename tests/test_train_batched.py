"""qalib.lab.train_batched: S members trained as one computation equal S solo runs of qalib.lab.train (fp32, CPU)."""

from dataclasses import dataclass

import pytest
import torch

from qalib.lab.data import IGNORE, Batch, MLMTask, PairTask, ProbeTask, SyntheticLanguage
from qalib.lab.device import get_device
from qalib.lab.train import TrainConfig, evaluate, loss_and_accuracy, train
from qalib.lab.train_batched import StackedMembers, train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert

CFG = MiniBertConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=32)
LANGUAGE = SyntheticLanguage(vocab_size=32, seed=0)
CPU = get_device("cpu")


@dataclass
class PaddedProbeTask:
    """ProbeTask "previous" with each sequence's tail padded ([PAD], attention_mask 0, no label), to a random length
    per row: the attention mask path under vmap."""

    seq_len: int = 12

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        b = ProbeTask("previous", vocab_size=32, seq_len=self.seq_len).batch(batch_size, generator)
        lengths = torch.randint(3, self.seq_len + 2, (batch_size,), generator=generator)  # (B,) real tokens
        real = torch.arange(self.seq_len + 1)[None, :] < lengths[:, None]  # (B, T)
        return Batch(b.input_ids.masked_fill(~real, 0), b.token_type_ids, real.long(),
                     b.labels.masked_fill(~real, IGNORE), "token")


TASKS = {"mlm": MLMTask(LANGUAGE, seq_len=14), "class": PairTask(LANGUAGE, half_len=6), "padded": PaddedProbeTask()}


def solo_model(seed: int, cfg: MiniBertConfig = CFG) -> MiniBert:
    torch.manual_seed(seed)
    return MiniBert(cfg)


@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_one_step_losses_and_gradients_equal_solo_models(task_name):
    """Every member's loss and gradient on its batch equals a solo model's, same init and batch, to 1e-5."""
    task, seeds = TASKS[task_name], [0, 1, 2, 3]
    members = [solo_model(s) for s in seeds]
    batches = [task.batch(16, torch.Generator().manual_seed(s)) for s in seeds]
    if task_name == "mlm":  # the case the masked per-member mean is for
        assert len({int((b.labels != IGNORE).sum()) for b in batches}) > 1, "members should differ in labelled counts"
    stacked = StackedMembers(members, CPU)
    losses, accuracies = stacked.losses(stacked.check_and_stack(batches, CPU))
    losses.sum().backward()
    worst_loss = worst_grad = 0.0
    for i, (seed, batch) in enumerate(zip(seeds, batches)):
        solo = solo_model(seed).train()
        loss, accuracy = loss_and_accuracy(solo, batch)
        loss.backward()
        worst_loss = max(worst_loss, abs(float(losses[i].detach()) - float(loss.detach())))
        assert float(accuracies[i]) == pytest.approx(float(accuracy), abs=1e-6)
        for name, p in solo.named_parameters():
            grad = stacked.params[name].grad
            if p.grad is None:  # a head this task does not use: no gradient in either
                assert grad is None, name
                continue
            worst_grad = max(worst_grad, float((grad[i] - p.grad).abs().max()))
    print(f"{task_name}: max |loss diff| {worst_loss:.1e}, max |grad diff| {worst_grad:.1e}")
    assert worst_loss < 1e-5 and worst_grad < 1e-5


@pytest.mark.parametrize("task_name", ["mlm", "class"])
def test_one_full_step_equals_solo_including_clipping_and_adamw(task_name):
    """One train step (clipping each member at its own norm, then AdamW with decay groups) moves every weight as
    the solo run's step does. A large lr and a small clip make both clipping and the optimizer matter."""
    task, seeds = TASKS[task_name], [0, 1, 2]
    cfg = TrainConfig(steps=1, batch_size=16, lr=0.05, clip=0.01, warmup=0, weight_decay=0.1)
    run = train_seeds(CFG, task, seeds, cfg)
    for seed, member, hist in zip(seeds, run.models, run.histories):
        solo = solo_model(seed)
        solo_hist = train(solo, task, cfg.replace(seed=seed))
        assert hist.step == solo_hist.step == [0]
        assert hist.loss[0] == pytest.approx(solo_hist.loss[0], abs=1e-5)
        assert set(hist.grad_norm) == set(solo_hist.grad_norm) == {"embeddings", "layer0", "layer1"}
        for k in hist.grad_norm:
            assert hist.grad_norm[k][0] == pytest.approx(solo_hist.grad_norm[k][0], rel=1e-5)
        worst = max(float((p - q).detach().abs().max()) for p, q in zip(member.parameters(), solo.parameters()))
        assert worst < 1e-5, f"seed {seed}: weights differ by {worst:.1e} after one step"


def test_eight_seeds_train_as_their_solo_runs():
    """Over a short run (30 steps) each of 8 members tracks its own solo run to float tolerance: the same
    curve, the same held-out loss. (Stronger than "the same distribution": the same runs, seed by seed.)"""
    task, seeds = TASKS["mlm"], list(range(8))
    cfg = TrainConfig(steps=30, batch_size=16, lr=5e-3, warmup=5, log_every=5)
    run = train_seeds(CFG, task, seeds, cfg)
    assert run.seeds == seeds and len(run.models) == len(run.histories) == 8
    worst_curve = worst_eval = 0.0
    for seed, member, hist in zip(seeds, run.models, run.histories):
        solo = solo_model(seed)
        solo_hist = train(solo, task, cfg.replace(seed=seed))
        assert hist.step == solo_hist.step
        worst_curve = max(worst_curve, max(abs(a - b) for a, b in zip(hist.loss, solo_hist.loss)))
        held_out = [evaluate(m, task, n_batches=1, batch_size=64)["loss"] for m in (member, solo)]
        worst_eval = max(worst_eval, abs(held_out[0] - held_out[1]))
    print(f"8 seeds x 30 steps: max |training loss diff| {worst_curve:.1e}, max |held-out loss diff| {worst_eval:.1e}")
    assert worst_curve < 1e-4 and worst_eval < 1e-4
    # and the members did train (and differently: their own inits and data)
    finals = [h.loss[-1] for h in run.histories]
    assert all(h.loss[-1] < h.loss[0] for h in run.histories) and len(set(finals)) == 8


def test_members_are_ordinary_independent_minibert_models():
    run = train_seeds(lambda: MiniBert(CFG.replace(n_layers=1)), TASKS["class"], [5, 6], TrainConfig(steps=3, batch_size=8))
    a, b = run.models
    assert type(a) is MiniBert and not a.training and a.cfg.n_layers == 1
    ids = TASKS["class"].batch(2, torch.Generator().manual_seed(0)).input_ids
    assert a(ids, return_internals=True).internals["layer0.probs"].shape == (2, 4, ids.shape[1], ids.shape[1])
    with torch.no_grad():
        a.classifier.weight.zero_()  # pruning one member leaves the other alone
    assert b.classifier.weight.abs().sum() > 0


def test_non_finite_loss_names_the_seed():
    def factory():  # the member built after torch.manual_seed(7) gets a NaN weight
        model = MiniBert(CFG)
        if torch.initial_seed() == 7:
            with torch.no_grad():
                model.embeddings.word_embeddings.weight[5:] = float("nan")
        return model

    with pytest.raises(FloatingPointError, match="at step 0 for seed 7"):
        train_seeds(factory, TASKS["mlm"], [3, 7], TrainConfig(steps=4, batch_size=8, log_every=2))


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="seeds"):
        train_seeds(CFG, TASKS["mlm"], [], TrainConfig(steps=1))
    with pytest.raises(ValueError, match="entropy_every"):
        train_seeds(CFG, TASKS["mlm"], [0], TrainConfig(steps=1, entropy_every=1))
    with pytest.raises(ValueError, match="norm='batch'"):
        train_seeds(CFG.replace(norm="batch"), TASKS["mlm"], [0], TrainConfig(steps=1))
    with pytest.raises(TypeError, match="MiniBert"):
        train_seeds(lambda: torch.nn.Linear(2, 2), TASKS["mlm"], [0], TrainConfig(steps=1))
    with pytest.raises(ValueError, match="vocab_size"):  # the task's ids do not fit the model: MiniBert's own check
        train_seeds(CFG.replace(vocab_size=10), TASKS["mlm"], [0, 1], TrainConfig(steps=1, batch_size=4))

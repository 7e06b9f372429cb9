import pytest
import torch
import torch.nn.functional as F

from qalib.data import IGNORE, MLMTask, ProbeTask
from qalib.device import one_thread
from qalib.model import MiniBert
from qalib.presets import TINY, TINY_TRAIN, tiny_language
from qalib.train import TrainConfig, evaluate, train


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


def _reference_losses(model, task, cfg):
    """train's arithmetic, written out plainly: the checked forward, the loss, AdamW foreach, clipping, warm-up."""
    model.train()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup))
    losses = []
    with one_thread():  # as train runs (TrainConfig.threads = 1): another thread count sums in another order
        for _ in range(cfg.steps):
            batch = task.batch(cfg.batch_size, gen)
            hidden = model(**batch.model_inputs()).last_hidden_state
            keep = batch.labels != IGNORE
            loss = F.cross_entropy(model.mlm_logits(hidden[keep]), batch.labels[keep])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
    return losses


def test_train_computes_exactly_the_plain_loop():
    """The lean step (inputs checked on the host, the unchecked forward, losses read only at log steps) changes
    no number: the loss curve is bit for bit the plain loop's."""
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    cfg = TrainConfig(steps=15, batch_size=16, log_every=1, seed=3, warmup=5)
    torch.manual_seed(0)
    hist = train(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task, cfg)
    torch.manual_seed(0)
    assert hist.loss == _reference_losses(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task, cfg)


def test_non_finite_loss_names_its_step_even_between_log_steps():
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    torch.manual_seed(0)
    model = MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64))
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        train(model, task, TrainConfig(steps=6, batch_size=4, log_every=4))


def test_fused_adamw_is_a_validated_option():
    with pytest.raises(ValueError, match="fused_adamw"):
        TrainConfig(fused_adamw=1)
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    torch.manual_seed(0)
    hist = train(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task,
                 TrainConfig(steps=3, batch_size=8, log_every=1, fused_adamw=True))
    assert len(hist.loss) == 3

import pytest
import torch

from qalib.lab.data import MLMTask, ProbeTask
from qalib.lab.presets import TINY, TINY_TRAIN, tiny_language
from qalib.lab.train import TrainConfig, evaluate, train
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


def test_fused_adamw_is_a_validated_option():
    with pytest.raises(ValueError, match="fused_adamw"):
        TrainConfig(fused_adamw=1)
    task = ProbeTask("previous", vocab_size=TINY.vocab_size, seq_len=8)
    torch.manual_seed(0)
    hist = train(MiniBert(TINY.replace(n_layers=1, d_model=32, d_ff=64)), task,
                 TrainConfig(steps=3, batch_size=8, log_every=1, fused_adamw=True))
    assert len(hist.loss) == 3

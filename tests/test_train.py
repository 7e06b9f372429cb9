import pytest
import torch

from qalib.data import MLMTask, ProbeTask
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

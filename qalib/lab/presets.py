"""Ready-made small settings that train in seconds on 2 CPU cores (numbers in tests/test_train.py)."""

from __future__ import annotations

from qalib.lab.data import SyntheticLanguage
from qalib.lab.train import TrainConfig
from qalib.nn.config import MiniBertConfig

# 2 layers, 4 heads, d=64: ~0.1M parameters; about 40 ms per training step of 64 x 26 tokens on 2 cores.
TINY = MiniBertConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, d_ff=256, max_len=64)
TINY_TRAIN = TrainConfig(steps=250, batch_size=64, lr=3e-3, warmup=25)


def tiny_language(seed: int = 0) -> SyntheticLanguage:
    """The synthetic language matching TINY's vocabulary (27 content tokens; chance accuracy 1/27)."""
    return SyntheticLanguage(vocab_size=TINY.vocab_size, branching=4, lag=4, p_lag=0.5, seed=seed)

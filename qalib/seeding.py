"""Reproducible randomness: the same seed gives the same numbers on CPU."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch.Generator seeded the same way.

    CPU runs are bit-for-bit reproducible with this (torch's CPU kernels are deterministic for a
    fixed thread count). On CUDA some kernels are not; notebooks compare over seeds, not bits.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= int(seed) < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)

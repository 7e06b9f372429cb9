"""Reproducible randomness: the same seed gives the same numbers on CPU; one source for every experiment's seeds.

    SEEDS = qalib.seeds(3)          # (0, 1, 2); with QALIB_SEED_OFFSET=100: (100, 101, 102)
    SCALE = qalib.scale(device)     # 1 on the CPU, 4 on a GPU; QALIB_SCALE=4 forces the GPU budget anywhere

Why an offset: a claim about Transformers must hold for any seeds, not only for the ones its threshold was tried
on. `python -m qalib.tools.robustness` re-runs every notebook under several offsets (and CPU kernels) to test that;
a reader can do the same with `QALIB_SEED_OFFSET=K make lab`. The default, offset 0, gives the seeds 0, 1, 2, ...
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from qalib.nn.validate import SEED_MAX  # one limit for every seed argument and seed_everything

SEED_OFFSET_ENV = "QALIB_SEED_OFFSET"
SCALE_ENV = "QALIB_SCALE"


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch.Generator seeded the same way.

    CPU runs are bit-for-bit reproducible with this (torch's CPU kernels are deterministic for a
    fixed thread count). On CUDA some kernels are not; notebooks compare over seeds, not bits.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= int(seed) <= SEED_MAX:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _env_int(name: str, low: int, high: int) -> int | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number in [{low}, {high}], got {value!r}") from None
    if not low <= n <= high:
        raise ValueError(f"{name} must be a whole number in [{low}, {high}], got {value!r}")
    return n


def seed_offset() -> int:
    """The shift QALIB_SEED_OFFSET applies to every seed set (0 when unset)."""
    return _env_int(SEED_OFFSET_ENV, 0, SEED_MAX // 2) or 0


def seeds(n: int) -> tuple[int, ...]:
    """The n seeds an experiment runs: (K, K + 1, ..., K + n - 1), with K = QALIB_SEED_OFFSET (default 0).

    Every experiment in the notebooks takes its seeds from here, so one variable moves all of them at once."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"seeds(n) needs a whole number n >= 1 of seeds, got {n!r}")
    k = seed_offset()
    return tuple(range(k, k + int(n)))


def seed(i: int = 0) -> int:
    """One seed, shifted like seeds(): the i-th of the current seed set (for a single randomised measurement)."""
    if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or i < 0:
        raise ValueError(f"seed(i) needs a whole number i >= 0, got {i!r}")
    return seed_offset() + int(i)


def scale(device: torch.device | str | None = None, gpu: int = 4) -> int:
    """The experiments' budget factor: QALIB_SCALE if set, else `gpu` on CUDA and 1 elsewhere.

    SCALE multiplies steps and seed counts where a GPU affords them; forcing QALIB_SCALE=4 on the CPU runs the GPU's
    settings there (slowly), so that the GPU run is not the first time its thresholds are tried."""
    forced = _env_int(SCALE_ENV, 1, 64)
    if forced is not None:
        return forced
    kind = torch.device(device).type if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    return gpu if kind == "cuda" else 1

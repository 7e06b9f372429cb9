"""Which device the notebooks run on: CUDA, then Apple MPS, then CPU; QALIB_DEVICE overrides. Also best_ms, the
best-of-n wall-clock timer the notebooks print their timings with."""

from __future__ import annotations

import contextlib
import math
import os
import time

import torch

_ALLOWED = ("cpu", "cuda", "mps")


def get_device(preferred: str | torch.device | None = None) -> torch.device:
    """Return the device to use.

    Order: the `preferred` argument, then the environment variable QALIB_DEVICE, then CUDA, MPS, CPU.
    A requested device that is not available raises ValueError instead of silently falling back,
    so a teacher who asked for the GPU knows they did not get it.
    """
    if isinstance(preferred, torch.device):
        preferred = str(preferred)
    choice = preferred if preferred is not None else os.environ.get("QALIB_DEVICE")
    if choice:
        kind = choice.split(":")[0].strip().lower()
        if kind not in _ALLOWED:
            raise ValueError(f"QALIB_DEVICE / preferred device {choice!r} is not one of {_ALLOWED} (optionally 'cuda:N')")
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {choice!r} was requested but torch.cuda.is_available() is False")
        if kind == "mps" and not _mps_available():
            raise ValueError(f"device {choice!r} was requested but Apple MPS is not available")
        return torch.device(choice.strip().lower())
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def describe(device: torch.device | None = None) -> str:
    """One line for a notebook's set-up cell: the device and, on CUDA, its name."""
    device = device or get_device()
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return device.type


class one_thread(contextlib.ContextDecorator):  # noqa: N801  (used like a function: `with one_thread():`, `@one_thread()`)
    """Torch on one CPU thread inside the block or decorated function. The notebooks' models and matrices are
    tiny, and on a busy 2-core machine a second thread spin-waiting costs more than it saves (why qalib.lab.train
    defaults to threads=1)."""

    def _recreate_cm(self) -> "one_thread":
        return one_thread()  # a fresh instance per decorated call: nested and recursive calls restore correctly

    def __enter__(self) -> "one_thread":
        self.previous = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc) -> None:
        torch.set_num_threads(self.previous)


def best_ms(fn, repeats: int = 3) -> float:
    """Best-of-`repeats` wall time of fn() in ms, after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1000 * best

"""Run independent training runs (seeds, variants) on every CPU core at once.

The experiments train many tiny models (d = 32-64, batches of 32). Such a model cannot keep two cores busy:
one run takes as long on one thread as on two (measured here), so running two runs side by side, one
thread each, finishes a seed sweep in about half the time. The runs are independent processes forked
from the notebook's kernel, so each one sees the same seeds and data as it would sequentially and
returns the same numbers.

    accs = map_runs(partial(train_one, steps=100), [(v, s) for v in VARIANTS for s in SEEDS], device=device)

On a GPU (or MPS), where CUDA state cannot be forked, or where fork is not the safe default (macOS,
Windows), the runs go one after another in this process. QALIB_WORKERS=1 forces that anywhere.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar

import torch

from qalib.lab.device import get_device, one_thread

T = TypeVar("T")


def workers_available() -> int:
    """Processes to run side by side: QALIB_WORKERS if set, else the CPU cores this process may use."""
    value = os.environ.get("QALIB_WORKERS")
    if value is not None:
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"QALIB_WORKERS must be a whole number >= 1, got {value!r}") from None
        if n < 1:
            raise ValueError(f"QALIB_WORKERS must be a whole number >= 1, got {value!r}")
        return n
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _one_thread_worker() -> None:
    torch.set_num_threads(1)  # one core per run; also keeps the forked child out of the parent's thread pool


def map_runs(fn: Callable[[Any], T], items: Iterable[Any], device: torch.device | str | None = None) -> list[T]:
    """[fn(item) for item in items], in order, in parallel processes where that is safe (see the module doc).

    fn must be a function defined at module level (or a functools.partial of one): it is sent to the worker
    processes by name. An error inside a run is raised here, as it would be sequentially.
    """
    items = list(items)
    try:  # checked everywhere (with the pool's own pickler), so code that runs here runs on more cores too
        ForkingPickler.dumps(fn)
    except Exception as err:  # PicklingError, AttributeError or TypeError, depending on what cannot be sent
        raise TypeError(f"map_runs sends fn to its worker processes by name, so it must be a module-level function "
                        f"or a functools.partial of one (not a lambda or a nested function): {err}") from None
    device_type = get_device(device).type  # None means the device the runs will pick: CUDA if there is one
    workers = min(workers_available(), len(items))
    if device_type != "cpu":
        return [fn(item) for item in items]
    if workers <= 1 or not sys.platform.startswith("linux"):
        with one_thread():  # as in a worker: runs this small are no faster on more threads, and results match
            return [fn(item) for item in items]
    # torch.optim imports torch._dynamo the first time an optimizer is built (~2 s here). Imported once in this
    # process, before forking, every worker inherits it instead of paying for it at every call.
    import torch._dynamo  # noqa: F401

    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread_worker) as pool:
        return list(pool.map(fn, items))


def map_grid(fn: Callable[[tuple[Any, Any]], T], variants: Iterable[Any], seeds: Iterable[Any],
             device: torch.device | str | None = None) -> dict[Any, list[T]]:
    """fn((variant, seed)) for every variant and every seed, all runs side by side (map_runs).
    -> {variant: [outcome for each seed, in seed order]}, variants in the order given."""
    variants, seeds = list(variants), list(seeds)
    outcomes = map_runs(fn, [(variant, seed) for variant in variants for seed in seeds], device)
    return {variant: outcomes[i * len(seeds):(i + 1) * len(seeds)] for i, variant in enumerate(variants)}

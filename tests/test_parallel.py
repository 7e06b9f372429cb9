"""qalib.lab.parallel: runs side by side give exactly the sequential results, in order, and errors surface."""

import functools

import numpy as np
import pytest
import torch

from qalib.lab.data import ProbeTask
from qalib.lab.parallel import map_grid, map_runs, workers_available
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert


def _tiny_run(seed: int, steps: int) -> dict:
    task = ProbeTask("previous", vocab_size=12, seq_len=8)
    torch.manual_seed(seed)
    model = MiniBert(MiniBertConfig(vocab_size=12, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=16))
    hist = train(model, task, TrainConfig(steps=steps, batch_size=16, lr=1e-2, warmup=2, seed=seed, log_every=1,
                                          device="cpu"))
    return {"loss": hist.loss, "accuracy": evaluate(model, task, n_batches=1, batch_size=32)["accuracy"],
            "weight": model.layers[0].attention.qkv.weight.detach().clone()}


def _fails_on_two(x: int) -> int:
    if x == 2:
        raise ValueError("run 2 went wrong")
    return x * 10


def _thread_count(_item) -> int:
    return torch.get_num_threads()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_every_cpu_run_gets_one_thread_and_the_caller_keeps_its_own(monkeypatch, workers):
    monkeypatch.setenv("QALIB_WORKERS", workers)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert map_runs(_thread_count, [0, 1], device="cpu") == [1, 1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_parallel_runs_equal_sequential_runs_in_order(monkeypatch):
    run = functools.partial(_tiny_run, steps=8)
    parallel = map_runs(run, [3, 1, 2], device="cpu")
    monkeypatch.setenv("QALIB_WORKERS", "1")
    sequential = map_runs(run, [3, 1, 2], device="cpu")
    for p, s in zip(parallel, sequential):
        assert p["loss"] == s["loss"] and p["accuracy"] == s["accuracy"]
        assert torch.equal(p["weight"], s["weight"])
    assert parallel[0]["loss"] != parallel[1]["loss"]  # different seeds really differ: the check above can fail


def test_an_error_inside_a_run_is_raised_here():
    with pytest.raises(ValueError, match="run 2 went wrong"):
        map_runs(_fails_on_two, [1, 2, 3], device="cpu")
    assert map_runs(_fails_on_two, [1, 3], device="cpu") == [10, 30]
    assert map_runs(_fails_on_two, [], device="cpu") == []


def test_a_lambda_gets_a_clear_message():
    with pytest.raises(TypeError, match="module-level function"):
        map_runs(lambda x: x, [1, 2], device="cpu")


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_bad_worker_count_is_named(monkeypatch, value):
    monkeypatch.setenv("QALIB_WORKERS", value)
    with pytest.raises(ValueError, match="QALIB_WORKERS"):
        workers_available()


def test_worker_count_defaults_to_the_usable_cores(monkeypatch):
    monkeypatch.delenv("QALIB_WORKERS", raising=False)
    assert workers_available() >= 1
    monkeypatch.setenv("QALIB_WORKERS", "3")
    assert workers_available() == 3
    assert np.isfinite(map_runs(functools.partial(_tiny_run, steps=2), [0], device="cpu")[0]["accuracy"])


def _describe(run: tuple) -> str:
    variant, seed = run
    return f"{variant}-{seed}"


def test_map_grid_groups_outcomes_by_variant_in_seed_order():
    grid = map_grid(_describe, ["b", "a"], [2, 0, 1], device="cpu")
    assert list(grid) == ["b", "a"]
    assert grid == {"b": ["b-2", "b-0", "b-1"], "a": ["a-2", "a-0", "a-1"]}

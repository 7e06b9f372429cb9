"""Notebook 13, the experiment: a GRU and a one-layer attention model trained on MarkedRecall at each distance.

    res = run_recall_experiment(distances=(4, 16, 64), seeds=(0, 1, 2), steps=100)
    res.accuracy        # (K, D, S) held-out accuracy, K = models ("gru", "attention"), D = distances, S = seeds
    res.answer_weight   # (D, S) the trained attention layer's weight on the answer, from the last position
    res.ms_per_step     # (K, D, S) wall time of one training step (printed, never checked: it moves with load)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from qalib.lab.parallel import map_runs
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.nn.validate import choices, int_in, seed_list
from qalib.topics.nb13_attention_vs_recurrence.compute import N_MARKED, MarkedRecall, make_model

MODELS = ("gru", "attention")


@dataclass
class RecallResult:
    models: list[str]
    distances: list[int]
    seeds: list[int]
    accuracy: np.ndarray       # (K, D, S) held-out accuracy (chance 1 / N_MARKED)
    answer_weight: np.ndarray  # (D, S) attention weight of the last position on the answer (position 0)
    ms_per_step: np.ndarray    # (K, D, S) wall time per training step, ms
    steps: int
    chance: float = 1 / N_MARKED


def run_recall_experiment(distances=(4, 16, 64), seeds=(0, 1, 2), steps: int = 100, batch_size: int = 16,
                          lr: float = 3e-3, models=MODELS, device: str | None = None) -> RecallResult:
    """Every (model, distance, seed) trained from scratch with the same TrainConfig and the same data stream."""
    distances = [int_in("distance", d, 1, 8192) for d in distances]
    seeds = seed_list("seeds", seeds)
    models = choices("models", list(models), MODELS)
    cfg = TrainConfig(steps=int_in("steps", steps, 1, 100_000), batch_size=batch_size, lr=lr, warmup=10,
                      log_every=steps, device=device)
    runs = [(m, d, s) for m in models for d in distances for s in seeds]  # independent: side by side on the cores
    out = map_runs(partial(_train_one, cfg=cfg), runs, device)
    shape = (len(models), len(distances), len(seeds))
    acc = np.array([o["accuracy"] for o in out]).reshape(shape)
    ms = np.array([o["ms_per_step"] for o in out]).reshape(shape)
    weight = np.array([o["answer_weight"] for o in out]).reshape(shape)
    k_att = models.index("attention") if "attention" in models else None
    return RecallResult(models, distances, seeds, acc,
                        weight[k_att] if k_att is not None else np.full(shape[1:], np.nan), ms, steps)


def _train_one(run: tuple[str, int, int], cfg: TrainConfig) -> dict:
    kind, distance, seed = run
    model = make_model(kind, max_len=distance + 1, seed=seed)
    task = MarkedRecall(distance)
    start = time.perf_counter()
    train(model, task, cfg.replace(seed=seed))
    ms = (time.perf_counter() - start) / cfg.steps * 1e3
    ev = evaluate(model, task, n_batches=2, batch_size=256)
    return {"accuracy": ev["accuracy"], "ms_per_step": ms,
            "answer_weight": answer_weight(model, task) if kind == "attention" else float("nan")}


@torch.no_grad()
def answer_weight(model, task: MarkedRecall, batch_size: int = 256) -> float:
    """Mean attention probability from the last position to position 0 (the answer), on held-out batches."""
    device = next(model.parameters()).device
    batch = task.batch(batch_size, torch.Generator().manual_seed(4321)).to(device)
    probs = model(**batch.model_inputs(), return_internals=True).internals["layer0.probs"]  # (B, H, T, T)
    return float(probs[:, :, -1, 0].mean())


def plot_recall_experiment(fig, res: RecallResult) -> None:
    """Accuracy against distance (log x) for each model, every seed as a dot and the mean as a line."""
    ax = fig.subplots()
    x = np.log2(res.distances)
    for k, name in enumerate(res.models):
        line, = ax.plot(x, res.accuracy[k].mean(1), marker="o", label=name)
        for j in range(len(res.seeds)):
            ax.plot(x, res.accuracy[k, :, j], ".", color=line.get_color(), alpha=0.5)
    ax.axhline(res.chance, color="grey", ls=":", lw=1, label=f"chance (1/{round(1 / res.chance)})")
    ax.set_xticks(x, [str(d) for d in res.distances])
    ax.set(title=f"recall the marked token d steps back: {len(res.seeds)} seeds (dots), {res.steps} steps each",
           xlabel="distance d (log scale)", ylabel="held-out accuracy", ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)

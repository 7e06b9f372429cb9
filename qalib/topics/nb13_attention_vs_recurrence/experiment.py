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

from qalib.lab.gate import Gate, learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.seeding import seed_offset
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.claims import above, at_least, at_most, below, check
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


HELD_OUT = 10_000  # seed k's held-out batches come from generator seed HELD_OUT + k: they move with the seeds


def _train_one(run: tuple[str, int, int], cfg: TrainConfig) -> dict:
    kind, distance, seed = run
    model = make_model(kind, max_len=distance + 1, seed=seed)
    task = MarkedRecall(distance)
    start = time.perf_counter()
    train(model, task, cfg.replace(seed=seed))
    ms = (time.perf_counter() - start) / cfg.steps * 1e3
    ev = evaluate(model, task, n_batches=2, batch_size=256, seed=HELD_OUT + seed)
    return {"accuracy": ev["accuracy"], "ms_per_step": ms,
            "answer_weight": answer_weight(model, task) if kind == "attention" else float("nan")}


@torch.no_grad()
def answer_weight(model, task: MarkedRecall, batch_size: int = 256) -> float:
    """Mean attention probability from the last position to position 0 (the answer), on held-out batches."""
    device = next(model.parameters()).device
    batch = task.batch(batch_size, torch.Generator().manual_seed(HELD_OUT + 4321 + seed_offset())).to(device)
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


# -- the reference: steps to solve against distance, 12 seeds, two initialisations of each model ----------------
SOLVED = 0.95       # held-out accuracy at which a run counts as having solved the task
CHECK_EVERY = 25    # steps between held-out evaluations
REFERENCE_DISTANCES = (4, 16, 64, 128)
REFERENCE_STEPS = 1600  # 16x the live budget; a run stops once solved


def solved_gate(accuracy: float) -> Gate:
    """The learned-or-not gate of this task: held-out accuracy above chance (1/8) by enough to be SOLVED (> 0.95)."""
    return learned("held-out accuracy", accuracy, baseline=1 / N_MARKED, baseline_name="chance",
                   margin=SOLVED - 1 / N_MARKED)


def recall_curve(kind: str, distance: int, seed: int, steps: int, gate_init: str = "default",
                 init_std: float = 0.1) -> dict:
    """One model trained as in the live run (same TrainConfig, same data stream for the seed), its held-out accuracy
    every CHECK_EVERY steps, stopped at the first check above SOLVED. -> {"steps": checked steps, "accuracy": held-out
    accuracy there, "solved_step": the first step above SOLVED (None: not within `steps`)}"""
    model = make_model(kind, max_len=distance + 1, seed=seed, gate_init=gate_init, init_std=init_std)
    task = MarkedRecall(distance)
    curve = {"steps": [], "accuracy": [], "solved_step": None}

    def check(history, step, model, batch) -> bool:
        if (step + 1) % CHECK_EVERY:
            return False
        acc = evaluate(model, task, n_batches=1, batch_size=256, seed=HELD_OUT + seed)["accuracy"]
        model.train()
        curve["steps"].append(step + 1)
        curve["accuracy"].append(acc)
        if acc > SOLVED:
            curve["solved_step"] = step + 1
        return acc > SOLVED  # stop: the step at which it solved the task is what the reference keeps

    cfg = TrainConfig(steps=steps, batch_size=16, lr=3e-3, warmup=10, log_every=steps, device="cpu", seed=seed)
    train(model, task, cfg, on_step=check)
    return curve


# (label, kind, gate_init, init_std): the live run's models, then the other initialisation of each
REFERENCE_MODELS = {"live": (("GRU", "gru", "default", 0.1), ("attention", "attention", "default", 0.1)),
                    "other init": (("GRU, chrono gates", "gru", "chrono", 0.1),
                                   ("attention, std 0.02", "attention", "default", 0.02))}


def reference_seed(seed: int, steps: int, models: str) -> dict:
    """One seed of the reference: each model of REFERENCE_MODELS[models] at every distance, recall_curve.
    -> {label: {str(distance): recall_curve(...)}}"""
    return {label: {str(d): recall_curve(kind, d, seed, steps, gate_init, std) for d in REFERENCE_DISTANCES}
            for label, kind, gate_init, std in REFERENCE_MODELS[models]}


@dataclass(frozen=True)
class StepsToSolve:
    """The reference, per model label: the step at which each (distance, seed) first passed SOLVED (inf: never)."""

    labels: list[str]
    distances: list[int]
    seeds: list[int]
    budget: int
    solved_step: dict[str, np.ndarray]  # label -> (distances, seeds)

    def solved_within(self, label: str, steps: int) -> np.ndarray:
        """(distances,) share of seeds that solved the task within `steps` training steps."""
        return (self.solved_step[label] <= steps).mean(1)

    def median_steps(self, label: str) -> np.ndarray:
        """(distances,) the median seed's steps to solve (inf where half the seeds or more never did)."""
        return np.median(self.solved_step[label], axis=1)


def steps_to_solve(ref) -> StepsToSolve:
    """The stored reference (qalib.lab.reference.Reference) as one StepsToSolve over every rung's models."""
    labels, solved, budget = [], {}, 0
    for rung in ref.rungs.values():
        budget = int(rung.kwargs["steps"])
        for label in rung.runs[0]:
            labels.append(label)
            solved[label] = np.array([[np.inf if run[label][str(d)]["solved_step"] is None
                                       else run[label][str(d)]["solved_step"] for run in rung.runs]
                                      for d in REFERENCE_DISTANCES], dtype=float)
    return StepsToSolve(labels, list(REFERENCE_DISTANCES), list(next(iter(ref.rungs.values())).seeds), budget, solved)


def reference_claims(ref) -> None:
    """The checks notebook 13 makes on its reference run (the runner makes them on every regeneration too)."""
    res = steps_to_solve(ref)
    live_models = ("GRU", "attention", "GRU, chrono gates")
    shares = {m: float(res.solved_within(m, res.budget).min()) for m in live_models}
    check(f"the gate: the GRU at either initialisation and the attention model at std 0.1 solved the task (held-out "
          f"accuracy > {SOLVED}, chance 1/8) within {res.budget} steps at every distance, in at least 90% of the seeds",
          at_least(min(shares.values()), 0.9), shares)
    gru, att, chrono = (res.median_steps(m) for m in live_models)
    check("the GRU at PyTorch's default gates needs more steps the further back the answer: its median steps to solve "
          "rise at every distance, and more than 4x from d = 4 to d = 128",
          above(float(np.diff(gru).min()), 0) & above(float(gru[-1] / gru[0]), 4), dict(zip(res.distances, gru)))
    d_gru = [paired_difference(res.solved_step["GRU"][i], res.solved_step["attention"][i], "GRU", "attention")
             for i in range(1, len(res.distances))]
    check("the attention model solves it sooner than that GRU at every distance from 16 on (paired by seed, every "
          "interval of the steps' difference above 0)", above(min(d.low for d in d_gru), 0), [str(d) for d in d_gru])
    d_chrono = [paired_difference(res.solved_step["GRU, chrono gates"][i], res.solved_step["GRU"][i], "chrono", "default")
                for i in range(1, len(res.distances))]
    check("chrono gates, which start the GRU holding its state, solve it sooner than PyTorch's default gates at every "
          "distance from 16 on (every interval below 0), and their median steps grow less from d = 4 to 128",
          below(max(d.high for d in d_chrono), 0) & below(float(chrono[-1] / chrono[0]), float(gru[-1] / gru[0])),
          {"differences": [str(d) for d in d_chrono], "growth, chrono": float(chrono[-1] / chrono[0]),
           "growth, default": float(gru[-1] / gru[0])})
    bert = res.solved_within("attention, std 0.02", res.budget)
    check(f"at BERT's std 0.02 the attention model solves d = 4 in every seed but d = {res.distances[-1]} in none "
          f"within {res.budget} steps, where the default GRU solved it in every seed", at_least(bert[0], 1.0)
          & at_most(bert[-1], 0.0),
          dict(zip(res.distances, bert)))


def plot_steps_to_solve(fig, res: StepsToSolve, live_steps: int = 100) -> None:
    """Steps to solve against distance (log-log), per model: the median seed as a line, the middle half as a band;
    a run that never solved sits above the budget line. Right: the share of seeds solved within the live budget."""
    ax, ax_share = fig.subplots(1, 2, width_ratios=[1.6, 1])
    x = np.array(res.distances)
    styles = {"GRU": ("C0", "-"), "GRU, chrono gates": ("C0", "--"), "attention": ("C1", "-"),
              "attention, std 0.02": ("C1", "--")}
    ceiling = res.budget * 1.6  # where "never solved" is drawn
    for label in res.labels:
        colour, ls = styles.get(label, ("k", ":"))
        s = np.minimum(res.solved_step[label], ceiling)
        ax.plot(x, np.median(s, axis=1), "o" + ls, color=colour, label=label)
        ax.fill_between(x, np.percentile(s, 25, axis=1), np.percentile(s, 75, axis=1), color=colour, alpha=0.12, lw=0)
        ax_share.plot(x, res.solved_within(label, live_steps), "o" + ls, color=colour, label=label)
    ax.axhline(res.budget, color="grey", ls=":", lw=1, label=f"budget ({res.budget} steps; above: never solved)")
    for a in (ax, ax_share):
        a.set_xscale("log")
        a.set_xticks(x, [str(d) for d in x])
        a.minorticks_off()
        a.set_xlabel("distance d (log scale)")
    ax.set_yscale("log")
    ax.set(ylabel=f"training steps to held-out accuracy > {SOLVED}",
           title=f"steps to solve: median of {len(res.seeds)} seeds, middle half shaded")
    ax_share.set(ylabel="share of seeds", ylim=(-0.03, 1.03), title=f"solved within {live_steps} steps (the live run)")
    ax.legend(fontsize=7)


REFERENCES = [
    ReferenceSpec(
        "13_attention_vs_recurrence", "recall", reference_seed, seeds=12,
        rungs=(Rung("live models", steps=REFERENCE_STEPS, models="live"),
               Rung("other initialisations", steps=REFERENCE_STEPS, models="other init")),
        lesson="the steps a GRU and an attention layer need to solve recall at distance 4-128, at two "
               "initialisations of each, over 12 seeds", claims=reference_claims),
]

"""Notebook 05, section 5: train the mini-BERT on directed probe tasks with separate, shared and
shared + self-masked (Reformer) query/key projections, over several seeds.

    res = run_probe_experiment(ProbeTask("previous", vocab_size=16, seq_len=8), seeds=range(3), steps=150)
    res["curves"]["shared"]        # (n_seeds, n_logged) training accuracy
    res["final"]["separate"]       # (n_seeds,) accuracy on fresh evaluation batches
    res["attention"]["shared"]     # mean layer-0 attention mass on the target, on self, on the mirror token
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from qalib.lab.data import ProbeTask
from qalib.lab.parallel import map_grid
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.drawing import seed_band

VARIANTS = {
    "separate": {},
    "shared": {"qk": "shared"},
    "shared + mask self": {"qk": "shared", "mask_self": True},  # Reformer sec. 3: a token may not attend to itself
}


def probe_config(task: ProbeTask, d_model: int = 32, n_heads: int = 1, n_layers: int = 1, **changes) -> MiniBertConfig:
    """A one-layer mini-BERT sized for a probe task (learned positions, one slot for [CLS])."""
    if not isinstance(task, ProbeTask):
        raise TypeError(f"task must be a qalib.lab.data.ProbeTask, got {type(task).__name__}")
    return MiniBertConfig(vocab_size=task.vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                          d_ff=2 * d_model, max_len=task.seq_len + 1, **changes)


@torch.no_grad()
def attention_masses(model: MiniBert, task: ProbeTask, batch_size: int = 64, seed: int = 999) -> dict[str, float]:
    """Layer 0 (mean over heads) at labelled positions i: attention on the target i - k, on i itself and on the
    mirror position i + k; and the logit margin S[i, i-k] - S[i, i+k] (mean, std, fraction of rows > 0).
    For a symmetric S the margins telescope along the sequence, so their mean is pinned near 0."""
    k = 1 if task.kind == "previous" else task.k
    batch = task.batch(batch_size, torch.Generator().manual_seed(seed))
    device = next(model.parameters()).device
    internals = model(**batch.to(device).model_inputs(), return_internals=True).internals
    p = internals["layer0.probs"].float().cpu().mean(1)    # (B, T, T); [CLS] at 0: task token t sits at t + 1
    s = internals["layer0.scores"].float().cpu().mean(1)   # (B, T, T) logits (the diagonal is -inf if masked)
    t = p.shape[-1]
    rows = torch.arange(1 + k, t - k)  # positions with a target and a mirror inside the sequence
    margin = s[:, rows, rows - k] - s[:, rows, rows + k]
    return {"target": float(p[:, rows, rows - k].mean()), "self": float(p[:, rows, rows].mean()),
            "mirror": float(p[:, rows, rows + k].mean()), "margin_mean": float(margin.mean()),
            "margin_std": float(margin.std()), "margin_positive": float((margin > 0).float().mean())}


def run_probe_experiment(task: ProbeTask, variants=tuple(VARIANTS), seeds=range(3), steps: int = 150,
                         d_model: int = 32, n_heads: int = 1, batch_size: int = 32, lr: float = 3e-3,
                         log_every: int = 10, device: str | None = "cpu", **config_changes) -> dict:
    """Train every variant with every seed; return training-accuracy curves, final evaluation accuracy and
    the layer-0 attention masses of each trained model (arrays over seeds). `config_changes` go to every
    variant's MiniBertConfig (e.g. pos="rotary")."""
    seeds = seed_list("seeds", seeds)
    variants = choices("variants", variants, VARIANTS)
    int_in("steps", steps, 1)
    out = {"task": f"{task.kind}" + (f" (k={task.k})" if task.kind == "k_back" else ""), "seeds": seeds,
           "chance": 1.0 / (task.vocab_size - 5), "curves": {}, "final": {}, "attention": {}, "step": None}
    train_one = partial(_train_one, task=task, d_model=d_model, n_heads=n_heads, config_changes=config_changes,
                        train_cfg=TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=10,
                                              log_every=log_every, device=device))
    for name, mine in map_grid(train_one, variants, seeds, device).items():  # runs side by side on the CPU cores
        out["step"] = mine[-1]["step"]
        out["curves"][name] = np.array([o["curve"] for o in mine])
        out["final"][name] = np.array([o["final"] for o in mine])
        out["attention"][name] = {key: np.array([o["masses"][key] for o in mine]) for key in mine[0]["masses"]}
    return out


def _train_one(run: tuple[str, int], task: ProbeTask, d_model: int, n_heads: int, config_changes: dict,
               train_cfg: TrainConfig) -> dict:
    name, seed = run
    torch.manual_seed(seed)
    model = MiniBert(probe_config(task, d_model, n_heads, **config_changes, **VARIANTS[name]))
    hist = train(model, task, train_cfg.replace(seed=seed))
    final = evaluate(model, task, n_batches=2, batch_size=128)["accuracy"]
    return {"step": np.array(hist.step), "curve": hist.accuracy, "final": final, "masses": attention_masses(model, task)}


def plot_curves(fig, results) -> None:
    """One panel per task: mean training accuracy per variant, band = min..max over seeds."""
    axes = fig.subplots(1, len(results), sharey=True, squeeze=False)[0]
    for ax, res in zip(axes, results):
        for i, (name, c) in enumerate(res["curves"].items()):
            seed_band(ax, res["step"], c, alpha=0.2, color=f"C{i}", label=name)
        ax.axhline(res["chance"], color="0.5", ls=":", label="chance")
        ax.set(title=f"{res['task']}: {len(res['seeds'])} seeds (band = min..max)", xlabel="training step",
               ylabel="training accuracy", ylim=(0, 1.02))
    axes[0].legend(fontsize=8, loc="upper left")


def plot_attention_masses(fig, results) -> None:
    """Grouped bars: layer-0 attention on target / self / mirror per variant, mean and min..max over seeds."""
    axes = fig.subplots(1, len(results), sharey=True, squeeze=False)[0]
    for ax, res in zip(axes, results):
        names = list(res["attention"])
        for j, key in enumerate(("target", "self", "mirror")):  # the margin_* entries are not drawn
            vals = np.array([res["attention"][n][key] for n in names])  # (variants, seeds)
            x = np.arange(len(names)) + (j - 1) * 0.27
            m = vals.mean(1)
            ax.bar(x, m, width=0.27, color=f"C{j + 3}", label=f"on {key}",
                   yerr=[m - vals.min(1), vals.max(1) - m], capsize=3)
        ax.set_xticks(np.arange(len(names)), names, fontsize=8)
        ax.set(title=f"{res['task']}: where layer 0 looks", ylabel="attention probability", ylim=(0, 1.05))
    axes[0].legend(fontsize=8)

"""Notebook 07, section 5: a token task that needs two relations at once, trained with 1, 2, 4, 8 heads.

    task = NeighbourPairTask(m=5, seq_len=12)          # label_t = the ordered pair (x_{t-1}, x_{t+1})
    res = run_heads_experiment((1, 2, 4, 8), seeds=(0, 1, 2), steps=125)
    res.accuracy                                       # (n_variants, n_seeds) held-out accuracy
    pruning_effect(res.models[(8, 0)], task)           # accuracy with each head zeroed, or each head alone
    heads_view(res, n_heads=8, seed=0, remove=3)       # one trained model, one head removed (the demo's view)

The models have one layer and Shaw relative positions (no absolute positions in the residual stream):
then one head returns one weighted average of the value vectors, p v(x_{t-1}) + (1 - p) v(x_{t+1}),
and the order of the two tokens survives only if p is far from 1/2. Two heads can each read one side.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from functools import lru_cache, partial

import numpy as np
import torch

from qalib.lab.data import CLS, IGNORE, N_SPECIAL, SEP, Batch
from qalib.lab.gate import Gate, learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, evaluate
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.drawing import budget_axis, seeds_and_median
from qalib.notebook.claims import above, at_least, check
from qalib.topics.nb07_multi_head.compute import VASWANI_TABLE3_A


@dataclass
class NeighbourPairTask:
    """Uniform random tokens from m symbols; at every inner position the label is the ordered pair
    (x_{t-1}, x_{t+1}) coded as one class a*m + b (m^2 classes; chance 1/m^2). [CLS] x [SEP]."""

    m: int = 5
    seq_len: int = 12

    def __post_init__(self):
        int_in("m", self.m, 2)
        int_in("seq_len", self.seq_len, 3)

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + self.m * self.m  # the m input symbols are the first m content ids

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        int_in("batch_size", batch_size, 1)
        x = torch.randint(self.m, (batch_size, self.seq_len), generator=generator)  # (B, T) symbols 0..m-1
        labels = torch.full((batch_size, self.seq_len + 2), IGNORE)
        labels[:, 2:-2] = N_SPECIAL + x[:, :-2] * self.m + x[:, 2:]  # inner position t: (x_{t-1}, x_{t+1})
        cls, sep = torch.full((batch_size, 1), CLS), torch.full((batch_size, 1), SEP)
        ids = torch.cat([cls, x + N_SPECIAL, sep], dim=1)  # (B, T + 2)
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


def heads_config(n_heads: int, d_model: int = 32, task: NeighbourPairTask | None = None) -> MiniBertConfig:
    """One layer, Shaw relative positions clipped at 2: the variants differ only in n_heads."""
    task = task or NeighbourPairTask()
    int_in("n_heads", n_heads, 1)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
    return MiniBertConfig(vocab_size=task.vocab_size, d_model=d_model, n_layers=1, n_heads=n_heads,
                          d_ff=2 * d_model, max_len=task.seq_len + 2, pos="shaw", rel_clip=2)


@dataclass
class HeadsResult:
    n_heads: list[int]
    seeds: list[int]
    accuracy: np.ndarray                   # (n_variants, n_seeds), held-out
    curve_steps: list[int]
    curves: np.ndarray                     # (n_variants, n_seeds, n_logged) training accuracy
    models: dict = field(default_factory=dict, repr=False)  # (n_heads, seed) -> trained MiniBert (CPU, eval)
    task: NeighbourPairTask = field(default_factory=NeighbourPairTask)

    def mean(self) -> np.ndarray:
        return self.accuracy.mean(axis=1)


def run_heads_experiment(n_heads=(1, 2, 4, 8), seeds=(0, 1, 2), steps: int = 125, d_model: int = 32,
                         lr: float = 1e-2, batch_size: int = 64, warmup: int = 10, task: NeighbourPairTask | None = None,
                         device: str | None = None) -> HeadsResult:
    """Train one model per (n_heads, seed) at equal d_model; evaluate on fresh batches."""
    task = task or NeighbourPairTask()
    seeds = seed_list("seeds", seeds)
    if not n_heads:
        raise ValueError("n_heads must be non-empty")
    int_in("steps", steps, 1)
    train_cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=warmup, log_every=max(1, steps // 25),
                            device=device)
    # one batched run of all seeds per head count (qalib.lab.train_batched); the head counts side by side on the cores
    per_variant = map_runs(partial(_train_variant, seeds=seeds, d_model=d_model, task=task, train_cfg=train_cfg),
                           list(n_heads), device)
    acc = np.array([[o["accuracy"] for o in outs] for outs in per_variant])      # (n_variants, n_seeds)
    curves = np.array([[o["curve"] for o in outs] for outs in per_variant])     # (n_variants, n_seeds, n_logged)
    models = {(h, seed): o["model"] for h, outs in zip(n_heads, per_variant) for seed, o in zip(seeds, outs)}
    return HeadsResult(list(n_heads), list(seeds), acc, per_variant[-1][-1]["step"], curves, models, task)


def _train_variant(h: int, seeds: list[int], d_model: int, task: NeighbourPairTask, train_cfg: TrainConfig) -> list[dict]:
    """Every seed of one head count, trained together: member i starts as torch.manual_seed(seed_i);
    MiniBert(heads_config(h)) and reads its own data stream, so each seed sees the same data for every h."""
    run = train_seeds(heads_config(h, d_model, task), task, seeds, train_cfg)
    return [{"accuracy": evaluate(model, task, n_batches=2, batch_size=256)["accuracy"], "curve": hist.accuracy,
             "step": hist.step, "model": model.cpu().eval()} for model, hist in zip(run.models, run.histories)]


# -- what the heads do, and what removing them costs ----------------------------------------------
@torch.no_grad()
def offset_profile(model: MiniBert, task: NeighbourPairTask, offsets=(-2, -1, 0, 1, 2), layer: int = 0,
                   seed: int = 7, n: int = 256) -> np.ndarray:
    """(H, len(offsets)): mean attention mass each head puts at key position t + offset, over inner queries."""
    batch = task.batch(n, torch.Generator().manual_seed(seed))
    probs = model(**batch.model_inputs(), return_internals=True).internals[f"layer{layer}.probs"]  # (B, H, T, T)
    t = probs.shape[-1]
    queries = torch.arange(2, t - 2)  # inner positions: both neighbours are content tokens
    out = [probs[:, :, queries, queries + o].mean(dim=(0, 2)) for o in offsets]  # each (H,)
    return torch.stack(out, dim=-1).numpy()


def prune_heads(model: MiniBert, layer: int, heads) -> MiniBert:
    """A copy whose attention output ignores `heads` of `layer`: the columns of W_O that read them are zeroed.

    Multi-head output = concat(head_1..head_H) W_O^T = sum_h head_h W_O[:, slice_h]^T, so this removes
    exactly those heads' contributions (Michel et al. 2019 mask heads the same way)."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    int_in("layer", layer, 0, n_layers - 1)
    heads = [int_in("heads", h, 0, n_heads - 1) for h in heads]
    pruned = copy.deepcopy(model)
    dh = model.cfg.d_head
    with torch.no_grad():
        w = pruned.layers[layer].attention.output.weight  # (d, d): input columns = concatenated heads
        for h in heads:
            w[:, h * dh:(h + 1) * dh] = 0.0
    return pruned


def pruning_effect(model: MiniBert, task: NeighbourPairTask, layer: int = 0, n_batches: int = 1,
                   batch_size: int = 128) -> dict:
    """Accuracy of the full model, with each head removed alone, and with each head kept alone."""
    n = model.cfg.n_heads
    acc = lambda m: evaluate(m, task, n_batches=n_batches, batch_size=batch_size)["accuracy"]  # noqa: E731
    full = acc(model)
    without = np.array([acc(prune_heads(model, layer, [h])) for h in range(n)])
    only = np.array([acc(prune_heads(model, layer, [g for g in range(n) if g != h])) for h in range(n)])
    return {"full": full, "without": without, "only": only, "drop": full - without}


# -- the experiment's figure and the demo on its trained models -------------------------------------
def plot_heads_experiment(fig, res: HeadsResult) -> None:
    """Our accuracy vs number of heads (mean, min-max over seeds, each seed a dot) next to Vaswani's BLEU."""
    ax1, ax2 = fig.subplots(1, 2)
    x = np.arange(len(res.n_heads))
    lo, hi = res.accuracy.min(1), res.accuracy.max(1)
    ax1.errorbar(x, res.mean(), yerr=[res.mean() - lo, hi - res.mean()], fmt="o-", capsize=4, label="mean, min-max")
    jitter = np.linspace(-0.15, 0.15, len(res.seeds)) if len(res.seeds) > 1 else np.zeros(1)  # one dot per seed
    for j in range(len(res.seeds)):
        ax1.plot(x + jitter[j], res.accuracy[:, j], ".", color="grey", alpha=0.7)
    ax1.axhline(1 / res.task.m ** 2, ls=":", color="k", label="chance")
    ax1.set(xticks=x, xticklabels=res.n_heads, xlabel="heads (d_model fixed)", ylabel="held-out accuracy",
            ylim=(0, 1.05), title="Our task: predict (x[t-1], x[t+1])")
    ax1.legend(fontsize=8, loc="lower right")
    t = VASWANI_TABLE3_A
    ax2.plot(range(len(t["n_heads"])), t["bleu"], "s-", color="C1")
    ax2.set(xticks=range(len(t["n_heads"])), xticklabels=[f"{h}\n(d_k={d})" for h, d in zip(t["n_heads"], t["d_k"])],
            xlabel="heads (d_model = 512)", ylabel="dev BLEU", title="Vaswani et al., Table 3 (A)")


@lru_cache(maxsize=1)
def small_result() -> HeadsResult:
    """A quick stand-in for the notebook's experiment (one seed, few steps) so the demo builds on its own."""
    return run_heads_experiment((1, 2, 4, 8), seeds=(0,), steps=40, device="cpu")


def heads_view(res: HeadsResult, n_heads: int, seed: int, remove) -> dict:
    """Accuracy summary, the chosen model's per-head offset profile, and its accuracy with one head removed."""
    if (n_heads, seed) not in res.models:
        raise ValueError(f"no trained model for n_heads={n_heads}, seed={seed}; choose among {sorted(res.models)}")
    if remove != "none" and not 0 <= remove < n_heads:
        raise ValueError(f"a {n_heads}-head model has heads 0..{n_heads - 1}; head {remove} does not exist")
    model = res.models[(n_heads, seed)]
    if remove != "none":
        model = prune_heads(model, 0, [remove])
    pruned_acc = evaluate(model, res.task, n_batches=1, batch_size=128)["accuracy"]  # small: a redraw stays fast
    return {"res": res, "n_heads": n_heads, "seed": seed, "remove": remove, "pruned_acc": pruned_acc,
            "profile": offset_profile(model, res.task, n=64), "accuracy": res.accuracy,
            "note": "" if remove == "none" else f"head {remove} zeroed in W_O (Michel et al.'s mask)"}


# -- the reference: capacity or speed? Every head count trained 4x and 8x longer, 8 seeds ---------------------------
REFERENCE_HEADS = (1, 2, 4, 8)
HELD_OUT = 30_000_001  # + the seed: the reference's held-out batches, disjoint from every training stream
SOLVED = 0.95          # held-out accuracy at which a run counts as having solved the task


def reference_seed(seed: int, steps: int) -> dict:
    """One seed of the reference: the live run's model for each head count (run_heads_experiment's settings, one
    seed), trained `steps` steps. -> {str(n_heads): {"accuracy": held-out accuracy, "steps": logged steps,
    "curve": training accuracy there}}"""
    task = NeighbourPairTask()
    cfg = TrainConfig(steps=steps, batch_size=64, lr=1e-2, warmup=10, log_every=25, device="cpu")
    out = {}
    for h in REFERENCE_HEADS:
        run = train_seeds(heads_config(h, 32, task), task, [seed], cfg)
        hist = run.histories[0]
        out[str(h)] = {"accuracy": evaluate(run.models[0], task, n_batches=2, batch_size=256,
                                            seed=HELD_OUT + seed)["accuracy"],
                       "steps": list(hist.step), "curve": list(hist.accuracy)}
    return out


def solved_gate(accuracy: float, task: NeighbourPairTask | None = None) -> Gate:
    """Learned or not: held-out accuracy above chance (1 over the number of ordered pairs) by enough to reach SOLVED."""
    chance = 1 / (task or NeighbourPairTask()).m ** 2
    return learned("held-out accuracy", accuracy, baseline=chance, baseline_name="chance", margin=SOLVED - chance)


def reference_accuracy(ref) -> dict[str, np.ndarray]:
    """{rung name: (len(REFERENCE_HEADS), seeds) held-out accuracy}, in the spec's rung order."""
    return {r.name: np.array([r.values(str(h), "accuracy") for h in REFERENCE_HEADS]) for r in ref.rungs.values()}


def reference_claims(ref) -> None:
    """The checks notebook 07 makes on its reference run (the runner makes them on every regeneration too)."""
    acc = reference_accuracy(ref)
    steps = {r.name: int(r.kwargs["steps"]) for r in ref.rungs.values()}
    live, longest = acc["live"], acc[list(acc)[-1]]
    one, four = REFERENCE_HEADS.index(1), REFERENCE_HEADS.index(4)
    d = paired_difference(live[four], live[one], "4 heads", "1 head")
    check(f"at the live {steps['live']} steps 4 heads beat 1 head (paired over {live.shape[1]} seeds, the 95% interval "
          "of the accuracy difference above 0)", above(d.low, 0), str(d))
    solved = float(np.mean([solved_gate(a).passed for a in longest.ravel()]))
    check(f"but it is speed, not capacity: after {list(steps.values())[-1]} steps every head count, one head included, "
          f"solved the task (held-out accuracy > {SOLVED}) in every seed", at_least(solved, 1.0),
          {f"{h} head{'s' * (h > 1)}": longest[i] for i, h in enumerate(REFERENCE_HEADS)})


def plot_reference(fig, ref) -> None:
    """Held-out accuracy against the budget per head count (median over seeds as a line, a dot per seed)."""
    acc = reference_accuracy(ref)
    steps = np.array([int(r.kwargs["steps"]) for r in ref.rungs.values()])
    ax = fig.add_subplot(1, 1, 1)
    for i, h in enumerate(REFERENCE_HEADS):
        vals = np.array([acc[name][i] for name in acc])  # (rungs, seeds)
        x = steps * (1 + 0.04 * (i - 1.5))                 # a small offset per head count, so dots stay visible
        seeds_and_median(ax, x, vals, f"C{i}", f"{h} head{'s' * (h > 1)}")
    ax.axhline(SOLVED, color="grey", ls=":", lw=1, label=f"solved: {SOLVED}")
    budget_axis(ax, steps)
    n = next(iter(acc.values())).shape[1]
    ax.set(ylabel="held-out accuracy", ylim=(-0.02, 1.02),
           title=f"the same model with 1-8 heads, {n} seeds (dots), median as lines")
    ax.legend(fontsize=8, loc="lower right")


REFERENCES = [
    ReferenceSpec(
        "07_multi_head", "heads", reference_seed, seeds=8,
        rungs=(Rung("live", steps=125), Rung("4x", steps=500), Rung("8x", steps=1000)),
        lesson="whether one head can learn the neighbour-pair task given time, or only more slowly than several, "
               "over 8 seeds at 125, 500 and 1000 steps", claims=reference_claims),
]

"""Notebook 19, the trained part: the first-token task under full, windowed, global and random attention patterns.

    setup = LongSetup()                                          # T = 32 tokens after [CLS], d = 32, 2 layers
    runs = run_patterns(["window", "window+global"], seeds=(0, 1, 2), setup=setup)   # accuracy by distance per seed
    gates(runs["acc"][:, :, -1], setup.task().chance)            # the learned-or-not gate of each model
    REFERENCES                                                   # the reference runs (python -m qalib.tools.reference 19)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import torch

from qalib.lab.device import one_thread
from qalib.lab.gate import Gate, learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.train import TrainConfig, train
from qalib.nn.config import MiniBertConfig
from qalib.nn.validate import choice, int_in, seed_list
from qalib.notebook.claims import above, at_least, below, check
from qalib.topics.nb19_long_context.compute import (FirstTokenTask, accuracy_by_distance, hops, pattern_mask, reach,
                                                   sparse_model)

# name -> (window radius or None, global tokens, random keys per query)
PATTERNS = {"full": (None, 0, 0), "window": (4, 0, 0), "window+global": (4, 1, 0), "window+random": (4, 0, 2)}
GATE_MARGIN = 0.3  # a model learned when its accuracy one step from the first token beats chance by this much


@dataclass(frozen=True)
class LongSetup:
    """The first-token task at T = seq_len tokens after [CLS], a mini-BERT with learned absolute positions;
    scale > 1 trains longer (GPU)."""
    seq_len: int = 32
    vocab_size: int = 16
    d_model: int = 32
    n_layers: int = 2
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3

    def scaled(self, scale: int) -> "LongSetup":
        int_in("scale", scale, 1)
        return replace(self, steps=self.steps * scale)

    def config(self, n_layers: int | None = None) -> MiniBertConfig:
        return MiniBertConfig(vocab_size=self.vocab_size, d_model=self.d_model, n_layers=n_layers or self.n_layers,
                              n_heads=4, d_ff=2 * self.d_model, max_len=self.seq_len + 1)

    def task(self) -> FirstTokenTask:
        return FirstTokenTask(self.vocab_size, self.seq_len)

    def mask(self, pattern: str, seed: int = 0, window: int | None = None) -> torch.Tensor | None:
        choice("pattern", pattern, tuple(PATTERNS))
        radius, n_global, n_random = PATTERNS[pattern]
        if radius is None:
            return None
        return pattern_mask(self.seq_len + 1, window=window or radius, n_global=n_global, n_random=n_random,
                            seed=seed)


HELD_OUT = 19_000_003  # + the seed: held-out batches, disjoint from every training stream


@one_thread()  # a 2-layer model of width 32: a second thread only spins
def train_pattern(pattern: str, seed: int, setup: LongSetup = LongSetup(), n_layers: int | None = None,
                  window: int | None = None, steps: int | None = None, checkpoints=(), device=None):
    """Train one model of `pattern` (its random links drawn from `seed`) on the first-token task.
    -> (model, accuracy by distance 1 .. T-1 on held-out sequences at the end, {step: the same} at each of
    `checkpoints`: with a constant rate after the warm-up, the first s steps of a longer run are a run of s steps)."""
    torch.manual_seed(seed)
    model = sparse_model(setup.config(n_layers), setup.mask(pattern, seed, window))
    steps = steps or setup.steps
    task = setup.task()
    seen = {}

    def at_checkpoint(history, step, m, batch):
        if step + 1 in checkpoints and step + 1 < steps:
            seen[step + 1] = accuracy_by_distance(m, task, seed=HELD_OUT + seed)
            m.train()

    train(model, task, TrainConfig(steps=steps, batch_size=setup.batch_size, lr=setup.lr, warmup=20, seed=seed,
                                   log_every=steps, device=None if device is None else str(device)),
          on_step=at_checkpoint if checkpoints else None)
    return model, accuracy_by_distance(model, task, seed=HELD_OUT + seed), seen


def _accuracy(run: tuple, setup: LongSetup, device) -> np.ndarray:
    pattern, seed = run
    return train_pattern(pattern, seed, setup, device=device)[1]


def run_patterns(patterns, seeds=(0, 1, 2), setup: LongSetup = LongSetup(), device=None) -> dict:
    """Each pattern for each seed, side by side on the CPU cores. -> {"acc": (patterns, seeds, T-1) accuracy by
    distance, "patterns", "seeds", "chance", "setup"}"""
    patterns = [choice("pattern", p, tuple(PATTERNS)) for p in patterns]
    seeds = seed_list("seeds", seeds)
    runs = [(p, s) for p in patterns for s in seeds]
    acc = map_runs(partial(_accuracy, setup=setup, device=device), runs, device)
    return {"acc": np.stack(acc).reshape(len(patterns), len(seeds), -1), "patterns": patterns, "seeds": list(seeds),
            "chance": setup.task().chance, "setup": setup}


def gate(acc_by_distance: np.ndarray, chance: float) -> Gate:
    """Did a model learn the task where the first token is in every pattern's reach (distance 1)?"""
    return learned("held-out accuracy at distance 1", float(acc_by_distance[0]), chance, "chance", GATE_MARGIN)


def plot_runs(fig, r: dict, reach: dict | None = None) -> None:
    """Accuracy against distance from the first token, one line per pattern (mean over seeds, band min-max)."""
    ax = fig.add_subplot()
    dist = np.arange(1, r["acc"].shape[-1] + 1)
    for i, p in enumerate(r["patterns"]):
        a = r["acc"][i]
        ax.plot(dist, a.mean(0), color=f"C{i}", marker="o", ms=3, label=p)
        ax.fill_between(dist, a.min(0), a.max(0), color=f"C{i}", alpha=0.2, lw=0)
    for i, (p, d) in enumerate((reach or {}).items()):
        ax.axvline(d + 0.5, color=f"C{r['patterns'].index(p)}", ls=":", lw=1)
    ax.axhline(r["chance"], color="0.4", ls="--", lw=1, label="chance")
    ax.set(ylim=(0, 1.05), xlabel="distance from the first token (positions)", ylabel="held-out accuracy",
           title=f"copy the first token, T = {r['setup'].seq_len}, {r['setup'].n_layers} layers, "
                 f"{r['setup'].steps} steps (mean, min-max over {len(r['seeds'])} seeds)")
    ax.legend(fontsize=8, loc="center right")


# -- the reference: the sparse patterns at 2 and 3 layers, at the live budget and 3x, 6 seeds ---------------------------
REFERENCE_VARIANTS = (("window", 2), ("window", 3), ("window+global", 2), ("window+random", 2))
REFERENCE_STEPS = 1800


def variant_name(pattern: str, n_layers: int) -> str:
    return f"{pattern}, {n_layers} layers"


@one_thread()
def reference_seed(seed: int, steps: int, read_at: int) -> dict:
    """One seed of the reference: each of REFERENCE_VARIANTS trained `steps` steps on the live setup, read at step
    `read_at` (the live budget) and at the end. -> {"<read_at> steps" and "<steps> steps": {variant name:
    accuracy by distance 1 .. T-1}}"""
    setup = LongSetup()
    out = {f"{read_at} steps": {}, f"{steps} steps": {}}
    for p, n in REFERENCE_VARIANTS:
        _, final, seen = train_pattern(p, seed, setup, n_layers=n, steps=steps, checkpoints=(read_at,), device="cpu")
        out[f"{read_at} steps"][variant_name(p, n)] = seen[read_at].tolist()
        out[f"{steps} steps"][variant_name(p, n)] = final.tolist()
    return out


def reference_table(ref) -> dict[str, dict[str, np.ndarray]]:
    """{budget: {variant: (seeds, T-1) accuracy by distance}} of the reference's one rung."""
    r, = ref.rungs.values()
    return {budget: {v: r.values(budget, v) for v in r.runs[0][budget]} for budget in r.runs[0]}


def two_hop_distances(setup: LongSetup, pattern: str, seed: int) -> np.ndarray:
    """(T-1,) bool over distances 1 .. T-1: the positions that two layers of `pattern` (its random links drawn from
    `seed`) connect to the first token, but one layer does not."""
    mask = setup.mask(pattern, seed)
    one, two = reach(mask, 1)[2:, 1], reach(mask, 2)[2:, 1]
    return (two & ~one).numpy()


def two_hop_accuracy(ref, budget: str | None = None) -> dict[str, np.ndarray]:
    """Per seed, the mean accuracy at the distances that need exactly two hops: the window's 5-8, and for random
    links the positions they put two hops from the first token beyond the window's own two-hop reach (NaN for a
    seed with none)."""
    setup = LongSetup()
    t = reference_table(ref)
    a = t[budget or list(t)[-1]]
    seeds = next(iter(ref.rungs.values())).seeds
    out = {}
    for name in ("window, 2 layers", "window+random, 2 layers"):
        pattern = name.split(",")[0]
        rows = []
        for acc, seed in zip(a[name], seeds):
            sel = two_hop_distances(setup, pattern, seed)
            if "random" in pattern:
                sel[:2 * PATTERNS[pattern][0]] = False  # distances 1 .. 2r: the window reaches them in two hops
            rows.append(acc[sel].mean() if sel.any() else np.nan)
        out[name] = np.array(rows)
    return out


def reference_claims(ref) -> None:
    """The checks notebook 19 makes on its reference run (the runner makes them on every regeneration too)."""
    t = reference_table(ref)
    chance = LongSetup().task().chance
    last = list(t)[-1]
    a = t[last]
    passed = {v: np.array([gate(x, chance).passed for x in acc]) for v, acc in a.items()}
    n = len(a["window, 2 layers"])
    check(f"gate: at {last} every two-layer window and random-link model learned the task where it is one hop away "
          f"(distance 1 above chance + {GATE_MARGIN}); the 3-layer and global-token models are read only where they "
          "passed", at_least(min(int(passed[v].sum()) for v in ("window, 2 layers", "window+random, 2 layers")), n),
          {v: f"{int(p.sum())} of {n}" for v, p in passed.items()})
    two = a["window, 2 layers"]
    check(f"two layers of a ±4 window learn every distance the mask lets them reach, 1-8 (L r = 8), relay included: "
          f"every seed above 0.95 there at {last}", above(two[:, :8].min(1), 0.95), two[:, :8].min(1))
    ok3 = passed["window, 3 layers"]
    third = a["window, 3 layers"][ok3, 8:12].mean(1)
    check(f"a third layer adds the next 4 (distances 9-12) in at least half of the 3-layer models that passed their "
          f"gate at {last} (> 0.95; {int((third > 0.95).sum())} of {int(ok3.sum())})",
          at_least(int((third > 0.95).sum()), max(1, -(-int(ok3.sum()) // 2))), third)
    glob = a["window+global, 2 layers"]
    ok = passed["window+global, 2 layers"]
    check(f"through [CLS], two layers carry the first token all 31 places: in at least one seed the last position is "
          f"above 0.95 at {last}", above(float(glob[:, -1].max()), 0.95), glob[:, -1])
    flat = np.abs(glob[ok, -1] - glob[ok, 0])
    check("and every global-token model that passed its gate reads distance 31 as well as distance 1 (within 0.05), "
          "as if every copy, even a neighbour's, went through [CLS]", below(float(flat.max()), 0.05),
          {"distance 1": glob[ok, 0], "distance 31": glob[ok, -1]})
    hop2 = two_hop_accuracy(ref)["window+random, 2 layers"]
    check(f"random links are used too: at the positions beyond distance 8 that they put two hops from the first token, "
          f"the median seed is above 0.95 at {last}", above(float(np.nanmedian(hop2)), 0.95), hop2)


REFERENCES = [
    ReferenceSpec(
        "19_long_context", "patterns", reference_seed, seeds=6,
        rungs=(Rung(f"{REFERENCE_STEPS} steps, read at 600", steps=REFERENCE_STEPS, read_at=600),),
        lesson="how far the first token's identity travels under windowed, global and random attention patterns "
               "with 2 and 3 layers, at the live budget and 3x, over 6 seeds", claims=reference_claims),
]


def hops_of(setup: LongSetup, pattern: str, seed: int = 0, n_layers_max: int = 64) -> float:
    """The fewest layers that carry the first token (position 1) to the last position under `pattern`."""
    mask = setup.mask(pattern, seed)
    return 1.0 if mask is None else hops(mask, 1, setup.seq_len, n_layers_max)

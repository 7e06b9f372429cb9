"""Notebook 20, the trained part: small ViTs on the handwritten digits, against patch size, position scheme and a
small CNN at several training-set sizes.

    setup = PatchSetup()                                        # 300 steps, batch 64, lr 3e-3, d = 32, 2 layers
    runs = run_variants(LIVE_VARIANTS, seeds=(0, 1, 2), setup=setup)   # {variant name: [Outcome per seed]}
    gate(outcome)                                               # the learned-or-not gate of one model
    REFERENCES                                                  # the reference run (python -m qalib.tools.reference 20)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.device import one_thread
from qalib.lab.gate import Gate, learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, fit
from qalib.nn.validate import choice, int_in, seed_list
from qalib.notebook.claims import above, below, check
from qalib.topics.nb20_patches_as_tokens.compute import (N_CLASSES, PATCHES, POSITIONS, SmallCNN, ViT, ViTConfig,
                                                         accuracy, batches, grid_similarity, n_params,
                                                         shuffle_patches, split)

CHANCE = 1 / N_CLASSES
GATE_MARGIN = 0.2   # a model learned when its held-out accuracy beats chance (0.1) by this much
SIZES = (100, 300, 1300)  # training-set sizes of the CNN comparison; 1,300 is the whole training pool
SUBSET = 20_000_017       # + the seed: which images a smaller training set keeps (the same for ViT and CNN)
SHUFFLE = 20_000_033      # + the seed: the patch order of the shuffled test set

ModelKind = Literal["vit", "cnn"]


@dataclass(frozen=True)
class Variant:
    """One model to train: a ViT (patch size, position scheme) or the CNN, on the first n_train images of a seeded
    subset of the training pool."""
    model: ModelKind = "vit"
    patch: int = 2
    pos: str = "learned"
    n_train: int = 1300

    def __post_init__(self) -> None:
        choice("Variant.model", self.model, ("vit", "cnn"))
        choice("Variant.patch", self.patch, PATCHES)
        choice("Variant.pos", self.pos, POSITIONS)
        int_in("Variant.n_train", self.n_train, 10, 1300)

    @property
    def name(self) -> str:
        if self.model == "cnn":
            return f"CNN, {self.n_train} images"
        pos = {"learned": "learned 1-D", "sin2d": "2-D sinusoid", "none": "no positions"}[self.pos]
        return f"ViT {self.patch}x{self.patch}, {pos}, {self.n_train} images"


@dataclass(frozen=True)
class PatchSetup:
    """The live recipe; scale > 1 trains longer (GPU)."""
    steps: int = 200
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 20
    d_model: int = 32
    n_layers: int = 2

    def scaled(self, scale: int) -> "PatchSetup":
        int_in("scale", scale, 1)
        return replace(self, steps=self.steps * scale)

    def vit(self, patch: int, pos: str) -> ViTConfig:
        return ViTConfig(patch=patch, pos=pos, d_model=self.d_model, n_layers=self.n_layers, d_ff=2 * self.d_model)


@dataclass(frozen=True)
class Outcome:
    """What one trained model measured on the 497 held-out digits."""
    accuracy: float            # held-out accuracy
    shuffled: float            # the same images, their patches in a random order (ViT: its own patch size; CNN: 2)
    grid: float                # neighbours' position cosine minus the others' (NaN: no table, or a grid under 3x3)
    grid_init: float           # the same for the untrained table of the same seed
    n_params: int

    def as_dict(self) -> dict:
        return asdict(self)


# the live run: positions at 2x2 patches, patch sizes 2-8, and the CNN against the ViT at three training-set sizes
LIVE_VARIANTS = (Variant(pos="learned"), Variant(pos="sin2d"), Variant(pos="none"), Variant(patch=4),
                 Variant(patch=8), Variant(n_train=100), Variant("cnn", n_train=100), Variant("cnn", n_train=1300))
# the reference adds 300 images and pixels as tokens (5x the time per step of 2x2 patches)
REFERENCE_VARIANTS = LIVE_VARIANTS + (Variant(n_train=300), Variant("cnn", n_train=300), Variant(patch=1))


def build(variant: Variant, setup: PatchSetup = PatchSetup()) -> torch.nn.Module:
    return SmallCNN() if variant.model == "cnn" else ViT(setup.vit(variant.patch, variant.pos))


def _grid(model) -> float:
    if not isinstance(model, ViT) or model.cfg.pos == "none" or model.cfg.grid < 3:
        return float("nan")
    return grid_similarity(model.position_rows())


@torch.no_grad()
def measure(model, variant: Variant, seed: int, grid_init: float) -> Outcome:
    s = split()
    shuffled = shuffle_patches(s.test_x, variant.patch, torch.Generator().manual_seed(SHUFFLE + seed))
    return Outcome(accuracy(model, s.test_x, s.test_y), accuracy(model, shuffled, s.test_y), _grid(model),
                   grid_init, n_params(model))


def _loss(model, batch) -> torch.Tensor:
    x, y = batch
    device = next(model.parameters()).device
    return F.cross_entropy(model(x.to(device)), y.to(device))


@one_thread()  # a model of 20k weights: a second thread only spins
def train_variant(variant: Variant, seed: int, setup: PatchSetup = PatchSetup(), steps: int | None = None,
                  checkpoints=(), device=None):
    """Train one model of `variant` from `seed` (weights and batches). -> (model, Outcome at the end,
    {step: Outcome} at each of `checkpoints`: the learning rate is constant after the warm-up, so the first s steps
    of a longer run are a run of s steps)."""
    s = split()
    keep = torch.randperm(len(s.train_y), generator=torch.Generator().manual_seed(SUBSET + seed))[:variant.n_train]
    torch.manual_seed(seed)
    model = build(variant, setup)
    grid_init = _grid(model)
    steps = steps or setup.steps
    seen = {}

    def at_checkpoint(history, step, m, batch):
        if step + 1 in checkpoints and step + 1 < steps:
            seen[step + 1] = measure(m, variant, seed, grid_init)
            m.train()

    fit(model, _loss, batches(s.train_x[keep], s.train_y[keep], setup.batch_size, seed),
        TrainConfig(steps=steps, batch_size=setup.batch_size, lr=setup.lr, warmup=setup.warmup, seed=seed,
                    log_every=steps, device=None if device is None else str(device)),
        on_step=at_checkpoint if checkpoints else None)
    model.cpu()
    return model, measure(model, variant, seed, grid_init), seen


def _one(run: tuple, setup: PatchSetup, device, keep_model: bool):
    variant, seed = run
    model, outcome, _ = train_variant(variant, seed, setup, device=device)
    return outcome, (model.state_dict() if keep_model else None)


def run_variants(variants, seeds=(0, 1, 2), setup: PatchSetup = PatchSetup(), device=None) -> "LiveRun":
    """Each variant for each seed, side by side on the CPU cores; the ViTs of the first seed are kept."""
    variants = list(variants)
    seeds = seed_list("seeds", seeds)
    runs = [(v, s) for v in variants for s in seeds]
    out = map_runs(partial(_one_kept, setup=setup, device=device, first=seeds[0]), runs, device)
    outcomes = {v.name: [o for (o, _), (vv, _) in zip(out, runs) if vv == v] for v in variants}
    models = {}
    for (o, state), (v, s) in zip(out, runs):
        if state is not None:
            model = build(v, setup)
            model.load_state_dict(state)
            models[v] = model.eval()
    return LiveRun(outcomes, list(seeds), setup, models)


def _one_kept(run: tuple, setup: PatchSetup, device, first: int):
    v, s = run
    return _one(run, setup, device, keep_model=(s == first and v.model == "vit"))


@dataclass
class LiveRun:
    outcomes: dict          # {variant name: [Outcome per seed]}
    seeds: list
    setup: PatchSetup
    models: dict            # {Variant: trained model of the first seed} (the ViTs)

    def values(self, name: str, metric: str = "accuracy") -> np.ndarray:
        return np.array([getattr(o, metric) for o in self.outcomes[name]])

    def gates(self) -> dict[str, list[Gate]]:
        return {name: [gate(o.accuracy) for o in outs] for name, outs in self.outcomes.items()}

    def by_patch(self) -> dict[int, ViT]:
        """The first seed's ViTs with learned positions on all 1,300 images, by patch size."""
        return {v.patch: m for v, m in self.models.items() if v.pos == "learned" and v.n_train == 1300}


def gate(acc: float) -> Gate:
    """Did a model learn to read digits at all: held-out accuracy above chance (10 classes) by GATE_MARGIN?"""
    return learned("held-out accuracy", float(acc), CHANCE, "chance", GATE_MARGIN)


def plot_runs(fig, values: dict[str, np.ndarray], title: str) -> None:
    """One row per model: each seed's held-out accuracy (dots) and the median (bar)."""
    ax = fig.add_subplot()
    names = list(values)
    for i, name in enumerate(names):
        v = np.asarray(values[name])
        ax.barh(i, np.median(v), color="C0" if name.startswith("ViT") else "C2", alpha=0.5)
        ax.plot(v, np.full(len(v), i), "o", color="k", ms=3)
    ax.axvline(CHANCE, color="0.4", ls="--", lw=1)
    ax.text(CHANCE, len(names) - 0.4, " chance", fontsize=8, color="0.3")
    ax.set(yticks=range(len(names)), yticklabels=names, xlim=(0, 1), xlabel="held-out accuracy (497 digits)",
           title=title)
    ax.invert_yaxis()


# -- the reference: every variant and pixels as tokens, 1,200 steps read at 200 (live) and 800, 8 seeds ---------------
REFERENCE_STEPS = 1200
READ_AT = (200, 800)


@one_thread()
def reference_seed(seed: int, steps: int, read_at) -> dict:
    """One seed of the reference: every REFERENCE_VARIANT trained `steps` steps with the live recipe, read at each
    step of `read_at` (the live budget first) and at the end. -> {"<s> steps": {variant name: Outcome}} per budget"""
    read_at = [int_in("read_at", r, 1, steps - 1) for r in read_at]
    out = {f"{r} steps": {} for r in (*read_at, steps)}
    for v in REFERENCE_VARIANTS:
        _, final, seen = train_variant(v, seed, PatchSetup(), steps=steps, checkpoints=tuple(read_at), device="cpu")
        for r in read_at:
            out[f"{r} steps"][v.name] = seen[r].as_dict()
        out[f"{steps} steps"][v.name] = final.as_dict()
    return out


def reference_table(ref, metric: str = "accuracy") -> dict[str, dict[str, np.ndarray]]:
    """{budget: {variant name: (seeds,) values of metric}} of the reference's one rung."""
    r, = ref.rungs.values()
    return {budget: {v: r.values(budget, v, metric) for v in r.runs[0][budget]} for budget in r.runs[0]}


NAMES = {"learned": Variant(pos="learned").name, "sin2d": Variant(pos="sin2d").name,
         "none": Variant(pos="none").name, "p1": Variant(patch=1).name, "p4": Variant(patch=4).name,
         "p8": Variant(patch=8).name, **{f"vit{n}": Variant(n_train=n).name for n in SIZES},
         **{f"cnn{n}": Variant("cnn", n_train=n).name for n in SIZES}}


def reference_claims(ref) -> None:
    """The checks notebook 20 makes on its reference run (the runner makes them on every regeneration too)."""
    acc = reference_table(ref)
    shuf = reference_table(ref, "shuffled")
    grid = reference_table(ref, "grid")
    grid0 = reference_table(ref, "grid_init")
    last = list(acc)[-1]
    a = acc[last]
    lowest = {v: float(x.min()) for v, x in a.items()}
    check(f"gate: at {last} every model of every seed learned (held-out accuracy above chance + {GATE_MARGIN})",
          above(min(lowest.values()), CHANCE + GATE_MARGIN), lowest)
    d_none = paired_difference(a[NAMES["learned"]], a[NAMES["none"]], "learned 1-D", "no positions")
    check(f"positions matter for digits cut in 2x2 patches: learned 1-D minus none, at {last}, 95% interval above "
          f"+0.15 ({d_none})", above(d_none.low, 0.15), d_none.diffs)
    d_sin = paired_difference(a[NAMES["learned"]], a[NAMES["sin2d"]], "learned 1-D", "2-D sinusoid")
    check(f"and which positions matters little: learned 1-D minus the 2-D sinusoid, its 95% interval inside ±0.03 at "
          f"{last} ({d_sin})", above(d_sin.low, -0.03) & below(d_sin.high, 0.03), d_sin.diffs)
    drop = {k: a[NAMES[k]] - shuf[last][NAMES[k]] for k in ("learned", "sin2d")}
    check("with positions, shuffling the test patches costs every seed more than 0.4 of its accuracy (learned 1-D "
          "and 2-D sinusoid)", above(min(float(d.min()) for d in drop.values()), 0.4), drop)
    g, g0 = grid[last][NAMES["learned"]], grid0[last][NAMES["learned"]]
    d_grid = paired_difference(g, g0, "trained table", "untrained")
    check(f"the learned table moves toward the 4x4 grid: neighbours' rows more similar than other pairs', trained "
          f"minus the same seed's untrained table, 95% interval above +0.05 at {last} ({d_grid})",
          above(d_grid.low, 0.05), {"trained": g, "untrained": g0})
    d_pix = paired_difference(a[NAMES["p1"]], a[NAMES["learned"]], "pixels (1x1)", "2x2 patches")
    check(f"pixels as tokens buy no accuracy here: 1x1 minus 2x2 patches, its 95% interval below +0.02 at {last} "
          f"({d_pix})", below(d_pix.high, 0.02), d_pix.diffs)
    gap = {m: paired_difference(a[NAMES[f"cnn{m}"]], a[NAMES[f"vit{m}"]], "CNN", "ViT") for m in SIZES}
    check(f"with 100 training images the CNN beats the ViT of about its size: CNN minus ViT, 95% interval above "
          f"+0.05 at {last} ({gap[100]})", above(gap[100].low, 0.05), {m: str(d) for m, d in gap.items()})
    check(f"and with all 1,300 images it is still ahead, by less: CNN minus ViT, 95% interval above 0 at {last} "
          f"({gap[1300]})", above(gap[1300].low, 0.0), gap[1300].diffs)
    shrink = paired_difference(gap[100].diffs, gap[1300].diffs, "gap at 100", "gap at 1300")
    check(f"and the CNN's lead shrinks with data: its lead at 100 images minus its lead at 1,300, 95% interval "
          f"above 0 ({shrink})", above(shrink.low, 0.0), shrink.diffs)


REFERENCES = [
    ReferenceSpec(
        "20_patches_as_tokens", "vit", reference_seed, seeds=8,
        rungs=(Rung(f"{REFERENCE_STEPS} steps, read at {READ_AT[0]} and {READ_AT[1]}", steps=REFERENCE_STEPS,
                    read_at=list(READ_AT)),),
        lesson="ViTs on the digits against patch size (pixels to one patch), position scheme (learned 1-D, 2-D "
               "sinusoid, none; shuffled patches) and a CNN of about their size at 100, 300 and 1,300 images, at the "
               "live budget, 4x and 6x, over 8 seeds", claims=reference_claims),
]

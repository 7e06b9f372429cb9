"""Notebook 03, sections 5 and 6: train with and without sqrt(d_model); read the pretrained MiniLM's tables.

Variants (all tie the MLM decoder to the word embeddings, as MiniBert always does):
    "sqrt_d": original Transformer: sinusoidal positions, no embedding LayerNorm, word init std d^-1/2, x sqrt(d)
    "none":   the same without the factor
    "bert":   BERT: learned positions, every table std 0.02, LayerNorm after the sum, no factor
"""

from __future__ import annotations

from dataclasses import dataclass, field

from functools import partial

import numpy as np
import torch

from qalib.lab.data import SyntheticLanguage, MLMTask
from qalib.lab.gate import learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, evaluate
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.positions import sinusoidal
from qalib.nn.validate import choice, int_in, seed_list
from qalib.notebook.claims import above, at_least, at_most, below, check
from qalib.notebook.drawing import budget_axis, seed_band, seeds_and_median

VARIANTS = ("sqrt_d", "none", "bert")
LABELS = {"sqrt_d": r"original, $\times\sqrt{d}$", "none": "original, no factor", "bert": "BERT-style"}


def variant_config(variant: str, d_model: int = 64, vocab_size: int = 128, n_layers: int = 1) -> MiniBertConfig:
    choice("variant", variant, VARIANTS)
    base = MiniBertConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=4, d_ff=4 * d_model,
                          max_len=64)
    if variant == "bert":
        return base.replace(pos="learned", embed_norm=True, embed_scale="none")
    return base.replace(pos="sinusoidal", embed_norm=False, embed_init_std=d_model ** -0.5,
                        embed_scale="sqrt_d" if variant == "sqrt_d" else "none")


def experiment_task(vocab_size: int = 128, seq_len: int = 10) -> MLMTask:
    """MLM on the synthetic bigram-plus-lag language: a masked token is guessed from its neighbours' identities."""
    language = SyntheticLanguage(vocab_size=vocab_size, branching=4, lag=4, p_lag=0.5, seed=0)
    return MLMTask(language, seq_len=seq_len, mlm_prob=0.3)


@dataclass
class ExperimentResult:
    steps: np.ndarray                                    # logged training steps
    loss: dict[str, np.ndarray] = field(default_factory=dict)       # variant -> (seeds, logged steps)
    accuracy: dict[str, np.ndarray] = field(default_factory=dict)   # variant -> (seeds,) held-out MLM accuracy
    eval_loss: dict[str, np.ndarray] = field(default_factory=dict)  # variant -> (seeds,)
    token_to_position: dict[str, np.ndarray] = field(default_factory=dict)  # variant -> (seeds, 2): before, after
    chance: float = 0.0
    uniform_loss: float = 0.0


def _token_to_position(model: MiniBert) -> float:
    """Mean norm of a content word row as it enters the sum (factor included) over the mean position-row norm."""
    emb = model.embeddings
    word = emb.word_embeddings.weight[5:].detach().norm(dim=1).mean() * emb.word_scale
    d = model.cfg.d_model
    pos = emb.position_embeddings.weight[:16] if model.cfg.pos == "learned" else sinusoidal(16, d)
    return float(word / pos.detach().norm(dim=1).mean())


def run_experiment(steps: int = 100, seeds=(0, 1, 2), d_model: int = 64, vocab_size: int = 128,
                   batch_size: int = 32, lr: float = 3e-3, variants=VARIANTS, device=None,
                   eval_batch_size: int = 128) -> ExperimentResult:
    """Train each variant from each seed on the same data stream; evaluate on held-out batches."""
    int_in("steps", steps, 2)
    seeds = seed_list("seeds", seeds)
    device = None if device is None else str(device)  # TrainConfig.device is a string ("cpu", "cuda:0")
    task = experiment_task(vocab_size)
    log_every = max(1, steps // 20)
    res = ExperimentResult(steps=np.array([]), chance=1.0 / task.language.n_content,
                           uniform_loss=float(np.log(task.language.n_content)))
    train_cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=max(1, steps // 6),
                            log_every=log_every, device=device)
    # every seed of one variant in one batched run (qalib.lab.train_batched); the variants side by side on the cores
    variants = list(variants)
    per_variant = map_runs(partial(_train_variant, seeds=seeds, d_model=d_model, vocab_size=vocab_size, task=task,
                                   train_cfg=train_cfg, eval_batch_size=eval_batch_size), variants, device)
    for v, mine in zip(variants, per_variant):
        res.steps = mine[-1]["step"]
        res.loss[v] = np.array([o["loss"] for o in mine])
        res.accuracy[v] = np.array([o["accuracy"] for o in mine])
        res.eval_loss[v] = np.array([o["eval_loss"] for o in mine])
        res.token_to_position[v] = np.array([o["ratios"] for o in mine])
    return res


def _train_variant(v: str, seeds: list[int], d_model: int, vocab_size: int, task, train_cfg: TrainConfig,
                   eval_batch_size: int) -> list[dict]:
    """Every seed of one variant: member i starts as torch.manual_seed(seed_i); MiniBert(config) and reads its own
    data stream, so each seed sees the same data in every variant."""
    cfg = variant_config(v, d_model, vocab_size)
    before = []
    for seed in seeds:  # the ratio at initialisation: the weights train_seeds starts member i from
        torch.manual_seed(seed)
        before.append(_token_to_position(MiniBert(cfg)))
    run = train_seeds(cfg, task, seeds, train_cfg)
    out = []
    for model, hist, ratio0 in zip(run.models, run.histories, before):
        ev = evaluate(model, task, n_batches=2, batch_size=eval_batch_size)
        out.append({"step": np.array(hist.step), "loss": hist.loss, "accuracy": ev["accuracy"], "eval_loss": ev["loss"],
                    "ratios": (ratio0, _token_to_position(model.cpu()))})
    return out


def plot_experiment(fig, res: ExperimentResult) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    for i, (v, curves) in enumerate(res.loss.items()):
        seed_band(ax1, res.steps, curves, color=f"C{i}", label=LABELS[v])
    ax1.axhline(res.uniform_loss, color="k", ls=":", lw=1, label="uniform guess")
    ax1.set(xlabel="training step", ylabel="MLM loss (nats)", title="Training loss: mean, band = min-max over seeds")
    ax1.legend(fontsize=8)
    names = list(res.accuracy)
    for i, v in enumerate(names):
        acc = res.accuracy[v]
        ax2.bar(i, acc.mean(), color=f"C{i}", alpha=0.6)
        ax2.plot(np.full(len(acc), i), acc, "ko", ms=4)
    ax2.axhline(res.chance, color="k", ls=":", lw=1, label="chance")
    ax2.set_xticks(range(len(names)), [LABELS[v] for v in names], fontsize=8)
    ax2.set(ylabel="held-out masked-token accuracy", title="After training (dots: seeds)")
    ax2.legend(fontsize=8)


# ---------------------------------------------------------------------------------------------
# The pretrained checkpoint
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def pretrained_norms(model: MiniBert) -> dict:
    """Row norms of the word, position and token-type tables of a loaded checkpoint."""
    emb = model.embeddings
    word = emb.word_embeddings.weight.norm(dim=1)
    pos = emb.position_embeddings.weight.norm(dim=1)
    seg = emb.token_type_embeddings.weight.norm(dim=1)
    used = word[999:]  # BERT's vocab.txt: ids < 999 are [PAD], [unused*] and the specials, never trained as words
    return {"word": used.numpy(), "position": pos.numpy(), "token_type": seg.numpy(), "d_model": model.cfg.d_model,
            "word_mean": float(used.mean()), "position_mean": float(pos.mean()), "token_type_mean": float(seg.mean()),
            "embed_scale": model.cfg.embed_scale, "embed_norm": model.cfg.embed_norm}


@torch.no_grad()
def pretrained_recovery(model: MiniBert, factor: float = 1.0, n_samples: int = 256, max_position: int = 128,
                        seed: int = 0) -> dict:
    """Read the word and the position back from factor * word + position + segment 0 of the real tables."""
    emb = model.embeddings
    word_t, pos_t = emb.word_embeddings.weight, emb.position_embeddings.weight[:max_position]
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(999, word_t.shape[0], (n_samples,), generator=g)
    positions = torch.randint(max_position, (n_samples,), generator=g)
    x = factor * word_t[tokens] + pos_t[positions] + emb.token_type_embeddings.weight[0]  # (N, d)
    unit = lambda m: m / m.norm(dim=-1, keepdim=True)  # noqa: E731
    tok_acc = (x @ unit(word_t).T).argmax(1) == tokens
    pos_acc = (x @ unit(pos_t).T).argmax(1) == positions
    share = (factor * word_t[tokens]).norm(dim=1) / x.norm(dim=1)
    return {"factor": factor, "token_accuracy": float(tok_acc.float().mean()),
            "position_accuracy": float(pos_acc.float().mean()), "word_share": float(share.mean())}


def plot_pretrained_norms(fig, r: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    bins = np.linspace(0, max(r["word"].max(), r["position"].max()) * 1.02, 60)
    ax1.hist(r["word"], bins=bins, color="C0", alpha=0.7, density=True, label="word rows")
    ax1.hist(r["position"], bins=bins, color="0.4", alpha=0.7, density=True, label="position rows")
    for i, v in enumerate(r["token_type"]):
        ax1.axvline(v, color="C1", ls="--", label="token-type rows" if i == 0 else None)
    ax1.set(xlabel="row L2 norm", ylabel="density", title="all-MiniLM-L6-v2 embedding tables")
    ax1.legend(fontsize=8)
    ax2.plot(r["position"], color="0.4")
    ax2.axhline(r["word_mean"], color="C0", ls="--", label=f"mean word row {r['word_mean']:.3g}")
    ax2.set(xlabel="position", ylabel="row L2 norm", title="Position rows by position")
    ax2.legend(fontsize=8)


# -- the reference: the same three models trained 4x and 16x longer, 8 seeds ---------------------------------------
HELD_OUT = 50_000_017  # + the seed: the reference's held-out batches, disjoint from every training stream


def reference_seed(seed: int, steps: int) -> dict:
    """One seed of the reference: each variant of run_experiment (same config, task, optimiser and schedule) trained
    `steps` steps from this seed. -> {variant: {"accuracy", "eval_loss": held-out, "ratio": the token/position norm
    ratio before and after}}"""
    task = experiment_task(128)
    cfg = TrainConfig(steps=steps, batch_size=32, lr=3e-3, warmup=max(1, steps // 6), log_every=steps, device="cpu")
    out = {}
    for v in VARIANTS:
        model_cfg = variant_config(v, 64, 128)
        torch.manual_seed(seed)
        before = _token_to_position(MiniBert(model_cfg))
        model = train_seeds(model_cfg, task, [seed], cfg).models[0]
        ev = evaluate(model, task, n_batches=4, batch_size=128, seed=HELD_OUT + seed)
        out[v] = {"accuracy": ev["accuracy"], "eval_loss": ev["loss"], "ratio": [before, _token_to_position(model.cpu())]}
    return out


GATE_MARGIN = 0.2  # learned: held-out loss at least this far below the uniform guess, log(n_content) nats


@dataclass(frozen=True)
class FactorRung:
    """One budget of the reference, per variant: (seeds,) arrays in seed order (they pair across variants)."""

    name: str
    steps: int
    accuracy: dict[str, np.ndarray]
    eval_loss: dict[str, np.ndarray]
    ratio_moved: np.ndarray   # (seeds,) the unscaled model's token/position ratio after training over before
    uniform_loss: float

    def learned(self, variant: str) -> np.ndarray:
        """(seeds,) bool: the runs of `variant` whose held-out loss is GATE_MARGIN below the uniform guess."""
        return np.array([learned("held-out MLM loss", x, baseline=self.uniform_loss, baseline_name="the uniform guess",
                                 margin=GATE_MARGIN, higher_is_better=False).passed for x in self.eval_loss[variant]])


def summarize_reference(ref) -> list[FactorRung]:
    """The stored reference (qalib.lab.reference.Reference) as one FactorRung per budget, in the spec's order."""
    uniform = float(np.log(experiment_task(128).language.n_content))
    out = []
    for r in ref.rungs.values():
        ratio = r.values("none", "ratio")  # (seeds, 2): before, after
        out.append(FactorRung(r.name, int(r.kwargs["steps"]), {v: r.values(v, "accuracy") for v in VARIANTS},
                              {v: r.values(v, "eval_loss") for v in VARIANTS}, ratio[:, 1] / ratio[:, 0], uniform))
    return out


def plot_reference(fig, ref) -> None:
    """Held-out accuracy against the budget, per variant (median over seeds as a line, a dot per seed)."""
    rungs = summarize_reference(ref)
    steps = np.array([r.steps for r in rungs])
    ax = fig.add_subplot(1, 1, 1)
    for i, v in enumerate(VARIANTS):
        acc = np.array([r.accuracy[v] for r in rungs])  # (rungs, seeds)
        seeds_and_median(ax, steps * (1 + 0.05 * (i - 1)), acc, f"C{i}", LABELS[v])  # offset: dots stay visible
    budget_axis(ax, steps)
    ax.set(ylabel="held-out masked-token accuracy",
           title=f"{len(rungs[0].accuracy['none'])} seeds (dots), median as lines")
    ax.legend(fontsize=8)


def reference_claims(ref) -> None:
    """The checks notebook 03 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = summarize_reference(ref)
    first, by = rungs[0], next(r for r in rungs if r.steps == 1600)
    check(f"the gate (held-out loss {GATE_MARGIN} nats under the uniform guess): without the factor no run learned in "
          f"{first.steps} steps; every run of all three models had by {by.steps}",
          at_most(float(first.learned("none").mean()), 0.0) & at_least(min(float(by.learned(v).mean()) for v in VARIANTS), 1.0),
          {f"no factor, {first.steps} steps": first.eval_loss["none"], "uniform": first.uniform_loss})
    early = [paired_difference(r.accuracy["sqrt_d"], r.accuracy["none"], "factor", "no factor") for r in rungs[:-1]]
    check(f"the factor is a head start: at {', '.join(str(r.steps) for r in rungs[:-1])} steps it adds held-out accuracy "
          "(paired by seed, every 95% interval above 0)", above(min(d.low for d in early), 0), [str(d) for d in early])
    last = rungs[-1]
    d = paired_difference(last.accuracy["sqrt_d"], last.accuracy["none"], "factor", "no factor")
    check(f"and only that: by {last.steps} steps the model without it has caught up (the paired 95% interval of the "
          "difference lies inside [-0.07, +0.07])", above(d.low, -0.07) & below(d.high, 0.07), str(d))
    check(f"meanwhile it grew its word rows: its token/position norm ratio moved < 20% in {first.steps} steps and "
          f"more than doubled by {last.steps}, in every seed",
          below(float(np.abs(first.ratio_moved - 1).max()), 0.2) & above(float(last.ratio_moved.min()), 2),
          {f"{first.steps} steps": first.ratio_moved, f"{last.steps} steps": last.ratio_moved})


REFERENCES = [
    ReferenceSpec(
        "03_embedding_scale", "factor", reference_seed, seeds=8,
        rungs=(Rung("live", steps=100), Rung("4x", steps=400), Rung("16x", steps=1600), Rung("64x", steps=6400)),
        lesson="how much the sqrt(d) factor speeds up the original model's masked-token learning at 100, 400, 1600 and "
               "6400 steps, against the same model without it and a BERT-style one, over 8 paired seeds",
        claims=reference_claims),
]

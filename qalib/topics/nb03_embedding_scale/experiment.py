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
from qalib.lab.parallel import map_runs
from qalib.lab.train import TrainConfig, evaluate
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.positions import sinusoidal
from qalib.nn.validate import choice, int_in, seed_list
from qalib.notebook.drawing import seed_band

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

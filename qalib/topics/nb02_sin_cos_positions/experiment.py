"""Notebook 02's experiment: learned vs sinusoidal vs no positions on an order-sensitive task, then longer inputs.

Task: qalib.lab.data.ProbeTask("previous"): every token must output the token before it, on uniformly random
tokens, so nothing but order can solve it. The mini-BERT's learned table has exactly train_len + 1 rows
([CLS] + tokens), as BERT's has 512: evaluating on longer sequences asks for rows it does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from qalib.lab.data import IGNORE, ProbeTask
from qalib.lab.parallel import map_runs
from qalib.lab.train import TrainConfig, evaluate
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.drawing import seed_band

VARIANTS = ("learned", "sinusoidal", "none")


@dataclass
class PositionExperiment:
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    train_len: int
    long_len: int
    steps: list[int]
    curves: dict[str, np.ndarray]            # variant -> (n_seeds, n_logged) training accuracy
    accuracy: dict[str, np.ndarray]          # variant -> (n_seeds,) held-out accuracy at train_len
    long_accuracy: dict[str, np.ndarray | None]  # variant -> (n_seeds, long_len) accuracy per token position,
                                                 # None if the variant cannot run at long_len
    long_error: dict[str, str | None]        # variant -> the error message when it cannot run
    chance: float
    bag_ceiling: float                       # best accuracy without order information (see bag_of_tokens_ceiling)
    models: dict[str, list[MiniBert]] = field(default_factory=dict, repr=False)


def experiment_config(pos: str, train_len: int, d_model: int = 32, vocab_size: int = 16) -> MiniBertConfig:
    """1 layer, 2 heads; the learned table has train_len + 1 rows ([CLS] + tokens)."""
    return MiniBertConfig(vocab_size=vocab_size, d_model=d_model, n_layers=1, n_heads=2, d_ff=4 * d_model,
                          max_len=train_len + 1, pos=pos, embed_init_std=1.0)


def build_model(pos: str, train_len: int, d_model: int = 32, vocab_size: int = 16) -> MiniBert:
    """Same starting scale for every variant: word vectors std 1 (norm ~sqrt(d)); a learned position row std
    1/sqrt(2) (norm ~sqrt(d/2), the sinusoid's norm). With BERT's 0.02 for one of the two, the other drowns it
    after the sum and LayerNorm, and that variant waits hundreds of steps for its part to grow."""
    model = MiniBert(experiment_config(pos, train_len, d_model, vocab_size))
    if pos == "learned":
        torch.nn.init.normal_(model.embeddings.position_embeddings.weight, std=2 ** -0.5)
    return model


@torch.no_grad()
def accuracy_by_position(model: MiniBert, task: ProbeTask, seq_len: int, n: int = 256, seed: int = 999) -> np.ndarray:
    """Accuracy at each token position 1 .. seq_len - 1 (position 0 has no previous token): -> (seq_len,), NaN-free
    (entry 0 is set to the mean of the rest so plots stay finite). Raises the model's ValueError if it cannot run."""
    batch = task.batch(n, torch.Generator().manual_seed(seed), seq_len=seq_len)
    model.eval()
    hidden = model(batch.input_ids, batch.token_type_ids, batch.attention_mask).last_hidden_state
    pred = model.mlm_logits(hidden).argmax(-1)[:, 1:]  # drop [CLS]: (n, seq_len)
    labels = batch.labels[:, 1:]
    keep = labels != IGNORE
    acc = ((pred == labels) & keep).double().sum(0) / keep.double().sum(0).clamp(min=1)
    acc[0] = acc[1:].mean()
    return acc.numpy()


def bag_of_tokens_ceiling(task: ProbeTask, n: int = 2000, seed: int = 7) -> float:
    """Best accuracy of a position-blind predictor on 'previous': it knows x_t and the multiset of tokens, so its
    best guess is the most frequent other token. Monte Carlo over n sequences."""
    x = task.batch(n, torch.Generator().manual_seed(seed)).input_ids[:, 1:]  # (n, T) content tokens
    counts = torch.zeros(n, task.vocab_size).scatter_add_(1, x, torch.ones_like(x, dtype=torch.float))
    others = counts[:, None, :].repeat(1, x.shape[1], 1)
    others.scatter_add_(2, x[:, :, None], -torch.ones(n, x.shape[1], 1))  # remove x_t itself: (n, T, V)
    best = others.max(-1).values[:, 1:]  # positions 1 .. T-1 have a previous token
    return float((best / (x.shape[1] - 1)).mean())


def run_position_experiment(variants=VARIANTS, seeds=(0, 1, 2), steps: int = 200, train_len: int = 12,
                            long_len: int = 24, d_model: int = 32, vocab_size: int = 16, batch_size: int = 32,
                            lr: float = 5e-3, device=None) -> PositionExperiment:
    """Train each variant once per seed; evaluate at train_len (held-out batches) and per position at long_len.
    Each variant's seeds train as one batched run (train_seeds); the variants run side by side on the cores."""
    variants = choices("variants", variants, VARIANTS)
    seeds = seed_list("seeds", seeds)
    int_in("long_len", long_len, train_len + 1)  # longer than trained on: the length the variants extrapolate to
    task = ProbeTask("previous", vocab_size=vocab_size, seq_len=train_len)
    tcfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=20, log_every=max(1, steps // 20),
                       device=None if device is None else str(device))
    res = PositionExperiment(tuple(variants), tuple(seeds), train_len, long_len, [], {}, {}, {}, {},
                             chance=1 / (vocab_size - 5), bag_ceiling=bag_of_tokens_ceiling(task))
    _train_all(res, task, tcfg, d_model, vocab_size)
    return res


def _train_all(res: PositionExperiment, task: ProbeTask, tcfg: TrainConfig, d_model: int, vocab_size: int) -> None:
    # every seed of one variant in one batched run (qalib.lab.train_batched); the variants side by side on the cores
    train_variant = partial(_train_variant, seeds=list(res.seeds), task=task, tcfg=tcfg, train_len=res.train_len,
                            long_len=res.long_len, d_model=d_model, vocab_size=vocab_size)
    for v, mine in zip(res.variants, map_runs(train_variant, list(res.variants), tcfg.device)):
        res.steps = mine[-1]["step"]
        res.models[v] = [o["model"] for o in mine]
        res.curves[v] = np.array([o["curve"] for o in mine])
        res.accuracy[v] = np.array([o["accuracy"] for o in mine])
        longs = [o["long"] for o in mine if o["long"] is not None]
        res.long_error[v] = mine[-1]["long_error"]
        res.long_accuracy[v] = np.array(longs) if longs else None


def _train_variant(v: str, seeds: list[int], task: ProbeTask, tcfg: TrainConfig, train_len: int, long_len: int,
                   d_model: int, vocab_size: int) -> list[dict]:
    """Every seed of one variant: member i starts as torch.manual_seed(seed_i); build_model(v, ...) and reads its
    own data stream, so each seed sees the same data in every variant."""
    run = train_seeds(partial(build_model, v, train_len, d_model, vocab_size), task, seeds, tcfg)
    out = []
    for model, hist in zip(run.models, run.histories):
        model.cpu()
        o = {"step": hist.step, "curve": hist.accuracy, "model": model, "long": None, "long_error": None,
             "accuracy": evaluate(model, task, n_batches=2, batch_size=256)["accuracy"]}
        try:
            o["long"] = accuracy_by_position(model, task, long_len)
        except ValueError as err:
            o["long_error"] = str(err)
        out.append(o)
    return out


def plot_experiment(fig, r: PositionExperiment) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    for i, v in enumerate(r.variants):
        seed_band(ax1, r.steps, r.curves[v], color=f"C{i}", label=f"{v} (final {r.accuracy[v].mean():.2f})")
        if r.long_accuracy[v] is not None:
            seed_band(ax2, np.arange(1, r.long_len), r.long_accuracy[v][:, 1:], color=f"C{i}", label=v)
    for ax in (ax1, ax2):
        ax.axhline(r.bag_ceiling, color="grey", ls=":", label="best without order")
        ax.set(ylim=(0, 1.02), ylabel="accuracy")
    ax1.set(title=f"training ('previous' token, length {r.train_len}); band = min-max over {len(r.seeds)} seeds",
            xlabel="step")
    ax2.axvspan(r.train_len - 0.5, r.long_len - 0.5, color="grey", alpha=0.1, label="positions never trained")
    failed = [v for v in r.variants if r.long_error.get(v)]
    ax2.set(title=f"evaluated at length {r.long_len}" + (f" ({', '.join(failed)}: cannot run)" if failed else ""),
            xlabel="token position")
    ax1.legend(fontsize="small")
    ax2.legend(fontsize="small")

"""Notebook 01, section 5: train a one-layer attention model with three logit scales on a retrieval task.

    task = RecallTask(n_keys=4, n_values=4)
    res = scale_ablation(seeds=(0, 1, 2), steps=150)
    res["final_loss"]["none"]     # one number per seed

The task needs content-based retrieval: the query token names a key; the model must find the one
pair token carrying that key and copy it. One attention layer can do it only with a sharp attention
pattern, so the logit scale (Vaswani et al. 2017, sec. 3.2.1) decides how easily it gets there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from qalib.lab.data import CLS, IGNORE, N_SPECIAL, Batch
from qalib.lab.parallel import map_grid
from qalib.lab.train import TrainConfig, loss_and_accuracy, train
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert, SelfAttention
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.drawing import seed_band

SCALES = ("inv_sqrt_dk", "none", "inv_dk")


@dataclass
class RecallTask:
    """[CLS] p_1 .. p_K query; p_j encodes (key_j, value_j), keys a random permutation, values random.

    Pair token for (key k, value v): N_SPECIAL + k * n_values + v. Query token for key k:
    N_SPECIAL + n_keys * n_values + k. The only label is at the query position: the pair token with
    that key. Knowing the key alone gives accuracy 1 / n_values; retrieving the pair gives 1.
    """

    n_keys: int = 4
    n_values: int = 4

    def __post_init__(self):
        for name in ("n_keys", "n_values"):
            int_in(f"RecallTask.{name}", getattr(self, name), 2)

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + self.n_keys * self.n_values + self.n_keys

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        b, k_n, v_n = batch_size, self.n_keys, self.n_values
        keys = torch.argsort(torch.rand(b, k_n, generator=generator), dim=1)      # (B, K) permutation of keys
        values = torch.randint(v_n, (b, k_n), generator=generator)                  # (B, K)
        pairs = N_SPECIAL + keys * v_n + values                                    # (B, K) pair tokens
        pick = torch.randint(k_n, (b,), generator=generator)                       # which pair is asked for
        rows = torch.arange(b)
        query = N_SPECIAL + k_n * v_n + keys[rows, pick]                            # (B,)
        ids = torch.cat([torch.full((b, 1), CLS), pairs, query[:, None]], dim=1)    # (B, K + 2)
        labels = torch.full_like(ids, IGNORE)
        labels[:, -1] = pairs[rows, pick]
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


def recall_config(d_model: int = 64, n_heads: int = 1, task: RecallTask | None = None, init_std: float | None = None,
                  attn_scale="inv_sqrt_dk") -> MiniBertConfig:
    """One layer, large per-head d_k. init_std None: d_model ** -0.5, so q and k start with ~unit-variance
    components, the footnote's assumption (BERT's 0.02 would start every variant with near-zero logits)."""
    task = task or RecallTask()
    std = d_model ** -0.5 if init_std is None else init_std
    return MiniBertConfig(vocab_size=task.vocab_size, d_model=d_model, n_layers=1, n_heads=n_heads, d_ff=d_model,
                          max_len=task.n_keys + 2, attn_scale=attn_scale, init_std=std, embed_init_std=0.02)


def train_variant(scale, seed: int, steps: int = 200, d_model: int = 64, n_heads: int = 1, batch_size: int = 32,
                  lr: float = 3e-3, task: RecallTask | None = None, log_every: int = 10, device=None,
                  init_std: float | None = None) -> dict:
    """Train one model; return loss/accuracy curves, attention entropy and the W_q/W_k gradient norm.
    init_std: as recall_config's (None: d_model ** -0.5, the footnote's unit-variance q and k)."""
    task = task or RecallTask()
    torch.manual_seed(seed)
    model = MiniBert(recall_config(d_model, n_heads, task, init_std=init_std, attn_scale=scale))
    qk_grad: list[float] = []
    att = model.layers[0].attention
    # the hook sits on the parameter, qkv.weight (3d, d): its gradient g holds every row, split into W_q, W_k, W_v
    handle = att.qkv.weight.register_hook(lambda g: qk_grad.append(_qk_norm(att, g)))
    try:
        hist = train(model, task, TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=10, seed=seed,
                                              log_every=log_every, entropy_every=log_every,
                                              device=None if device is None else str(device)))  # TrainConfig wants a str
    finally:
        handle.remove()
    return {"step": np.array(hist.step), "loss": np.array(hist.loss), "accuracy": np.array(hist.accuracy),
            "entropy_step": np.array(hist.entropy_step), "entropy": np.array([e[0] for e in hist.attn_entropy]),
            "qk_grad": np.array(qk_grad)[np.array(hist.step)]}


def initial_qk_grads(scales=SCALES, seeds=range(100), d_model: int = 64, n_heads: int = 1, batch_size: int = 32,
                     task: RecallTask | None = None) -> dict[str, np.ndarray]:
    """The W_q, W_k gradient norm at step 0 for many initialisations, without training: scale -> (n_seeds,).

    Entry i is train_variant(scale, seeds[i])["qk_grad"][0]: the same initial weights (torch.manual_seed(seed),
    then the model) and the same first batch (a generator seeded with seed), one forward and backward pass."""
    seeds = seed_list("seeds", seeds)
    scales = choices("scales", scales, SCALES)
    task = task or RecallTask()
    out = {}
    for s in scales:
        norms = []
        for seed in seeds:
            torch.manual_seed(seed)
            model = MiniBert(recall_config(d_model, n_heads, task, attn_scale=s)).train()
            loss, _ = loss_and_accuracy(model, task.batch(batch_size, torch.Generator().manual_seed(seed)))
            loss.backward()
            att = model.layers[0].attention
            norms.append(_qk_norm(att, att.qkv.weight.grad))
        out[s] = np.array(norms)
    return out


def _qk_norm(att: SelfAttention, grad: torch.Tensor) -> float:
    """The Frobenius norm of the W_q and W_k rows of a gradient of qkv.weight (3d, d), taken together."""
    g_q, g_k, _ = att.split_qkv(grad)  # (d, d) each
    return float(torch.cat([g_q, g_k]).norm())  # (2d, d): the rows [q | k] in order, one norm as over both blocks


def _train_pair(pair: tuple, **kwargs) -> dict:
    scale, seed = pair
    return train_variant(scale, seed, **kwargs)


def scale_ablation(scales=SCALES, seeds=(0, 1, 2), steps: int = 200, d_model: int = 64, n_heads: int = 1,
                   batch_size: int = 32, lr: float = 3e-3, n_keys: int = 4, n_values: int = 4, device=None) -> dict:
    """Every scale x every seed. Arrays are (n_seeds, n_logged). final_* are the mean of the last 3 logs per seed."""
    seeds = seed_list("seeds", seeds)
    scales = choices("scales", scales, SCALES)
    int_in("steps", steps, 20)
    task = RecallTask(n_keys, n_values)
    out = {"scales": list(scales), "seeds": list(seeds), "d_k": d_model // n_heads, "runs": {},
           "chance_loss": math.log(task.n_keys * task.n_values), "key_only_loss": math.log(task.n_values)}
    train_one = partial(_train_pair, steps=steps, d_model=d_model, n_heads=n_heads, batch_size=batch_size, lr=lr,
                        task=task, device=device)
    for s, mine in map_grid(train_one, scales, seeds, device).items():  # runs side by side on the CPU cores
        out["runs"][s] = {k: np.stack([r[k] for r in mine]) for k in mine[0]}
    out["final_loss"] = {s: out["runs"][s]["loss"][:, -3:].mean(1) for s in scales}
    out["final_accuracy"] = {s: out["runs"][s]["accuracy"][:, -3:].mean(1) for s in scales}
    out["initial_entropy"] = {s: out["runs"][s]["entropy"][:, 0] for s in scales}
    out["initial_qk_grad"] = {s: out["runs"][s]["qk_grad"][:, 0] for s in scales}
    out["late_qk_grad"] = {s: out["runs"][s]["qk_grad"][:, -5:].mean(1) for s in scales}
    out["final_entropy"] = {s: out["runs"][s]["entropy"][:, -3:].mean(1) for s in scales}
    out["max_entropy"] = math.log(task.n_keys + 2)  # uniform over [CLS], the pairs and the query
    return out


def plot_ablation(fig, res) -> None:
    """Loss, attention entropy and W_q/W_k gradient norm over training: mean over seeds, band = min..max."""
    axes = fig.subplots(1, 3)
    panels = [("loss", "step", "training loss (nats)", "loss"), ("entropy", "entropy_step", "attention entropy (nats)",
              "attention entropy"), ("qk_grad", "step", "||grad W_q, W_k|| (log scale)", "gradient norm at W_q, W_k")]
    for ax, (key, xkey, ylabel, title) in zip(axes, panels):
        for i, s in enumerate(res["scales"]):
            r = res["runs"][s]
            seed_band(ax, r[xkey][0], r[key], color=f"C{i}", label=s)
        ax.set(xlabel="training step", ylabel=ylabel, title=title)
    axes[0].axhline(res["key_only_loss"], color="grey", ls=":", label="knows key only")
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=8)

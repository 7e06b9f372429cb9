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
from qalib.lab.gate import Gate, learned, learned_share
from qalib.lab.parallel import map_grid
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_interval
from qalib.lab.train import TrainConfig, loss_and_accuracy, train
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert, SelfAttention
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.claims import above, at_least, at_most, below, check
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


# -- the reference: the same runs with more seeds, at three budgets and two initialisations ---------------------
SOLVED_LOSS = 0.05  # a run has solved the task once its logged training loss is below this (retrieval drives it to 0)


def reference_seed(seed: int, steps: int, init_std: float | None = None) -> dict:
    """One seed of the reference: every scale trained `steps` steps from the same initial draw and data stream.
    -> {scale: {"final_loss", "final_accuracy", "initial_entropy": nats at step 0, "solved_step": the first logged
    step with loss < SOLVED_LOSS (None: not solved), "steps": logged steps, "loss": the loss at them}}"""
    log_every = max(10, steps // 40)
    out = {}
    for scale in SCALES:
        r = train_variant(scale, seed, steps=steps, log_every=log_every, init_std=init_std, device="cpu")
        solved = np.flatnonzero(r["loss"] < SOLVED_LOSS)
        out[scale] = {"final_loss": float(r["loss"][-3:].mean()), "final_accuracy": float(r["accuracy"][-3:].mean()),
                      "initial_entropy": float(r["entropy"][0]),
                      "solved_step": int(r["step"][solved[0]]) if len(solved) else None,
                      "steps": r["step"].tolist(), "loss": r["loss"].tolist()}
    return out


@dataclass(frozen=True)
class RungSummary:
    """One rung of the reference, per scale: arrays over the seeds, in seed order (so they pair across scales)."""

    name: str
    steps: int
    init: str                          # "d^-1/2" (the footnote's unit-variance q, k) or BERT's "0.02"
    final_loss: dict[str, np.ndarray]  # mean of the last 3 logged losses
    solved_step: dict[str, np.ndarray]  # the first logged step under SOLVED_LOSS; inf where never
    gates: dict[str, list]             # per seed: qalib.lab.gate.Gate, "learned the key part"

    def solved(self, scale: str) -> np.ndarray:
        return np.isfinite(self.solved_step[scale])

    def learned_share(self, scale: str) -> float:
        return learned_share(self.gates[scale])


def key_part_gate(final_loss: float, n_keys: int = 4, n_values: int = 4) -> Gate:
    """The learned-or-not gate of this task: beat chance over the pair tokens, ln(K V), by enough to know the key,
    i.e. end below ln(V) + 0.2 (knowing the key alone gives ln V; retrieving the pair drives the loss to 0)."""
    chance = math.log(n_keys * n_values)
    return learned("final loss (nats)", final_loss, baseline=chance, baseline_name="chance over the pair tokens",
                   margin=chance - math.log(n_values) - 0.2, higher_is_better=False)


def summarize_reference(ref) -> list[RungSummary]:
    """The stored reference (qalib.lab.reference.Reference) as one RungSummary per rung, in the spec's order."""
    out = []
    for rung in ref.rungs.values():
        final = {s: rung.values(s, "final_loss") for s in SCALES}
        solved = {s: np.array([np.inf if r[s]["solved_step"] is None else r[s]["solved_step"] for r in rung.runs],
                              dtype=float) for s in SCALES}
        init = "0.02" if rung.kwargs.get("init_std") == 0.02 else "d^-1/2"
        out.append(RungSummary(rung.name, int(rung.kwargs["steps"]), init, final, solved,
                               {s: [key_part_gate(v) for v in final[s]] for s in SCALES}))
    return out


SCALE_LABELS = {"inv_sqrt_dk": "1/sqrt(d_k)", "none": "no scaling", "inv_dk": "1/d_k"}


@dataclass(frozen=True)
class Paired:
    """a's final loss minus b's, seed by seed, on the seeds where both runs passed the gate; its 95% interval."""

    a: str
    b: str
    n: int          # pairs used
    n_left_out: int  # seeds where a run did not learn the key part
    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        left = f", {self.n_left_out} seed(s) left out: a run did not learn" if self.n_left_out else ""
        return (f"{SCALE_LABELS[self.a]} minus {SCALE_LABELS[self.b]}: {self.mean:+.2f} nats, 95% interval "
                f"[{self.low:+.2f}, {self.high:+.2f}] over {self.n} seeds{left}")


def paired(rung: RungSummary, a: str, b: str) -> Paired:
    """The paired comparison of two scalings' final losses at one rung (qalib.lab.stats.paired_interval)."""
    keep = np.array([ga.passed and gb.passed for ga, gb in zip(rung.gates[a], rung.gates[b])])
    r = paired_interval(rung.final_loss[a][keep], rung.final_loss[b][keep])
    return Paired(a, b, int(keep.sum()), int((~keep).sum()), r["mean"], r["low"], r["high"])


def reference_claims(ref) -> None:
    """The checks notebook 01 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = {r.name: r for r in summarize_reference(ref)}
    shares = {name: min(r.learned_share(s) for s in SCALES) for name, r in rungs.items()}
    check("the gate: at every budget and initialisation at least 90% of each scaling's runs learned the key part "
          "(final loss below ln 4 + 0.2; chance over the pair tokens ln 16 = 2.77); only those are compared",
          at_least(min(shares.values()), 0.9), shares)
    live, ref_ = rungs["live"], rungs["reference"]
    for rung, a, b, word in ((live, "inv_dk", "inv_sqrt_dk", "below"), (live, "none", "inv_sqrt_dk", "above"),
                             (ref_, "inv_dk", "inv_sqrt_dk", "below")):
        d = paired(rung, a, b)
        side = below(d.high, 0) if word == "below" else above(d.low, 0)
        check(f"footnote's initialisation, {rung.steps} steps: {SCALE_LABELS[a]} ends {word} {SCALE_LABELS[b]} "
              f"(paired 95% interval of the final-loss difference entirely {word} 0)", side,
              {"mean": d.mean, "interval": (d.low, d.high), "pairs": d.n})
    bert = rungs["reference, init 0.02"]
    d = paired(bert, "none", "inv_sqrt_dk")
    check(f"BERT's 0.02 initialisation, {bert.steps} steps: no scaling ends above 1/sqrt(d_k) (paired 95% interval "
          "entirely above 0)", above(d.low, 0), {"mean": d.mean, "interval": (d.low, d.high), "pairs": d.n})
    check(f"BERT's 0.02 initialisation, {bert.steps} steps: 1/sqrt(d_k) and 1/d_k both solve the task in at least "
          "90% of the seeds, no scaling in at most 60%", at_least(min(bert.solved("inv_sqrt_dk").mean(),
          bert.solved("inv_dk").mean()), 0.9) & at_most(bert.solved("none").mean(), 0.6),
          {SCALE_LABELS[s]: float(bert.solved(s).mean()) for s in SCALES})


def plot_reference(fig, ref) -> None:
    """Left: the median final loss of each scaling against the budget (band: the middle half of the seeds), with the
    footnote's initialisation; BERT's 0.02 initialisation at the reference budget as open markers. Right: the share
    of seeds that solved the task by the end of the run."""
    rungs = summarize_reference(ref)
    main = [r for r in rungs if r.init == "d^-1/2"]
    other = [r for r in rungs if r.init != "d^-1/2"]
    ax_loss, ax_solved = fig.subplots(1, 2)
    steps = np.array([r.steps for r in main])
    for i, (s, marker) in enumerate(zip(SCALES, "os^")):
        q25, q50, q75 = (np.array([np.percentile(r.final_loss[s], q) for r in main]) for q in (25, 50, 75))
        ax_loss.plot(steps, q50, marker + "-", color=f"C{i}", label=SCALE_LABELS[s])
        ax_loss.fill_between(steps, q25, q75, color=f"C{i}", alpha=0.2, lw=0)
        ax_solved.plot(steps, [r.solved(s).mean() for r in main], marker + "-", color=f"C{i}", label=SCALE_LABELS[s],
                       ms=9 - 2 * i)  # three sizes: equal shares stay visible
        for r in other:  # beside the last budget, one step right per scaling, so equal values do not hide each other
            x = r.steps * (1.12 + 0.1 * i)
            ax_loss.plot([x], [np.median(r.final_loss[s])], marker, mfc="none", color=f"C{i}")
            ax_solved.plot([x], [r.solved(s).mean()], marker, mfc="none", color=f"C{i}")
    ax_loss.axhline(math.log(4), color="grey", ls=":", lw=1, label="knows the key only (ln 4)")
    for ax in (ax_loss, ax_solved):
        ax.set_xscale("log")
        ax.set_xticks(steps, [str(x) for x in steps])
        ax.minorticks_off()
        ax.set_xlabel("training steps (open markers: BERT's 0.02 init)")
    n = len(main[0].final_loss[SCALES[0]])
    ax_loss.set(ylabel="final loss (nats)", title=f"median over {n} seeds, middle half shaded")
    ax_solved.set(ylabel="share of seeds", ylim=(-0.03, 1.03), title=f"solved the task (loss < {SOLVED_LOSS})")
    ax_loss.legend(fontsize=8)


REFERENCES = [
    ReferenceSpec(
        "01_scaled_attention", "ablation", reference_seed, seeds=20,
        rungs=(Rung("live", steps=200), Rung("4x", steps=800), Rung("reference", steps=3200),
               Rung("reference, init 0.02", steps=3200, init_std=0.02)),
        lesson="how the three scalings rank at three budgets and two initialisations, over 20 paired seeds",
        claims=reference_claims),
]


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

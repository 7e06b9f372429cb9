"""Notebook 11's experiment: pre-train the mini-BERT with 100/0/0 and 80/10/10 masking, then look at the
tokens that were NOT masked, as fine-tuning will (no [MASK] anywhere in the input).

Language: qalib's SyntheticLanguage with 15 content tokens, 2 successors per token, no lag (a pure bigram
chain): a one-layer d=32 model learns its masked-LM task within a few hundred steps on one CPU thread.

    bayes_mlm_accuracy   the best possible accuracy at a [MASK] with both neighbours visible (exact posterior)
    probe_unmasked       after pre-training: MLM head on clean input (own token?), [MASK] accuracy, repair of
                         random replacements, linear probes on clean hidden states (own / previous / next token)
    run_experiment       both variants x several seeds
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from qalib.lab.data import IGNORE, N_SPECIAL, MLMTask, SyntheticLanguage, mask_tokens, with_cls_sep
from qalib.lab.gate import Gate, learned, learned_share
from qalib.lab.parallel import map_runs
from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import PairedDifference, paired_difference
from qalib.lab.train import TrainConfig
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.claims import above, at_least, below, check
from qalib.notebook.drawing import seed_band

VARIANTS = {"100/0/0": (1.0, 0.0), "80/10/10": (0.8, 0.1)}  # (mask_frac, random_frac); keep = the rest


def experiment_language(seed: int = 0) -> SyntheticLanguage:
    return SyntheticLanguage(vocab_size=20, branching=2, lag=4, p_lag=0.0, seed=seed)


def experiment_config(d_model: int = 32, n_layers: int = 1) -> MiniBertConfig:
    return MiniBertConfig(vocab_size=20, d_model=int_in("d_model", d_model, 8), n_layers=int_in("n_layers", n_layers, 1, 12),
                          n_heads=2, d_ff=2 * d_model, max_len=32)


def transition_matrix(language: SyntheticLanguage) -> torch.Tensor:
    """(C, C) bigram probabilities between content tokens (lag ignored: the experiment's language has none)."""
    c = language.n_content
    A = torch.zeros(c, c, dtype=torch.float64)
    for a in range(c):
        for b in language.successors[a].tolist():
            A[a, b] += 1.0 / language.branching
    return A


def one_neighbour_accuracy(language: SyntheticLanguage) -> float:
    """The best accuracy at a [MASK] from the left neighbour alone: E over the left token a of max_b P(b | a), with a
    drawn from the chain's stationary distribution. A model at this level uses one side of its context."""
    A = transition_matrix(language)
    w, v = torch.linalg.eig(A.T)
    pi = v[:, int(torch.argmin((w - 1).abs()))].real
    pi = pi / pi.sum()                                                          # stationary: pi A = pi
    return float((pi * A.max(-1).values).sum())


def bayes_mlm_accuracy(language: SyntheticLanguage, n: int = 2000, seq_len: int = 12, seed: int = 1) -> float:
    """Expected accuracy of the Bayes predictor at an interior position with both neighbours visible:
    P(x_t | x_{t-1}, x_{t+1}) is proportional to A[x_{t-1}, x_t] A[x_t, x_{t+1}]; accuracy = E[max posterior]."""
    if language.p_lag > 0:
        raise ValueError("bayes_mlm_accuracy needs a pure bigram language (p_lag = 0)")
    A = transition_matrix(language)
    x = language.sample(int_in("n", n, 1), int_in("seq_len", seq_len, 3), torch.Generator().manual_seed(seed)) - N_SPECIAL
    left, right = x[:, :-2].reshape(-1), x[:, 2:].reshape(-1)
    post = A[left] * A[:, right].T                                              # (N, C): A[l, b] A[b, r]
    post = post / post.sum(-1, keepdim=True)
    return float(post.max(-1).values.mean())


@torch.no_grad()
def probe_unmasked(model: MiniBert, language: SyntheticLanguage, seq_len: int = 12, n: int = 512, seed: int = 999) -> dict:
    """Measurements on a pre-trained model (all on fresh sequences from a fixed seed).

    own_token      MLM head at every position of CLEAN input (no [MASK]): argmax == the input token
    p_own          the probability it gives the input token there
    masked_acc     accuracy at [MASK] positions (15% of positions, all [MASK]): the pre-training task itself
    repair_acc     at positions replaced by a random token: argmax == the original token
    probe_*        linear least-squares probes on the clean final hidden states (train half / test half)
    """
    g = torch.Generator().manual_seed(seed)
    ids = with_cls_sep(language.sample(int_in("n", n, 4), seq_len, g))            # (n, T + 2)
    inner = slice(1, seq_len + 1)
    h = model(ids).last_hidden_state                                             # (n, T + 2, d)
    probs = model.mlm_logits(h[:, inner]).float().softmax(-1)                    # (n, T, V)
    own = ids[:, inner]
    res = {"own_token": float((probs.argmax(-1) == own).double().mean()),
           "p_own": float(probs.gather(-1, own[..., None]).mean())}
    v = language.vocab_size
    for name, (m, r) in (("masked_acc", (1.0, 0.0)), ("repair_acc", (0.0, 1.0))):
        corrupted, labels = mask_tokens(ids, v, g, 0.15, m, r)
        keep = (labels != IGNORE) & (corrupted != ids) if r else labels != IGNORE  # random: only real replacements
        pred = model.mlm_logits(model(corrupted).last_hidden_state[keep]).argmax(-1)
        res[name] = float((pred == labels[keep]).double().mean())
    X = h[:, 2:seq_len].double()                                                 # positions with both neighbours real
    targets = {"own": ids[:, 2:seq_len], "previous": ids[:, 1:seq_len - 1], "next": ids[:, 3:seq_len + 1]}
    half = n // 2
    for name, y in targets.items():
        Wp = fit_probe(X[:half].reshape(-1, X.shape[-1]), y[:half].reshape(-1), v, ridge=1e-3)
        res[f"probe_{name}"] = probe_accuracy(Wp, X[half:].reshape(-1, X.shape[-1]), y[half:].reshape(-1))
    return res


LIVE_STEPS, LIVE_LR = 500, 3e-3  # the live run: 80/10/10 has learned the [MASK] task in most seeds, 100/0/0 not yet
HELD_OUT = 10_000  # seed k's probe sentences come from generator seed HELD_OUT + k: they move with the seeds


def run_experiment(seeds=(0, 1, 2), steps: int = LIVE_STEPS, d_model: int = 32, n_layers: int = 1, batch_size: int = 32,
                   seq_len: int = 12, lr: float = LIVE_LR, variants=tuple(VARIANTS), n_probe: int = 512,
                   device=None) -> dict:
    """Pre-train one mini-BERT per (variant, seed) on the same data stream, then probe_unmasked each."""
    variants = choices("variants", variants, VARIANTS)
    seeds = seed_list("seeds", seeds)
    int_in("steps", steps, 1)
    lang = experiment_language()
    cfg = experiment_config(d_model, n_layers)
    start = time.perf_counter()
    # one batched run of all seeds per rule (qalib.lab.train_batched); the rules side by side on the CPU cores
    train_one = partial(_train_variant, seeds=seeds, lang=lang, cfg=cfg, seq_len=seq_len, n_probe=n_probe,
                        train_cfg=TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=max(1, steps // 10),
                                              log_every=max(1, steps // 20), device=device))
    per_variant = map_runs(train_one, list(variants), device)
    metrics: dict[str, dict[str, list]] = {v: {} for v in variants}
    curves: dict[str, list] = {v: [] for v in variants}
    for variant, outs in zip(variants, per_variant):
        for out in outs:
            curves[variant].append(out["loss"])
            for k, val in out["metrics"].items():
                metrics[variant].setdefault(k, []).append(val)
    log_steps = per_variant[-1][-1]["step"]
    return {"variants": list(variants), "seeds": list(seeds), "steps": steps,
            "metrics": {v: {k: np.array(x) for k, x in m.items()} for v, m in metrics.items()},
            "curves": {v: np.array(c) for v, c in curves.items()}, "log_steps": np.array(log_steps),
            "bayes": bayes_mlm_accuracy(lang, seq_len=seq_len), "chance": 1 / lang.n_content,
            "seconds": time.perf_counter() - start}


def _train_variant(variant: str, seeds: list[int], lang: SyntheticLanguage, cfg: MiniBertConfig, seq_len: int,
                   n_probe: int, train_cfg: TrainConfig) -> list[dict]:
    """Every seed of one masking rule, trained together: member i starts as torch.manual_seed(seed_i);
    MiniBert(cfg) and reads its own data stream (the same for both rules), then probe_unmasked each."""
    mask_frac, random_frac = VARIANTS[variant]
    task = MLMTask(lang, seq_len, 0.15, mask_frac, random_frac)
    run = train_seeds(cfg, task, seeds, train_cfg)
    return [{"step": hist.step, "loss": hist.loss,
             "metrics": probe_unmasked(model.cpu(), lang, seq_len, n=n_probe, seed=HELD_OUT + seed)}
            for seed, model, hist in zip(seeds, run.models, run.histories)]


_SHOWN = {"own_token": "MLM head: own token\n(clean input)", "masked_acc": "MLM at [MASK]",
          "repair_acc": "MLM at random\nreplacements", "probe_own": "probe: own token",
          "probe_previous": "probe: previous", "probe_next": "probe: next"}


def plot_experiment(fig, r) -> None:
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.7, 1])
    keys = list(_SHOWN)
    x = np.arange(len(keys))
    width = 0.8 / len(r["variants"])
    for i, v in enumerate(r["variants"]):
        a = np.array([r["metrics"][v][k] for k in keys])                         # (metrics, seeds)
        m = a.mean(1)
        ax1.bar(x + (i - 0.5) * width, m, width, yerr=[m - a.min(1), a.max(1) - m], capsize=3, label=v, color=f"C{i}")
    ax1.axhline(r["chance"], color="k", lw=1, ls=":", label=f"chance 1/{round(1 / r['chance'])}")
    ax1.axhline(r["bayes"], color="0.4", lw=1, ls="--", label=f"best possible at [MASK] ({r['bayes']:.2f})")
    ax1.set_xticks(x, [_SHOWN[k] for k in keys], fontsize=7)
    ax1.set(ylabel="accuracy", ylim=(0, 1.05), title=f"after {r['steps']} steps (mean, min-max over {len(r['seeds'])} seeds)")
    ax1.legend(fontsize=7, loc="upper right")
    for i, v in enumerate(r["variants"]):
        seed_band(ax2, r["log_steps"], r["curves"][v], color=f"C{i}", label=v)
    ax2.set(xlabel="training step", ylabel="MLM loss on the predicted 15% (nats)", title="training loss")
    ax2.legend(fontsize=7)


# -- the gate and the reference: 16 paired seeds at three budgets and the earlier, higher rate ------------------
GATE_MARGIN = 0.1  # above the one-neighbour level: the model uses both sides of the [MASK]


def mlm_gate(masked_acc: float, language: SyntheticLanguage) -> Gate:
    """The learned-or-not gate: accuracy at [MASK] above what the left neighbour alone gives (0.5 here) by 0.1."""
    return learned("accuracy at [MASK]", masked_acc, baseline=one_neighbour_accuracy(language),
                   baseline_name="the one-neighbour level", margin=GATE_MARGIN)


def reference_seed(seed: int, steps: int, lr: float) -> dict:
    """One seed of the reference: both rules trained `steps` steps at rate `lr` from the same initial draw on the same
    data stream, then probe_unmasked; "untrained": probe_unmasked of that initial model (what training added).
    -> {"untrained": metrics, rule: {**metrics, "steps": logged steps, "loss": the logged training loss}}"""
    lang, cfg = experiment_language(), experiment_config()
    torch.manual_seed(seed)
    out = {"untrained": probe_unmasked(MiniBert(cfg).eval(), lang, 12, seed=HELD_OUT + seed)}
    train_cfg = TrainConfig(steps=steps, batch_size=32, lr=lr, warmup=max(1, steps // 10),
                            log_every=max(1, steps // 40), device="cpu")
    for rule in VARIANTS:
        (r,) = _train_variant(rule, [seed], lang, cfg, 12, 512, train_cfg)
        out[rule] = {**r["metrics"], "steps": list(r["step"]), "loss": [round(float(x), 4) for x in r["loss"]]}
    return out


METRICS = ("own_token", "p_own", "masked_acc", "repair_acc", "probe_own", "probe_previous", "probe_next")


@dataclass(frozen=True)
class MaskingRung:
    """One rung of the reference, per rule: arrays over the seeds, in seed order (so they pair across rules)."""

    name: str
    steps: int
    lr: float
    metrics: dict[str, dict[str, np.ndarray]]  # rule (or "untrained") -> METRICS name -> (seeds,)
    gates: dict[str, list[Gate]]               # rule -> per seed: mlm_gate
    curve_steps: np.ndarray                    # (logged,)
    curves: dict[str, np.ndarray]              # rule -> (seeds, logged) training loss

    def values(self, rule: str, metric: str) -> np.ndarray:
        return self.metrics[rule][metric]

    def learned_share(self, rule: str) -> float:
        return learned_share(self.gates[rule])

    def learned(self) -> np.ndarray:
        """(seeds,) bool: both rules' runs passed the gate in that seed."""
        return np.array([all(self.gates[r][i].passed for r in VARIANTS) for i in range(len(self.gates["80/10/10"]))])

    def paired(self, metric: str, a: str = "80/10/10", b: str = "100/0/0", only_learned: bool = True) -> PairedDifference:
        """a's metric minus b's, seed by seed (only where both learned, unless only_learned=False)."""
        keep = self.learned() if only_learned else np.ones(len(self.gates[a]), bool)
        return paired_difference(self.values(a, metric)[keep], self.values(b, metric)[keep], a, b)


def summarize_reference(ref) -> list[MaskingRung]:
    """The stored reference (qalib.lab.reference.Reference) as one MaskingRung per rung, in the spec's order."""
    lang = experiment_language()
    out = []
    for rung in ref.rungs.values():
        m = {r: {k: rung.values(r, k) for k in METRICS} for r in ("untrained", *VARIANTS)}
        out.append(MaskingRung(rung.name, int(rung.kwargs["steps"]), float(rung.kwargs["lr"]), m,
                               {r: [mlm_gate(v, lang) for v in m[r]["masked_acc"]] for r in VARIANTS},
                               np.array(rung.runs[0]["80/10/10"]["steps"]),
                               {r: rung.values(r, "loss") for r in VARIANTS}))
    return out


def reference_claims(ref) -> None:
    """The checks notebook 11 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = {r.name: r for r in summarize_reference(ref)}
    live, ref_ = rungs["live"], rungs["reference"]
    check(f"the gate: after {ref_.steps} steps both rules learned the [MASK] task (accuracy above 0.6) in at least "
          "90% of the seeds; only seeds where both learned are compared below",
          at_least(min(ref_.learned_share(v) for v in VARIANTS), 0.9),
          {v: ref_.learned_share(v) for v in VARIANTS})
    speed = live.paired("masked_acc", only_learned=False)
    check(f"80/10/10 learns the task faster: after {live.steps} steps its [MASK] accuracy is higher than 100/0/0's on "
          "the same data (paired 95% interval entirely above 0), and more of its runs have learned the task",
          above(speed.low, 0) & above(live.learned_share("80/10/10"), live.learned_share("100/0/0")),
          {"paired": str(speed), "learned": {v: live.learned_share(v) for v in VARIANTS}})
    same = ref_.paired("masked_acc")
    check(f"prediction (b): once both have learned the task ({ref_.steps} steps), neither is better at [MASK] by more "
          "than 0.02 (the interval lies inside [-0.02, +0.02])", above(same.low, -0.02) & below(same.high, 0.02),
          str(same))
    high = rungs["4x, lr 1e-2"]
    check(f"at the higher rate ({high.lr:g}, {high.steps} steps) more 80/10/10 runs learned the task than 100/0/0 runs",
          above(high.learned_share("80/10/10"), high.learned_share("100/0/0")),
          {v: high.learned_share(v) for v in VARIANTS})
    own = ref_.paired("own_token")
    check(f"after {ref_.steps} steps, at a visible token, 80/10/10's head names it far more often than 100/0/0's "
          "(interval of the difference entirely above 0.2)", above(own.low, 0.2), str(own))
    keep = ref_.learned()
    ignores = paired_difference(ref_.values("100/0/0", "own_token")[keep], ref_.values("100/0/0", "masked_acc")[keep],
                                "100/0/0 at a visible token", "100/0/0 at [MASK]")
    check("100/0/0's head does worse at a visible token than at a [MASK]: it predicts from the context and ignores "
          "the token (interval entirely below 0)", below(ignores.high, 0), str(ignores))
    probes = [ref_.paired(m) for m in ("probe_previous", "probe_next")]
    check("frozen features: linear probes read the previous and the next token better from 80/10/10's clean hidden "
          "states than from 100/0/0's (both intervals entirely above 0)", above(min(d.low for d in probes), 0),
          [str(d) for d in probes])


def plot_reference(fig, ref) -> None:
    """Left: accuracy at [MASK] against the budget, per rule (median over seeds, middle half shaded). Middle: at a
    visible token, how often the head names it. Right: the neighbour probes at the reference budget, per rule."""
    rungs = [r for r in summarize_reference(ref) if r.lr == LIVE_LR]
    axes = fig.subplots(1, 3)
    steps = np.array([r.steps for r in rungs])
    for ax, metric, title in ((axes[0], "masked_acc", "accuracy at [MASK]"),
                              (axes[1], "own_token", "head names the visible token")):
        for i, rule in enumerate(VARIANTS):
            q25, q50, q75 = (np.array([np.percentile(r.values(rule, metric), q) for r in rungs]) for q in (25, 50, 75))
            ax.plot(steps, q50, "o-", color=f"C{i}", label=rule)
            ax.fill_between(steps, q25, q75, color=f"C{i}", alpha=0.2, lw=0)
        ax.set_xscale("log")
        ax.set_xticks(steps, [str(x) for x in steps])
        ax.minorticks_off()
        ax.set(xlabel="pre-training steps", ylabel="accuracy", ylim=(0, 1.02), title=title)
    lang = experiment_language()
    axes[0].axhline(one_neighbour_accuracy(lang), color="grey", ls=":", lw=1, label="one neighbour only")
    axes[0].axhline(bayes_mlm_accuracy(lang), color="0.4", ls="--", lw=1, label="best possible")
    axes[0].legend(fontsize=7)
    last = rungs[-1]
    keys = ("probe_own", "probe_previous", "probe_next")
    x = np.arange(len(keys))
    for i, rule in enumerate(("untrained", *VARIANTS)):
        m = np.array([np.median(last.values(rule, k)) for k in keys])
        axes[2].bar(x + (i - 1) * 0.27, m, 0.27, color="0.7" if rule == "untrained" else f"C{i - 1}", label=rule)
    axes[2].set_xticks(x, ["own token", "previous", "next"])
    axes[2].set(ylabel="probe accuracy (median seed)", ylim=(0, 1.05),
                title=f"linear probes on clean hidden states, {last.steps} steps")
    axes[2].legend(fontsize=7)


REFERENCES = [
    ReferenceSpec(
        "11_mlm_and_nsp", "masking", reference_seed, seeds=16,
        rungs=(Rung("live", steps=LIVE_STEPS, lr=LIVE_LR), Rung("4x", steps=4 * LIVE_STEPS, lr=LIVE_LR),
               Rung("reference", steps=5000, lr=LIVE_LR), Rung("4x, lr 1e-2", steps=4 * LIVE_STEPS, lr=1e-2)),
        lesson="what each masking rule's head does at a visible token, how fast each learns the [MASK] task, and "
               "what a probe reads from its hidden states, at three budgets and two rates, over 16 paired seeds",
        claims=reference_claims),
]

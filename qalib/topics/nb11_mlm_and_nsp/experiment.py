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

from functools import partial

import numpy as np
import torch

from qalib.lab.data import IGNORE, N_SPECIAL, MLMTask, SyntheticLanguage, mask_tokens, with_cls_sep
from qalib.lab.parallel import map_runs
from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.lab.train import TrainConfig
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choices, int_in, seed_list
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


def run_experiment(seeds=(0, 1, 2), steps: int = 400, d_model: int = 32, n_layers: int = 1, batch_size: int = 32,
                   seq_len: int = 12, lr: float = 1e-2, variants=tuple(VARIANTS), n_probe: int = 512, device=None) -> dict:
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
    return [{"step": hist.step, "loss": hist.loss, "metrics": probe_unmasked(model.cpu(), lang, seq_len, n=n_probe)}
            for model, hist in zip(run.models, run.histories)]


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

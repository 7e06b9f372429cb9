"""Notebook 18's training runs and real-model measurements: the key-token classifier trained over seeds (one
batched run, qalib.lab.train_batched), each model's accuracy against the task's floor, every attribution method's
hits on the known token, the methods' agreement, Jain & Wallace's adversarial attention, and the same methods on
all-MiniLM-L6-v2 for sentences with a planted word."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from qalib.lab.data import N_SPECIAL
from qalib.lab.train import TrainConfig
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.validate import seed_list
from qalib.topics.nb18_attention_explanation.compute import (METHODS, SHORT, KeyTokenTask, adversarial_attention,
                                                agreement_matrix, attributions, class_margin, cls_readout,
                                                mean_readout, pooled, rank_scores, residual_share, similarity_to)

N_EVAL = 256   # held-out sentences each model's attributions are scored on
N_ADV = 128    # of which the adversarial search runs on the first N_ADV
EVAL_SEED = 12345


def explanation_config(task: KeyTokenTask) -> MiniBertConfig:
    """A 2-layer post-LN mini-BERT (d = 32, 2 heads): two layers, so that layer 0 can move the key's information
    to other positions before the last layer's [CLS] reads it."""
    return MiniBertConfig(vocab_size=task.vocab_size, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                          max_len=task.seq_len + 2)


def run_experiment(seeds=(0, 1, 2), steps: int = 150, device: str | None = "cpu", bound: float = 0.01,
                   task: KeyTokenTask | None = None) -> dict:
    """Train one model per seed (one batched run), then on the same held-out batch: accuracy, each method's hit
    rate and mean reciprocal rank on the key token, the methods' Kendall-tau agreement, the adversarial search
    (|delta p| < bound) and the residual's share per layer. Models are moved to the CPU for reading."""
    seeds = seed_list("seeds", seeds)
    task = task or KeyTokenTask()
    run = train_seeds(explanation_config(task), task, seeds,
                      TrainConfig(steps=steps, batch_size=64, lr=3e-3, warmup=20, device=device))
    batch, key = task.sample(N_EVAL, torch.Generator().manual_seed(EVAL_SEED))
    inputs = batch.model_inputs()
    content = batch.input_ids >= N_SPECIAL
    out = {"seeds": list(seeds), "steps": steps, "task": task, "bound": bound, "batch": batch, "key": key,
           "models": [], "accuracy": [], "hit": {m: [] for m in METHODS}, "rr": {m: [] for m in METHODS},
           "tau": [], "jsd": [], "delta_p": [], "key_attention": [], "key_attention_adv": [], "residual_share": [],
           "last_layer_hit_by_class": []}
    for model in run.models:
        model = model.cpu().eval()
        out["models"].append(model)
        with torch.no_grad():
            pred = model.class_logits(model(**inputs).last_hidden_state).argmax(-1)
        out["accuracy"].append(float((pred == batch.labels).float().mean()))
        attr = attributions(model, inputs, cls_readout(batch.input_ids.shape[1]), class_margin, pred)
        for m in METHODS:
            s = rank_scores(attr[m], key, content)
            out["hit"][m].append(float(s["hit"].mean()))
            out["rr"][m].append(float(s["rr"].mean()))
        last = rank_scores(attr["attention (last layer)"], key, content)["hit"]
        out["last_layer_hit_by_class"].append([float(last[batch.labels == c].mean()) for c in (0, 1)])
        out["tau"].append(agreement_matrix(attr, content))
        adv = adversarial_attention(model, {k: v[:N_ADV] for k, v in inputs.items()}, bound=bound)
        rows = torch.arange(N_ADV)
        out["jsd"].append(adv["jsd"].numpy())
        out["delta_p"].append(adv["delta_p"].numpy())
        out["key_attention"].append(adv["original"].mean(1)[rows, key[:N_ADV]].numpy())
        out["key_attention_adv"].append(adv["adversarial"].mean(1)[rows, key[:N_ADV]].numpy())
        out["residual_share"].append(residual_share(model, inputs).numpy())
    for k in ("accuracy", "residual_share", "last_layer_hit_by_class"):
        out[k] = np.array(out[k])
    for k in ("hit", "rr"):
        out[k] = {m: np.array(v) for m, v in out[k].items()}
    for k in ("tau", "jsd", "delta_p", "key_attention", "key_attention_adv"):
        out[k] = np.stack(out[k])
    return out


@lru_cache(maxsize=1)
def small_result() -> dict:
    """A stand-in for the notebook's experiment (one seed) so the adversarial demo builds on its own."""
    return run_experiment(seeds=(0,), steps=150, device="cpu")


def plot_scores(fig, exp: dict) -> None:
    """Hit rate and mean reciprocal rank of the known token per method: one dot per seed, a bar at the mean."""
    axes = fig.subplots(1, 2)
    x = np.arange(len(METHODS))
    for ax, key, label in zip(axes, ("hit", "rr"), ("share of examples: key token ranked first",
                                                     "mean reciprocal rank of the key token")):
        vals = np.array([exp[key][m] for m in METHODS])  # (M, S)
        ax.bar(x, vals.mean(1), color="#9ecae1", edgecolor="#08519c")
        for j in range(vals.shape[1]):
            ax.plot(x, vals[:, j], "o", color="#08519c", ms=3)
        ax.set_xticks(x, [SHORT[m] for m in METHODS], rotation=30, ha="right")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(label)
    n = exp["task"].seq_len
    axes[0].axhline(1 / n, color="grey", ls=":", label=f"random order: 1/{n}")
    axes[0].legend(loc="lower right", fontsize=8)
    axes[0].set_title(f"{len(exp['seeds'])} seeds (dots), {exp['steps']} steps", fontsize=10)
    axes[1].set_title(f"{exp['batch'].input_ids.shape[0]} held-out sentences per seed", fontsize=10)


def plot_agreement(fig, tau: np.ndarray, title: str) -> None:
    """(M, M) mean Kendall tau between methods, as a heat map with the values written in."""
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(tau, cmap="viridis", vmin=-0.2, vmax=1)
    names = [SHORT[m] for m in METHODS]
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, f"{tau[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if tau[i, j] > 0.5 else "white")
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label="Kendall tau")


def plot_adversarial(fig, exp: dict) -> None:
    """Left: the JSD the search reached per example (all seeds). Right: attention on the key token before/after."""
    a1, a2 = fig.subplots(1, 2)
    a1.hist(exp["jsd"].ravel(), bins=30, range=(0, np.log(2)), color="#2166ac")
    a1.axvline(np.log(2), color="grey", ls=":", label="ln 2: disjoint supports")
    a1.set_xlabel("JS divergence from the model's own attention (nats, mean over heads)")
    a1.set_ylabel("examples")
    a1.set_title(f"|Δp| < {exp['bound']:g} kept", fontsize=10)
    a1.legend(fontsize=8)
    a2.hist([exp["key_attention"].ravel(), exp["key_attention_adv"].ravel()], bins=20, range=(0, 1),
            label=["the model's own", "adversarial"], color=["#2166ac", "#b35806"])
    a2.set_xlabel("last-layer [CLS] attention on the key token (head mean)")
    a2.set_ylabel("examples")
    a2.legend(fontsize=8)


# -- all-MiniLM-L6-v2: sentences with a planted word -------------------------------------------------------------
TEMPLATES = ("yesterday we walked to the market and saw a {} near the old bridge",
             "the {} was the only thing anyone talked about at dinner",
             "after the long meeting she finally went home to think about the {}",
             "nobody in the office expected a {} on a quiet monday morning",
             "he wrote a short letter about the {} and left it on the table",
             "in the middle of the busy station there was a {}")
WORDS = ("dog", "guitar", "pizza", "volcano", "bicycle")


def minilm_planted(model, tok, ig_steps: int = 16) -> dict:
    """For every template x word: the sentence with the word planted, and the target = cosine similarity of its
    pooled embedding to the word's own embedding. The planted word's word piece is the known answer.
    -> {"hit": {method: (N,)}, "tau": (M, M), "n": N, "sentences": [...]}."""
    hits = {m: [] for m in METHODS}
    taus, sentences = [], []
    for word in WORDS:
        wid = tok(word)["input_ids"][0, 1:-1]
        if wid.numel() != 1:
            raise ValueError(f"planted word {word!r} is not one word piece")
        with torch.no_grad():
            ref = pooled(model, **tok(word))[0]
        texts = [t.format(word) for t in TEMPLATES]
        sentences += texts
        enc = tok(texts)
        ids = enc["input_ids"]
        key = (ids == wid).float().argmax(1)
        content = ~torch.isin(ids, torch.tensor([tok.cls_id, tok.sep_id, tok.pad_id]))
        attr = attributions(model, enc, mean_readout(enc["attention_mask"].bool()), similarity_to(ref), None,
                            ig_steps, (tok.cls_id, tok.sep_id))
        for m in METHODS:
            hits[m].append(rank_scores(attr[m], key, content)["hit"].numpy())
        taus.append(agreement_matrix(attr, content))
    return {"hit": {m: np.concatenate(v) for m, v in hits.items()}, "tau": np.mean(taus, 0), "n": len(sentences),
            "sentences": sentences}

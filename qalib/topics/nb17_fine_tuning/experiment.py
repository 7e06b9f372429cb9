"""Notebook 17's runs: all-MiniLM-L6-v2 fine-tuned over seeds on the two tasks of qalib.topics.nb17_fine_tuning.compute.

    pair = run_pair(seeds=(0, 1), steps=20)
    pair["acc"]          # (S, LR, K): held-out accuracy per seed, learning rate and number of trained layers
    pair["cka"]          # (S, LR, K, L): CKA of each layer's output to the pretrained model's
    span = run_span(seeds=(0, 1), steps=24)
    span["em"]           # {head: (S,)}: exact match of BERT's span head and of a span head on [CLS]

For each seed, one stream of training examples (the seed draws them and the heads' initial weights): every run of
that seed reads the same examples in the same order, so learning rates, frozen layers and heads are compared in
pairs. The pretrained model runs once over each stream (qalib.topics.nb17_fine_tuning.compute.frozen_stream); a run that
trains only the top layers starts from the stored hidden states. Seeds run side by side on every core
(qalib.lab.parallel.map_runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache, partial

import nbformat
import numpy as np
import torch

from qalib.lab.device import get_device
from qalib.lab.parallel import map_runs
from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.nn.model import MiniBert
from qalib.nn.pretrained import real_model
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.paths import NOTEBOOKS
from qalib.topics.nb17_fine_tuning.compute import (HEAD_NAMES, Examples, FineTuneConfig, MembershipTask, SpanTask, Stream, WordIds,
                                      accuracy, best_span, finetune, frozen_stream, layer_cka, linear_cka, mean_pooled,
                                      relative_weight_change, similarity_structure, trained_name)

LRS = (3e-5, 3e-4, 1e-3)   # inside BERT's range (app. A.3: 5e-5, 3e-5, 2e-5), 10x and 33x above it
TRAINABLE = (0, 1, 6)      # the head alone (a linear probe), the top layer, every layer
MAIN_LR = 3e-4             # the rate the probes and the movement are read at
# BERT warms up over 10% of the steps (run_classifier.py's warmup_proportion); of 20 steps that is 2, after which one
# seed in eight collapsed to a constant class at MAIN_LR in a first calibration. Over 20% (4 steps) none of the same
# eight did. The share stays 20% at every budget (16 of SCALE = 4's 80 steps).
WARMUP = 0.2
SPAN_LR, SPAN_TRAINABLE = 1e-3, 2
BATCH = 16
N_EVAL = 256               # held-out examples per task, the same for every seed and run
N_TEXT = 64                # held-out sentences of the project's own prose, for forgetting
TEXT_PIECES = 12           # word pieces kept of each (all the same length: no padding)
EVAL_SEED = 7_000_003      # + the first seed: the held-out examples move with the seed set, like everything else
RIDGES = (1e-3, 1e-2, 1e-1)  # the probes' ridge (relative to the Gram's mean diagonal), chosen by 2-fold CV


# -- held-out text: forgetting is measured on prose the tasks never show ------------------------------------------
def held_out_text(tokenizer, n: int = N_TEXT, pieces: int = TEXT_PIECES, exclude: str = "17_") -> Examples:
    """The first n sentences of the project's own notebooks (their markdown, in file order, notebook 17's left out)
    made only of words, digits and punctuation (no formula, link or code), with at least `pieces` word pieces, cut
    to that many: (n, pieces + 2) ids with [CLS] and [SEP], every token real."""
    rows = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if path.name.startswith(exclude):
            continue
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            for sentence in re.split(r"(?<=[.!?])\s+", cell.source.replace("\n", " ")):
                sentence = re.sub(r"[*_`]", "", sentence).strip().rstrip(".!?").lower()  # markdown emphasis
                if not re.fullmatch(r"[a-z][a-z0-9 ,;:'()-]+", sentence):  # no formulas, links or code
                    continue
                ids = tokenizer(sentence)["input_ids"][0, 1:-1]
                if len(ids) >= pieces:
                    rows.append(ids[:pieces])
                if len(rows) == n:
                    ids = torch.stack(rows)
                    ids = torch.cat([torch.full((n, 1), tokenizer.cls_id), ids, torch.full((n, 1), tokenizer.sep_id)], 1)
                    return Examples(ids, torch.zeros_like(ids), torch.zeros(n, dtype=torch.long))
    raise ValueError(f"the notebooks hold only {len(rows)} plain sentences of >= {pieces} word pieces; need {n}")


def cv_probe(train_x, train_y, test_x, test_y, n_classes: int = 2) -> float:
    """Held-out accuracy of a least-squares linear probe (qalib.lab.probes) whose ridge is picked by 2-fold
    cross-validation on the training examples alone."""
    half = len(train_x) // 2
    folds = [(slice(0, half), slice(half, None)), (slice(half, None), slice(0, half))]
    score = {r: np.mean([probe_accuracy(fit_probe(train_x[a], train_y[a], n_classes, ridge=r), train_x[b], train_y[b])
                         for a, b in folds]) for r in RIDGES}
    ridge = max(RIDGES, key=lambda r: (score[r], r))
    return probe_accuracy(fit_probe(train_x, train_y, n_classes, ridge=ridge), test_x, test_y)


@dataclass
class Fixed:
    """What every seed's runs share: the pretrained model, its tokenizer's word ids, the held-out streams."""

    base: MiniBert
    words: WordIds
    pair_eval: Stream
    span_eval: Stream
    text: Stream


@lru_cache(maxsize=2)
def fixed(eval_seed: int, device: str = "cpu") -> Fixed:
    base, tok = real_model(device)
    words = WordIds(tok)
    g = torch.Generator().manual_seed(eval_seed)
    return Fixed(base, words, frozen_stream(base, MembershipTask().sample(words, N_EVAL, g)),
                 frozen_stream(base, SpanTask().sample(words, N_EVAL, g)), frozen_stream(base, held_out_text(tok)))


def _pair_seed(seed: int, steps: int, eval_seed: int, device: str = "cpu") -> dict:
    """Every pair-task run of one seed: the probes before; for each learning rate and number of trained layers
    the accuracy, the per-layer movement and the similarity structure of the held-out text; the probes after the
    main run."""
    fx = fixed(eval_seed, device)
    g = torch.Generator().manual_seed(seed)
    stream = frozen_stream(fx.base, MembershipTask().sample(fx.words, steps * BATCH, g))
    y, y_eval = stream.examples.labels.cpu(), fx.pair_eval.examples.labels
    n_layers = len(fx.base.layers)

    def probes(train_h, eval_h) -> dict:  # on the CPU, in closed form
        train_h, eval_h, y_cpu = train_h.cpu(), eval_h.cpu(), y_eval.cpu()
        return {"cls": cv_probe(train_h[:, 0], y, eval_h[:, 0], y_cpu),
                "mean": cv_probe(mean_pooled(train_h), y, mean_pooled(eval_h), y_cpu)}

    out = {"probe_before": probes(stream.hidden[-1], fx.pair_eval.hidden[-1])}
    shape = (len(LRS), len(TRAINABLE))
    acc, sim = np.zeros(shape), np.ones(shape)
    change, cka, text_cka = np.zeros(shape + (n_layers,)), np.ones(shape + (n_layers,)), np.ones(shape)
    text_before = fx.text.hidden[-1]
    for i, lr in enumerate(LRS):
        for j, k in enumerate(TRAINABLE):
            if k == 0:  # the head alone: the best linear head on the frozen [CLS], fitted in closed form
                acc[i, j] = out["probe_before"]["cls"]
                continue
            run = finetune(fx.base, stream, "cls", FineTuneConfig(lr=lr, trainable=k, batch_size=BATCH, warmup=WARMUP), seed)
            hidden = run.hidden(fx.pair_eval)
            acc[i, j] = accuracy(run.head(hidden[-1]), y_eval)
            change[i, j] = relative_weight_change(fx.base, run)
            cka[i, j] = layer_cka(fx.pair_eval.hidden, hidden)
            text_after = run.hidden(fx.text)[-1]
            sim[i, j] = similarity_structure(mean_pooled(text_before), mean_pooled(text_after))
            text_cka[i, j] = linear_cka(text_before.flatten(0, 1), text_after.flatten(0, 1))
            if lr == MAIN_LR and k == n_layers:
                out["probe_after"] = probes(run.hidden(stream)[-1], hidden[-1])
                out["losses"] = run.losses
    out.update(acc=acc, similarity=sim, weight_change=change, cka=cka, text_cka=text_cka)
    return out


def _span_seed(seed: int, steps: int, eval_seed: int, device: str = "cpu") -> dict:
    """BERT's span head and a span head on [CLS], trained alike (the top SPAN_TRAINABLE layers, SPAN_LR) on one
    stream: exact match, and how often each picks one of the two colour-noun phrases at all."""
    fx = fixed(eval_seed, device)
    g = torch.Generator().manual_seed(seed)
    stream = frozen_stream(fx.base, SpanTask().sample(fx.words, steps * BATCH, g),
                           layers=len(fx.base.layers) - SPAN_TRAINABLE)
    truth = fx.span_eval.examples.labels.cpu()
    ids = fx.span_eval.examples.input_ids.cpu()
    phrase_start = torch.isin(ids, fx.words.colours)  # (N, T): where a colour-noun phrase starts
    out = {"em": {}, "phrase": {}, "logits": {}, "losses": {}}
    for head in ("span", "cls_span"):
        run = finetune(fx.base, stream, head, FineTuneConfig(lr=SPAN_LR, trainable=SPAN_TRAINABLE, batch_size=BATCH,
                                                          warmup=WARMUP),
                       seed)
        logits = run.logits(fx.span_eval).cpu()
        pred = best_span(logits)
        rows = torch.arange(len(pred))
        out["em"][head] = accuracy(logits, truth)
        # a phrase: the span starts on a colour and ends on the word after it
        out["phrase"][head] = float((phrase_start[rows, pred[:, 0]] & (pred[:, 1] == pred[:, 0] + 1)).float().mean())
        out["logits"][head] = logits.numpy()
        out["losses"][head] = run.losses
    return out


def run_pair(seeds=(0, 1), steps: int = 20, device=None) -> dict:
    """Every pair-task run of the notebook, one process per seed where the cores allow: for each seed, the learning
    rate x trained layers grid (steps: optimiser steps of each run, BATCH examples each, every example seen once),
    the probes before and after."""
    seeds = seed_list("seeds", seeds)
    steps = int_in("steps", steps, 1, 100_000)
    device = str(get_device(device))
    eval_seed = EVAL_SEED + seeds[0]
    fx = fixed(eval_seed, device)  # loaded here, before the workers fork, so each inherits it
    pair = map_runs(partial(_pair_seed, steps=steps, eval_seed=eval_seed, device=device), seeds, device=device)
    stack = lambda key: np.stack([p[key] for p in pair])  # noqa: E731
    return {"seeds": seeds, "steps": steps, "lrs": LRS, "trainable": TRAINABLE, "main_lr": MAIN_LR,
            "n_layers": len(fx.base.layers), "acc": stack("acc"), "similarity": stack("similarity"),
            "weight_change": stack("weight_change"), "cka": stack("cka"), "text_cka": stack("text_cka"),
            "losses": np.array([p["losses"] for p in pair]),
            "probe_before": {h: np.array([p["probe_before"][h] for p in pair]) for h in ("cls", "mean")},
            "probe_after": {h: np.array([p["probe_after"][h] for p in pair]) for h in ("cls", "mean")}}


def run_span(seeds=(0, 1), steps: int = 24, device=None) -> dict:
    """The span task's runs, one process per seed where the cores allow: both span heads per seed."""
    seeds = seed_list("seeds", seeds)
    steps = int_in("steps", steps, 1, 100_000)
    device = str(get_device(device))
    eval_seed = EVAL_SEED + seeds[0]
    fx = fixed(eval_seed, device)
    span = map_runs(partial(_span_seed, steps=steps, eval_seed=eval_seed, device=device), seeds, device=device)
    return {"seeds": seeds, "steps": steps, "n_layers": len(fx.base.layers), "eval": fx.span_eval.examples.to("cpu"),
            "em": {h: np.array([s["em"][h] for s in span]) for h in ("span", "cls_span")},
            "phrase": {h: np.array([s["phrase"][h] for s in span]) for h in ("span", "cls_span")},
            "logits": {h: np.stack([s["logits"][h] for s in span]) for h in ("span", "cls_span")},
            "losses": {h: np.array([s["losses"][h] for s in span]) for h in ("span", "cls_span")}}


@lru_cache(maxsize=1)
def small_result() -> dict:
    """A stand-in for the notebook's experiment (one seed, a few steps) so that the demos build on their own."""
    return {"pair": run_pair(seeds=(0,), steps=4, device="cpu"), "span": run_span(seeds=(0,), steps=4, device="cpu")}


# -- the notebook's figures ------------------------------------------------------------------------------------
def _dots(ax, x, rows, color, **kw):
    """One dot per seed at each x (rows: (S, n)), slightly spread so that equal values stay visible."""
    rows = np.atleast_2d(rows)
    for s, row in enumerate(rows):
        ax.plot(np.asarray(x) + 0.06 * (s - (len(rows) - 1) / 2), row, "o", color=color, ms=3.5, **kw)


def plot_probes(fig, pair: dict) -> None:
    """What a least-squares linear probe reads from [CLS] and from the mean of the tokens, before fine-tuning and
    after the main run: a bar at the mean over seeds, a dot per seed."""
    ax = fig.add_subplot(1, 1, 1)
    p = pair
    bars = [("[CLS], before", p["probe_before"]["cls"]), ("mean, before", p["probe_before"]["mean"]),
            ("[CLS], after", p["probe_after"]["cls"]), ("mean, after", p["probe_after"]["mean"])]
    x = np.arange(len(bars))
    ax.bar(x, [v.mean() for _, v in bars], color=["#9ecae1", "#fdd0a2", "#2166ac", "#b35806"], edgecolor="black")
    for xi, (_, v) in zip(x, bars):
        _dots(ax, [xi], v[:, None], "black")
    ax.axhline(0.5, color="grey", ls=":", label="chance")
    ax.set_xticks(x, [name for name, _ in bars])
    ax.set_ylim(0.4, 1.02)
    ax.set_ylabel("held-out accuracy of the probe")
    ax.set_title(f"linear probes on the last layer; after: {pair['steps']} steps at lr {pair['main_lr']:g}, "
                 f"{len(pair['seeds'])} seeds (dots)", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)


def plot_movement(fig, pair: dict) -> None:
    """The main run (every layer trained, MAIN_LR): per layer, the relative weight change (left) and 1 - CKA of its
    output to the pretrained model's on the task's held-out examples (right), a line per seed; the right panel
    also marks the last layer on held-out prose."""
    a1, a2 = fig.subplots(1, 2)
    p, i, j = pair, pair["lrs"].index(pair["main_lr"]), pair["trainable"].index(pair["n_layers"])
    layers = np.arange(1, pair["n_layers"] + 1)
    for s in range(len(pair["seeds"])):
        a1.plot(layers, p["weight_change"][s, i, j], "o-", color="#2166ac", alpha=0.8)
        a2.plot(layers, 1 - p["cka"][s, i, j], "o-", color="#b35806", alpha=0.8)
        a2.plot([layers[-1] + 0.25], [1 - p["text_cka"][s, i, j]], "s", color="#4d4d4d",
                label="last layer, held-out prose" if s == 0 else None)
    a1.set_ylim(0, None)
    a1.set_xlabel("layer")
    a1.set_ylabel("relative weight change ||θ - θ₀|| / ||θ₀||")
    a1.set_title("weights", fontsize=10)
    a2.set_ylim(0, 1)
    a2.set_xlabel("layer")
    a2.set_ylabel("1 - CKA to the pretrained layer")
    a2.set_title("representations of the task's inputs", fontsize=10)
    a2.legend(loc="upper left", fontsize=8)


def plot_learning_rates(fig, pair: dict) -> None:
    """Held-out accuracy (left) and the similarity structure of held-out prose kept (right) against the learning
    rate, one line per number of trained layers (mean over seeds, a dot per seed); BERT's range shaded."""
    a1, a2 = fig.subplots(1, 2)
    p = pair
    x = np.log10(pair["lrs"])
    colours = {0: "#4d4d4d", 1: "#b35806", pair["n_layers"]: "#2166ac"}
    for j, k in enumerate(pair["trainable"]):
        name = trained_name(k, pair["n_layers"])
        a1.plot(x, p["acc"][:, :, j].mean(0), "-", color=colours.get(k, "C2"), label=name)
        _dots(a1, x, p["acc"][:, :, j], colours.get(k, "C2"))
        if k:
            a2.plot(x, p["similarity"][:, :, j].mean(0), "-", color=colours.get(k, "C2"), label=name)
            _dots(a2, x, p["similarity"][:, :, j], colours.get(k, "C2"))
    for ax in (a1, a2):
        ax.axvspan(np.log10(2e-5), np.log10(5e-5), color="#d9d9d9", alpha=0.6, lw=0, label="BERT's 2e-5 - 5e-5")
        ax.set_xticks(x, [f"{lr:g}" for lr in pair["lrs"]])
        ax.set_xlabel("learning rate (peak)")
    a1.axhline(0.5, color="grey", ls=":")
    a1.set_ylim(0.4, 1.02)
    a1.set_ylabel("held-out accuracy")
    a1.set_title(f"{pair['steps']} steps of {BATCH}", fontsize=10)
    a1.legend(loc="lower left", fontsize=7)
    a2.set_ylim(-0.1, 1.05)
    a2.set_ylabel("r(cosine similarities before, after)")
    a2.set_title(f"{N_TEXT} held-out sentences of prose", fontsize=10)


def plot_span(fig, span: dict) -> None:
    """Exact match and 'picked one of the two phrases' for the two span heads: a bar at the mean, a dot per seed."""
    ax = fig.add_subplot(1, 1, 1)
    heads = list(span["em"])
    x = np.arange(len(heads))
    for off, key, colour, label in ((-0.2, "em", "#2166ac", "exact match (start and end right)"),
                                    (0.2, "phrase", "#fdae6b", "picked one of the two colour-noun phrases")):
        vals = [span[key][h] for h in heads]
        ax.bar(x + off, [v.mean() for v in vals], width=0.4, color=colour, edgecolor="black", label=label)
        for xi, v in zip(x, vals):
            _dots(ax, [xi + off], v[:, None], "black")
    ax.set_xticks(x, [HEAD_NAMES[h] for h in heads])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of held-out questions")
    ax.set_title(f"{trained_name(SPAN_TRAINABLE, span['n_layers'])} and the head trained, {span['steps']} steps at "
                 f"lr {SPAN_LR:g}, {len(span['seeds'])} seeds (dots)", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)

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

from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import torch

from qalib.lab.device import get_device
from qalib.lab.parallel import map_runs
from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.nn.model import MiniBert
from qalib.nn.pretrained import real_model
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.claims import above, at_least, at_most, below, check
from qalib.lab.gate import Gate, learned
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.topics.nb17_fine_tuning.compute import (HEAD_NAMES, Examples, FineTuneConfig, MembershipTask, SpanTask,
                                                   Stream, WordIds, accuracy, best_span, finetune, frozen_stream,
                                                   layer_cka, linear_cka, mean_pooled, random_encoder,
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
PROSE_FILE = Path(__file__).with_name("held_out_prose.txt")


def held_out_text(tokenizer, n: int = N_TEXT, pieces: int = TEXT_PIECES) -> Examples:
    """The first n sentences of held_out_prose.txt (plain sentences of notebooks 00-16, frozen in that file so that
    editing a notebook cannot change what forgetting is measured on), each cut to `pieces` word pieces: (n, pieces + 2)
    ids with [CLS] and [SEP], every token real."""
    rows = []
    for line in PROSE_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        ids = tokenizer(line.strip())["input_ids"][0, 1:-1]
        if len(ids) >= pieces:
            rows.append(ids[:pieces])
        if len(rows) == n:
            ids = torch.stack(rows)
            ids = torch.cat([torch.full((n, 1), tokenizer.cls_id), ids, torch.full((n, 1), tokenizer.sep_id)], 1)
            return Examples(ids, torch.zeros_like(ids), torch.zeros(n, dtype=torch.long))
    raise ValueError(f"{PROSE_FILE.name} holds only {len(rows)} plain sentences of >= {pieces} word pieces; need {n}")


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


def _probes(train_h, y, eval_h, y_eval) -> dict:
    """Least-squares probes (cv_probe) on the last layer's [CLS] vector and on the mean of its tokens, fitted on the
    training stream's vectors, scored on the held-out ones; on the CPU, in closed form."""
    train_h, eval_h, y, y_eval = train_h.cpu(), eval_h.cpu(), y.cpu(), y_eval.cpu()
    return {"cls": cv_probe(train_h[:, 0], y, eval_h[:, 0], y_eval),
            "mean": cv_probe(mean_pooled(train_h), y, mean_pooled(eval_h), y_eval)}


CONTROLS = {"random encoder": False, "pretrained embeddings, random layers": True}  # name -> keep_embeddings


def probe_controls(fx: Fixed, examples: Examples, seed: int) -> dict:
    """The probes of section 3 on encoders that were never pretrained (random_encoder, seeded by `seed`): what any
    encoder of MiniLM's shape lets a linear probe read. -> {control name: {"cls": acc, "mean": acc}}"""
    out = {}
    for name, keep in CONTROLS.items():
        model = random_encoder(fx.base, seed, keep_embeddings=keep)
        train_h, eval_h = frozen_stream(model, examples).hidden[-1], frozen_stream(model, fx.pair_eval.examples).hidden[-1]
        out[name] = _probes(train_h, examples.labels, eval_h, fx.pair_eval.examples.labels)
    return out


def measure_run(fx: Fixed, run) -> dict:
    """What one pair-task run learned and moved, as plain numbers: held-out accuracy, the share of held-out pairs
    predicted 'true' (0 or 1: the run collapsed to one class), the mean loss of its last 5 steps, per layer the
    relative weight change and the CKA of its output to the pretrained one, the similarity structure kept on the
    held-out prose (r) and the CKA of the prose's last layer."""
    hidden = run.hidden(fx.pair_eval)
    logits = run.head(hidden[-1])
    text_before, text_after = fx.text.hidden[-1], run.hidden(fx.text)[-1]
    return {"acc": accuracy(logits, fx.pair_eval.examples.labels),
            "true_share": float((logits.argmax(-1) == 1).float().mean()),
            "final_loss": float(np.mean(run.losses[-5:])),
            "weight_change": relative_weight_change(fx.base, run).tolist(),
            "cka": layer_cka(fx.pair_eval.hidden, hidden).tolist(),
            "similarity": similarity_structure(mean_pooled(text_before), mean_pooled(text_after)),
            "text_cka": linear_cka(text_before.flatten(0, 1), text_after.flatten(0, 1))}


def _pair_seed(seed: int, steps: int, eval_seed: int, device: str = "cpu") -> dict:
    """Every pair-task run of one seed: the probes before (and on never-pretrained encoders); for each learning rate
    and number of trained layers the accuracy, the per-layer movement and the similarity structure of the held-out
    text; the probes after the main run."""
    fx = fixed(eval_seed, device)
    g = torch.Generator().manual_seed(seed)
    stream = frozen_stream(fx.base, MembershipTask().sample(fx.words, steps * BATCH, g))
    y, y_eval = stream.examples.labels, fx.pair_eval.examples.labels
    n_layers = len(fx.base.layers)
    out = {"probe_before": _probes(stream.hidden[-1], y, fx.pair_eval.hidden[-1], y_eval),
           "probe_control": probe_controls(fx, stream.examples, seed)}
    shape = (len(LRS), len(TRAINABLE))
    acc, sim, share = np.zeros(shape), np.ones(shape), np.full(shape, np.nan)
    change, cka, text_cka = np.zeros(shape + (n_layers,)), np.ones(shape + (n_layers,)), np.ones(shape)
    for i, lr in enumerate(LRS):
        for j, k in enumerate(TRAINABLE):
            if k == 0:  # the head alone: the best linear head on the frozen [CLS], fitted in closed form
                acc[i, j] = out["probe_before"]["cls"]
                continue
            run = finetune(fx.base, stream, "cls", FineTuneConfig(lr=lr, trainable=k, batch_size=BATCH, warmup=WARMUP), seed)
            m = measure_run(fx, run)
            acc[i, j], share[i, j], sim[i, j], text_cka[i, j] = m["acc"], m["true_share"], m["similarity"], m["text_cka"]
            change[i, j], cka[i, j] = m["weight_change"], m["cka"]
            if lr == MAIN_LR and k == n_layers:
                out["probe_after"] = _probes(run.hidden(stream)[-1], y, run.hidden(fx.pair_eval)[-1], y_eval)
                out["losses"] = run.losses
    out.update(acc=acc, similarity=sim, true_share=share, weight_change=change, cka=cka, text_cka=text_cka)
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
            "true_share": stack("true_share"), "losses": np.array([p["losses"] for p in pair]),
            "probe_control": {c: {h: np.array([p["probe_control"][c][h] for p in pair]) for h in ("cls", "mean")}
                              for c in CONTROLS},
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


# -- the reference: the pair task's grid at the live budget, at 4x and at BERT's length, over 10 seeds ------------
REFERENCE_TRAINABLE = (1, 6)  # the top layer, every layer (the head alone needs no run: it is probe_before's [CLS])
# BERT fine-tuned GLUE for 3 epochs at batch 32 (sec. 4.1); MRPC's 3,668 training pairs make ~340 steps. At that
# length BERT's own 10% warm-up (run_classifier.py's warmup_proportion) is 34 steps, so the reference uses it.
REFERENCE_STEPS = 340


def reference_seed(seed: int, steps: int, warmup: float) -> dict:
    """One seed of the reference: the pair task's stream of steps x BATCH examples, drawn as the live run draws it
    (so the 'live' rung's runs are the live run's), the probes before and on never-pretrained encoders, and for every
    learning rate of LRS the top layer or every layer trained (measure_run). The held-out pairs are the seed's own
    (EVAL_SEED + seed), the held-out prose is the notebook's.
    -> {"probe_before": {...}, "probe_control": {...}, "runs": {f"{lr:g}": {str(trainable): measure_run(...)}}}"""
    fx = fixed(EVAL_SEED + seed, "cpu")
    g = torch.Generator().manual_seed(seed)
    stream = frozen_stream(fx.base, MembershipTask().sample(fx.words, steps * BATCH, g))
    out = {"probe_before": _probes(stream.hidden[-1], stream.examples.labels, fx.pair_eval.hidden[-1],
                                   fx.pair_eval.examples.labels),
           "probe_control": probe_controls(fx, stream.examples, seed), "runs": {}}
    for lr in LRS:
        out["runs"][f"{lr:g}"] = {
            str(k): measure_run(fx, finetune(fx.base, stream, "cls",
                                             FineTuneConfig(lr=lr, trainable=k, batch_size=BATCH, warmup=warmup), seed))
            for k in REFERENCE_TRAINABLE}
    return out


# -- reading the reference ---------------------------------------------------------------------------------------
GATE_MARGIN = 0.3   # a run learned the pair task when its held-out accuracy beats chance (0.5) by more than this
COLLAPSED = 0.99    # a run collapsed when it predicts one class for at least this share of the held-out pairs


@dataclass(frozen=True)
class PairRuns:
    """One condition of the reference (a budget, a learning rate, how many top layers trained), over its seeds:
    each array's first axis is the seed, in the reference's seed order (so conditions pair by seed)."""

    rung: str
    steps: int
    lr: float
    trainable: int
    acc: np.ndarray            # (S,) held-out accuracy
    true_share: np.ndarray     # (S,) share of held-out pairs predicted 'true'
    final_loss: np.ndarray     # (S,)
    similarity: np.ndarray     # (S,) r: the similarity structure kept on the held-out prose
    text_shift: np.ndarray     # (S,) 1 - CKA of the prose's last layer
    weight_change: np.ndarray  # (S, L) relative weight change per layer (0: frozen)
    shift: np.ndarray          # (S, L) 1 - CKA of each layer's output on held-out pairs

    @property
    def gates(self) -> list[Gate]:
        return [learned("held-out accuracy", a, baseline=0.5, baseline_name="chance", margin=GATE_MARGIN)
                for a in self.acc]

    @property
    def learned(self) -> np.ndarray:
        """(S,) bool: the seeds whose run passed the gate."""
        return np.array([g.passed for g in self.gates])

    @property
    def collapsed(self) -> np.ndarray:
        """(S,) bool: the seeds whose run predicts one class for >= COLLAPSED of the held-out pairs."""
        return np.maximum(self.true_share, 1 - self.true_share) >= COLLAPSED

    @property
    def depth_ratio(self) -> np.ndarray:
        """(S,) the top layer's relative weight change over the bottom layer's (every layer trained)."""
        return self.weight_change[:, -1] / self.weight_change[:, 0]


@dataclass(frozen=True)
class PairReference:
    """The stored reference (qalib.lab.reference.Reference) of notebook 17, read into typed arrays."""

    seeds: list[int]
    steps: dict[str, int]                              # rung -> steps
    probe_before: dict[str, dict[str, np.ndarray]]     # rung -> "cls" / "mean" -> (S,)
    probe_control: dict[str, dict[str, dict[str, np.ndarray]]]  # rung -> control -> "cls" / "mean" -> (S,)
    runs: dict[tuple[str, float, int], PairRuns]

    def run(self, rung: str, lr: float, trainable: int) -> PairRuns:
        key = (rung, lr, trainable)
        if key not in self.runs:
            raise KeyError(f"the reference has no run {key}; it has rungs {list(self.steps)}, learning rates {LRS} "
                           f"and trainable {REFERENCE_TRAINABLE}")
        return self.runs[key]


def summarize_reference(ref) -> PairReference:
    """Notebook 17's stored reference as a PairReference."""
    runs, steps, before, control = {}, {}, {}, {}
    for rung in ref.rungs.values():
        steps[rung.name] = int(rung.kwargs["steps"])
        before[rung.name] = {h: rung.values("probe_before", h) for h in ("cls", "mean")}
        control[rung.name] = {c: {h: rung.values("probe_control", c, h) for h in ("cls", "mean")} for c in CONTROLS}
        for lr in LRS:
            for k in REFERENCE_TRAINABLE:
                v = lambda key: rung.values("runs", f"{lr:g}", str(k), key)  # noqa: E731
                runs[(rung.name, lr, k)] = PairRuns(rung.name, steps[rung.name], lr, k, v("acc"), v("true_share"),
                                                    v("final_loss"), v("similarity"), 1 - v("text_cka"),
                                                    v("weight_change"), 1 - v("cka"))
    seeds = list(next(iter(ref.rungs.values())).seeds)
    return PairReference(seeds, steps, before, control, runs)



def probe_claims(res: PairReference) -> None:
    """Section 3's control on the reference: the pretrained probe against never-pretrained encoders."""
    gap = {rung: float(min(res.probe_before[rung]["cls"][s] - max(c[h][s] for c in res.probe_control[rung].values()
                                                                    for h in ("cls", "mean"))
                            for s in range(len(res.seeds)))) for rung in res.steps}
    check(f"the probe reads what pretraining put there: at every budget, in each of {len(res.seeds)} seeds, the "
          "frozen [CLS] probe beats the best probe on a never-pretrained encoder (random layers, with or without "
          "the pretrained embeddings) by > 0.2", above(min(gap.values()), 0.2), gap)


def movement_claims(res: PairReference) -> None:
    """Section 5 on the reference: how the weights' change by depth turns with the budget; the outputs."""
    live, bert = res.run("live", MAIN_LR, 6), res.run("reference", 3e-5, 6)
    fast = res.run("reference", MAIN_LR, 6)
    check(f"in the {live.steps}-step runs (3e-4) the top layer's weights moved 0.8-1.25x as much as the bottom "
          f"layer's in every seed; at BERT's recipe (3e-5, {bert.steps} steps) > 1.4x in every seed; at 3e-4 for "
          f"{fast.steps} steps < 1.1x in every seed",
          above(float(live.depth_ratio.min()), 0.8) & below(float(live.depth_ratio.max()), 1.25)
          & above(float(bert.depth_ratio.min()), 1.4) & below(float(fast.depth_ratio.max()), 1.1),
          {"20 steps": live.depth_ratio, "BERT's recipe": bert.depth_ratio, "3e-4, 340 steps": fast.depth_ratio})
    check("at both, the outputs moved most at the top: the last layer's 1 - CKA > 0.3 and the first's < 0.01 in "
          "every seed", above(float(min(live.shift[:, -1].min(), bert.shift[:, -1].min())), 0.3)
          & below(float(max(live.shift[:, 0].max(), bert.shift[:, 0].max())), 0.01),
          {"first": [live.shift[:, 0].max(), bert.shift[:, 0].max()],
           "last": [live.shift[:, -1].min(), bert.shift[:, -1].min()]})
    prose = bert.text_shift / bert.shift[:, -1]
    check("at BERT's recipe the held-out prose moved far less than the task's pairs: its last-layer 1 - CKA < 0.3x "
          "theirs in every seed", below(float(prose.max()), 0.3), prose)
    own = {rung: res.run(rung, MAIN_LR, 1).shift[:, -1] / res.run(rung, MAIN_LR, 6).shift[:, -1]
           for rung in ("live", "reference")}  # (S,) each: the top layer trained alone, over every layer trained
    check(f"the top layer's own share of its output change grows with training: trained alone at 3e-4 it moved its "
          f"output < 1/20 as far as when every layer trained after {res.steps['live']} steps, and > 0.6x as far after "
          f"{res.steps['reference']}, in every seed",
          below(float(own["live"].max()), 0.05) & above(float(own["reference"].min()), 0.6), own)


def rate_claims(res: PairReference) -> None:
    """Section 6 on the reference: the gate at BERT's rate, the collapse at 1e-3, forgetting at matched accuracy."""
    short, bert = res.run("live", 3e-5, 6), res.run("reference", 3e-5, 6)
    check(f"the gate (held-out accuracy > {0.5 + GATE_MARGIN}, chance 0.5): BERT's rate passes it in no seed after "
          f"{short.steps} steps and in every seed after {bert.steps}, at > 0.99",
          below(float(short.acc.max()), 0.5 + GATE_MARGIN) & above(float(bert.acc.min()), 0.99),
          {f"{short.steps} steps": short.acc, f"{bert.steps} steps": bert.acc})
    high = res.run("reference", 1e-3, 6)
    check(f"33x BERT's rate with every layer trained collapses: after {high.steps} steps at least 7 of "
          f"{len(res.seeds)} runs predict one class for >= {COLLAPSED:.0%} of the held-out pairs, and none passes "
          "the gate", at_least(float(high.collapsed.mean()), 0.7) & at_most(float(high.learned.mean()), 0.0),
          {"collapsed": high.collapsed.astype(int), "share predicted true": high.true_share,
           "final loss (ln 2 = 0.693)": high.final_loss})
    fast = res.run("reference", MAIN_LR, 6)
    d = paired_difference(bert.similarity, fast.similarity, "3e-5", "3e-4")
    check(f"at matched accuracy ({bert.steps} steps, both > 0.99 in every seed), 10x BERT's rate kept less of the "
          "similarity structure: r higher at 3e-5 by a paired 95% interval above 0.2",
          above(float(min(bert.acc.min(), fast.acc.min())), 0.99) & above(d.low, 0.2), str(d))
    early = res.run("4x", 3e-5, 6)
    d = paired_difference(early.similarity, bert.similarity, f"{early.steps} steps", f"{bert.steps} steps")
    check(f"and at BERT's rate, training on from {early.steps} steps (already past the gate in every seed) to "
          f"{bert.steps} lost more of it: r lower by a paired 95% interval above 0.2",
          above(float(early.acc.min()), 0.5 + GATE_MARGIN) & above(d.low, 0.2), str(d))


def freezing_claims(res: PairReference) -> None:
    """Section 7 on the reference: freezing at matched accuracy, and where it stops helping."""
    top, full = res.run("reference", MAIN_LR, 1), res.run("reference", MAIN_LR, 6)
    d = paired_difference(top.similarity, full.similarity, "top layer", "all layers")
    check(f"at {top.steps} steps and 3e-4, training only the top layer learned as well (> 0.99 in every seed) and kept "
          "more of the similarity structure than training all: a paired 95% interval above 0.25",
          above(float(min(top.acc.min(), full.acc.min())), 0.99) & above(d.low, 0.25), str(d))
    hot = res.run("reference", 1e-3, 1)
    check(f"but at 1e-3 freezing the lower five layers did not keep it: with only the top layer trained, r < 0.3 in "
          f"every seed after {hot.steps} steps (and > 0.99 accuracy)", below(float(hot.similarity.max()), 0.3) & above(float(hot.acc.min()), 0.99),
          {"r": hot.similarity, "accuracy": hot.acc})


def reference_claims(ref) -> None:
    """Every check notebook 17 makes on its reference run (the runner makes them on every regeneration too)."""
    res = summarize_reference(ref)
    probe_claims(res)
    movement_claims(res)
    rate_claims(res)
    freezing_claims(res)


REFERENCES = [
    ReferenceSpec(
        "17_fine_tuning", "pair_task", reference_seed, seeds=10,
        rungs=(Rung("live", steps=20, warmup=WARMUP), Rung("4x", steps=80, warmup=WARMUP),
               Rung("reference", steps=REFERENCE_STEPS, warmup=0.1)),
        lesson="what fine-tuning MiniLM on the pair task learns, moves and forgets at 3e-5, 3e-4 and 1e-3, the top "
               "layer or all layers trained, at 20 steps, 80 and BERT's ~3 epochs (340 steps), over 10 seeds",
        claims=reference_claims),
]


LR_COLOURS = {3e-5: "#1b9e77", 3e-4: "#2166ac", 1e-3: "#d95f02"}
RUNG_MARKERS = {"live": "o", "4x": "s", "reference": "D"}


def plot_reference(fig, res: PairReference) -> None:
    """Left: each layer's relative weight change over the bottom layer's, every layer trained (median over seeds,
    middle half shaded): the live run at 3e-4 and BERT's recipe. Right: what each run learned against what it kept,
    one marker per condition at the median seed (colour: learning rate; shape: budget; open: only the top layer
    trained), the middle half of the seeds as bars."""
    ax, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.35])
    layers = np.arange(1, res.runs[("live", 3e-4, 6)].weight_change.shape[1] + 1)
    shown = (("live", 3e-4, f"the live run: 3e-4, {res.steps['live']} steps", "#7f7f7f", "--"),
             ("reference", 3e-4, f"3e-4, {res.steps['reference']} steps", LR_COLOURS[3e-4], "-"),
             ("reference", 3e-5, f"BERT's recipe: 3e-5, {res.steps['reference']} steps", LR_COLOURS[3e-5], "-"))
    for rung, lr, label, colour, ls in shown:
        run = res.run(rung, lr, 6)
        rel = run.weight_change / run.weight_change[:, :1]  # (S, L): over the bottom layer's change
        ax.plot(layers, np.median(rel, 0), "o" + ls, color=colour, label=label)
        ax.fill_between(layers, *np.percentile(rel, [25, 75], axis=0), color=colour, alpha=0.15, lw=0)
    ax.axhline(1, color="grey", ls=":", lw=1)
    ax.set(xlabel="layer", ylabel="relative weight change / layer 1's", xticks=layers,
           title=f"every layer trained: weights moved, {len(res.seeds)} seeds")
    ax.legend(fontsize=7, loc="upper left")
    for (rung, lr, k), run in res.runs.items():
        x, y = np.median(run.acc), np.median(run.similarity)
        xerr = np.abs(np.percentile(run.acc, [25, 75]) - x)[:, None]
        yerr = np.abs(np.percentile(run.similarity, [25, 75]) - y)[:, None]
        c = LR_COLOURS[lr]
        ax2.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=RUNG_MARKERS[rung], color=c, ms=6, lw=0.8,
                     mfc=c if k == 6 else "white")
    for lr, c in LR_COLOURS.items():  # the legend: colours for rates, shapes for budgets
        ax2.plot([], [], "o", color=c, label=f"lr {lr:.0e}".replace("e-0", "e-"))
    for rung, m in RUNG_MARKERS.items():
        ax2.plot([], [], m, color="grey", label=f"{res.steps[rung]} steps")
    ax2.plot([], [], "o", color="grey", mfc="white", label="only the top layer trained")
    ax2.axvline(0.5 + GATE_MARGIN, color="grey", ls=":", lw=1)
    ax2.text(0.5 + GATE_MARGIN, -0.05, " learned →", fontsize=8, color="grey", va="bottom")
    ax2.set(xlabel="held-out accuracy on the pair task", ylabel="similarity structure kept on held-out prose (r)",
            xlim=(0.4, 1.02), ylim=(-0.1, 1.05), title="what a run learned against what it kept (median seed)")
    ax2.legend(fontsize=7, loc="center left", ncol=2)



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

"""Notebook 18's training runs and real-model measurements: the key-token classifier trained over seeds (one
batched run, qalib.lab.train_batched) on labels with 10% noise, the learned-or-not gate, the truth by intervention
(which sentences' key the prediction depends on), every attribution method's hits on decisive keys and its weight on
keys the model does not use, the methods' agreement, Jain & Wallace's adversarial attention and Wiegreffe & Pinter's
uniform baseline, the reference run over 16 seeds at three budgets, and the same methods on all-MiniLM-L6-v2 for
sentences with a planted word."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from qalib.lab.data import N_SPECIAL
from qalib.lab.gate import Gate, learned
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.validate import seed_list
from qalib.notebook.claims import above, at_least, at_most, below, check
from qalib.topics.nb18_attention_explanation.compute import (IG_STEPS, METHODS, SHORT, KeyTokenTask,
                                                             adversarial_attention, agreement_matrix, attributions,
                                                             class_margin, cls_readout, completeness_gap,
                                                             key_intervention, mean_readout, pooled, rank_scores,
                                                             js_divergence, residual_share, seed_pair_distances, similarity_to,
                                                             special_mass, split_hits,
                                                             uniform_last_layer)

N_EVAL = 256   # held-out sentences each model's attributions are scored on
N_ADV = 128    # of which the adversarial search runs on the first N_ADV
EVAL_SEED = 12345
LABEL_NOISE = 0.1  # share of training labels flipped: the best log-odds is ln 9 = 2.2, so the output cannot run away
GATE_MARGIN = 0.45  # learned: held-out accuracy > chance 0.5 + 0.45


def explanation_task() -> KeyTokenTask:
    """The notebook's task: 4 key tokens among 27 distractors, 12 tokens a sentence, 10% of training labels flipped."""
    return KeyTokenTask(label_noise=LABEL_NOISE)


def explanation_config(task: KeyTokenTask) -> MiniBertConfig:
    """A 2-layer post-LN mini-BERT (d = 32, 2 heads): two layers, so that layer 0 can move the key's information
    to other positions before the last layer's [CLS] reads it."""
    return MiniBertConfig(vocab_size=task.vocab_size, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                          max_len=task.seq_len + 2)


def train_config(steps: int, device: str | None = "cpu") -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=3e-3, warmup=20, device=device)


def accuracy_gate(accuracy: float) -> Gate:
    """The learned-or-not gate: held-out accuracy (clean labels) above chance 0.5 by GATE_MARGIN."""
    return learned("held-out accuracy", accuracy, baseline=0.5, baseline_name="chance", margin=GATE_MARGIN)


def held_out(task: KeyTokenTask):
    """The held-out sentences every model is read on: (Batch with clean labels, key positions, content mask)."""
    batch, key = task.sample(N_EVAL, torch.Generator().manual_seed(EVAL_SEED))
    return batch, key, batch.input_ids >= N_SPECIAL


def read_model(model, task: KeyTokenTask, batch, key, content) -> dict:
    """Everything the notebook reads from one trained model, as plain numbers and per-sentence tensors.
    The key is decisive for a sentence when replacing it by a distractor flips the prediction (key_intervention);
    "unused" below means not decisive. Per method: hit (key ranked first among the content tokens), mass (the share
    of the method's |weight| on the content tokens that sits on the key) and size (|weight| on the key), each the
    mean or median over the decisive sentences and over the others.
    -> {"summary": {...plain floats...}, "decisive": (B,) bool, "attr": {method: (B, T)}, "intervention": {...}}."""
    inputs = batch.model_inputs()
    iv = key_intervention(model, inputs, key, task.distractors)
    pred = iv["pred"]
    decisive = iv["flip"] > 0.5
    attr = attributions(model, inputs, cls_readout(batch.input_ids.shape[1]), class_margin, pred)
    labels = batch.labels
    rows = torch.arange(len(key))
    others = content.clone()
    others[rows, key] = False
    loo = attr["leave-one-out"].abs()
    gxi = attr["gradient x input"].abs().masked_fill(~content, 0).max(1).values
    med = lambda x: float(x.median()) if x.numel() else float("nan")  # noqa: E731
    s = {"accuracy": float((pred == labels).float().mean()),
         "log_odds_median": med(iv["log_odds"]), "log_odds_min": float(iv["log_odds"].min()),
         "decisive_share": {str(c): float(decisive[labels == c].float().mean()) for c in (0, 1)},
         "decisive_all": float(decisive.float().mean()),
         "drop_decisive": med(iv["delta"][decisive]), "drop_unused": med(iv["delta"][~decisive].abs()),
         "erasure_key_decisive": med(loo[rows, key][decisive]), "erasure_distractor": med(loo[others]),
         "gxi_largest": med(gxi),
         "hit_decisive": {}, "hit_unused": {}, "mass_decisive": {}, "mass_unused": {}, "size_decisive": {},
         "size_unused": {}}
    for m in METHODS:
        h = rank_scores(attr[m], key, content)["hit"]
        s["hit_decisive"][m], s["hit_unused"][m] = split_hits(h, decisive)
        a = attr[m].abs().masked_fill(~content, 0)
        mass = a[rows, key] / a.sum(1).clamp_min(1e-30)   # the share of the method's weight that sits on the key
        s["mass_decisive"][m], s["mass_unused"][m] = med(mass[decisive]), med(mass[~decisive])
        s["size_decisive"][m], s["size_unused"][m] = med(a[rows, key][decisive]), med(a[rows, key][~decisive])
    uni = uniform_last_layer(model, inputs)
    s["uniform_delta_p"], s["uniform_flip"] = med(uni["delta_p"]), float(uni["flip"].mean())
    gap = completeness_gap(model, inputs, pred, IG_STEPS)
    s["ig_gap_median"] = med(gap)
    s["residual_share"] = [float(x) for x in residual_share(model, inputs)]
    return {"summary": s, "decisive": decisive, "attr": attr, "intervention": iv}


def run_experiment(seeds=(0, 1, 2), steps: int = 150, device: str | None = "cpu", bound: float = 0.01,
                   task: KeyTokenTask | None = None) -> dict:
    """Train one model per seed (one batched run), gate each (accuracy_gate), then on the same held-out batch:
    read_model's summary (the truth by intervention, hit rates on decisive and unused keys, magnitudes, IG's
    completeness gap, the uniform baseline, the residual share), the methods' Kendall-tau agreement and the
    adversarial search (|delta p| < bound). Models are moved to the CPU for reading."""
    seeds = seed_list("seeds", seeds)
    task = task or explanation_task()
    run = train_seeds(explanation_config(task), task, seeds, train_config(steps, device))
    batch, key, content = held_out(task)
    inputs = batch.model_inputs()
    out = {"seeds": list(seeds), "steps": steps, "task": task, "bound": bound, "batch": batch, "key": key,
           "models": [], "gates": [], "summary": [], "decisive": [], "tau": [], "jsd": [], "delta_p": [],
           "key_attention": [], "key_attention_adv": [], "last_layer_hit": [], "cls_attention": [],
           "cls_attention_adv": []}
    for model in run.models:
        model = model.cpu().eval()
        out["models"].append(model)
        r = read_model(model, task, batch, key, content)
        out["gates"].append(accuracy_gate(r["summary"]["accuracy"]))
        out["summary"].append(r["summary"])
        out["decisive"].append(r["decisive"].numpy())
        out["last_layer_hit"].append(rank_scores(r["attr"]["attention (last layer)"], key, content)["hit"].numpy())
        out["tau"].append(agreement_matrix(r["attr"], content))
        adv = adversarial_attention(model, {k: v[:N_ADV] for k, v in inputs.items()}, bound=bound)
        rows = torch.arange(N_ADV)
        out["jsd"].append(adv["jsd"].numpy())
        out["delta_p"].append(adv["delta_p"].numpy())
        out["key_attention"].append(adv["original"].mean(1)[rows, key[:N_ADV]].numpy())
        out["key_attention_adv"].append(adv["adversarial"].mean(1)[rows, key[:N_ADV]].numpy())
        out["cls_attention"].append(adv["original"].mean(1))        # (N_ADV, T): the head mean
        out["cls_attention_adv"].append(adv["adversarial"].mean(1))
    out["cls_attention"], out["cls_attention_adv"] = torch.stack(out["cls_attention"]), torch.stack(out["cls_attention_adv"])
    for k in ("tau", "jsd", "delta_p", "key_attention", "key_attention_adv", "decisive", "last_layer_hit"):
        out[k] = np.stack(out[k])
    out["learned"] = np.array([g.passed for g in out["gates"]])
    return out


@dataclass(frozen=True)
class SeedVariance:
    """Wiegreffe & Pinter's calibration on the first N_ADV held-out sentences: models trained like the live run's
    but for the seed, each read only if it passed its gate. `distance` is (n_pairs, N_ADV): the JS divergence
    (nats) between two models' head-mean last-layer [CLS] attention; `agreement` (n_pairs,) the share of sentences on
    which the two predict the same class."""
    seeds: list[int]
    learned: np.ndarray
    pairs: list[tuple[int, int]]
    distance: np.ndarray
    agreement: np.ndarray

    @property
    def median_distance(self) -> np.ndarray:
        """(n_pairs,) each pair's median over sentences."""
        return np.median(self.distance, axis=1)


def seed_variance(seeds, steps: int, device: str | None = "cpu") -> SeedVariance:
    """Train one model per seed (one batched run, the live recipe) and compare every pair of those that learned."""
    task = explanation_task()
    run = train_seeds(explanation_config(task), task, seed_list("seeds", seeds), train_config(steps, device))
    batch, _, _ = held_out(task)
    inputs = batch.model_inputs()
    kept, attn, preds, passed = [], [], [], []
    for seed, model in zip(seeds, run.models):
        model = model.cpu().eval()
        with torch.no_grad():
            out = model(**inputs, return_internals=True)
            pred = model.class_logits(out.last_hidden_state).argmax(-1)          # (N_EVAL,)
        passed.append(accuracy_gate(float((pred == batch.labels).float().mean())).passed)
        if passed[-1]:
            kept.append(seed)
            last = out.internals[f"layer{model.cfg.n_layers - 1}.probs"]          # (N_EVAL, H, T, T)
            attn.append(last[:N_ADV, :, 0, :].mean(1))                           # (N_ADV, T): [CLS] row, head mean
            preds.append(pred[:N_ADV])
    if len(kept) < 2:
        raise RuntimeError(f"only {len(kept)} of {len(seeds)} models passed the gate: no pair to compare")
    pairs, dist = seed_pair_distances(torch.stack(attn))
    agree = np.array([float((preds[i] == preds[j]).float().mean()) for i, j in pairs])
    return SeedVariance(kept, np.array(passed), [(kept[i], kept[j]) for i, j in pairs], dist.numpy(), agree)


def per_seed(summaries: list[dict], *keys: str) -> np.ndarray:
    """(n_seeds,) summary[keys[0]][keys[1]]... of each seed."""
    out = []
    for s in summaries:
        for k in keys:
            s = s[k]
        out.append(s)
    return np.asarray(out, dtype=float)


# -- the reference run: 16 seeds at the live budget, 4x and 16x -------------------------------------------------
def reference_seed(seed: int, steps: int) -> dict:
    """One seed of the reference: the live run's model, task and training (train_seeds with this one seed), read
    on the same held-out sentences. -> read_model's summary (plain numbers; no per-sentence arrays)."""
    task = explanation_task()
    model = train_seeds(explanation_config(task), task, (seed,), train_config(steps)).models[0].cpu().eval()
    batch, key, content = held_out(task)
    return read_model(model, task, batch, key, content)["summary"]


def learned_runs(rung) -> list[dict]:
    """The runs of a reference rung that pass the gate: nothing is read from the others."""
    return [r for r in rung.runs if accuracy_gate(r["accuracy"]).passed]


def reference_claims(ref) -> None:
    """The checks notebook 18 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = list(ref.rungs.values())
    passed = {r.name: len(learned_runs(r)) / len(r.runs) for r in rungs}
    check(f"the gate: at every budget at least 90% of the {len(rungs[0].runs)} seeds learned the task (held-out "
          f"accuracy > chance 0.5 + {GATE_MARGIN}); only those are read below", at_least(min(passed.values()), 0.9),
          passed)
    top = rungs[-1]
    runs = learned_runs(top)
    steps = top.kwargs["steps"]
    d0, d1 = per_seed(runs, "decisive_share", "0"), per_seed(runs, "decisive_share", "1")
    default = float((np.minimum(d0, d1) < 0.05).mean())
    check(f"at {steps} steps, at least 75% of the models have a default class: one class's key is decisive in < 5% of "
          "its sentences", at_least(default, 0.75), {"share of seeds": default,
                                                     "weaker class, per seed": np.round(np.minimum(d0, d1), 3)})
    row = {m: i for i, m in enumerate(METHODS)}
    erasure_low = min(float(method_arrays(learned_runs(r))["hit"][row["leave-one-out"]].min()) for r in rungs)
    check("at every budget erasure ranks the decisive key first in >= 95% of those sentences, in every seed",
          at_least(erasure_low, 0.95), erasure_low)
    arr = method_arrays(runs)
    hit, ratio = arr["hit"], arr["ratio"]
    d_hit = paired_difference(hit[row["rollout"]], hit[row["attention (last layer)"]], "rollout", "last layer")
    last = hit[row["attention (last layer)"]]
    check(f"at {steps} steps rollout finds the decisive key more often than raw last-layer attention (paired by seed, "
          "the 95% interval of the difference above 0); last-layer attention finds it in < 50% of those sentences in "
          "the median seed, and in < 20% in at least a third of the seeds", above(d_hit.low, 0)
          & below(float(np.median(last)), 0.5) & at_least(float((last < 0.2).mean()), 1 / 3),
          {"difference": str(d_hit), "last layer, per seed": np.round(last, 2)})
    ok = np.isfinite(ratio[row["rollout"]]) & np.isfinite(ratio[row["leave-one-out"]])
    d_ratio = paired_difference(ratio[row["rollout"]][ok], ratio[row["leave-one-out"]][ok], "rollout", "erasure")
    quiet = {m: float(np.nanmedian(ratio[row[m]])) for m in ("leave-one-out", "integrated gradients")}
    check(f"at {steps} steps rollout points at keys the output ignores, erasure hardly: |weight| on an unused key over "
          "that on a decisive key is larger for rollout (paired by seed, interval above 0.1); erasure's and integrated "
          "gradients' are < 0.05 in the median seed", above(d_ratio.low, 0.1) & below(max(quiet.values()), 0.05),
          {"difference": str(d_ratio), **quiet})
    mean_ratio = {r.name: float(np.nanmedian(method_arrays(learned_runs(r))["ratio"][row["attention (mean of layers)"]]))
                  for r in rungs}
    check("longer training does not cure it: the layer mean's ratio stays > 0.15 in the median seed at every budget",
          above(min(mean_ratio.values()), 0.15), mean_ratio)
    uni = per_seed(runs, "uniform_flip")
    check(f"at {steps} steps Wiegreffe & Pinter's uniform baseline: uniform weights in the last layer's [CLS] row "
          "change < 1% of the predictions in at least half of the seeds (the others depend on that row)",
          at_least(float((uni < 0.01).mean()), 0.5), np.round(uni, 3))
    gaps = per_seed(runs, "ig_gap_median")
    check(f"{IG_STEPS}-step integrated gradients do not add up on most trained models: at {steps} steps the median "
          "sentence misses f(x) - f(baseline) by more than a quarter in at least half of the seeds",
          at_least(float((gaps > 0.25).mean()), 0.5), np.round(gaps, 3))


REFERENCES = [
    ReferenceSpec(
        "18_attention_explanation", "decisive", reference_seed, seeds=16,
        rungs=(Rung("live", steps=150), Rung("4x", steps=600), Rung("reference", steps=2400)),
        lesson="which attribution methods find the key token the prediction depends on (the truth by intervention), "
               "and which put their weight on a key the model does not use, over 16 seeds at three budgets",
        claims=reference_claims),
]


@lru_cache(maxsize=1)
def small_result() -> dict:
    """A stand-in for the notebook's experiment (one seed) so the adversarial demo builds on its own."""
    return run_experiment(seeds=(0,), steps=150, device="cpu")


def method_arrays(summaries: list[dict]) -> dict[str, np.ndarray]:
    """Per-seed summaries -> (M, S) arrays in METHODS order: "hit" on decisive keys, "hit_unused" on the others, and
    "ratio" = |weight| on an unused key / |weight| on a decisive key (the medians' ratio: 1 says the method points
    at a key the prediction ignores as strongly as at one it depends on; 0 says it does not point at it at all)."""
    hit = np.array([per_seed(summaries, "hit_decisive", m) for m in METHODS])
    unused = np.array([per_seed(summaries, "hit_unused", m) for m in METHODS])
    ratio = np.array([per_seed(summaries, "size_unused", m) / per_seed(summaries, "size_decisive", m)
                      for m in METHODS])
    return {"hit": hit, "hit_unused": unused, "ratio": ratio}


def plot_scores(fig, panels: list[tuple[str, dict[str, np.ndarray]]], seq_len: int = 12) -> None:
    """Left: each method's hit rate on the sentences whose key is decisive; right: the weight it puts on a key the
    prediction does not use, relative to a decisive one (log scale). panels: [(label, method_arrays(...))], one
    colour each (the live run, or the reference's rungs); one dot per seed, a line at the median."""
    a_hit, a_ratio = fig.subplots(1, 2)
    x = np.arange(len(METHODS))
    width = 0.8 / len(panels)
    for i, (label, arr) in enumerate(panels):
        off = (i - (len(panels) - 1) / 2) * width
        colour = f"C{i}"
        for ax, key in ((a_hit, "hit"), (a_ratio, "ratio")):
            v = np.clip(arr[key], 1e-4, None) if key == "ratio" else arr[key]
            for j in range(v.shape[1]):
                ax.plot(x + off, v[:, j], "o", color=colour, ms=2.5, alpha=0.6)
            ax.hlines(np.nanmedian(v, 1), x + off - width / 2, x + off + width / 2, color=colour, lw=2,
                      label=label if ax is a_hit else None)
    for ax in (a_hit, a_ratio):
        ax.set_xticks(x, [SHORT[m] for m in METHODS], rotation=30, ha="right")
    a_hit.set_ylim(0, 1.05)
    a_hit.axhline(1 / seq_len, color="grey", ls=":")
    a_hit.set_ylabel("decisive key ranked first\n(share of those sentences)")
    a_hit.legend(fontsize=8, loc="lower left")
    a_ratio.set_yscale("log")
    a_ratio.axhline(1, color="grey", ls=":")
    a_ratio.set_ylabel("|weight| on an unused key\n÷ on a decisive key (floor 1e-4)")
    a_hit.set_title("Does it find the key the output depends on?", fontsize=10)
    a_ratio.set_title("Does it point at a key the output ignores?", fontsize=10)


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


def adversarial_distance(exp: dict) -> np.ndarray:
    """(n_seeds,) the median sentence's JS divergence between the head means of a model's own last-layer [CLS]
    attention and the adversarial one (section 6's rows, averaged like seed_variance's, so the two compare)."""
    return np.array([float(js_divergence(own, adv).median())
                     for own, adv in zip(exp["cls_attention"], exp["cls_attention_adv"])])


def plot_seed_variance(ax, sv: SeedVariance, adversarial: np.ndarray) -> None:
    """Every pair of seeds' distance (median sentence), sorted, beside the adversarial search's per seed."""
    d = np.sort(sv.median_distance)
    ax.plot(np.arange(1, len(d) + 1), d, "o", color="#2166ac", label=f"two seeds' models ({len(d)} pairs)")
    for i, a in enumerate(np.sort(adversarial)):
        ax.axhline(a, color="#b35806", ls="--", lw=1, label="adversarial search, one line per seed" if i == 0 else None)
    ax.axhline(np.log(2), color="grey", ls=":", label="ln 2: disjoint supports")
    ax.set_xlabel("pair of models, sorted by distance")
    ax.set_ylabel("JS divergence of last-layer [CLS]\nattention, head mean (nats)")
    ax.set_ylim(0, 0.75)
    ax.set_title("Retraining moves attention as far as the adversary does", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")


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
    Also: the attention methods' share of mass on [CLS] and [SEP], and the residual share per layer (the mean over
    the five words' batches of residual_share).
    -> {"hit": {method: (N,)}, "tau": (M, M), "n": N, "sentences": [...], "special_mass": {method: (N,)} for the
    three attention methods, "residual_share": (L,)}."""
    hits = {m: [] for m in METHODS}
    taus, sentences, specials, shares = [], [], {m: [] for m in METHODS[:3]}, []
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
        for m in specials:
            specials[m].append(special_mass(attr[m], ~content & enc["attention_mask"].bool()).numpy())
        taus.append(agreement_matrix(attr, content))
        shares.append(residual_share(model, enc).numpy())
    return {"hit": {m: np.concatenate(v) for m, v in hits.items()}, "tau": np.mean(taus, 0), "n": len(sentences),
            "sentences": sentences, "special_mass": {m: np.concatenate(v) for m, v in specials.items()},
            "residual_share": np.mean(shares, 0)}

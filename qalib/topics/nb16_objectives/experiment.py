"""Notebook 16, training: one model size, one language, three objectives (masked LM, causal LM, span corruption),
several seeds; then what each frozen network's output holds (linear probes) and how well each predicts the next
token, against the language's true distribution.

    exp = run_experiment(seeds=(0, 1, 2), steps=400)     # ObjectivesResult: models, probes at checkpoints, FLOPs
    task_floors()                                        # the lowest held-out loss each objective's task allows
    held_out_loss(model, "span")                         # a trained model's loss on its own task, fresh text
    next_token_kl(model, "mlm", lang, text)              # KL(truth || model) of p(next | prefix), the [MASK] trick
    generate_text(model, "mlm", prompt, 32, seed=0)      # left-to-right sampling, the same trick each step
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.data import IGNORE, MASK, N_SPECIAL, UNK
from qalib.lab.device import get_device, one_thread
from qalib.lab.gate import Gate, learned
from qalib.notebook.claims import above, at_least, at_most, below, check
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.lab.train import TrainConfig, fit
from qalib.nn.generate import generate
from qalib.lab.language_truth import kl, true_next_probs
from qalib.topics.nb16_objectives.compute import (DECODER_START, EOS, LANG_VOCAB, OBJECTIVES, SEQ_LEN, build_model, logits_of,
                                     model_config, n_params, objective_batch, objectives_language, sentinel, span_corrupt,
                                     step_flops)
from qalib.nn.validate import choice, choices, int_in, seed_list

PROBE_LEN = SEQ_LEN - 3  # probed text (+ EOS for T5's encoder = its training input length, SEQ_LEN - 2)
PROBE_SEED = 4242   # the probes' text, the same for every model
FLOOR_SEED = 5151   # the held-out text of task_floors and held_out_loss
BATCH = 64
LR = 1e-2
WARMUP_SHARE = 0.4  # of the steps, linear, then the constant LR: a short warm-up leaves the masked LM on its plateau


def features(model, objective: str, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) clean ids -> (B, T, d): the frozen network's final hidden states (after the final norm), the output a
    classifier would read. span: the encoder's output (memory) on ids + EOS, without the EOS position."""
    dev = next(model.parameters()).device
    with torch.no_grad():
        if objective == "span":
            src = torch.cat([ids, torch.full((len(ids), 1), EOS)], dim=1).to(dev)
            return model.encode(src)[:, :-1].float().cpu()
        return model.decoder(model.embeddings(ids.to(dev)))[0].float().cpu()  # (hidden, cache): the hidden states


def probe_text(n: int, seed: int = PROBE_SEED) -> torch.Tensor:
    return objectives_language().sample(n, PROBE_LEN, torch.Generator().manual_seed(seed))


def probe_scores(model, objective: str, train_ids: torch.Tensor, test_ids: torch.Tensor) -> dict:
    """Linear probes (least squares, qalib.lab.probes) on the frozen output at positions 1 .. T-2, reading the token to
    the RIGHT (t + 1: needs the right context) and the token to the LEFT (t - 1). -> {"next": acc, "previous": acc}
    on the held-out text."""
    def rows(ids):
        h = features(model, objective, ids)[:, 1:-1]               # (B, T-2, d): positions 1 .. T-2
        return h.reshape(-1, h.shape[-1]), ids[:, 2:].reshape(-1), ids[:, :-2].reshape(-1)
    x, nxt, prev = rows(train_ids)
    x_test, nxt_test, prev_test = rows(test_ids)
    v = model.cfg.vocab_size
    w_next, w_prev = fit_probe(x, [nxt, prev], [v, v]).split([v, v], dim=1)
    return {"next": probe_accuracy(w_next, x_test, nxt_test), "previous": probe_accuracy(w_prev, x_test, prev_test)}


def loss_of(model, objective: str, batch: dict) -> torch.Tensor:
    """Cross-entropy over the positions that carry a loss; mlm projects to the vocabulary only at those."""
    labels = batch["labels"]
    if objective == "mlm":
        hidden = model.decoder(model.embeddings(batch["inputs"]))[0]  # (B, T, d)
        keep = labels != IGNORE
        return F.cross_entropy(model.logits(hidden[keep]).float(), labels[keep])
    logits = logits_of(model, objective, batch)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def train_one(run: tuple[str, int], steps: int, d_model: int, n_probe: int, checkpoints: int,
              device: str | None = None, lr: float = LR, warmup_share: float = WARMUP_SHARE) -> dict:
    """Train one objective on one seed's stream of fresh text (the same text for every objective with that seed),
    probing the frozen output at `checkpoints` + 1 evenly spaced steps (step 0 = the random initialisation)."""
    objective, seed = run
    lang, cfg, dev = objectives_language(), model_config(d_model), get_device(device)
    torch.manual_seed(seed)
    model = build_model(objective, cfg).to(dev)
    text = torch.Generator().manual_seed(seed)       # the clean text: the same stream for every objective
    noise = torch.Generator().manual_seed(10_000 + seed)  # the corruption's own draws, so the text stays aligned
    batches = (objective_batch(objective, lang.sample(BATCH, SEQ_LEN, text), noise) for _ in range(steps))
    train_ids, test_ids = probe_text(n_probe), probe_text(n_probe, PROBE_SEED + 1)
    at = sorted({round(i * steps / checkpoints) for i in range(checkpoints + 1)})
    probes = []

    def probe(model) -> None:
        model.eval()
        probes.append(probe_scores(model, objective, train_ids, test_ids))
        model.train()

    if 0 in at:
        probe(model)

    def probe_after(history, step, model, batch) -> None:  # fit's on_step: after step `step`, step + 1 are done
        if step + 1 in at:
            probe(model)

    train_cfg = TrainConfig(steps=steps, batch_size=BATCH, lr=lr, warmup=max(1, round(steps * warmup_share)),
                            weight_decay=0.0, clip=1.0, log_every=steps, device=dev)
    history = fit(model, partial(objective_loss, objective=objective), batches, train_cfg, on_step=probe_after)
    return {"state": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "loss": history.step_loss,
            "probe_steps": at, "probes": probes}


def objective_loss(model, batch: dict, objective: str) -> torch.Tensor:
    """loss_of on one objective_batch, moved to the model's device."""
    dev = next(model.parameters()).device
    return loss_of(model, objective, {k: v.to(dev) for k, v in batch.items()})


# -- did each model learn its own task? -------------------------------------------------------
def _held_out(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """n held-out sequences, their span corruption, and one interior position per sequence (the masked LM's test)."""
    g = torch.Generator().manual_seed(seed)
    ids = objectives_language().sample(n, SEQ_LEN, g)
    src, tgt, noise = span_corrupt(ids, g)
    where = torch.randint(1, SEQ_LEN - 1, (n,), generator=g)
    return ids, (src, tgt, noise), where, g


def task_floors(n: int = 8_000, seed: int = FLOOR_SEED) -> dict:
    """The lowest held-out loss each objective's own task allows, from the language's successor table. The language
    is a Markov chain with 4 equally likely successors per token, so a token given its left neighbour has entropy
    ln 4, and given both neighbours it is uniform over the paths between them: -log p = log(number of paths).
    -> {"causal": {"left context": ln 4},
        "mlm": one [MASK] at an interior position: {"left neighbour only": ln 4, "both neighbours": E log A^2[l, r]},
        "span": nats per decoder token (sentinel, 3 span tokens, sentinel, EOS: only the span tokens are uncertain):
                {"ignores the encoder": (H(first span token) + 2 ln 4) / 6, "left neighbour": 3 ln 4 / 6,
                 "both neighbours": E log A^4[l, r] / 6}}."""
    lang = objectives_language()
    k = lang.n_content
    a = torch.zeros(k, k, dtype=torch.float64)
    a.scatter_(1, lang.successors, 1.0)                     # a[i, j] = 1 if j may follow i
    ids, (_, tgt, noise), where, _ = _held_out(n, seed)
    x, rows = ids - N_SPECIAL, torch.arange(n)
    start = noise.int().argmax(1)                           # the one span's first position (3 tokens)
    first = torch.bincount(x[rows, start], minlength=k).double() / n
    h_first = float(-(first[first > 0] * first[first > 0].log()).sum())
    ln4 = float(np.log(lang.branching))
    n_dec = tgt.shape[1]
    return {"causal": {"left context": ln4},
            "mlm": {"left neighbour only": ln4,
                    "both neighbours": float((a @ a)[x[rows, where - 1], x[rows, where + 1]].log().mean())},
            "span": {"ignores the encoder": (h_first + 2 * ln4) / n_dec, "left neighbour": 3 * ln4 / n_dec,
                     "both neighbours": float(torch.linalg.matrix_power(a, 4)[x[rows, start - 1], x[rows, start + 3]]
                                              .log().mean()) / n_dec}}


@torch.no_grad()
def held_out_loss(model, objective: str, n: int = 512, seed: int = FLOOR_SEED + 1) -> float:
    """A trained model's cross-entropy on its own task, on fresh text, comparable with task_floors: causal, every
    next token; mlm, one [MASK] at an interior position per sequence (the rest intact); span, every decoder token."""
    choice("objective", objective, OBJECTIVES)
    dev = next(model.parameters()).device
    ids, (src, tgt, _), where, _ = _held_out(n, seed)
    rows = torch.arange(n)
    if objective == "mlm":
        inputs = ids.clone()
        inputs[rows, where] = MASK
        hidden = model.decoder(model.embeddings(inputs.to(dev)))[0][rows, where.to(dev)]
        return float(F.cross_entropy(model.logits(hidden).float(), ids[rows, where].to(dev)))
    if objective == "causal":
        batch = {"inputs": ids[:, :-1], "labels": ids[:, 1:]}
    else:
        start = torch.full((n, 1), DECODER_START)
        batch = {"inputs": src, "decoder_in": torch.cat([start, tgt[:, :-1]], dim=1), "labels": tgt}
    return float(loss_of(model, objective, {k: v.to(dev) for k, v in batch.items()}))


@dataclass
class ObjectivesResult:
    objectives: tuple[str, ...]
    seeds: list[int]
    steps: int
    models: dict            # {(objective, seed): trained model, eval mode}
    loss: dict              # {objective: (S, steps) training loss, each on its own scale}
    probe_steps: list[int]
    probe: dict             # {(objective, "next" | "previous"): (S, checkpoints + 1) held-out probe accuracy}
    params: dict            # {objective: parameter count}
    flops_per_step: dict    # {objective: counted training FLOPs of one step of BATCH sequences}

    def final(self, objective: str, what: str = "next") -> np.ndarray:
        """(S,) probe accuracy after training; objective "random" = the untrained bidirectional network."""
        if objective == "random":
            return self.probe[("mlm", what)][:, 0]
        return self.probe[(objective, what)][:, -1]


@one_thread()
def run_experiment(seeds=(0, 1, 2), steps: int = 400, d_model: int = 32, n_probe: int = 256, checkpoints: int = 4,
                   device: str | None = None, objectives=OBJECTIVES) -> ObjectivesResult:
    """Every objective x seed, side by side on the CPU cores (qalib.lab.parallel)."""
    seeds = seed_list("seeds", seeds)
    objectives = tuple(choices("objectives", objectives, OBJECTIVES))
    int_in("steps", steps, 1, 100_000)
    int_in("checkpoints", checkpoints, 1, steps)
    runs = [(o, s) for o in objectives for s in seeds]
    outcomes = dict(zip(runs, map_runs(partial(train_one, steps=steps, d_model=d_model, n_probe=n_probe,
                                               checkpoints=checkpoints, device=device), runs, device)))
    cfg, dev = model_config(d_model), get_device(device)
    models = {}
    for run, o in outcomes.items():
        m = build_model(run[0], cfg)
        m.load_state_dict(o["state"])
        models[run] = m.to(dev).eval()
    probe = {(obj, what): np.array([[p[what] for p in outcomes[(obj, s)]["probes"]] for s in seeds])
             for obj in objectives for what in ("next", "previous")}
    return ObjectivesResult(objectives, seeds, steps, models,
                            {obj: np.array([outcomes[(obj, s)]["loss"] for s in seeds]) for obj in objectives},
                            outcomes[runs[0]]["probe_steps"], probe,
                            {obj: n_params(models[(obj, seeds[0])]) for obj in objectives},
                            {obj: step_flops(cfg, obj, SEQ_LEN, BATCH) for obj in objectives})


# -- next-token prediction and generation ------------------------------------------------------
@torch.no_grad()
def next_probs(model, objective: str, prefix: torch.Tensor) -> torch.Tensor:
    """(B, t) prefix -> (B, V) the model's distribution of token t. causal: the last position's output. mlm: the
    trick, a [MASK] appended at position t and read there. span: the prefix and one sentinel (a span to fill at
    the end) as the encoder's input; the decoder, after <start> <sentinel 0>, predicts the span's first token."""
    choice("objective", objective, OBJECTIVES)
    dev = next(model.parameters()).device
    b = len(prefix)
    if objective == "causal":
        logits = model(prefix.to(dev), last_only=True).logits[:, -1]
    elif objective == "mlm":
        logits = model(torch.cat([prefix, torch.full((b, 1), MASK)], dim=1).to(dev)).logits[:, -1]
    else:
        s0 = torch.full((b, 1), sentinel(0))
        src = torch.cat([prefix, s0, torch.full((b, 1), EOS)], dim=1)
        logits = model(src.to(dev), torch.cat([torch.full((b, 1), DECODER_START), s0], dim=1).to(dev)).logits[:, -1]
    return logits.double().softmax(-1).cpu()


def next_token_kl(model, objective: str, text: torch.Tensor, lengths=(4, 8, 12, 16)) -> float:
    """Mean KL(truth || model) in nats of the next-token distribution after the prefixes of text of these lengths
    (decoding.true_next_probs; the truth gives 0 to sentinels and special ids, so their share counts as a miss)."""
    truth = true_next_probs(objectives_language(), text)  # (B, T, 32): at t, the distribution of token t + 1
    out = [kl(truth[:, t - 1], next_probs(model, objective, text[:, :t])[:, :truth.shape[-1]]).mean()
           for t in (int_in("prefix length", t, 1, text.shape[1] - 1) for t in lengths)]
    return float(torch.stack(out).mean())


@torch.no_grad()
def generate_text(model, objective: str, prompt: torch.Tensor, new_tokens: int, seed: int = 0) -> torch.Tensor:
    """(B, P) prompt -> (B, P + new_tokens) sampled at temperature 1. causal: qalib.nn.generate. mlm: the trick, one
    appended [MASK] per step, sampled, written in, and the whole sequence read again. A sentinel id, which is no
    token of the language, comes back as [UNK], so the truth (decoding.true_logprobs) counts it as impossible."""
    choice("objective", objective, ("mlm", "causal"))
    if objective == "causal":
        dev = next(model.parameters()).device
        ids = generate(model, prompt.to(dev), new_tokens, strategy="sample", seed=seed).cpu()
    else:
        g = torch.Generator().manual_seed(seed)
        ids = prompt.clone()
        for _ in range(int_in("new_tokens", new_tokens, 0)):
            p = next_probs(model, "mlm", ids)  # (B, V)
            ids = torch.cat([ids, torch.multinomial(p, 1, generator=g)], dim=1)
    return torch.where(ids < LANG_VOCAB, ids, torch.full_like(ids, UNK))


# -- the reference: T5 learns, after a plateau ------------------------------------------------------------------------
T5_LR, T5_WARMUP_SHARE = 3e-3, 0.1   # the reference's T5 recipe: a lower rate and a short warm-up
T5_WINDOW = 100                      # training-loss steps averaged to find where the plateau ends


@one_thread()  # tiny tensors: a second thread only spins
def t5_reference_seed(seed: int, steps: int, lr: float = T5_LR, warmup_share: float = T5_WARMUP_SHARE) -> dict:
    """One seed of the T5 reference: train_one("span") at this budget and recipe, then -> {"loss": held-out loss per
    decoder token, "per_position": the held-out loss at each decoder position (sentinel, 3 span tokens, sentinel,
    EOS), "left_mass": the best cross-attention head's mean mass, from the first span token's query, on the source
    token left of the sentinel, "next"/"previous": the frozen encoder's probes (as the live models'), "escape": the
    first step whose T5_WINDOW-step mean training loss is under the learned-or-not threshold (None: never),
    "curve": the training loss averaged over windows of T5_WINDOW steps}"""
    floors = task_floors()["span"]
    out = train_one(("span", seed), steps, 32, 256, 1, device="cpu", lr=lr, warmup_share=warmup_share)
    model = build_model("span", model_config(32))
    model.load_state_dict(out["state"])
    model.eval()
    _, (src, tgt, noise), _, _ = _held_out(512, FLOOR_SEED + 1)
    decoder_in = torch.cat([torch.full((len(src), 1), DECODER_START), tgt[:, :-1]], dim=1)
    with torch.no_grad():
        res = model(src, decoder_in, return_internals=True)
    per_position = F.cross_entropy(res.logits.float().transpose(1, 2), tgt, reduction="none").mean(0)  # (T_dec,)
    left = noise.int().argmax(1) - 1                         # (B,): the source position left of the sentinel
    cross = res.internals["layer0.cross.probs"][:, :, 1]     # (B, H, S): the first span token's query
    left_mass = cross[torch.arange(len(src)), :, left].mean(0).max()  # (B, H) -> per head mean -> best head
    window = np.asarray(out["loss"][: len(out["loss"]) // T5_WINDOW * T5_WINDOW]).reshape(-1, T5_WINDOW).mean(1)
    below = np.flatnonzero(window < floors["ignores the encoder"] - T5_MARGIN)
    return {"loss": held_out_loss(model, "span"), "per_position": per_position.tolist(),
            "left_mass": float(left_mass), "next": out["probes"][-1]["next"], "previous": out["probes"][-1]["previous"],
            "escape": int(below[0] * T5_WINDOW) if len(below) else None, "curve": window.tolist()}


T5_MARGIN = 0.25  # nats under the floor of a decoder that ignores the encoder: T5's learned-or-not gate


def t5_gate(loss: float, floors: dict | None = None) -> Gate:
    """Learned or not: T5's held-out loss per decoder token under the floor of a decoder that ignores its encoder."""
    f = (floors or task_floors())["span"]
    return learned("loss per decoder token", loss, baseline=f["ignores the encoder"],
                   baseline_name="the floor of a decoder that ignores the encoder", margin=T5_MARGIN,
                   higher_is_better=False)



def t5_reference_claims(ref) -> None:
    """The checks notebook 16 makes on its T5 reference (the runner makes them on every regeneration too)."""
    floors = task_floors()
    f = floors["span"]
    rungs = list(ref.rungs.values())
    loss = {r.name: r.values("loss") for r in rungs}
    passed = {r.name: float(np.mean([t5_gate(x, floors).passed for x in loss[r.name]])) for r in rungs}
    first, longest = rungs[0].name, "5000 steps"
    check(f"at the masked LM's budget and recipe ({first}) T5 does not learn to read its encoder: no seed passes the "
          f"gate (loss per decoder token under {f['ignores the encoder']:.3f} - {T5_MARGIN})", at_most(passed[first], 0),
          loss[first])
    check(f"given 5000 steps (lr {T5_LR:g}, {T5_WARMUP_SHARE:.0%} warm-up) every seed learns, and ends within 0.1 nats "
          f"of the floor that both of the span's neighbours allow ({f['both neighbours']:.3f})",
          at_least(passed[longest], 1.0) & below(float(loss[longest].max() - f["both neighbours"]), 0.1),
          {name: loss[name] for name in ("1000 steps", "3000 steps", longest)})
    escape = ref.rung(longest).values("escape")
    check(f"the plateau is long: in every seed the {T5_WINDOW}-step mean training loss first passes the gate after more "
          "than 1000 steps", above(float(np.nanmin(escape)), 1000)
          & at_least(float(np.isfinite(escape).mean()), 1.0), escape)
    same = "5000 steps, the masked LM's recipe"
    check("it is the budget, not the recipe: with the masked LM's rate and warm-up, 5000 steps also pass the gate in "
          "every seed", at_least(passed[same], 1.0), loss[same])
    mass = ref.rung(longest).values("left_mass")
    n_source = SEQ_LEN - 3 + 2  # text tokens kept, the sentinel and EOS
    check(f"what it learned to read: from the first span token, the best cross-attention head puts more than 0.3 of its "
          f"mass on the source token left of the sentinel, in every seed (uniform: 1/{n_source})", above(mass, 0.3), mass)


def plot_t5_reference(fig, ref) -> None:
    """Left: training loss (means over T5_WINDOW steps) at 5000 steps, one line per seed, with the floors. Right:
    held-out loss per rung, a dot per seed, with the gate."""
    f = task_floors()["span"]
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    curves = ref.rung("5000 steps").values("curve")  # (seeds, windows)
    x = (np.arange(curves.shape[1]) + 0.5) * T5_WINDOW
    for row in curves:
        ax1.plot(x, row, color="C2", lw=1, alpha=0.7)
    for ax in (ax1, ax2):
        for (name, value), ls in zip(f.items(), ("--", "-.", ":")):
            ax.axhline(value, color="grey", ls=ls, lw=1, label=f"floor: {name}" if ax is ax1 else None)
    ax2.axhline(f["ignores the encoder"] - T5_MARGIN, color="C3", lw=1, label="learned-or-not gate")
    ax1.set(xlabel="step", ylabel="loss per decoder token (nats)", title="T5 at 5000 steps: a plateau, then a drop",
            ylim=(0.3, 1.5))  # the first 200 steps (from ~3.2) are off the top: the plateau is the story
    ax1.legend(fontsize=8)
    names = list(ref.rungs)
    for i, name in enumerate(names):
        v = ref.rung(name).values("loss")
        ax2.plot(np.full(len(v), i), v, "o", color="C2", alpha=0.6, ms=4)
    ax2.set_xticks(range(len(names)), [n.replace(", ", ",\n") for n in names], fontsize=7, rotation=30, ha="right")
    ax2.set(ylabel="held-out loss per decoder token", title="each budget, a dot per seed")
    ax2.legend(fontsize=8)


REFERENCES = [
    ReferenceSpec(
        "16_objectives", "t5", t5_reference_seed, seeds=8,
        rungs=(Rung("400 steps, the masked LM's recipe", steps=400, lr=LR, warmup_share=WARMUP_SHARE),
               Rung("1000 steps", steps=1000), Rung("3000 steps", steps=3000), Rung("5000 steps", steps=5000),
               Rung("5000 steps, the masked LM's recipe", steps=5000, lr=LR, warmup_share=WARMUP_SHARE)),
        lesson="whether the small T5 learns to read its encoder given time, how long its plateau lasts, and what its "
               "encoder then holds, over 8 seeds", claims=t5_reference_claims),
]

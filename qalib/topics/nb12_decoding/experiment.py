"""Notebook 12, training: tiny decoders on the synthetic language, with and without the causal mask, and with
4, 2 or 1 key/value heads; then what each one generates, judged against the truth.

    runs = train_variants(seeds=(0, 1, 2), steps=150)     # {variant: [model per seed]}
    lm_loss(model, lang, ids)                              # next-token cross-entropy (nats) on the given text
"""

from __future__ import annotations

import functools
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.device import get_device, one_thread
from qalib.lab.language_truth import entropy_rate
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.train import TrainConfig, fit
from qalib.nn.decoder import DecoderLM
from qalib.nn.validate import int_in, seed_list
from qalib.lab.gate import learned
from qalib.lab.stats import paired_difference
from qalib.notebook.claims import above, at_least, below, check
from qalib.notebook.drawing import budget_axis, seed_band, seeds_and_median
from qalib.topics.nb12_decoding.compute import decoder_config, decoding_language, sampling_view


# name -> (causal, n_kv_heads): the notebook's four decoders (n_kv_heads None = one K/V head per query head)
VARIANTS = {"causal": (True, None), "no causal mask": (False, None), "GQA, 2 kv heads": (True, 2),
            "MQA, 1 kv head": (True, 1)}
SEQ_LEN = 24


def lm_loss(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting ids[:, 1:] from ids[:, :-1] (every position predicts the next token)."""
    logits = model(ids[:, :-1]).logits  # (B, T-1, V)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def train_lm(variant: str, seed: int, steps: int = 150, batch_size: int = 32, lr: float = 2e-2,
             device: str | None = None, d_model: int = 32) -> dict:
    """Train one of VARIANTS on fresh batches of the language (the same stream for every variant with the same
    seed). -> {"state": its weights on the CPU, "loss": the training loss every step}."""
    causal, kv = VARIANTS[variant]
    lang = decoding_language()
    torch.manual_seed(seed)
    model = DecoderLM(decoder_config(causal, kv, d_model=d_model))
    data = torch.Generator().manual_seed(seed)
    batches = (lang.sample(batch_size, SEQ_LEN, data) for _ in range(steps))
    cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=max(1, steps // 10), weight_decay=0.0,
                      clip=1.0, log_every=steps, device=device)
    history = fit(model, next_token_loss, batches, cfg)
    return {"state": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "loss": history.step_loss}


def next_token_loss(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    """lm_loss on a batch of the language, moved to the model's device."""
    return lm_loss(model, ids.to(next(model.parameters()).device))


def _train_one(run: tuple[str, int], steps: int, device: str | None) -> dict:
    variant, seed = run
    return train_lm(variant, seed, steps, device=device)


@one_thread()
def train_variants(seeds=(0, 1, 2), steps: int = 150, variants=tuple(VARIANTS), device: str | None = None) -> dict:
    """Every variant x seed, side by side on the CPU cores. -> {variant: {"models": [DecoderLM in eval mode, one per
    seed], "loss": (S, steps) training losses}}"""
    seeds = seed_list("seeds", seeds)
    int_in("steps", steps, 1, 100_000)
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"variants: {v!r} is not one of {list(VARIANTS)}")
    runs = [(v, s) for v in variants for s in seeds]
    outcomes = map_runs(partial(_train_one, steps=steps, device=device), runs, device)
    dev = get_device(device)
    result = {}
    for i, v in enumerate(variants):
        models = []
        for o in outcomes[i * len(seeds):(i + 1) * len(seeds)]:
            m = DecoderLM(decoder_config(*VARIANTS[v]))
            m.load_state_dict(o["state"])
            models.append(m.to(dev).eval())
        result[v] = {"models": models,
                     "loss": torch.tensor([o["loss"] for o in outcomes[i * len(seeds):(i + 1) * len(seeds)]])}
    return result


def plot_training(fig, runs: dict, entropy_rate: float) -> None:
    """Training loss per variant (mean over seeds, min-max band), with the truth's entropy rate."""
    ax = fig.subplots()
    for name, r in runs.items():
        seed_band(ax, np.arange(r["loss"].shape[1]), r["loss"].numpy(), label=name, lw=1)
    ax.axhline(entropy_rate, color="black", ls="--", lw=1, label=f"the truth's entropy rate {entropy_rate:.3f}")
    ax.set(title="training loss (min-max band over seeds)", xlabel="step", ylabel="cross-entropy (nats)", ylim=(0, 3.5))
    ax.legend(fontsize=8)


# -- the demos: they need a trained model ------------------------------------------------------
DEMO_CONTEXTS = 8     # contexts the sampling demo offers, each one of the language's sentences cut at a position
DEMO_PROMPT = 12      # their length: long enough for the copy rule (lag 4) to act


@functools.lru_cache(maxsize=1)
def demo_models() -> dict:
    """{True: the causal decoder, False: the one trained without the mask}, seed 0, trained once per process."""
    runs = train_variants(seeds=(0,), variants=("causal", "no causal mask"))
    return {True: runs["causal"]["models"][0], False: runs["no causal mask"]["models"][0]}


def demo_text() -> torch.Tensor:
    """(DEMO_CONTEXTS, SEQ_LEN) sentences of the language, the same in every run."""
    return decoding_language().sample(DEMO_CONTEXTS, SEQ_LEN, torch.Generator().manual_seed(2024))


def sampling_at_context(logits: torch.Tensor, truth: torch.Tensor, context: int = 0, temperature: float = 1.0,
              top_k: int = 27, top_p: float = 1.0) -> dict:
    c = int_in("context", context, 0, logits.shape[0] - 1)
    return sampling_view(logits[c], truth[c], temperature, top_k, top_p)


# -- the reference: does sharing keys and values cost quality once the models have learned? -------------------------
HELD_OUT = 20_000_012   # + the seed: the reference's held-out text, disjoint from every training stream
HELD_OUT_SENTENCES = 1024
LEARNED_MARGIN = 0.5    # nats under the unigram loss a model must reach to count as having learned the language


def unigram_loss(lang, ids: torch.Tensor) -> float:
    """The cross-entropy of the best context-free guess (the text's own token frequencies): the learned-or-not
    baseline a model that ignores its context would reach."""
    counts = torch.bincount(ids[:, 1:].reshape(-1), minlength=lang.vocab_size).double()
    p = counts / counts.sum()
    return float(-(p[p > 0] * p[p > 0].log()).sum())


@one_thread()  # tiny tensors: a second thread only spins
def reference_seed(seed: int, steps: int, d_model: int = 32) -> dict:
    """One seed of the reference: every VARIANT trained as the notebook trains it (train_lm), `steps` steps, at width
    d_model; -> {variant: {"loss": held-out loss, "excess": loss minus the entropy rate H}, "H": H, "unigram": the
    context-free baseline's loss on the same text}."""
    lang = decoding_language()
    text = lang.sample(HELD_OUT_SENTENCES, SEQ_LEN, torch.Generator().manual_seed(HELD_OUT + seed))
    H = entropy_rate(lang, length=SEQ_LEN)
    out = {"H": H, "unigram": unigram_loss(lang, text)}
    for v in VARIANTS:
        model = DecoderLM(decoder_config(*VARIANTS[v], d_model=d_model))
        model.load_state_dict(train_lm(v, seed, steps, device="cpu", d_model=d_model)["state"])
        with torch.no_grad():
            loss = float(lm_loss(model.eval(), text))
        out[v] = {"loss": loss, "excess": loss - H}
    return out


KV_VARIANTS = ("causal", "GQA, 2 kv heads", "MQA, 1 kv head")  # 4, 2 and 1 key/value heads, all with the mask


def reference_excess(ref) -> dict[str, dict[str, np.ndarray]]:
    """{rung name: {variant: (seeds,) held-out loss minus H}}."""
    return {name: {v: rung.values(v, "excess") for v in VARIANTS} for name, rung in ref.rungs.items()}


def reference_claims(ref) -> None:
    """The checks notebook 12 makes on its reference run (the runner makes them on every regeneration too)."""
    ex = reference_excess(ref)
    steps = {r.name: int(r.kwargs["steps"]) for r in ref.rungs.values()}
    narrow = [r for r in ref.rungs if ref.rungs[r].kwargs.get("d_model", 32) == 32]
    gates = [learned("held-out loss", float(loss), baseline=float(u), baseline_name="the context-free (unigram) loss",
                     margin=LEARNED_MARGIN, higher_is_better=False).passed
             for r in ref.rungs.values() for v in VARIANTS
             for loss, u in zip(r.values(v, "loss"), r.values("unigram"))]
    check(f"learned-or-not gate: every decoder, in every seed at every budget, ends more than {LEARNED_MARGIN} nats under "
          "the context-free (unigram) loss", at_least(float(np.mean(gates)), 1.0),
          {r: {v: ex[r][v].max() for v in KV_VARIANTS} for r in ex})
    cost = {r: paired_difference(ex[r]["MQA, 1 kv head"], ex[r]["causal"], "MQA", "multi-head") for r in ex}
    live, mid, last = narrow[0], narrow[1], narrow[-1]
    print(f"at the live {steps[live]} steps the run cannot tell: {cost[live]}")
    check(f"once the models have learned more ({steps[mid]} steps), sharing one key/value head costs quality: MQA's "
          "held-out loss is above multi-head's (paired by seed, the 95% interval above 0)", above(cost[mid].low, 0),
          str(cost[mid]))
    check(f"the cost shrinks as the models converge but stays: at {steps[last]} steps the interval is still above 0, "
          f"its mean under half of the {steps[mid]}-step one", above(cost[last].low, 0) & below(cost[last].mean, cost[mid].mean / 2),
          {f"{steps[r]} steps": str(cost[r]) for r in (mid, last)})
    gqa = paired_difference(ex[mid]["MQA, 1 kv head"], ex[mid]["GQA, 2 kv heads"], "MQA", "GQA (2 kv heads)")
    check(f"two key/value heads keep most of it: at {steps[mid]} steps GQA's loss is below MQA's (paired by seed, the "
          "95% interval above 0)", above(gqa.low, 0), f"{gqa}; GQA minus multi-head: "
          f"{paired_difference(ex[mid]['GQA, 2 kv heads'], ex[mid]['causal'], 'GQA', 'multi-head')}")
    wide = [r for r in ref.rungs if ref.rungs[r].kwargs.get("d_model", 32) != 32]
    if wide:
        w = wide[0]
        same = next(r for r in narrow if steps[r] == steps[w])
        by_width = paired_difference(cost[same].diffs, cost[w].diffs, "MQA's cost at d_head 8", "at d_head 16")
        check(f"part of the cost is the toy's narrow heads: at {steps[w]} steps MQA costs less with heads twice as wide "
              "(d_head 16; paired by seed, the 95% interval of the difference above 0)", above(by_width.low, 0),
              str(by_width))


def plot_reference(fig, ref) -> None:
    """MQA's and GQA's held-out loss minus multi-head's, per seed (dots) and median (line), against the budget."""
    ex = reference_excess(ref)
    narrow = [r for r in ref.rungs if ref.rungs[r].kwargs.get("d_model", 32) == 32]
    steps = np.array([int(ref.rungs[r].kwargs["steps"]) for r in narrow])
    ax = fig.add_subplot(1, 1, 1)
    for i, (v, color) in enumerate((("MQA, 1 kv head", "C3"), ("GQA, 2 kv heads", "C2"))):
        rows = [ex[r][v] - ex[r]["causal"] for r in narrow]
        seeds_and_median(ax, steps * (1 + 0.04 * (i - 0.5)), rows, color, f"{v} minus multi-head")
    ax.axhline(0, color="grey", lw=1)
    ax.set_yscale("symlog", linthresh=0.01)  # the live budget's spread is ten times the converged cost
    budget_axis(ax, steps)
    ax.set(ylabel="held-out loss difference (nats,\nlinear within ±0.01)", title="what sharing keys and values costs, per seed")
    ax.legend(fontsize=8)


REFERENCES = [
    ReferenceSpec(
        "12_decoding", "kv_heads", reference_seed, seeds=8,
        rungs=(Rung("live", steps=150), Rung("4x", steps=600), Rung("16x", steps=2400),
               Rung("d_head 16", steps=600, d_model=64)),
        lesson="whether sharing keys and values (GQA, MQA) costs quality once the decoders have learned the language, "
               "at 150, 600 and 2400 steps, and at twice the head width", claims=reference_claims),
]

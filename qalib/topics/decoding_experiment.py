"""Notebook 12, training: tiny decoders on the synthetic language, with and without the causal mask, and with
4, 2 or 1 key/value heads; then what each one generates, judged against the truth.

    runs = train_variants(seeds=(0, 1, 2), steps=150)     # {variant: {"models": [model per seed], "loss": (S, steps)}}
    lm_loss(model, lang, ids)                              # next-token cross-entropy (nats) on the given text
"""

from __future__ import annotations

import functools
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.device import get_device, one_thread
from qalib.lab.parallel import map_runs
from qalib.lab.stacked import train_stacked
from qalib.nn.decoder import DecoderLM
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.drawing import seed_band
from qalib.topics.decoding import decoder_config, decoding_language, sampling_view


# name -> (causal, n_kv_heads): the notebook's four decoders (n_kv_heads None = one K/V head per query head)
VARIANTS = {"causal": (True, None), "no causal mask": (False, None), "GQA, 2 kv heads": (True, 2),
            "MQA, 1 kv head": (True, 1)}
SEQ_LEN = 24


def lm_loss(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting ids[:, 1:] from ids[:, :-1] (every position predicts the next token)."""
    logits = model(ids[:, :-1]).logits  # (B, T-1, V)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _member_lm_loss(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    """lm_loss for one member of a stacked run (qalib.lab.stacked): the unchecked forward, which vmap can trace."""
    logits = model.forward_unchecked(ids[:, :-1])  # (B, T-1, V)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def train_lm_seeds(variant: str, seeds, steps: int = 150, batch_size: int = 32, lr: float = 2e-2,
                   device: str | None = None) -> dict:
    """Train one of VARIANTS once per seed, the seeds as one batched computation (qalib.lab.stacked). Member s is
    the solo run of seed s: torch.manual_seed(s) before building it, fresh batches of the language from its own
    generator seeded with s (the same stream for every variant with that seed), AdamW (no weight decay) with a
    linear warm-up over the first tenth of the steps, its gradient clipped to norm 1 on its own.
    -> {"states": [its weights on the CPU, per seed], "loss": (S, steps) training losses}."""
    causal, kv = VARIANTS[variant]
    lang = decoding_language()
    dev = get_device(device)
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(DecoderLM(decoder_config(causal, kv)).to(dev).train())
    data = [torch.Generator().manual_seed(seed) for seed in seeds]

    def next_batch(step):
        return (torch.stack([lang.sample(batch_size, SEQ_LEN, g) for g in data]),)  # (S, B, SEQ_LEN)

    def optimizer(params):
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, foreach=True)
        warmup = max(1, steps // 10)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))

    losses = train_stacked(models, _member_lm_loss, next_batch, steps, optimizer, clip=1.0, device=dev)
    return {"states": [{k: v.detach().cpu() for k, v in m.state_dict().items()} for m in models], "loss": losses}


@one_thread()
def train_variants(seeds=(0, 1, 2), steps: int = 150, variants=tuple(VARIANTS), device: str | None = None) -> dict:
    """Every variant x seed: each variant's seeds as one batched run (train_lm_seeds), the variants side by side on
    the CPU cores. -> {variant: {"models": [DecoderLM in eval mode, one per seed], "loss": (S, steps) training
    losses}}"""
    seeds = seed_list("seeds", seeds)
    int_in("steps", steps, 1, 100_000)
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"variants: {v!r} is not one of {list(VARIANTS)}")
    outcomes = map_runs(partial(train_lm_seeds, seeds=seeds, steps=steps, device=device), variants, device)
    dev = get_device(device)
    result = {}
    for v, outcome in zip(variants, outcomes):
        models = []
        for state in outcome["states"]:
            m = DecoderLM(decoder_config(*VARIANTS[v]))
            m.load_state_dict(state)
            models.append(m.to(dev).eval())
        result[v] = {"models": models, "loss": outcome["loss"]}
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


def _sampling(logits: torch.Tensor, truth: torch.Tensor, context: int = 0, temperature: float = 1.0,
              top_k: int = 27, top_p: float = 1.0) -> dict:
    c = int_in("context", context, 0, logits.shape[0] - 1)
    return sampling_view(logits[c], truth[c], temperature, top_k, top_p)

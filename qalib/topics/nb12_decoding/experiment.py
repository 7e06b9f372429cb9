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
from qalib.lab.parallel import map_runs
from qalib.lab.train import TrainConfig, fit
from qalib.nn.decoder import DecoderLM
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.drawing import seed_band
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
             device: str | None = None) -> dict:
    """Train one of VARIANTS on fresh batches of the language (the same stream for every variant with the same
    seed). -> {"state": its weights on the CPU, "loss": the training loss every step}."""
    causal, kv = VARIANTS[variant]
    lang = decoding_language()
    torch.manual_seed(seed)
    model = DecoderLM(decoder_config(causal, kv))
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

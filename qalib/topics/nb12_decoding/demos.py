"""Notebook 12's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

from functools import partial

import ipywidgets as W
import torch

from qalib.nn.decoder import DecoderLM
from qalib.notebook.widgets import Demo
from qalib.topics.nb12_decoding.compute import (attention_view, decoding_language, plot_attention_view, plot_sampling_view,
                                   true_next_probs)
from qalib.topics.nb12_decoding.experiment import DEMO_CONTEXTS, DEMO_PROMPT, sampling_at_context, demo_models, demo_text


def sampling_demo(model: DecoderLM | None = None) -> Demo:
    """Temperature, top-k and top-p acting on the trained model's next-token distribution, beside the truth."""
    model = demo_models()[True] if model is None else model
    prompts = demo_text()[:, :DEMO_PROMPT]
    with torch.no_grad():
        logits = model(prompts.to(next(model.parameters()).device)).logits[:, -1].float().cpu()  # (C, V)
    truth = true_next_probs(decoding_language(), prompts)[:, -1]                                 # (C, V)
    controls = {"context": W.IntSlider(value=0, min=0, max=DEMO_CONTEXTS - 1, description="context"),
                "temperature": W.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.05, description="temperature T"),
                "top_k": W.IntSlider(value=27, min=1, max=27, description="top-k"),
                "top_p": W.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p")}
    return Demo(partial(sampling_at_context, logits, truth), plot_sampling_view, controls,
                title="What sampling draws from, next to the truth", figsize=(9, 3.4))


def mask_demo(models: dict | None = None) -> Demo:
    """One head's attention in the decoder trained with the causal mask and in the one trained without it."""
    models = demo_models() if models is None else models
    ids = demo_text()[:1, :-1]  # (1, SEQ_LEN - 1): the positions a model is trained on
    cfg = models[True].cfg
    controls = {"causal": W.Checkbox(value=False, description="causal mask"),
                "layer": W.IntSlider(value=0, min=0, max=cfg.n_layers - 1, description="layer"),
                "head": W.IntSlider(value=0, min=0, max=cfg.n_heads - 1, description="head")}
    return Demo(partial(attention_view, models, ids), plot_attention_view, controls,
                title="What each position sees, with and without the causal mask", figsize=(7, 5))


DEMOS = [sampling_demo, mask_demo]

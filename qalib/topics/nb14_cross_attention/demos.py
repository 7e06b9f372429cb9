"""Notebook 14's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

from functools import partial

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb14_cross_attention.compute import attention_masks, plot_masks, plot_smoothing, smoothing
from qalib.topics.nb14_cross_attention.experiment import ReversalResult, small_result, alignment_view, plot_alignment


def masks_demo() -> Demo:
    controls = {"src_len": W.IntSlider(value=6, min=1, max=16, description="source length"),
                "tgt_len": W.IntSlider(value=5, min=1, max=16, description="target length"),
                "n_src_pad": W.IntSlider(value=2, min=0, max=15, description="source pads")}
    return Demo(attention_masks, plot_masks, controls, title="The three attentions: who may look at whom (dark = allowed)",
                figsize=(10, 3.6))


def smoothing_demo() -> Demo:
    controls = {"eps": W.FloatSlider(value=0.1, min=0.0, max=1.0, step=0.05, description="eps"),
                "vocab_size": W.IntSlider(value=24, min=2, max=200, description="vocabulary V")}
    return Demo(smoothing, plot_smoothing, controls, title="Label smoothing: the target, and the perplexity it costs",
                figsize=(9.5, 3.4))


def alignment_demo(result: ReversalResult | None = None) -> Demo:
    res = result if result is not None else small_result()
    model = next(iter(res.models.values()))
    controls = {"variant": W.Dropdown(options=res.variants, value=res.variants[0], description="model"),
                "seed": W.Dropdown(options=res.seeds, value=res.seeds[0], description="seed"),
                "layer": W.IntSlider(value=0, min=0, max=model.cfg.n_layers - 1, description="decoder layer"),
                "head": W.Dropdown(options=["mean"] + list(range(model.cfg.n_heads)), value="mean", description="head"),
                "example": W.IntSlider(value=0, min=0, max=63, description="sentence")}
    return Demo(partial(alignment_view, res), plot_alignment, controls,
                title="Where does each target position look in the source?", figsize=(7, 4.6))


DEMOS = [masks_demo, smoothing_demo, alignment_demo]

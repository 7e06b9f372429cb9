"""Notebook 06's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb06_layernorm_vs_batchnorm.compute import padding_effect, plot_padding_effect, plot_running_stats, running_stats_trace


def padding_demo() -> Demo:
    return Demo(padding_effect, plot_padding_effect, {
        "batch_size": W.IntSlider(value=16, min=1, max=64, description="batch size"),
        "pad_frac": W.FloatSlider(value=0.4, min=0.0, max=0.9, step=0.05, description="padding fraction"),
        "outlier": W.FloatLogSlider(value=1.0, base=10, min=-1, max=1.5, step=0.05, description="outlier sentence x"),
    }, title="One fixed sentence normalised inside different batches", figsize=(12, 3.8))


def running_stats_demo() -> Demo:
    return Demo(running_stats_trace, plot_running_stats, {
        "momentum": W.FloatSlider(value=0.1, min=0.0, max=1.0, step=0.01, description="momentum"),
        "train_mode": W.ToggleButtons(options=[("train mode", True), ("eval mode", False)], value=True),
    }, title="BatchNorm: running statistics against the batch's", figsize=(10, 3.8))


DEMOS = [padding_demo, running_stats_demo]

"""Notebook 13's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb13_attention_vs_recurrence.compute import N_KEYS, cost_view, plot_cost_view, plot_soft_lookup, soft_lookup


def lookup_demo() -> Demo:
    controls = {"temperature": W.FloatLogSlider(value=1.0, base=10, min=-3, max=3, step=0.1, description="temperature T",
                                                readout_format=".3r"),
                "target": W.IntSlider(value=2, min=0, max=N_KEYS - 1, description="query near key"),
                "blend": W.FloatSlider(value=0.3, min=0.0, max=1.0, step=0.05, description="blend with next key")}
    return Demo(soft_lookup, plot_soft_lookup, controls, title="Attention as a soft dictionary lookup", figsize=(10, 3.4))


def cost_demo() -> Demo:
    controls = {"n": W.IntSlider(value=256, min=8, max=8192, step=8, description="sequence length n"),
                "d": W.IntSlider(value=64, min=16, max=1024, step=16, description="width d")}
    return Demo(cost_view, plot_cost_view, controls, title="Vaswani Table 1: FLOPs per layer, attention vs recurrence",
                figsize=(9, 3.6))


DEMOS = [lookup_demo, cost_demo]

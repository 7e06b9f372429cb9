"""Notebook 09's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb09_attention_random_walk.compute import (COLLAPSE_DEPTH, COLLAPSE_DIM, COLLAPSE_TOKENS, MARKOV_STEPS,
                                      collapse_demo_compute, markov_demo_compute, plot_collapse_demo,
                                      plot_markov_demo)


def markov_demo() -> Demo:
    controls = {
        "temperature": W.FloatLogSlider(value=1.0, base=10, min=-1.3, max=1.3, step=0.05, description="temperature τ"),
        "t": W.IntSlider(value=8, min=0, max=MARKOV_STEPS, description="steps t"),
        "kernel": W.Dropdown(options=["Q = K = X (symmetric)", "W_q ≠ W_k (random heads)"], description="scores"),
    }
    return Demo(markov_demo_compute, plot_markov_demo, controls, title="P = softmax(q·k / (τ√d)) as a random walk",
                figsize=(10, 3.3))


def collapse_demo() -> Demo:
    controls = {
        "depth": W.IntSlider(value=12, min=1, max=COLLAPSE_DEPTH, description="layers"),
        "residual": W.Checkbox(value=False, description="residual"),
        "mlp": W.Checkbox(value=False, description="MLP"),
        "layer_norm": W.Checkbox(value=False, description="LayerNorm"),
        "qk_gain": W.FloatSlider(value=1.0, min=0.0, max=4.0, step=0.25, description="W_q gain"),
    }
    title = (f"Stacked attention, random weights (n = {COLLAPSE_TOKENS}, d = {COLLAPSE_DIM}, 3 seeds, band = min..max):"
             " depth, residual, MLP")
    return Demo(collapse_demo_compute, plot_collapse_demo, controls, title=title, figsize=(9, 3.3))


DEMOS = [markov_demo, collapse_demo]

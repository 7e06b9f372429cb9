"""Notebook 10's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb10_residuals_ffn_masks.compute import (MASKS, RESIDUAL_DEMO_LAYERS, cost_view, leak_map, plot_cost_view,
                                      plot_leak_map, plot_residual_view, residual_view)


def cost_demo() -> Demo:
    controls = {"T": W.IntSlider(value=512, min=16, max=1024, step=16, description="sequence length T"),
                "k": W.IntSlider(value=64, min=16, max=256, step=16, description="Linformer k")}
    return Demo(cost_view, plot_cost_view, controls, title="Sequence length -> memory and time of attention",
                figsize=(10, 3.6))


def mask_demo() -> Demo:
    controls = {"mask": W.Dropdown(options=list(MASKS), value="causal", description="mask"),
                "position": W.IntSlider(value=5, min=0, max=11, description="changed position"),
                "n_pad": W.IntSlider(value=3, min=0, max=8, description="padding tokens")}
    return Demo(leak_map, plot_leak_map, controls, title="Change one token: which outputs move?", figsize=(9, 3.4))


def residual_demo() -> Demo:
    controls = {"n_layers": W.IntSlider(value=8, min=1, max=RESIDUAL_DEMO_LAYERS, description="layers"),
                "residual": W.Checkbox(value=False, description="residual connections"),
                "norm": W.Dropdown(options=["layer", "none"], value="layer", description="norm")}
    return Demo(residual_view, plot_residual_view, controls, title="Gradients at initialisation, 3 seeds",
                figsize=(9, 3.4))


DEMOS = [cost_demo, mask_demo, residual_demo]

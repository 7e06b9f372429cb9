"""Notebook 03's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb03_embedding_scale.compute import (DEMO_D, INITS, factor_sweep, plot_setting, setting, tied,
                                          plot_factor_sweep, plot_tied_logits)


def setting_demo() -> Demo:
    """d_model, init and the factor on/off -> norms, cosine to the token, token/position recovery."""
    controls = {"d_model": W.SelectionSlider(options=list(DEMO_D), value=512, description="d_model"),
                "init": W.Dropdown(options=list(INITS), value="t2t", description="init"),
                "scaled": W.Checkbox(value=True, description="multiply by sqrt(d_model)")}
    return Demo(setting, plot_setting, controls, title="Token vs sinusoid at the encoder input", figsize=(11, 3.4))


def factor_demo() -> Demo:
    """Sweep the multiplier: where do token and position both survive, and where does sqrt(d) fall?"""
    controls = {"d_model": W.SelectionSlider(options=list(DEMO_D), value=256, description="d_model"),
                "init": W.Dropdown(options=list(INITS), value="t2t", description="init"),
                "log10_factor": W.FloatSlider(value=1.0, min=-1.0, max=3.0, step=0.1, description="log10 factor")}
    return Demo(factor_sweep, plot_factor_sweep, controls, title="Which multiplier keeps both token and position?",
                figsize=(7, 3.6))


def tied_demo() -> Demo:
    """The same table is the output layer: how big are the initial logits?"""
    controls = {"d_model": W.SelectionSlider(options=list(DEMO_D), value=512, description="d_model"),
                "init": W.Dropdown(options=list(INITS), value="t2t", description="init")}
    return Demo(tied, plot_tied_logits, controls, title="The tied output layer at initialisation", figsize=(7, 3.2))


DEMOS = [setting_demo, factor_demo, tied_demo]

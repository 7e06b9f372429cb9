"""Notebook 16's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb16_objectives.compute import (NAMES, OBJECTIVES, SEQ_LEN, corruption_view, plot_corruption, plot_signals,
                                     signals_view)


def corruption_demo() -> Demo:
    controls = {"objective": W.Dropdown(options=[(NAMES[o], o) for o in OBJECTIVES], value="span", description="objective"),
                "rate": W.FloatSlider(value=0.15, min=0.05, max=0.5, step=0.05, description="mask / noise rate"),
                "mean_span": W.FloatSlider(value=3.0, min=1.5, max=8.0, step=0.5, description="mean span (T5)"),
                "length": W.IntSlider(value=SEQ_LEN, min=8, max=64, description="length"),
                "seed": W.IntSlider(value=0, min=0, max=20, description="seed")}
    return Demo(corruption_view, plot_corruption, controls, title="What each objective reads and predicts",
                figsize=(9, 3.2))


def signals_demo() -> Demo:
    controls = {"length": W.IntSlider(value=SEQ_LEN, min=4, max=64, description="length"),
                "rate": W.FloatSlider(value=0.15, min=0.05, max=0.5, step=0.05, description="mask / noise rate"),
                "mean_span": W.FloatSlider(value=3.0, min=1.5, max=8.0, step=0.5, description="mean span (T5)"),
                "d_model": W.IntSlider(value=32, min=8, max=512, step=8, description="d_model")}
    return Demo(signals_view, plot_signals, controls, title="Training signals and compute per sequence", figsize=(9, 3.4))


DEMOS = [corruption_demo, signals_demo]

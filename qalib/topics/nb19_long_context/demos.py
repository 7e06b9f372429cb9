"""Notebook 19's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb19_long_context.compute import cost_view, pattern_view, plot_costs, plot_pattern


def pattern_demo() -> Demo:
    return Demo(pattern_view, plot_pattern,
                {"t": W.IntSlider(value=64, min=8, max=256, step=8, description="length T"),
                 "window": W.IntSlider(value=4, min=0, max=64, description="window ±r"),
                 "n_global": W.IntSlider(value=0, min=0, max=4, description="global tokens"),
                 "n_random": W.IntSlider(value=0, min=0, max=8, description="random keys"),
                 "layers": W.IntSlider(value=2, min=1, max=16, description="layers")},
                title="Which keys each query reads, and where token 1 has reached", figsize=(10, 3.6))


def cost_demo() -> Demo:
    return Demo(cost_view, plot_costs,
                {"d": W.IntSlider(value=768, min=64, max=4096, step=64, description="width d"),
                 "heads": W.IntSlider(value=12, min=1, max=64, description="heads"),
                 "window": W.IntSlider(value=256, min=16, max=2048, step=16, description="window ±r")},
                title="What the score matrix costs against the rest of a layer", figsize=(10, 3.4))


DEMOS = [pattern_demo, cost_demo]

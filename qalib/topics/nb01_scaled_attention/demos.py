"""Notebook 01's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.nn.config import SCALINGS
from qalib.notebook.widgets import Demo
from qalib.topics.nb01_scaled_attention.compute import attention_compute, plot_attention, plot_saturation, saturation


def attention_demo() -> Demo:
    controls = {"d_k": W.FloatLogSlider(value=64, base=2, min=0, max=12, step=1, description="d_k",
                                           readout_format="d"),
                "scaling": W.Dropdown(options=list(SCALINGS), value="inv_sqrt_dk", description="scaling")}
    return Demo(attention_compute, plot_attention, controls, title="Random unit-variance q, k: logits and attention")


def saturation_demo() -> Demo:
    controls = {"a": W.FloatLogSlider(value=1.0, base=10, min=-2, max=3, step=0.1, description="a",
                                         readout_format=".3r"),
                "temperature": W.FloatLogSlider(value=1.0, base=10, min=-1, max=2, step=0.1, description="temperature T")}
    return Demo(saturation, plot_saturation, controls, title="softmax([a, a, 2a] / T): probabilities and gradient")


DEMOS = [attention_demo, saturation_demo]

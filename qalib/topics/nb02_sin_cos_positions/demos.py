"""Notebook 02's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb02_sin_cos_positions.compute import (PE_DEMO_MAX_LENGTH, ROTATION_D, ROTATION_N, pe_compute, pe_plot,
                                            rotation_compute, rotation_plot)


def pe_demo() -> Demo:
    controls = {"base": W.FloatLogSlider(value=10000.0, base=10, min=0, max=6, step=0.1, readout_format=".3r"),
                "d_model": W.IntSlider(value=64, min=2, max=256, step=2),
                "length": W.IntSlider(value=128, min=8, max=PE_DEMO_MAX_LENGTH, step=8)}
    return Demo(pe_compute, pe_plot, controls, title="The sinusoid: base, width and length")


def rotation_demo() -> Demo:
    controls = {"k": W.IntSlider(value=5, min=-40, max=40),
                "pair": W.IntSlider(value=2, min=0, max=ROTATION_D // 2 - 1),
                "position": W.IntSlider(value=60, min=0, max=ROTATION_N - 1)}
    return Demo(rotation_compute, rotation_plot, controls, title="One rotation per offset: PE(p + k) = M_k PE(p)")


DEMOS = [pe_demo, rotation_demo]

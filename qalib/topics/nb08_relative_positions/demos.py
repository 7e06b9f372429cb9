"""Notebook 08's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb08_relative_positions.compute import (ALIBI_MAX_HEADS, BIAS_MAX_T, LABELS, METHODS, bias_matrix, plot_bias,
                                             plot_rotary, plot_slopes_and_buckets, rotary_profile,
                                             slopes_and_buckets)


def bias_demo() -> Demo:
    methods = [(LABELS[m], m) for m in METHODS]
    return Demo(lambda method, clip, t, same_content: bias_matrix(method, t, clip, same_content=same_content),
                plot_bias,
                {"method": W.Dropdown(options=methods, value="shaw"),
                 "clip": W.IntSlider(value=3, min=0, max=16, description="clip k"),
                 "t": W.IntSlider(value=20, min=2, max=BIAS_MAX_T, description="length T"),
                 "same_content": W.Checkbox(value=True, description="same token everywhere")},
                title="What each scheme adds to the attention scores", figsize=(11, 3.4))


def rotary_demo() -> Demo:
    return Demo(rotary_profile, plot_rotary,
                {"d_head": W.IntSlider(value=32, min=2, max=128, step=2, description="head size d"),
                 "base": W.FloatLogSlider(value=10000.0, base=10, min=1, max=6, step=0.25, description="base",
                                              readout_format=".3r"),
                 "start": W.IntSlider(value=0, min=0, max=200, description="query position m")},
                title="Rotary: the score depends on the offset only", figsize=(10, 3.3))


def slopes_demo() -> Demo:
    return Demo(slopes_and_buckets, plot_slopes_and_buckets,
                {"n_heads": W.IntSlider(value=8, min=1, max=ALIBI_MAX_HEADS, description="ALiBi heads"),
                 "n_buckets": W.IntSlider(value=32, min=4, max=64, step=2, description="T5 buckets"),
                 "max_distance": W.IntSlider(value=128, min=20, max=512, description="T5 max distance")},
                title="ALiBi slopes and T5 buckets", figsize=(10, 3.3))


DEMOS = [bias_demo, rotary_demo, slopes_demo]

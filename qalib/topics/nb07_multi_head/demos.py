"""Notebook 07's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

from functools import partial

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb07_multi_head.compute import (SENTENCES, attention_map, plot_attention_map, plot_heads_view, plot_readout,
                                     readout_view)
from qalib.topics.nb07_multi_head.experiment import HeadsResult, small_result, heads_view


def attention_demo() -> Demo:
    controls = {"layer": W.Dropdown(options=list(range(6)), value=0, description="layer"),
                "head": W.Dropdown(options=list(range(12)) + ["mean"], value=2, description="head"),
                "text": W.Text(value=SENTENCES[0], description="sentence", layout=W.Layout(width="420px"))}
    return Demo(attention_map, plot_attention_map, controls, title="all-MiniLM-L6-v2: one head's attention",
                figsize=(9.5, 4.2))


def readout_demo() -> Demo:
    controls = {"m": W.IntSlider(value=4, min=2, max=8, description="symbols m"),
                "heads": W.Dropdown(options=["one head", "two heads"], value="one head", description="heads"),
                "left_weight": W.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05, description="weight on x[t-1]")}
    return Demo(readout_view, plot_readout, controls, title="One softmax = one average: can the pair be read back?",
                figsize=(6.5, 4.0))


def heads_demo(result: HeadsResult | None = None) -> Demo:
    res = result if result is not None else small_result()
    compute = partial(heads_view, res)
    controls = {"n_heads": W.Dropdown(options=res.n_heads, value=res.n_heads[-1], description="heads"),
                "seed": W.Dropdown(options=res.seeds, value=res.seeds[0], description="seed"),
                "remove": W.Dropdown(options=["none"] + list(range(max(res.n_heads))), value="none",
                                     description="remove head")}
    return Demo(compute, plot_heads_view, controls, title="Number of heads -> accuracy; prune one head",
                figsize=(9.5, 3.8))


DEMOS = [attention_demo, readout_demo, heads_demo]

"""Notebook 17's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

from functools import partial

import ipywidgets as W

from qalib.nn.pretrained import real_model
from qalib.notebook.widgets import Demo
from qalib.topics.nb17_fine_tuning.compute import (HEAD_NAMES, movement_demo_compute, plot_movement_demo, plot_span_demo,
                                      span_demo_compute, trained_name)
from qalib.topics.nb17_fine_tuning.experiment import small_result


def movement_demo(pair: dict | None = None) -> Demo:
    """pair: the notebook's run_pair result."""
    res = pair if pair is not None else small_result()["pair"]
    n_layers = res["n_layers"]
    controls = {
        "lr": W.SelectionSlider(options=[(f"{lr:g}", lr) for lr in res["lrs"]], value=res["main_lr"],
                                description="learning rate"),
        "trainable": W.SelectionSlider(options=[(trained_name(k, n_layers), k) for k in res["trainable"]],
                                       value=n_layers, description="trained"),
        "seed": W.Dropdown(options=list(range(len(res["seeds"]))), value=0, description="run (seed index)"),
    }
    return Demo(partial(movement_demo_compute, res), plot_movement_demo, controls,
                title="What a fine-tuning run moved, layer by layer (runs made above)", figsize=(10, 3.4))


def span_demo(span: dict | None = None) -> Demo:
    """span: the notebook's run_span result."""
    res = span if span is not None else small_result()["span"]
    _, tok = real_model()
    tokens = [[tok.backend.id_to_token(int(i)) for i in row] for row in res["eval"].input_ids]
    logits = res["logits"]
    controls = {
        "head": W.ToggleButtons(options=[(HEAD_NAMES[h], h) for h in logits], value="span", description="head"),
        "example": W.IntSlider(value=0, min=0, max=len(tokens) - 1, description="held-out example"),
        "seed": W.Dropdown(options=list(range(len(res["seeds"]))), value=0, description="run (seed index)"),
    }
    return Demo(partial(span_demo_compute, logits, res["eval"], tokens), plot_span_demo, controls,
                title="Where does the answer start and end? Two span heads on the same tokens", figsize=(10, 3.4))


DEMOS = [movement_demo, span_demo]

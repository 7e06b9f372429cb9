"""Notebook 04's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb04_bert_embedding_sum.compute import pair_parts, plot_pair, plot_probe, probe_sum


def pair_demo() -> Demo:
    controls = {
        "text": W.Text(value="I love strawberries.", description="sentence A"),
        "pair": W.Text(value="They are sweet.", description="sentence B"),
        "token": W.IntSlider(value=3, min=0, max=40, description="token index"),
        "after_norm": W.Checkbox(value=False, description="last row after LayerNorm"),
    }
    return Demo(pair_parts, plot_pair, controls, title="A sentence pair as BERT's embedding layer sees it",
                figsize=(10, 3.8))


def probe_demo() -> Demo:
    controls = {
        "d_model": W.IntSlider(value=64, min=2, max=384, step=2, description="d_model"),
        "n_tokens": W.IntSlider(value=100, min=2, max=400, description="tokens V"),
        "n_positions": W.IntSlider(value=64, min=1, max=200, description="positions P"),
        "n_segments": W.IntSlider(value=2, min=1, max=8, description="segments S"),
    }
    return Demo(probe_sum, plot_probe, controls, title="How many dimensions does a sum of three embeddings need?",
                figsize=(10, 3.6))


DEMOS = [pair_demo, probe_demo]

"""Notebook 05's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb05_shared_qk.compute import (FORMS, INPUT_KINDS, MAX_TOKENS, diagonal_demo_compute, directed_scores,
                                    plot_diagonal_demo, plot_directed)


def diagonal_demo() -> Demo:
    controls = {
        "d": W.IntSlider(value=32, min=2, max=256, step=2, description="d"),
        "n": W.IntSlider(value=16, min=2, max=MAX_TOKENS, description="tokens n"),
        "kind": W.Dropdown(options=list(INPUT_KINDS), value="gaussian", description="inputs"),
        "tied": W.Checkbox(value=True, description="tie W_q = W_k"),
    }
    return Demo(diagonal_demo_compute, plot_diagonal_demo, controls,
                title="Shared or separate projections: where does each token look?", figsize=(9.5, 3.8))


def directed_demo() -> Demo:
    controls = {
        "form": W.Dropdown(options=list(FORMS), value="separate", description="scores"),
        "k": W.IntSlider(value=1, min=1, max=4, description="k back"),
        "n": W.IntSlider(value=16, min=3, max=MAX_TOKENS, description="tokens n"),
        "sharpness": W.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.1, description="sharpness"),
    }
    return Demo(directed_scores, plot_directed, controls,
                title="Can a symmetric score say 'look k tokens back'?", figsize=(9.5, 3.8))


DEMOS = [diagonal_demo, directed_demo]

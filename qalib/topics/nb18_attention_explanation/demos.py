"""Notebook 18's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

from functools import partial

import ipywidgets as W

from qalib.nn.pretrained import real_model, real_model_name
from qalib.notebook.widgets import Demo
from qalib.topics.nb18_attention_explanation.compute import (adversarial_demo_compute, plot_adversarial_demo, plot_real_demo,
                                                real_demo_compute)
from qalib.topics.nb18_attention_explanation.experiment import N_ADV, small_result

DEFAULT_TEXT = "the movie was long but the acting was wonderful"
DEFAULT_REFERENCE = "a great performance"


def typing_demo() -> Demo:
    model, tok = real_model()
    controls = {"text": W.Text(value=DEFAULT_TEXT, description="sentence"),
                "reference": W.Text(value=DEFAULT_REFERENCE, description="compared with")}
    return Demo(partial(real_demo_compute, model, tok), plot_real_demo, controls,
                title=f"Which words make the sentence similar to the reference? Six answers from {real_model_name()}",
                figsize=(10, 3.4))


def adversarial_demo(result: dict | None = None) -> Demo:
    res = result if result is not None else small_result()
    controls = {"bound": W.FloatLogSlider(value=0.01, base=10, min=-4, max=-0.5, step=0.25, description="bound on |Δp|"),
                "example": W.IntSlider(value=0, min=0, max=N_ADV - 1, description="sentence"),
                "seed": W.Dropdown(options=list(range(len(res["seeds"]))), value=0, description="model (seed index)")}
    compute = lambda bound, example, seed: adversarial_demo_compute(res["models"][seed], res["batch"], bound, example)  # noqa: E731
    return Demo(compute, plot_adversarial_demo, controls,
                title="Jain & Wallace's test: attention as far from the model's own as the output allows",
                figsize=(9, 3.4))


DEMOS = [typing_demo, adversarial_demo]

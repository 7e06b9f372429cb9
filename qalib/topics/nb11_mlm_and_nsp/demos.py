"""Notebook 11's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

import ipywidgets as W

from qalib.nn.pretrained import real_model, real_model_name
from qalib.notebook.widgets import Demo
from qalib.topics.nb11_mlm_and_nsp.compute import mask_sentence, plot_masked_sentence, plot_segment_effect, segment_view


def masking_demo() -> Demo:
    controls = {
        "text": W.Text(value="The quick brown fox jumps over the lazy dog near the riverbank.", description="sentence"),
        "mlm_prob": W.FloatSlider(value=0.15, min=0.0, max=1.0, step=0.05, description="mlm_prob"),
        "mask_frac": W.FloatSlider(value=0.8, min=0.0, max=1.0, step=0.05, description="[MASK] share"),
        "random_frac": W.FloatSlider(value=0.1, min=0.0, max=1.0, step=0.05, description="random share"),
        "seed": W.IntSlider(value=0, min=0, max=50, description="redraw seed"),
    }
    return Demo(mask_sentence, plot_masked_sentence, controls, title="BERT's masking rule on your sentence",
                figsize=(10, 3.4))


def segment_demo() -> Demo:
    n_layers = real_model()[0].cfg.n_layers  # 6 in MiniLM
    controls = {
        "text_a": W.Text(value="The cat sat on the mat.", description="sentence A"),
        "text_b": W.Text(value="It was warm there.", description="sentence B"),
        "mode": W.Dropdown(options=["zero", "ones", "swap"], value="zero", description="new segment ids"),
        "layer": W.IntSlider(value=n_layers, min=0, max=n_layers, description="layer"),
    }
    return Demo(segment_view, plot_segment_effect, controls, title=f"What the segment ids do in {real_model_name()}",
                figsize=(10, 3.4))


DEMOS = [masking_demo, segment_demo]

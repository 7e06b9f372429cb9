"""One module per notebook: its compute functions, plot functions and demos.

Each module defines DEMOS, a list of functions that build the notebook's interactive demos (`Demo`
objects). The notebook displays them; the tests and `make bench` drive every control of every demo.
"""

from __future__ import annotations

import importlib

# notebook stem -> topic module
TOPICS = {
    "01_scaled_attention": "qalib.topics.scaled_attention",
    "02_sin_cos_positions": "qalib.topics.sin_cos_positions",
    "03_embedding_scale": "qalib.topics.embedding_scale",
    "04_bert_embedding_sum": "qalib.topics.embedding_sum",
    "05_shared_qk": "qalib.topics.shared_qk",
    "06_layernorm_vs_batchnorm": "qalib.topics.normalization",
    "07_multi_head": "qalib.topics.multi_head",
    "08_relative_positions": "qalib.topics.relative_positions",
    "09_attention_random_walk": "qalib.topics.random_walk",
    "10_residuals_ffn_masks": "qalib.topics.block_parts",
    "11_mlm_and_nsp": "qalib.topics.pretraining",
}


def demo_factories() -> dict[str, list]:
    """{notebook stem: [demo factory, ...]} for every topic module that exists."""
    out = {}
    for stem, module in TOPICS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name == module:
                continue  # that notebook has not been written yet
            raise
        out[stem] = list(getattr(mod, "DEMOS", []))
    return out

"""Notebook 20's demos, listed in DEMOS: each wires a compute function to its plot and controls."""

from functools import lru_cache, partial

import ipywidgets as W

from qalib.notebook.widgets import Demo
from qalib.topics.nb20_patches_as_tokens.compute import (N_TEST, TABLES, cost_view, patch_view, plot_costs, plot_patches,
                                                         plot_positions, position_view)
from qalib.topics.nb20_patches_as_tokens.experiment import PatchSetup, Variant, train_variant


@lru_cache(maxsize=1)
def _small_models() -> dict:
    """A ViT per patch size 2, 4, 8, trained briefly (seed 0), for a demo opened without the notebook's models."""
    return {p: train_variant(Variant(patch=p), 0, PatchSetup(steps=150))[0] for p in (2, 4, 8)}


def patch_demo(models: dict | None = None) -> Demo:
    """models: {patch size: trained ViT} (the notebook passes its live run's); None trains three small ones."""
    models = dict(models or _small_models())
    sizes = sorted(models)
    return Demo(partial(patch_view, models), plot_patches,
                {"index": W.IntSlider(value=0, min=0, max=N_TEST - 1, description="test digit"),
                 "patch": W.Dropdown(options=sizes, value=2 if 2 in sizes else sizes[0], description="patch side p"),
                 "layer": W.IntSlider(value=2, min=1, max=2, description="layer")},
                title="A digit cut into patches, and where [CLS] looks", figsize=(9, 3.6))


def cost_demo() -> Demo:
    return Demo(cost_view, plot_costs,
                {"image": W.IntSlider(value=224, min=8, max=1024, step=8, description="image side (pixels)"),
                 "patch": W.IntSlider(value=16, min=1, max=64, description="patch side p"),
                 "d": W.IntSlider(value=768, min=64, max=4096, step=64, description="width d")},
                title="Tokens and score entries against the patch size", figsize=(10, 3.6))


def position_demo(model=None) -> Demo:
    """model: a trained ViT with learned positions and 2x2 patches (None: the demo's own, 150 steps, seed 0)."""
    model = model or _small_models()[2]
    g = model.cfg.grid
    return Demo(partial(position_view, model), plot_positions,
                {"cell": W.IntSlider(value=g + 1, min=0, max=g * g - 1, description="patch (row-major)"),
                 "table": W.ToggleButtons(options=TABLES, value="trained", description="table")},
                title="Which patches a position table treats as neighbours", figsize=(6, 4.2))


DEMOS = [patch_demo, cost_demo, position_demo]

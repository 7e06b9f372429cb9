"""One look for every figure: seaborn's clean theme, perceptually uniform colour maps that survive grey print."""

from __future__ import annotations

import os

import matplotlib as mpl
import seaborn as sns

SEQUENTIAL = "viridis"  # perceptually uniform, monotone in lightness: readable in greyscale
DIVERGING = "RdBu_r"    # for signed quantities centred on 0 (differences, scores)
PALETTE = "colorblind"


def use_style(context: str | None = None) -> None:
    """Apply the house style. context='talk' enlarges everything for a classroom projector.

    Without an argument the environment variable QALIB_STYLE decides (`make present` sets it to 'talk'),
    else 'notebook'.
    """
    context = context or os.environ.get("QALIB_STYLE", "notebook")
    if context not in ("paper", "notebook", "talk", "poster"):
        raise ValueError(f"context must be one of paper/notebook/talk/poster, got {context!r}")
    sns.set_theme(context=context, style="whitegrid", palette=PALETTE)
    mpl.rcParams.update(
        {
            "image.cmap": SEQUENTIAL,
            "figure.dpi": 120 if context in ("talk", "poster") else 90,
            "figure.autolayout": False,
            "figure.constrained_layout.use": True,
            "axes.titleweight": "bold",
            # a fixed title height: by default every draw searches each axes' top tick labels to lift the title
            # above them (tens of ms per redraw), and no figure here puts tick labels on top
            "axes.titley": 1.0,
            "savefig.bbox": "tight",
        }
    )

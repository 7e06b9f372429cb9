"""One look for every figure: seaborn's clean theme, perceptually uniform colour maps that survive grey print."""

from __future__ import annotations

import os

import matplotlib as mpl
import seaborn as sns

SEQUENTIAL = "viridis"  # perceptually uniform, monotone in lightness: readable in greyscale
DIVERGING = "RdBu_r"    # for signed quantities centred on 0 (differences, scores)
PALETTE = "colorblind"


SCALE = {"paper": 0.8, "notebook": 1.0, "talk": 1.5, "poster": 2.0}  # how large each context draws everything
NOTEBOOK_DPI = 90


def use_style(context: str | None = None) -> None:
    """Apply the house style. context='talk' enlarges everything for a classroom projector.

    Without an argument the environment variable QALIB_STYLE decides (`make present` sets it to 'talk'),
    else 'notebook'.

    Every context lays figures out with the notebook's font sizes and draws them with SCALE times the
    notebook's pixels per inch: a talk figure is the notebook figure 1.5x larger, text included. (Seaborn's
    'talk' context instead enlarges the fonts inside the same inches, and the panels' titles and labels of
    these figures then overlap or run off the edge.)
    """
    context = context or os.environ.get("QALIB_STYLE", "notebook")
    if context not in SCALE:
        raise ValueError(f"context must be one of {'/'.join(SCALE)}, got {context!r}")
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE)
    mpl.rcParams.update(
        {
            "image.cmap": SEQUENTIAL,
            "figure.dpi": round(NOTEBOOK_DPI * SCALE[context]),
            "figure.autolayout": False,
            "figure.constrained_layout.use": True,
            "axes.titleweight": "bold",
            # a fixed title height: by default every draw searches each axes' top tick labels to lift the title
            # above them (tens of ms per redraw), and no figure here puts tick labels on top
            "axes.titley": 1.0,
            "savefig.bbox": "tight",
        }
    )

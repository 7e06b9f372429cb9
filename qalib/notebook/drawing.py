"""Drawing for plots and demos, matplotlib only: what a demo's redraw changes (live) and what it keeps (static).

A plot function `plot(fig, result)` draws on a figure; `qalib.notebook.widgets.Demo` calls it. Drawing a multi-panel
figure from scratch takes 150-400 ms on a 2-core laptop, mostly axes, ticks and text. So `plot` may build its
figure once and return an `update(result)` function that changes only the artists that depend on the result
(line data, bar heights, image values, titles with numbers), which `plot` marks with `live(...)`. Everything
else is drawn once and kept as a background; a redraw restores it and draws the live artists over it
(matplotlib's blitting). `update` returns what else it changed: nothing more (None), the static parts of some
panels (`Panels(ax, ...)`, which `set_limits` returns when limits move: those panels are drawn again and pasted
into the kept background), anything static (`Change.AXES`: the kept figure is drawn again), or which panels
there are (`Change.FIGURE`: `plot` runs again on a new figure). A plot function that returns None is simply
plotted afresh on every change.

Live artists that redraw in a few milliseconds: a tick label is a Text, which Agg rasterises glyph by glyph
(about 0.5 ms a label plus 0.2 ms a glyph), and when the labels change (a typed sentence's word pieces) or the
limits move, the whole panel has to be drawn again. `LiveTickLabels` draws labels as glyph outlines in one
PathCollection and `live_bars` bars as polygons in one PolyCollection: both are live artists whose contents an
update replaces, so such a change redraws only them, over the kept background.

    pieces = LiveTickLabels(ax, "x")       # no ticks on x; room for the labels reserved below the axes
    bars = live_bars(ax, facecolors="C0")
    ...
    pieces.set(["[CLS]", "the", "cat"])    # in update(): one label at each of x = 0, 1, 2
    bars.set_verts(bar_polygons([0, 1, 2], heights))

The axis keeps no ticks, so moving its limits changes no static pixel (nothing static depends on them): an
update may set them and return None.

Axes that stay fast to draw: `decade_ticks` labels log10 data on a linear axis, `log_ticks` thins a log axis's
ticks, `limits_with_margins` fixes limits once, and `seed_band` draws a mean over seeds with its min-max band.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable
from typing import Any

import matplotlib as mpl
import matplotlib.ticker
import numpy as np
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.textpath import TextPath, text_to_path
from matplotlib.transforms import Affine2D, ScaledTranslation, Transform, blended_transform_factory


# -- what an update changed ----------------------------------------------------------------------
class Change(enum.Enum):
    """What an `update(result)` changed besides its live artists, hence how much must be drawn again."""

    AXES = "axes"      # limits, ticks or static labels: draw the kept figure again (its layout stays)
    FIGURE = "figure"  # which panels there are, or their shapes: plot a new figure


class Panels(frozenset):
    """What an `update(result)` returns when it changed static parts (limits, ticks, labels) of these axes only:
    they are drawn again, without the other panels, and the pixels of their areas (tick labels and titles
    included, before and after the change) are pasted into the kept background. Their siblings (shared or twin
    axes) are included. tests/test_demos.py compares every redraw with a fresh plot, pixel for pixel."""

    def __new__(cls, *axes):
        found = set()
        for ax in axes:
            found |= set(ax.get_shared_x_axes().get_siblings(ax)) | set(ax.get_shared_y_axes().get_siblings(ax))
        return super().__new__(cls, found)

    def __repr__(self) -> str:
        return f"Panels({len(self)} axes)"


Update = Callable[[Any], "Change | Panels | None"]


def live(*artists):
    """Mark the artists that `update` changes. They are left out of the kept background and drawn over it
    on every redraw, on top of the static artists of their axes. Returns the artists, for chaining."""
    for artist in artists:
        artist.set_animated(True)
    return artists


def set_limits(ax, xlim: tuple[float, float] | None = None, ylim: tuple[float, float] | None = None) -> Panels | None:
    """Set axis limits; `Panels(ax)` if they moved (its ticks must be drawn again), else None."""
    moved = None
    for lim, get, set_ in ((xlim, ax.get_xlim, ax.set_xlim), (ylim, ax.get_ylim, ax.set_ylim)):
        if lim is not None and not np.allclose(get(), lim, rtol=1e-9, atol=0):
            set_(*lim)
            moved = Panels(ax)
    return moved


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, ... (times any power of ten) that is >= x > 0. Limits rounded up this
    way move only when the data crosses a step, so most redraws keep their axes (and are fast)."""
    if not (np.isfinite(x) and x > 0):
        return 1.0
    exponent = np.floor(np.log10(x))
    for step in (1.0, 2.0, 5.0, 10.0):
        if step * 10.0**exponent >= x * (1 - 1e-12):
            return float(step * 10.0**exponent)
    return float(10.0 ** (exponent + 1))


def fixed_or_nice(extent: float, fixed: float) -> float:
    """An axis limit: `fixed` while it holds `extent`, else the 1-2-5 step above `extent` (nice_ceiling), so the
    limit stays put over a demo's usual range and moves only in coarse steps beyond it."""
    return fixed if extent <= fixed else nice_ceiling(extent)


def live_title(ax, static_title: str = ""):
    """A static title on the left and, returned, a live one on the right for the numbers: every glyph of a live
    text is drawn again on each change, those of the static title never."""
    if static_title:
        ax.set_title(static_title, loc="left")
    return live(ax.set_title("", loc="right", fontsize="small", fontweight="normal"))[0]


def power_of_two_window(n: int, smallest: int = 8) -> int:
    """max(smallest, the least power of two >= n): an axis range that follows a size (a length, a sequence)
    in coarse steps, so most moves of the size keep the axes."""
    return max(smallest, 1 << (int(n) - 1).bit_length())


def most(*changes: Change | Panels | None) -> Change | Panels | None:
    """The largest of several changes (FIGURE > AXES > the union of Panels > None), for an update made of parts."""
    for kind in (Change.FIGURE, Change.AXES):
        if kind in changes:
            return kind
    panels = [change for change in changes if isinstance(change, Panels)]
    return Panels(*(ax for change in panels for ax in change)) if panels else None


# -- live labels and bars --------------------------------------------------------------------------
ELLIPSIS = "\u2026"


def points_to_pixels(fig) -> Transform:
    """The transform of paths measured in points (1/72 inch), such as glyph outlines, to the pixels of `fig`."""
    return Affine2D().scale(1 / 72) + fig.dpi_scale_trans


@functools.lru_cache(maxsize=64)
def _font(size: float) -> FontProperties:
    return FontProperties(size=size)  # looked up once: finding the font is most of a TextPath's cost


@functools.lru_cache(maxsize=8192)
def text_width(text: str, size: float) -> float:
    """The advance width of `text` in the default font at `size` points, in points."""
    return text_to_path.get_text_width_height_descent(text, _font(size), ismath=False)[0]


@functools.lru_cache(maxsize=4096)
def fitted(text: str, size: float, max_width: float) -> str:
    """`text`, or its longest beginning that fits in `max_width` points with an ellipsis after it."""
    if text_width(text, size) <= max_width:
        return text
    for end in range(len(text) - 1, 0, -1):
        if text_width(text[:end] + ELLIPSIS, size) <= max_width:
            return text[:end] + ELLIPSIS
    return ELLIPSIS


_HA = {"left": 0.0, "center": 0.5, "right": 1.0}  # where the anchor is along a text's layout box
_VA = {"bottom": 0.0, "center": 0.5, "top": 1.0}   # ... and across it (bottom = the descender's bottom)


@functools.lru_cache(maxsize=4096)
def label_path(text: str, size: float, rotation: float = 0.0, ha: str = "right", va: str = "center") -> Path:
    """`text` as glyph outlines in points, with the point (ha, va) of its layout box at the origin, turned
    `rotation` degrees counter-clockwise about it: a Text with rotation_mode='anchor' placed at the origin."""
    width, height, descent = text_to_path.get_text_width_height_descent(text, _font(size), ismath=False)
    glyphs = TextPath((0, 0), text, prop=_font(size))  # baseline at y = 0, descenders below it
    to_anchor = Affine2D().translate(-_HA[ha] * width, descent - _VA[va] * height).rotate_deg(rotation)
    return to_anchor.transform_path(glyphs)


def _reach(width: float, height: float, rotation: float, ha: str, va: str) -> tuple[float, float]:
    """How far below and how far left of its anchor a box width x height (in points) anchored at (ha, va) and
    turned by `rotation` reaches."""
    xs = np.array([-_HA[ha], 1 - _HA[ha]]) * width
    ys = np.array([-_VA[va], 1 - _VA[va]]) * height
    corners = np.array([(x, y) for x in xs for y in ys])  # (4, 2)
    turned = corners @ Affine2D().rotate_deg(rotation).get_matrix()[:2, :2].T
    return float(-turned[:, 1].min()), float(-turned[:, 0].min())


def _checked_axis(axis: str) -> str:
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    return axis


class LiveTickLabels:
    """Labels at data positions along the x axis (below the axes) or the y axis (left of it), drawn as one live
    collection of glyph outlines: word pieces, or tick labels that follow moving limits.

    The axis loses its ticks. Room for labels `width_chars` digits wide is reserved with an invisible text (so
    that constrained layout leaves it free), the axis label is moved beyond it, and longer labels are cut to
    fit with an ellipsis. Of more than `most` labels, every k-th one is shown (the smallest k that shows at
    most `most`), so that a long text stays readable. By default x labels are turned 70 degrees and end at
    their position, as do y labels (not turned); x labels not turned are centred under it.
    """

    def __init__(self, ax, axis: str = "x", *, size: float | str = 7.0, rotation: float | None = None,
                 width_chars: int = 12, most: int = 40, pad: float = 3.5) -> None:
        _checked_axis(axis)
        if not ((isinstance(size, str) or size > 0) and width_chars >= 1 and most >= 1 and pad >= 0):
            raise ValueError(f"size, width_chars, most and pad must be positive, got {size}, {width_chars}, "
                             f"{most}, {pad}")
        fig = ax.get_figure(root=True)
        size = FontProperties(size=size).get_size_in_points()  # also 'small', 'medium', ... as rcParams give them
        self.ax, self.axis, self.size, self.most = ax, axis, float(size), int(most)
        self.rotation = float(rotation if rotation is not None else (70.0 if axis == "x" else 0.0))
        self.ha, self.va = ("center", "top") if axis == "x" and self.rotation == 0 else ("right", "center")
        self.max_width = text_width("0" * width_chars, self.size)  # in points
        # where a label's anchor sits: `pad` points outside the spine, at its data position along the axis
        if axis == "x":
            ax.set_xticks([])
            along = blended_transform_factory(ax.transData, ax.transAxes)
            outside = ScaledTranslation(0, -pad / 72, fig.dpi_scale_trans)
            self._positions = lambda p: np.c_[p, np.zeros(len(p))]  # (n, 2) offsets
        else:
            ax.set_yticks([])
            along = blended_transform_factory(ax.transAxes, ax.transData)
            outside = ScaledTranslation(-pad / 72, 0, fig.dpi_scale_trans)
            self._positions = lambda p: np.c_[np.zeros(len(p)), p]
        colour = mpl.rcParams[f"{axis}tick.labelcolor"]
        self.collection = PathCollection([], offsets=np.zeros((0, 2)), offset_transform=along + outside,
                                         transform=points_to_pixels(fig),
                                         facecolors=mpl.rcParams[f"{axis}tick.color"] if colour == "inherit" else colour,
                                         linewidths=0, clip_on=False)
        self.collection.set_in_layout(False)  # the reserve below stands in for it
        ax.add_collection(self.collection, autolim=False)
        live(self.collection)
        # The reserve: the widest label, anchored like the labels halfway along the axis, invisible.
        self.reserve = ax.text(*((0.5, 0.0) if axis == "x" else (0.0, 0.5)), "0" * width_chars,
                               transform=ax.transAxes + outside, fontsize=self.size, rotation=self.rotation,
                               rotation_mode="anchor", ha=self.ha, va=self.va, alpha=0.0)
        height = text_to_path.get_text_width_height_descent("0", _font(self.size), ismath=False)[1]
        below, left = _reach(self.max_width, height, self.rotation, self.ha, self.va)
        beyond = pad + (below if axis == "x" else left) + 2.0  # where the axis label goes, in points from the spine
        if axis == "x":
            ax.xaxis.set_label_coords(0.5, 0.0, ax.transAxes + ScaledTranslation(0, -beyond / 72, fig.dpi_scale_trans))
        else:
            ax.yaxis.set_label_coords(0.0, 0.5, ax.transAxes + ScaledTranslation(-beyond / 72, 0, fig.dpi_scale_trans))
        self.labels: list[str] = []

    def set(self, labels, positions=None, size: float | None = None) -> None:
        """Show `labels` at `positions` (data units along the axis; default 0, 1, 2, ...), at `size` points
        (default the size given at construction; the reserved width stays)."""
        labels = [str(label) for label in labels]
        positions = np.arange(len(labels)) if positions is None else np.asarray(positions, dtype=float)
        if positions.shape != (len(labels),):
            raise ValueError(f"{len(labels)} labels need {len(labels)} positions, got shape {positions.shape}")
        size = self.size if size is None else float(size)
        self.labels = labels
        step = max(1, -(-len(labels) // self.most))  # ceil(n / most): every step-th label is shown
        self.collection.set_paths([label_path(fitted(label, size, self.max_width), size, self.rotation, self.ha,
                                              self.va) for label in labels[::step]])
        self.collection.set_offsets(self._positions(positions[::step]))


def bar_polygons(x, heights, width: float = 0.8) -> np.ndarray:
    """The corners of bars centred at `x` with these heights (from 0), as PolyCollection vertices: (n, 4, 2)."""
    x, heights = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(heights, dtype=float))
    left, right = x - width / 2, x + width / 2
    zero = np.zeros_like(x)
    return np.stack([np.c_[left, zero], np.c_[left, heights], np.c_[right, heights], np.c_[right, zero]], axis=1)


def live_bars(ax, **kwargs) -> PolyCollection:
    """An empty live collection of bars on `ax` (fill it with `set_verts(bar_polygons(...))`); keyword arguments
    go to PolyCollection (facecolors, label, ...). No edges by default: the style's white bar edges (1 pt a side)
    would leave a narrow bar of a group almost no face."""
    kwargs.setdefault("linewidths", 0)
    # not antialiased: crisp edges on whole pixels, as snapped bar patches have
    bars = PolyCollection([], antialiaseds=False, **kwargs)
    ax.add_collection(bars, autolim=False)
    live(bars)
    return bars


# -- static axes that stay fast to draw ---------------------------------------------------------------
def decade_ticks(ax, axis: str, exponents) -> None:
    """Label an axis that shows log10 of its data with the values themselves at whole decades, at most 7 of them
    over the span of `exponents` (log10 values; NaNs are ignored). Drawing log10 on a linear axis instead of a
    log axis keeps a redraw fast (matplotlib's log tick labels are mathtext, slow to render)."""
    _checked_axis(axis)
    lo, hi = math.floor(np.nanmin(exponents)), math.ceil(np.nanmax(exponents))
    step = max(1, math.ceil((hi - lo) / 6))
    ticks = np.arange(lo, hi + 1, step)
    labels = [f"{10.0 ** t:g}" if -3 <= t <= 4 else f"1e{t}" for t in ticks]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks, labels)


def log_ticks(ax, axis: str, values, labels=None) -> None:
    """Major ticks at `values` only, named by `labels` (default: the axis's own formatter), and no minor ticks, on
    a log or symlog axis: by itself such an axis ticks every decade and puts minor ticks between them, which over
    many decades crowd it and cost drawing time."""
    target = ax.xaxis if _checked_axis(axis) == "x" else ax.yaxis
    target.set_ticks(values, labels)
    target.set_minor_locator(matplotlib.ticker.NullLocator())


def limits_with_margins(lo: float, hi: float, margin: float = 0.05) -> tuple[float, float]:
    """Limits for data from lo to hi with `margin` of the span added on each side, as autoscaling would add (5%):
    set once, they stay put when an update moves the data."""
    pad = margin * (hi - lo)
    return lo - pad, hi + pad


def seed_band(ax, x, rows, *, log: bool = False, alpha: float = 0.25, **line):
    """The mean of `rows` (S, n), one row a seed, drawn against `x` (n,) as a line, with a band from their minimum
    to their maximum in the line's colour. log=True draws log10 of the values (label the axis with decade_ticks).
    `line` goes to ax.plot (label, color, marker, ...). Returns the line, the band and move(x, rows), which puts
    both on other data in place (for an update)."""
    def stats(rows):
        rows = np.asarray(rows, dtype=float)
        rows = np.log10(rows) if log else rows
        return rows.mean(0), rows.min(0), rows.max(0)

    mean, lo, hi = stats(rows)
    (drawn,) = ax.plot(x, mean, **line)
    band = ax.fill_between(x, lo, hi, color=drawn.get_color(), alpha=alpha, lw=0)

    def move(x, rows) -> None:
        mean, lo, hi = stats(rows)
        drawn.set_data(x, mean)
        band.set_data(x, lo, hi)

    return drawn, band, move


def budget_axis(ax, steps) -> None:
    """An x axis of training budgets (a reference run's rungs): log scale, a tick at each budget and no others."""
    ax.set_xscale("log")
    log_ticks(ax, "x", list(steps), [str(s) for s in steps])
    ax.set_xlabel("training steps (log scale)")


def seeds_and_median(ax, x, rows, color, label: str | None = None, *, marker: str = "o-", mfc=None, ms: float = 6):
    """Per-seed values `rows` (n_x, S) at positions x (n_x,): a small dot per seed and the median as `marker`
    (a line through the medians when marker has '-'; mfc='white' draws it open)."""
    rows = np.atleast_2d(np.asarray(rows, dtype=float))
    x = np.asarray(x, dtype=float).reshape(-1)
    for xi, row in zip(x, rows):
        ax.plot(np.full(len(row), xi), row, ".", color=color, alpha=0.4, ms=4)
    ax.plot(x, np.median(rows, axis=1), marker, color=color, mfc=mfc, ms=ms, label=label)

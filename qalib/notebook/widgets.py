"""Interactive demos as three layers: compute -> plot -> controls.

    demo = Demo(compute=softmax_saturation, plot=plot_saturation,
                controls={"a": FloatLogSlider(...)}, title="softmax([a, a, 2a])")
    demo            # displays in a notebook

The callback only calls `compute(**control_values)` and then `plot(fig, result)`; all logic lives in
those two pure functions, which the unit tests call directly. Tests (and the benchmark) drive a demo
without a browser: `demo.set(a=10.0)` changes a control exactly as a user would and redraws.

`plot` may return an `update(result)` function that changes only what depends on the result; the demo then
draws it over a kept background. qalib.notebook.drawing (matplotlib only) explains how, and has what plots use for it
(`live`, `set_limits`, `Panels`, `Change`, live labels and bars).

If compute raises ValueError (a setting that makes no sense), the demo shows the message in place
and keeps the last valid figure, instead of a traceback.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as W
import matplotlib
import matplotlib.figure
import matplotlib.transforms
import PIL.Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
import numpy as np

from qalib.lab.device import one_thread
from qalib.notebook.drawing import Change, Panels, Update


class Demo:
    """A figure redrawn from the current values of named controls."""

    def __init__(
        self,
        compute: Callable[..., Any],
        plot: Callable[[matplotlib.figure.Figure, Any], Update | None],
        controls: Mapping[str, W.ValueWidget],
        *,
        title: str = "",
        figsize: tuple[float, float] = (9.0, 3.6),
        dpi: int | None = None,
    ) -> None:
        if not callable(compute) or not callable(plot):
            raise TypeError("compute and plot must be callables")
        if not controls:
            raise ValueError("a Demo needs at least one control")
        for name, control in controls.items():
            if not hasattr(control, "value"):
                raise TypeError(f"control {name!r} has no .value; use an ipywidgets value widget")
            if hasattr(control, "continuous_update"):
                control.continuous_update = False  # redraw on release: smooth in class, no redraw storms
            if not getattr(control, "description", ""):
                control.description = name
            control.style = {"description_width": "initial"}
        self.compute = compute
        self.plot = plot
        self.controls = dict(controls)
        self.figsize = figsize
        self.dpi = dpi or int(matplotlib.rcParams["figure.dpi"])  # use_style("talk") raises it for projectors
        self.redraws = 0
        self.result: Any = None
        self.error: str | None = None
        self.last_redraw_s: float = float("nan")
        self.last_redraw_kind = ""  # what the last redraw drew: "live" (live artists only), "panels", "axes", "figure"
        self._layouts: dict[tuple, list] = {}  # layout key -> axes positions (see _draw)
        self._new_layout_key: tuple | None = None
        self._figure: matplotlib.figure.Figure | None = None  # the kept figure, when plot returned an update
        self._update: Update | None = None
        self._live: list = []          # its live artists, in drawing order
        self._background = None        # its pixels without them, as a blitting region
        self._static: np.ndarray | None = None  # the same pixels, (H, W, 4), once a Panels change needs them
        self._extents: dict | None = None  # then also each panel's area, tick labels and titles included
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.message = W.HTML()
        header = [W.HTML(f"<b>{title}</b>")] if title else []
        self.widget = W.VBox(
            header + [W.HBox(list(self.controls.values()), layout=W.Layout(flex_flow="row wrap")), self.message, self.image]
        )
        self.widget.add_class("qalib-demo")  # the browser test and the static site find demos by this class
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.redraw()

    # -- what a user does -------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def set(self, **values: Any) -> "Demo":
        """Set control values as a user would (each change redraws, as in the browser)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise KeyError(f"unknown control(s) {sorted(unknown)}; this demo has {sorted(self.controls)}")
        for name, value in values.items():
            self.controls[name].value = value
        return self

    # -- the callback -----------------------------------------------------------------------
    def _on_change(self, _change) -> None:
        self.redraw()

    def redraw(self) -> None:
        start = time.perf_counter()
        try:
            with one_thread():  # a demo's tensors are tiny: a second thread only spins, the more so on a busy machine
                result = self.compute(**self.values())
        except ValueError as err:
            self.error = str(err)
            self.message.value = (
                f"<span style='color:#b35806'>&#9888; {err} (the figure still shows the last valid setting)</span>"
            )
            return
        self.error = None
        self.result = result
        fig = self._render(result)
        png = _png(fig)
        self.image.value = png
        self.image.width = str(int.from_bytes(png[16:20], "big"))  # natural pixel width (PNG header): no up-scaling
        self.message.value = _note_html(result)
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - start

    def _render(self, result: Any) -> matplotlib.figure.Figure:
        """Bring the figure's pixels up to `result`, drawing as little as the update allows."""
        change = Change.FIGURE if self._update is None else self._update(result)
        if change is Change.FIGURE:
            self.last_redraw_kind = "figure"
            fig, update = self._draw(result)
            if update is not None:
                _overlays_live(fig)
            fig.canvas.draw()  # lays out (if the layout is new) and renders everything but the live artists
            self._keep_layout(fig)
            if update is None:  # a plot without update: nothing to keep
                self._figure, self._update, self._live = None, None, []
                return fig
            fig.set_layout_engine("none")  # laid out once; later draws of this figure keep the positions
            self._figure, self._update, self._live = fig, update, _live_artists(fig)
            self._keep_static()
        elif change is Change.AXES or (isinstance(change, Panels) and self._extents is None):
            # (where the panels' static parts lie is measured on the first Panels change after a full draw,
            # which draws everything: measuring costs 10-20 ms a panel, too much to spend on every full draw)
            self.last_redraw_kind = "axes"
            self._figure.canvas.draw()
            self._keep_static(measure=isinstance(change, Panels))
        elif isinstance(change, Panels):
            self.last_redraw_kind = "panels"
            self._redraw_panels(change)
        elif change is None:
            self.last_redraw_kind = "live"
            self._figure.canvas.restore_region(self._background)
        else:
            raise TypeError(f"update() must return None, Panels, Change.AXES or Change.FIGURE, got {change!r}")
        fig = self._figure
        for artist in self._live:
            fig.draw_artist(artist)
        return fig

    def _keep_static(self, measure: bool = False) -> None:
        """After the kept figure's static artists are drawn: keep them as the blitting background and, if
        `measure`, as pixels with where each panel's static parts lie (what `_redraw_panels` needs)."""
        fig = self._figure
        self._background = fig.canvas.copy_from_bbox(fig.bbox)
        self._static, self._extents = None, None
        if measure:
            self._static = np.array(fig.canvas.buffer_rgba())  # (H, W, 4), a copy
            self._extents = {ax: _static_extent(ax) for ax in fig.axes}

    def _redraw_panels(self, panels: Panels) -> None:
        """Draw the static parts of `panels` again, without the other panels, and paste the pixels they covered
        before and cover now into the kept background. A panel whose area touches those pixels is drawn too
        (its pixels there would otherwise be lost), but not pasted: it has not changed."""
        fig = self._figure
        height, width = self._static.shape[:2]
        new = {ax: _static_extent(ax) for ax in panels}
        regions = []  # per panel: the pixels of its area before and now
        for ax in panels:
            boxes = [box for box in (self._extents.get(ax), new[ax]) if box is not None]
            if boxes:
                regions.append(_pixels(matplotlib.transforms.Bbox.union(boxes), height, width))
        touching = {ax for ax in fig.axes if ax not in panels and self._extents.get(ax) is not None
                    and any(_overlap(_pixels(self._extents[ax], height, width), r) for r in regions)}
        hidden = [ax for ax in fig.axes if ax not in panels and ax not in touching and ax.get_visible()]
        for ax in hidden:
            ax.set_visible(False)
        try:
            fig.canvas.draw()  # the figure's face and texts, and the static artists of the panels drawn
        finally:
            for ax in hidden:
                ax.set_visible(True)
        drawn = np.asarray(fig.canvas.buffer_rgba())  # (H, W, 4)
        for rows, cols in regions:
            self._static[rows, cols] = drawn[rows, cols]
        self._extents.update(new)
        drawn[...] = self._static  # the canvas now holds the new background
        self._background = fig.canvas.copy_from_bbox(fig.bbox)

    def _draw(self, result: Any) -> tuple[matplotlib.figure.Figure, Update | None]:
        """A new figure with `plot` applied and its axes laid out, and the update `plot` returned.

        Constrained layout measures every label and tick, which costs about as much as drawing the figure.
        A control change rarely changes what the layout depends on (which axes there are, their titles and
        labels, how long the tick labels are), so a layout found once is reused for every figure with the
        same layout key; anything else is laid out afresh. Coming back to a setting therefore draws the
        same picture.
        """
        fig = _figure(self.figsize, self.dpi, layout="none" if self._layouts else "constrained")
        update = self.plot(fig, result)
        if update is not None and not callable(update):
            raise TypeError(f"plot must return None or an update function, got {type(update).__name__}")
        key = _layout_key(fig)
        positions = self._layouts.get(key)
        if positions is not None:
            for ax, box in zip(fig.axes, positions):
                ax.set_position(box)
            return fig, update
        if fig.get_layout_engine() is None:  # a new kind of figure: plot it again, laid out
            fig = _figure(self.figsize, self.dpi, layout="constrained")
            update = self.plot(fig, result)
        self._new_layout_key = key  # redraw() keeps the positions once a draw has run the layout
        return fig, update

    def _keep_layout(self, fig: matplotlib.figure.Figure) -> None:
        key, self._new_layout_key = self._new_layout_key, None
        if key is None:
            return
        if len(self._layouts) >= 64:
            self._layouts.pop(next(iter(self._layouts)))  # oldest first: a bounded cache
        self._layouts[key] = [ax.get_position(original=True).frozen() for ax in fig.axes]

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _figure(figsize: tuple[float, float], dpi: int, layout: str) -> matplotlib.figure.Figure:
    """A figure on its own Agg canvas, outside pyplot: nothing to close, never shown inline by accident."""
    fig = matplotlib.figure.Figure(figsize=figsize, dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _static_extent(ax) -> matplotlib.transforms.Bbox | None:
    """Where an axes draws its static artists (ticks, labels, titles included), in display units."""
    static = [a for a in ax.get_default_bbox_extra_artists() if not a.get_animated()]
    return ax.get_tightbbox(ax.get_figure(root=True).canvas.get_renderer(), bbox_extra_artists=static)


def _pixels(box: matplotlib.transforms.Bbox, height: int, width: int) -> tuple[slice, slice]:
    """The rows and columns of pixels a display-units box touches (display y runs up, pixel rows run down)."""
    rows = slice(max(0, height - int(np.ceil(box.y1))), min(height, height - int(np.floor(box.y0))))
    cols = slice(max(0, int(np.floor(box.x0))), min(width, int(np.ceil(box.x1))))
    return rows, cols


def _overlap(a: tuple[slice, slice], b: tuple[slice, slice]) -> bool:
    return all(max(p.start, q.start) < min(p.stop, q.stop) for p, q in zip(a, b))


def _overlays_live(fig: matplotlib.figure.Figure) -> None:
    """Mark live, too, every static artist an axes paints above one of its live artists (markers or a legend over a
    live image): the kept background is painted first and the live artists over it, so a static artist above a live
    one would be covered on every draw."""
    for ax in fig.axes:
        lowest = min((a.get_zorder() for a in ax.get_children() if a.get_animated()), default=None)
        if lowest is None:
            continue
        for artist in (*ax.images, *ax.lines, *ax.collections, *ax.patches, *ax.texts, ax.get_legend()):
            if artist is not None and not artist.get_animated() and artist.get_zorder() > lowest:
                artist.set_animated(True)


def _live_artists(fig: matplotlib.figure.Figure) -> list:
    """The artists `live` marked, in the order a full draw would paint them: figure by axes, by z-order."""
    found = fig.findobj(lambda artist: artist.get_animated())
    order = {id(ax): i for i, ax in enumerate(fig.axes)}
    return sorted(found, key=lambda a: (order.get(id(a.axes), len(order)), a.get_zorder()))


def _png(fig: matplotlib.figure.Figure) -> bytes:
    """The drawn canvas as PNG. Encoded here rather than by savefig: savefig would draw the figure a second
    time, and zlib's fastest level is 2-3x quicker than the default for about 10% larger files."""
    buf = io.BytesIO()
    PIL.Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).save(buf, format="png", compress_level=1)
    return buf.getvalue()


def _layout_key(fig: matplotlib.figure.Figure) -> tuple:
    """What constrained layout depends on, found without measuring text: which axes there are, how many
    lines their titles and axis labels take, their legends' size, and how long their tick labels are.
    Numbers that change inside a title from one setting to the next do not change the layout."""
    key: list = [_lines(fig.get_suptitle()) if hasattr(fig, "get_suptitle") else 0]
    for ax in fig.axes:
        legend = ax.get_legend()
        legend_texts = [t.get_text() for t in legend.get_texts()] if legend else []
        key.append((
            *(_lines(ax.get_title(loc)) for loc in ("left", "center", "right")),
            _lines(ax.xaxis.label.get_text()), _lines(ax.yaxis.label.get_text()),
            len(legend_texts), max(map(len, legend_texts), default=0),
            _tick_label_length(ax.xaxis), _tick_label_length(ax.yaxis),
        ))
    return tuple(key)


def _lines(text: str) -> int:
    return text.count("\n") + 1 if text else 0


def _tick_label_length(axis) -> int:
    if not axis.get_visible():
        return 0
    labels = axis.major.formatter.format_ticks(axis.get_majorticklocs())
    return max((len(str(label)) for label in labels), default=0)


def _note_html(result: Any) -> str:
    """A compute result may carry a `note` (str) to show above the figure, e.g. 'd_k=1: nothing to scale'."""
    note = result.get("note") if isinstance(result, Mapping) else getattr(result, "note", None)
    return f"<span style='color:#2166ac'>{note}</span>" if note else ""

"""Interactive demos as three layers: compute -> plot -> controls.

    demo = Demo(compute=softmax_saturation, plot=plot_saturation,
                controls={"a": FloatLogSlider(...)}, title="softmax([a, a, 2a])")
    demo            # displays in a notebook

The callback only calls `compute(**control_values)` and then `plot(fig, result)`; all logic lives in
those two pure functions, which the unit tests call directly. Tests (and the benchmark) drive a demo
without a browser: `demo.set(a=10.0)` changes a control exactly as a user would and redraws.

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
import PIL.Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
import numpy as np


class Demo:
    """A figure redrawn from the current values of named controls."""

    def __init__(
        self,
        compute: Callable[..., Any],
        plot: Callable[[matplotlib.figure.Figure, Any], None],
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
        self._layouts: dict[tuple, list] = {}  # layout key -> axes positions (see _draw)
        self._new_layout_key: tuple | None = None
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
            result = self.compute(**self.values())
        except ValueError as err:
            self.error = str(err)
            self.message.value = (
                f"<span style='color:#b35806'>&#9888; {err} (the figure still shows the last valid setting)</span>"
            )
            return
        self.error = None
        self.result = result
        fig = self._draw(result)
        fig.canvas.draw()  # lays out (if the layout is new) and renders at the figure's dpi
        self._keep_layout(fig)
        png = _png(fig)
        self.image.value = png
        self.image.width = str(int.from_bytes(png[16:20], "big"))  # natural pixel width (PNG header): no up-scaling
        self.message.value = _note_html(result)
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - start

    def _draw(self, result: Any) -> matplotlib.figure.Figure:
        """A new figure with `plot` applied and its axes laid out.

        Constrained layout measures every label and tick, which costs about as much as drawing the figure.
        A control change rarely changes what the layout depends on (which axes there are, their titles and
        labels, how long the tick labels are), so a layout found once is reused for every figure with the
        same layout key; anything else is laid out afresh. Coming back to a setting therefore draws the
        same picture.
        """
        fig = _figure(self.figsize, self.dpi, layout="none" if self._layouts else "constrained")
        self.plot(fig, result)
        key = _layout_key(fig)
        positions = self._layouts.get(key)
        if positions is not None:
            for ax, box in zip(fig.axes, positions):
                ax.set_position(box)
            return fig
        if fig.get_layout_engine() is None:  # a new kind of figure: plot it again, laid out
            fig = _figure(self.figsize, self.dpi, layout="constrained")
            self.plot(fig, result)
        self._new_layout_key = key  # redraw() keeps the positions once a draw has run the layout
        return fig

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


def finite_values(result: Any) -> bool:
    """True if every number inside a compute result (nested dicts, lists, arrays, tensors) is finite."""
    import torch

    if isinstance(result, torch.Tensor):
        return bool(torch.isfinite(result.float()).all()) if result.is_floating_point() else True
    if isinstance(result, np.ndarray):
        return bool(np.isfinite(result).all()) if np.issubdtype(result.dtype, np.number) else True
    if isinstance(result, (float, int, np.number)) and not isinstance(result, bool):
        return bool(np.isfinite(result))
    if isinstance(result, Mapping):
        return all(finite_values(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return all(finite_values(v) for v in result)
    if hasattr(result, "__dataclass_fields__"):
        return all(finite_values(getattr(result, f)) for f in result.__dataclass_fields__)
    return True


def sweep_values(control: W.ValueWidget, n: int = 6) -> list[Any]:
    """Values a user could give a control: both ends of its range and points between (for tests and the benchmark)."""
    if isinstance(control, (W.Dropdown, W.RadioButtons, W.ToggleButtons, W.SelectionSlider, W.Select)):
        values = [v if not isinstance(v, tuple) else v[1] for v in control.options]
        return [values[i % len(values)] for i in range(max(n, len(values)))]
    if isinstance(control, (W.Checkbox, W.ToggleButton)):
        return [not control.value, control.value] * max(1, n // 2)
    if isinstance(control, (W.FloatLogSlider,)):
        exps = np.linspace(control.min, control.max, n)
        return [float(control.base ** e) for e in exps]
    if isinstance(control, (W.IntSlider, W.BoundedIntText)):
        return sorted({int(round(v)) for v in np.linspace(control.min, control.max, n)})
    if isinstance(control, (W.FloatSlider, W.BoundedFloatText)):
        return [float(v) for v in np.linspace(control.min, control.max, n)]
    if isinstance(control, (W.IntRangeSlider, W.FloatRangeSlider)):
        lo, hi = control.min, control.max
        return [(lo, hi), (lo, lo + (hi - lo) / 2), (lo + (hi - lo) / 2, hi)]
    return [control.value]

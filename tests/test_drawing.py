"""qalib.notebook.drawing: what an update changed, word pieces as one collection of glyph outlines, bars as one collection
of polygons, and the axes helpers that keep figures fast to draw."""

import subprocess
import sys

import matplotlib.colors
import matplotlib.figure
import matplotlib.font_manager
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox

from qalib.notebook.drawing import (ELLIPSIS, Change, LiveTickLabels, Panels, bar_polygons, decade_ticks, fitted,
                           fixed_or_nice, label_path, limits_with_margins, live_bars, live_title, log_ticks, most,
                           nice_ceiling, points_to_pixels, power_of_two_window, seed_band, set_limits, text_width)


def _figure(layout="constrained"):
    fig = matplotlib.figure.Figure(figsize=(6, 3), dpi=90, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _label_boxes(labels: LiveTickLabels) -> list[Bbox]:
    """Where each label's glyphs land, in display units (the figure must have been drawn: the layout is set)."""
    to_pixels = labels.collection.get_transform()
    anchors = labels.collection.get_offset_transform().transform(labels.collection.get_offsets())
    return [path.transformed(to_pixels).get_extents().translated(*anchor)
            for path, anchor in zip(labels.collection.get_paths(), anchors)]


def test_fitted_keeps_short_labels_and_cuts_long_ones_to_the_width():
    assert fitted("cat", 7.0, 50.0) == "cat"
    long = "antidisestablishmentarianism"
    cut = fitted(long, 7.0, 50.0)
    assert cut.endswith(ELLIPSIS) and long.startswith(cut[:-1]) and len(cut) < len(long)
    assert text_width(cut, 7.0) <= 50.0 < text_width(cut[:-1] + long[len(cut) - 1] + ELLIPSIS, 7.0)
    assert fitted(long, 7.0, 0.1) == ELLIPSIS  # no room at all: the ellipsis alone says something was cut


def test_a_centred_label_path_hangs_from_the_origin():
    """ha='center', va='top' (an x tick label not turned): centred on the origin, below it."""
    width = text_width("word", 10.0)
    points = label_path("word", 10.0, 0.0, "center", "top").vertices
    assert abs(points[:, 0].max() + points[:, 0].min()) < 1.0 and points[:, 0].max() - points[:, 0].min() <= width
    assert -0.5 < points[:, 1].max() <= 0.5 and points[:, 1].min() > -12.0


@pytest.mark.parametrize("rotation", [0.0, 70.0, 90.0])
def test_a_label_path_ends_at_the_origin(rotation):
    """The right end of the text, halfway up, sits at the origin, whatever the rotation (as for a tick label)."""
    width = text_width("word", 10.0)
    points = label_path("word", 10.0, rotation).vertices  # glyph outlines and their control points, (k, 2)
    angle = np.radians(rotation)
    end = np.array([np.cos(angle), np.sin(angle)])  # the direction the text runs in
    along = points @ end  # every point lies behind the origin along the text, within its width (+ side bearings)
    assert along.max() <= 1.0 and along.min() >= -width - 1.0
    across = points @ np.array([-end[1], end[0]])
    assert abs(across.max() + across.min()) < 3.0  # centred across the text, to a few tenths of the font size


def test_token_labels_sit_below_the_axes_clear_of_the_axis_label_and_inside_the_figure():
    fig = _figure()
    ax = fig.add_subplot()
    labels = LiveTickLabels(ax, "x", width_chars=10)
    ax.set_xlabel("key")
    tokens = ["[CLS]", "the", "0000000000", "a-much-longer-piece-than-fits", "[SEP]"]
    labels.set(tokens)
    ax.set_xlim(-0.5, len(tokens) - 0.5)
    fig.canvas.draw()
    assert list(ax.get_xticks()) == []
    assert labels.labels == tokens
    boxes = _label_boxes(labels)
    spine = ax.get_window_extent().y0
    axis_label = ax.xaxis.label.get_window_extent()
    for box in boxes:
        assert box.y1 < spine, "a label reaches into the axes"
        assert box.y0 > axis_label.y1, "a label runs into the axis label"
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), "a label left the figure"
    xs = [(box.x0 + box.x1) / 2 for box in boxes]
    assert xs == sorted(xs)  # in order along the axis


def test_token_labels_on_the_y_axis_sit_left_of_it_clear_of_its_label():
    fig = _figure()
    ax = fig.add_subplot()
    labels = LiveTickLabels(ax, "y", size=8, width_chars=8)
    ax.set_ylabel("query")
    labels.set(["a", "bb", "ccccccccccccccccccc"], positions=[0.0, 1.0, 2.0], size=6)
    ax.set_ylim(2.5, -0.5)
    fig.canvas.draw()
    assert list(ax.get_yticks()) == []
    spine = ax.get_window_extent().x0
    axis_label = ax.yaxis.label.get_window_extent()
    for box in _label_boxes(labels):
        assert axis_label.x1 < box.x0 and box.x1 < spine


def test_tick_labels_not_turned_are_centred_under_their_positions():
    fig = _figure()
    ax = fig.add_subplot()
    labels = LiveTickLabels(ax, "x", size="medium", rotation=0, width_chars=3)
    ax.set_xlabel("position")
    labels.set(["0", "50", "100"], positions=[0, 50, 100])
    ax.set_xlim(-0.5, 127.5)
    fig.canvas.draw()
    assert labels.size == pytest.approx(matplotlib.font_manager.FontProperties(size="medium").get_size_in_points())
    axis_label = ax.xaxis.label.get_window_extent()
    for box, x in zip(_label_boxes(labels), [0, 50, 100]):
        centre = ax.transData.transform((x, 0))[0]
        assert abs((box.x0 + box.x1) / 2 - centre) < 1.0  # pixels
        assert axis_label.y1 < box.y0 and box.y1 < ax.get_window_extent().y0


def test_token_labels_name_bad_arguments():
    ax = _figure().add_subplot()
    with pytest.raises(ValueError, match="axis must be"):
        LiveTickLabels(ax, "z")
    with pytest.raises(ValueError, match="width_chars"):
        LiveTickLabels(ax, "x", width_chars=0)
    labels = LiveTickLabels(ax, "x")
    with pytest.raises(ValueError, match="3 labels need 3 positions"):
        labels.set(["a", "b", "c"], positions=[0, 1])


def test_bar_polygons_and_live_bars():
    corners = bar_polygons([0.0, 2.0], [1.5, -1.0], width=0.5)  # (n, 4, 2)
    assert corners.shape == (2, 4, 2)
    np.testing.assert_allclose(corners[0], [[-0.25, 0], [-0.25, 1.5], [0.25, 1.5], [0.25, 0]])
    np.testing.assert_allclose(corners[1, :, 1], [0, -1.0, -1.0, 0])
    assert bar_polygons(np.arange(3), 2.0).shape == (3, 4, 2)  # one height for every bar
    ax = _figure().add_subplot()
    bars = live_bars(ax, facecolors="C1")
    bars.set_verts(corners)
    assert bars.get_animated() and bars in ax.collections and len(bars.get_paths()) == 2


def test_token_labels_thin_out_a_long_text_and_take_no_text():
    ax = _figure().add_subplot()
    labels = LiveTickLabels(ax, "x", most=10)
    pieces = [f"w{i}" for i in range(25)]
    labels.set(pieces)
    assert labels.labels == pieces  # what was asked for, for comparing with the next sentence
    offsets = labels.collection.get_offsets()
    assert len(labels.collection.get_paths()) == 9 and list(offsets[:, 0]) == list(range(0, 25, 3))
    labels.set(pieces[:10])
    assert len(labels.collection.get_paths()) == 10  # up to `most`, every one
    labels.set([])
    assert len(labels.collection.get_paths()) == 0


def test_limit_helpers():
    assert [nice_ceiling(x) for x in (0.3, 1.0, 1.01, 4.9, 5.0, 7.0, 130.0)] == [0.5, 1.0, 2.0, 5.0, 5.0, 10.0, 200.0]
    assert nice_ceiling(float("nan")) == 1.0 and nice_ceiling(0.0) == 1.0
    assert most(None, Change.AXES, None) is Change.AXES and most(Change.AXES, Change.FIGURE) is Change.FIGURE
    assert most(None, None) is None
    assert [power_of_two_window(n) for n in (1, 8, 9, 100, 512, 513)] == [8, 8, 16, 128, 512, 1024]
    assert power_of_two_window(3, smallest=2) == 4
    assert fixed_or_nice(2.9, 3.0) == 3.0 and fixed_or_nice(3.1, 3.0) == 5.0
    fig = matplotlib.figure.Figure()
    ax = fig.add_subplot()
    assert set_limits(ax, ylim=(0, 2)) == Panels(ax) and set_limits(ax, ylim=(0, 2)) is None
    twin = ax.twinx()
    other = fig.add_subplot(2, 1, 2)
    assert Panels(ax) == {ax, twin} and most(None, Panels(other), Panels(ax)) == {ax, twin, other}
    assert most(Panels(ax), Change.AXES) is Change.AXES
    assert ax.get_ylim() == (0, 2)
    numbers = live_title(ax, "static part")
    assert numbers.get_animated() and ax.get_title("left") == "static part" and not ax.title.get_animated()


def _tick_labels(ax, axis):
    return [label.get_text() for label in (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())]


def test_decade_ticks_name_the_values_of_a_log10_axis_at_most_seven_decades():
    ax = _figure().add_subplot()
    decade_ticks(ax, "y", [-18, 1])  # 19 decades: every 4th
    assert list(ax.get_yticks()) == [-18, -14, -10, -6, -2]
    assert _tick_labels(ax, "y") == ["1e-18", "1e-14", "1e-10", "1e-6", "0.01"]
    decade_ticks(ax, "x", np.array([np.nan, -2.3, 0.4]))  # the whole decades around the data, NaN left out
    assert list(ax.get_xticks()) == [-3, -2, -1, 0, 1]
    assert _tick_labels(ax, "x") == ["0.001", "0.01", "0.1", "1", "10"]
    with pytest.raises(ValueError, match="axis must be 'x' or 'y', got 'z'"):
        decade_ticks(ax, "z", [0, 1])


def test_log_ticks_put_major_ticks_at_the_values_only_and_no_minor_ticks():
    fig = _figure()
    ax1, ax2 = fig.subplots(1, 2)
    ax1.set(yscale="log", ylim=(1e-17, 10))
    log_ticks(ax1, "y", [1e-16, 1e-8, 1.0])
    ax2.set_xscale("symlog", base=2, linthresh=8)
    ax2.set_xlim(0, 512)
    log_ticks(ax2, "x", [0, 8, 64, 512], ["0", "8", "64", "512"])
    fig.canvas.draw()
    assert list(ax1.get_yticks()) == [1e-16, 1e-8, 1.0] and len(ax1.yaxis.get_minorticklocs()) == 0
    assert list(ax2.get_xticks()) == [0, 8, 64, 512] and len(ax2.xaxis.get_minorticklocs()) == 0
    assert _tick_labels(ax2, "x") == ["0", "8", "64", "512"]
    assert "10^{-8}" in _tick_labels(ax1, "y")[1]  # the axis's own formatter names them when no labels are given
    with pytest.raises(ValueError, match="axis must be 'x' or 'y'"):
        log_ticks(ax1, "both", [1.0])


def test_limits_with_margins_add_a_share_of_the_span_on_each_side():
    assert limits_with_margins(0, 20) == pytest.approx((-1.0, 21.0))
    assert limits_with_margins(2, 4, margin=0.5) == pytest.approx((1.0, 5.0))


def test_seed_band_draws_the_mean_and_the_min_max_band_and_moves_them():
    ax = _figure().add_subplot()
    rows = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 9.0]])  # (seeds, points)
    line, band, move = seed_band(ax, [0, 1, 2], rows, label="two seeds", color="C2", alpha=0.2)
    np.testing.assert_allclose(line.get_ydata(), [2.0, 3.0, 6.0])
    assert line.get_label() == "two seeds" and band.get_alpha() == 0.2
    assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], line.get_color())
    edge = band.get_paths()[0].vertices[:, 1]
    assert edge.min() == 1.0 and edge.max() == 9.0  # from the lowest seed to the highest
    move([0, 1], np.array([[10.0, 100.0], [1000.0, 10.0]]))
    np.testing.assert_allclose(line.get_xdata(), [0, 1])
    np.testing.assert_allclose(line.get_ydata(), [505.0, 55.0])
    _, band, move = seed_band(ax, [0, 1], np.array([[10.0, 100.0], [1000.0, 10.0]]), log=True)
    np.testing.assert_allclose(ax.lines[-1].get_ydata(), [2.0, 1.5])  # the mean of the log10 values
    edge = band.get_paths()[0].vertices[:, 1]
    assert edge.min() == pytest.approx(1.0) and edge.max() == pytest.approx(3.0)


def test_points_to_pixels_follows_the_figure_dpi():
    fig = _figure()  # 90 dpi: 72 points are 90 pixels
    np.testing.assert_allclose(points_to_pixels(fig).transform((72.0, 36.0)), (90.0, 45.0))


def test_the_drawing_layer_and_the_topics_plot_code_work_without_ipywidgets():
    """Plot code needs no widget shell (an experiment's worker process, a figure on the static site): with
    ipywidgets unimportable, qalib.notebook.drawing and every topic module but the demos modules import, and only
    the demos modules fail."""
    code = ("import importlib, pkgutil, sys\n"
            "sys.modules['ipywidgets'] = None  # as if it were not installed: importing it raises ImportError\n"
            "import qalib.notebook.drawing, qalib.topics\n"
            "names = [m.name for m in pkgutil.walk_packages(qalib.topics.__path__, 'qalib.topics.') if not m.ispkg]\n"
            "assert any(n.endswith('.demos') for n in names) and any(not n.endswith('.demos') for n in names)\n"
            "for name in names:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError:\n"
            "        assert name.endswith('.demos'), name + ' needs ipywidgets to import'\n"
            "    else:\n"
            "        assert not name.endswith('.demos'), name + ' built its demos without ipywidgets'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


def test_a_budget_axis_ticks_only_the_budgets_and_seeds_and_median_draws_dots_and_the_median():
    import matplotlib.figure

    from qalib.notebook.drawing import budget_axis, seeds_and_median

    ax = matplotlib.figure.Figure().add_subplot()
    seeds_and_median(ax, [100, 400], [[0.1, 0.3, 0.2], [0.5, 0.7, 0.6]], "C0", "a")
    budget_axis(ax, [100, 400])
    assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [100, 400]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["100", "400"] and not len(ax.xaxis.get_minorticklocs())
    median = ax.lines[-1]
    assert list(median.get_ydata()) == [0.2, 0.6] and median.get_label() == "a" and len(ax.lines) == 3

"""qalib's core helpers: claims, device, seeding, style, the Demo widget helper."""

import ipywidgets as W
import numpy as np
import pytest
import torch

import qalib
from qalib.notebook.claims import ClaimFailed, check, check_all, check_close
from qalib.notebook.drawing import Change, live, most, nice_ceiling, set_limits
from qalib.notebook.widgets import Demo
from qalib.tools.testing import finite_values


def test_check_prints_a_tick_and_the_value(capsys):
    check("two is more than one", 2 > 1, 2)
    assert capsys.readouterr().out.strip() == "\u2713 two is more than one — measured: 2"


def test_check_raises_with_the_claim_and_value():
    with pytest.raises(ClaimFailed, match="one is more than two — measured: 1"):
        check("one is more than two", 1 > 2, 1)


def test_check_close_tolerances_and_nan(capsys):
    check_close("softmax([1,1,2])[2]", 0.5761168847658291, 0.5761168847658291, rtol=1e-12)
    assert "\u2713" in capsys.readouterr().out
    with pytest.raises(ClaimFailed):
        check_close("close", 1.1, 1.0, rtol=0.05)
    with pytest.raises(ClaimFailed):
        check_close("nan is never close", float("nan"), float("nan"))
    with pytest.raises(ValueError, match="do not match"):
        check_close("shapes", np.ones(3), np.ones(4))


def test_check_rejects_non_boolean_conditions():
    with pytest.raises(TypeError, match="reduce"):
        check("tensor", torch.tensor([True, False]))
    with pytest.raises(TypeError):
        check("", True)
    with pytest.raises(ClaimFailed):
        check_all("all", [True, False])


def test_device_env_override(monkeypatch):
    monkeypatch.setenv("QALIB_DEVICE", "cpu")
    assert qalib.get_device().type == "cpu"
    monkeypatch.setenv("QALIB_DEVICE", "tpu")
    with pytest.raises(ValueError, match="QALIB_DEVICE"):
        qalib.get_device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("QALIB_DEVICE", "cuda")
        with pytest.raises(ValueError, match="cuda"):
            qalib.get_device()
    monkeypatch.delenv("QALIB_DEVICE")
    assert qalib.get_device().type in ("cpu", "cuda", "mps")


def test_seed_everything_reproduces():
    qalib.seed_everything(3)
    a = torch.randn(4), np.random.rand(2)
    qalib.seed_everything(3)
    b = torch.randn(4), np.random.rand(2)
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(ValueError):
        qalib.seed_everything(-1)
    with pytest.raises(TypeError):
        qalib.seed_everything(1.5)


def test_use_style_validates():
    qalib.use_style("talk")
    with pytest.raises(ValueError, match="context must be one of"):
        qalib.use_style("huge")


def test_the_talk_style_draws_the_notebook_figure_larger():
    """Same layout, 1.5x the pixels: nothing that fits in a notebook figure overlaps on the projector."""
    def layout_and_size(context):
        qalib.use_style(context)
        demo = Demo(_square, _plot_titled, {"x": W.FloatSlider(value=1.0, min=0.0, max=2.0)})
        positions = [ax.get_position().bounds for ax in demo._figure.axes]
        width = int.from_bytes(demo.image.value[16:20], "big")  # the PNG's pixel width
        return np.array(positions), width

    try:
        notebook, talk = layout_and_size("notebook"), layout_and_size("talk")
    finally:
        qalib.use_style("notebook")
    np.testing.assert_allclose(talk[0], notebook[0], atol=0.01)
    assert talk[1] == pytest.approx(1.5 * notebook[1], rel=0.01)


def _plot_titled(fig, r):
    ax1, ax2 = fig.subplots(1, 2)
    for ax in (ax1, ax2):
        ax.set(title="a title of some length", xlabel="an axis label", ylabel="another axis label")
    (line,) = ax1.plot(r["x"], r["y"])
    live(line)

    def update(r):
        line.set_data(r["x"], r["y"])

    return update


def _square(x):
    if x < 0:
        raise ValueError("x must be >= 0")
    return {"x": np.arange(5), "y": np.arange(5) * x}


def _plot(fig, r):
    ax = fig.add_subplot()
    ax.plot(r["x"], r["y"])


def test_demo_redraws_on_control_change():
    demo = Demo(_square, _plot, {"x": W.FloatSlider(value=1.0, min=-1, max=3)})
    first = demo.image.value
    assert demo.redraws == 1 and first[:4] == b"\x89PNG"
    demo.set(x=2.0)
    assert demo.redraws == 2 and demo.image.value != first
    assert demo.result["y"][-1] == 8.0


def test_demo_shows_a_message_for_bad_values_and_keeps_the_figure():
    demo = Demo(_square, _plot, {"x": W.FloatSlider(value=1.0, min=-1, max=3)})
    before = demo.image.value
    demo.set(x=-1.0)
    assert demo.error == "x must be >= 0" and "x must be &gt;= 0" not in demo.message.value
    assert "x must be >= 0" in demo.message.value and demo.image.value == before
    with pytest.raises(KeyError):
        demo.set(y=1)


def _titled_plot(fig, r):
    ax = fig.add_subplot()
    ax.plot(r["x"], r["y"])
    ax.set_title(f"slope {r['y'][1]:.2f}")  # a number in the title does not change the layout


def test_demo_reuses_a_layout_until_what_it_depends_on_changes():
    demo = Demo(_square, _titled_plot, {"x": W.FloatSlider(value=2.0, min=0, max=3000)})
    first = demo.image.value
    demo.set(x=1.75)  # y up to 7 instead of 8, tick labels still one character long
    assert len(demo._layouts) == 1 and demo.image.value != first  # the first layout is reused
    demo.set(x=3000.0)  # y tick labels grow to "12000": the axes must move right
    assert len(demo._layouts) == 2
    short_labels, long_labels = demo._layouts.values()
    assert long_labels[0].x0 > short_labels[0].x0
    demo.set(x=2.0)
    assert demo.image.value == first  # back to the first setting: the same picture


def _live_plot(fig, r):
    """A plot kept between redraws: the line and the title are live, the limits move only past a 1-2-5 step."""
    ax = fig.add_subplot()
    (line,) = ax.plot(r["x"], r["y"])
    live(line, ax.title)
    calls.append("plot")

    def update(r):
        calls.append("update")
        if len(r["x"]) != len(line.get_xdata()):
            return Change.FIGURE
        line.set_data(r["x"], r["y"])
        ax.set_title(f"slope {r['y'][1]:.2f}")
        return set_limits(ax, xlim=(0, 4), ylim=(0, nice_ceiling(max(r["y"].max(), 1.0))))

    update(r)
    return update


calls: list[str] = []


def _fresh_png(compute_result, positions, plot=None):
    """What plotting the result on a new figure with the given axes positions draws (no kept state)."""
    from qalib.notebook.widgets import _figure, _live_artists, _png

    fig = _figure((9.0, 3.6), 90, layout="none")
    (plot or _live_plot)(fig, compute_result)
    for ax, box in zip(fig.axes, positions):
        ax.set_position(box)
    fig.canvas.draw()
    for artist in _live_artists(fig):
        fig.draw_artist(artist)
    return _png(fig)


def test_demo_keeps_its_figure_and_redraws_only_what_changed():
    calls.clear()
    demo = Demo(_square, _live_plot, {"x": W.FloatSlider(value=1.0, min=0, max=3)}, figsize=(9.0, 3.6), dpi=90)
    fig = demo._figure
    first = demo.image.value
    positions = [ax.get_position() for ax in fig.axes]
    demo.set(x=1.2)  # y up to 4.8: same limits (0..5), a blit
    assert calls == ["plot", "update", "update"] and demo._figure is fig
    assert demo.image.value == _fresh_png(demo.result, positions)
    demo.set(x=3.0)  # y up to 12: the y limit moves to 20, the kept figure is drawn again
    assert demo._figure is fig and fig.axes[0].get_ylim() == (0, 20)
    assert demo.image.value == _fresh_png(demo.result, positions)
    demo.set(x=1.0)
    assert demo.image.value == first  # the same setting, the same picture
    assert demo._figure is fig  # plotted once, updated four times


def _two_panel_plot(fig, r):
    """Two panels; only the left one's limits follow the data, and a static label on the right changes far out."""
    left, right = fig.subplots(1, 2)
    (rising,) = left.plot(r["x"], r["y"])
    (falling,) = right.plot(r["x"], -r["y"])
    right.set(xlabel="x", ylim=(-20, 0))
    live(rising, falling)

    def update(r):
        rising.set_data(r["x"], r["y"])
        falling.set_data(r["x"], -r["y"])
        moved = set_limits(left, xlim=(0, 4), ylim=(0, nice_ceiling(max(r["y"].max(), 1.0))))
        label = "x, far out" if r["y"][1] > 2.5 else "x"
        if label != right.get_xlabel():  # a static text: only drawing the whole figure again knows its reach
            right.set_xlabel(label)
            return most(moved, Change.AXES)
        return moved

    update(r)
    return update


def test_demo_draws_again_only_the_panels_whose_limits_moved():
    demo = Demo(_square, _two_panel_plot, {"x": W.FloatSlider(value=1.0, min=0, max=3)}, figsize=(9.0, 3.6), dpi=90)
    fig = demo._figure
    left, right = fig.axes
    first = demo.image.value
    positions = [ax.get_position() for ax in fig.axes]
    drawn = []
    def spy(ax):
        draw = ax.draw

        def counted(renderer):
            if ax.get_visible():  # a hidden axes returns at once
                drawn.append(ax)
            return draw(renderer)
        ax.draw = counted

    for ax in (left, right):  # count the static draws of each panel
        spy(ax)
    # the first Panels change after a full draw draws everything and measures where each panel lies
    for x, kind, panels_drawn in ((1.2, "live", []), (2.0, "axes", [left, right]), (1.1, "panels", [left]),
                                  (2.0, "panels", [left]), (3.0, "axes", [left, right]), (1.0, "axes", [left, right])):
        drawn.clear()
        demo.set(x=x)
        assert demo.last_redraw_kind == kind and drawn == panels_drawn, (x, demo.last_redraw_kind, drawn)
        assert demo.image.value == _fresh_png(demo.result, positions, _two_panel_plot), x
    assert demo.image.value == first and demo._figure is fig


def test_demo_plots_a_new_figure_when_update_says_so():
    calls.clear()
    demo = Demo(lambda n: {"x": np.arange(n), "y": np.arange(n) * 1.0}, _live_plot,
                {"n": W.IntSlider(value=5, min=2, max=9)})
    fig = demo._figure
    demo.set(n=7)
    assert demo._figure is not fig and calls[-1] == "update"  # a new figure, plotted (and laid out) afresh
    assert len(demo._figure.axes[0].lines[0].get_xdata()) == 7


def test_demo_names_a_wrong_plot_or_update_return_value():
    with pytest.raises(TypeError, match="plot must return None or an update function"):
        Demo(_square, lambda fig, r: fig.add_subplot(), {"x": W.FloatSlider(value=1.0)})
    demo = Demo(_square, lambda fig, r: (lambda r: "axes"), {"x": W.FloatSlider(value=1.0)})
    with pytest.raises(TypeError, match="update\\(\\) must return None, Panels, Change.AXES or Change.FIGURE"):
        demo.set(x=2.0)


def test_finite_values():
    assert finite_values({"a": [1.0, np.ones(2)], "b": torch.zeros(3)})
    assert not finite_values({"a": [1.0, np.array([np.nan])]})
    assert not finite_values(torch.tensor([float("inf")]))


def test_one_thread_restores_the_thread_count_also_when_nested():
    from qalib.lab.device import one_thread

    before = torch.get_num_threads()

    @one_thread()
    def inner():
        return torch.get_num_threads()

    with one_thread():
        assert inner() == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_sweep_values_reach_every_kind_of_control():
    from qalib.tools.testing import sweep_values

    assert sweep_values(W.IntSlider(value=3, min=1, max=9), 3) == [1, 5, 9]
    assert sweep_values(W.Checkbox(value=False), 2) == [True, False]
    assert sweep_values(W.Dropdown(options=["a", "b"], value="a"), 2) == ["a", "b"]
    typed = sweep_values(W.Text(value="I rest."))
    assert typed[-1] == "I rest." and len(set(typed)) == 3 and all(t.startswith("I rest. ") for t in typed[:2])


def test_seeds_come_from_one_source_and_shift_together(monkeypatch):
    """QALIB_SEED_OFFSET moves every seed set; unset, the seeds are 0, 1, 2, ... as before."""
    monkeypatch.delenv("QALIB_SEED_OFFSET", raising=False)
    assert qalib.seeds(3) == (0, 1, 2) and qalib.seed(0) == 0
    monkeypatch.setenv("QALIB_SEED_OFFSET", "100")
    assert qalib.seeds(3) == (100, 101, 102) and qalib.seed(2) == 102
    for bad in ("-1", "x", "1.5"):
        monkeypatch.setenv("QALIB_SEED_OFFSET", bad)
        with pytest.raises(ValueError, match="QALIB_SEED_OFFSET"):
            qalib.seeds(2)
    monkeypatch.setenv("QALIB_SEED_OFFSET", "0")
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="seeds"):
            qalib.seeds(bad)


def test_scale_follows_the_device_unless_forced(monkeypatch):
    monkeypatch.delenv("QALIB_SCALE", raising=False)
    assert qalib.scale("cpu") == 1 and qalib.scale("cuda") == 4 and qalib.scale("cuda", gpu=2) == 2
    monkeypatch.setenv("QALIB_SCALE", "4")
    assert qalib.scale("cpu") == 4
    monkeypatch.setenv("QALIB_SCALE", "0")
    with pytest.raises(ValueError, match="QALIB_SCALE"):
        qalib.scale("cpu")

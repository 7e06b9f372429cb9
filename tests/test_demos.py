"""Every control of every demo, driven to both ends of its range and to random values in between:
no exception, nothing non-finite drawn, a readable message where a value makes no sense."""

import random

import ipywidgets as W
import pytest

from qalib.notebook.catalog import demo_factories
from qalib.tools.testing import finite_values, sweep_values

FACTORIES = [(stem, f) for stem, fs in demo_factories().items() for f in fs]


def _random_values(control, rng, n=3):
    values = sweep_values(control, 12)
    return [rng.choice(values) for _ in range(n)]


@pytest.mark.parametrize("stem,factory", FACTORIES, ids=[f"{s}:{f.__name__}" for s, f in FACTORIES])
def test_every_control_at_both_ends_and_random_values(stem, factory):
    rng = random.Random(0)
    demo = factory()
    assert demo.error is None, f"{factory.__name__} starts with an error: {demo.error}"
    assert finite_values(demo.result)
    for name, control in demo.controls.items():
        for value in sweep_values(control, 4) + _random_values(control, rng):
            control.value = value
            if demo.error is not None:
                assert len(demo.error) > 10 and "Traceback" not in demo.error, f"{name}={value!r}: unclear message {demo.error!r}"
            else:
                assert finite_values(demo.result), f"{factory.__name__}: {name}={value!r} produced a non-finite value"


@pytest.mark.parametrize("stem,factory", FACTORIES, ids=[f"{s}:{f.__name__}" for s, f in FACTORIES])
def test_same_settings_same_figure(stem, factory):
    """Order tolerance: coming back to a setting redraws the same picture."""
    demo = factory()
    first = demo.image.value
    movable = [(name, c, v) for name, c in demo.controls.items()
               for v in sweep_values(c, 4) if v != c.value]  # the first control that can take another value
    if not movable:
        pytest.skip("no control can take another value")
    name, control, other = movable[0]
    start = control.value
    control.value = other
    control.value = start
    assert demo.image.value == first, f"{factory.__name__}: returning {name} to {start!r} drew a different figure"


def _fresh_png(demo) -> bytes:
    """What plotting the demo's current result on a new figure, at the kept figure's axes positions, draws."""
    from qalib.notebook.widgets import _figure, _live_artists, _overlays_live, _png

    fig = _figure(demo.figsize, demo.dpi, layout="none")
    demo.plot(fig, demo.result)
    _overlays_live(fig)
    for ax, kept in zip(fig.axes, demo._figure.axes):
        ax.set_position(kept.get_position(original=True))
    fig.canvas.draw()
    for artist in _live_artists(fig):
        fig.draw_artist(artist)
    return _png(fig)


@pytest.mark.parametrize("stem,factory", FACTORIES, ids=[f"{s}:{f.__name__}" for s, f in FACTORIES])
def test_updating_in_place_draws_what_a_fresh_plot_draws(stem, factory):
    """A demo whose plot returns an update redraws by changing its live artists over a kept background.
    After any sequence of changes the picture must be exactly what plotting the result afresh draws:
    an update that forgets an artist, or a limit that should have moved, shows up here pixel for pixel."""
    demo = factory()
    if demo._figure is None:
        pytest.skip("this demo plots afresh on every change")
    for name, control in demo.controls.items():
        start = control.value
        for value in [v for v in sweep_values(control, 3) if v != start][:2] + [start]:
            control.value = value
            if demo.error is None:
                assert demo.image.value == _fresh_png(demo), f"{factory.__name__}: {name}={value!r} drew a stale figure"
                if isinstance(control, W.Text):  # a typed sentence must not redraw static parts (qalib.notebook.drawing)
                    assert demo.last_redraw_kind == "live", f"{factory.__name__}: new {name} drew {demo.last_redraw_kind}"


def test_static_markers_above_a_live_image_stay_visible_after_a_redraw():
    """The kept background is painted first and the live artists over it: a static marker (or legend) that a full
    draw paints above a live image must be drawn over it too, or every redraw hides it."""
    import matplotlib.pyplot as plt
    import numpy as np
    from qalib.notebook.drawing import live
    from qalib.notebook.widgets import Demo

    def plot(fig, level):
        ax = fig.subplots()
        im = ax.imshow(np.full((8, 8), level), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        ax.plot([4], [4], "s", ms=30, color="red")  # static, above the image (zorder 2 > 0)
        ax.set_axis_off()
        live(im)

        def update(level):
            im.set_data(np.full((8, 8), level))
        return update

    demo = Demo(lambda level: level, plot, {"level": W.FloatSlider(value=0.0, min=0, max=1)})
    demo.controls["level"].value = 1.0
    assert demo.last_redraw_kind == "live"
    import io
    from PIL import Image
    pixels = np.asarray(Image.open(io.BytesIO(bytes(demo.image.value))).convert("RGB")).reshape(-1, 3)
    red = (pixels[:, 0] > 200) & (pixels[:, 1] < 60) & (pixels[:, 2] < 60)
    assert red.sum() > 100, "the marker was painted under the live image"
    plt.close("all")


@pytest.mark.parametrize("stem,factory", FACTORIES, ids=[f"{s}:{f.__name__}" for s, f in FACTORIES])
def test_log_sliders_that_reach_thousands_read_out_without_exponents(stem, factory):
    """A FloatLogSlider reads out with '.3g' unless told otherwise: d_k = 4096 showed as 4.1e+03. One that reaches
    1000 must use an integer or a rounded decimal readout ('d', ',d', '.3r')."""
    for name, control in factory().controls.items():
        if isinstance(control, W.FloatLogSlider) and control.base ** control.max >= 1000:
            fmt = control.readout_format
            assert "g" not in fmt and "e" not in fmt, f"{factory.__name__}: {name} reads out as {fmt!r}"

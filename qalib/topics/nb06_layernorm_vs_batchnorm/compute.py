"""Notebook 06: why LayerNorm and not BatchNorm? The concepts, and the views behind the two demos.

    normalize(x, dims)            (x - mean) / std over the reduced dims (biased variance, as both norms use)
    AXES[layout][kind]            which dims LayerNorm / BatchNorm reduce for text [N, L, E] and images [N, C, H, W]
    stat_groups(shape, dims)      which statistic each element is normalised by (for the picture)
    padded_batch / padding_effect one fixed sentence normalised inside batches of padded neighbours
    sphere_geometry               LayerNorm output on the sqrt(d) sphere; RMSNorm without centring; invariances
    running_stats_trace           BatchNorm's running statistics against the batch's, train vs eval mode
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from qalib.nn.norms import LayerNorm, RMSNorm, TokenBatchNorm
from qalib.nn.validate import choice, float_in, int_in
from qalib.notebook.drawing import Change, Update, fixed_or_nice, live, most, set_limits


# dims each norm averages over. Text (N sentences, L positions, E features); images (N, C channels, H, W).
AXES = {
    "text": {"layer": (2,), "batch": (0, 1)},      # LN: per token over E; BN: per feature over N and L
    "image": {"layer": (1, 2, 3), "batch": (0, 2, 3)},  # LN: per image over C, H, W; BN: per channel over N, H, W
}


# -- which axes -----------------------------------------------------------------------------
def normalize(x: torch.Tensor, dims: tuple[int, ...], eps: float = 0.0) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps), mean and biased variance over `dims` (one statistic per remaining index)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__}")
    if not dims or any(not -x.dim() <= d < x.dim() for d in dims):
        raise ValueError(f"dims must be a non-empty tuple of axes of a {x.dim()}-d tensor, got {dims!r}")
    var, mean = torch.var_mean(x, dim=dims, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def stat_groups(shape: tuple[int, ...], dims: tuple[int, ...]) -> torch.Tensor:
    """An int tensor of `shape`: the index of the (mean, variance) pair each element is normalised with."""
    if any(not 0 <= d < len(shape) for d in dims):
        raise ValueError(f"dims must be axes of shape {shape}, got {dims!r}")
    kept = [s if i not in dims else 1 for i, s in enumerate(shape)]
    ids = torch.arange(math.prod(kept)).reshape(kept)
    return ids.expand(*shape)


def axes_summary(layout: str, shape: tuple[int, ...]) -> dict:
    """For 'text' or 'image': number of statistics and elements per statistic, for LayerNorm and BatchNorm."""
    choice("layout", layout, AXES)
    if len(shape) != (3 if layout == "text" else 4):
        raise ValueError(f"shape must have {3 if layout == 'text' else 4} dims for layout={layout!r}, got {shape}")
    out = {}
    for kind, dims in AXES[layout].items():
        groups = stat_groups(tuple(shape), dims)
        out[kind] = {"dims": dims, "n_stats": int(groups.max()) + 1, "per_stat": math.prod(shape[d] for d in dims)}
    return out


def plot_axes(fig, shapes=((3, 4, 6), (2, 3, 4, 4))):
    """Each element of a small text batch and image batch, coloured by the statistic that normalises it."""
    (n, l, e), (ni, c, h, w) = shapes
    panels = [("text [N, L, E]: LayerNorm", (n, l, e), AXES["text"]["layer"]),
              ("text [N, L, E]: BatchNorm", (n, l, e), AXES["text"]["batch"]),
              ("images [N, C, H, W]: LayerNorm", (ni, c, h, w), AXES["image"]["layer"]),
              ("images [N, C, H, W]: BatchNorm", (ni, c, h, w), AXES["image"]["batch"])]
    for k, (title, shape, dims) in enumerate(panels):
        ax = fig.add_subplot(2, 2, k + 1)
        g = stat_groups(shape, dims).reshape(shape[0] * shape[1], -1).numpy()  # rows: tokens / (image, channel)
        ax.imshow(g, cmap="viridis", aspect="auto", interpolation="nearest")
        for r in range(1, shape[0]):
            ax.axhline(r * shape[1] - 0.5, color="white", lw=2)  # boundary between sentences / images
        n_stats = int(g.max()) + 1
        ax.set_title(f"{title}\n{n_stats} (mean, var) pairs, one colour each", fontsize=9)
        ax.set_xlabel("feature E" if len(shape) == 3 else "pixel (H x W)")
        ax.set_ylabel("token (sentence by sentence)" if len(shape) == 3 else "(image, channel)")
        ax.set_xticks([]), ax.set_yticks([])


# -- padding and neighbours -----------------------------------------------------------------
def padded_batch(batch_size: int, pad_frac: float, outlier: float, d: int = 8, length: int = 10, seed: int = 0):
    """Hidden states (B, T, d) of padded sentences and keep (B, T), True at real tokens.

    Sentence 0 is the fixed one (`length` real tokens). Its neighbours are 5-`length` tokens long. Each
    sentence is its own offset plus noise (sentences differ in topic); padding positions hold one fixed
    vector, the [PAD] embedding. The batch is padded with extra columns that make up `pad_frac` of T
    (as when a batch is padded to a fixed bucket length). Neighbour 1 is multiplied by `outlier`.
    """
    int_in("batch_size", batch_size, 1, 256)
    float_in("pad_frac", pad_frac, 0.0, 0.9)
    float_in("outlier", outlier, 0.0, 100.0)
    int_in("length", length, 2, 512)
    g = torch.Generator().manual_seed(seed)
    pad_vec = torch.randn(d, generator=g)
    total = length + round(length * pad_frac / (1 - pad_frac))  # extra pad columns: pad_frac of T
    # one draw per sentence, so that sentence 0 is the same in any batch (one draw for the whole batch would not do:
    # torch's CPU randn fills a tensor 16 numbers at a time, and its last numbers depend on the tensor's size)
    draws = torch.stack([torch.randn(length + 1, d, generator=g) for _ in range(batch_size)])  # (B, length + 1, d)
    x = draws[:, :1] + draws[:, 1:]  # (B, length, d): each sentence's offset + its noise
    x = torch.cat([x, torch.zeros(batch_size, total - length, d)], dim=1)  # (B, T, d); filled with [PAD] below
    lengths = torch.randint(length // 2, length + 1, (batch_size,), generator=g)
    lengths[0] = length
    if batch_size > 1:
        x[1] = x[1] * outlier
    keep = torch.arange(total)[None] < lengths[:, None]  # (B, T)
    x = torch.where(keep[..., None], x, pad_vec)
    return x, keep


@torch.no_grad()
def normalise_three_ways(x: torch.Tensor, keep: torch.Tensor) -> dict[str, torch.Tensor]:
    """Train-mode outputs (no affine change: gamma=1, beta=0) of LayerNorm, BatchNorm and masked BatchNorm."""
    d = x.shape[-1]
    return {"LayerNorm": LayerNorm(d, eps=1e-5)(x, keep),
            "BatchNorm (pads included)": TokenBatchNorm(d, masked=False)(x, keep),
            "BatchNorm (pads masked)": TokenBatchNorm(d, masked=True)(x, keep)}


def padding_effect(batch_size: int = 16, pad_frac: float = 0.4, outlier: float = 1.0, d: int = 8, length: int = 10,
                   seed: int = 0) -> dict:
    """How much sentence 0's normalised output changes between being alone (batch size 1) and in this batch."""
    x, keep = padded_batch(batch_size, pad_frac, outlier, d, length, seed)
    inside = normalise_three_ways(x, keep)
    n = int(keep[0].sum())  # sentence 0's real tokens; alone it needs no padding
    alone = normalise_three_ways(x[:1, :n], keep[:1, :n])
    change = {k: float((inside[k][0, :n] - alone[k][0]).abs().mean()) for k in inside}
    tokens = x.reshape(-1, d)
    result = {
        "change": change,  # mean |output in batch - output alone| for the fixed sentence
        "bn_mean": tokens.mean(0).numpy(), "bn_mean_masked": tokens[keep.reshape(-1)].mean(0).numpy(),
        "own_mean": x[0, :n].mean(0).numpy(),  # what BN sees at batch size 1: the sentence's own positions
        "ln_mean": x[0, :n].mean(-1).numpy(), "ln_std": x[0, :n].std(-1, unbiased=False).numpy(),  # per token
        "pad_share": float(1 - keep.float().mean()), "batch_size": batch_size, "outlier": outlier,
    }
    if batch_size == 1:
        result["note"] = ("batch size 1: no neighbours; what still moves is the pads-included BatchNorm, "
                          "whose statistics count the padding columns")
    return result


# Axis ranges that hold what the demos' controls give, so that moving a control keeps the axes; a result beyond one
# gets a 1-2-5 step instead (fixed_or_nice). Over the controls' whole range: BatchNorm's means stay within +-2.9 except in
# batches of at most 17 sentences with an outlier of 7x or more (then +-5, 10 or 20), sentence 0's LayerNorm statistics
# within +-2.2, its change below 3.1 (the range leaves room for the label over the bar); the running-statistics trace
# within +-1.5 and the test sentence's outputs within +-2.7.
MEAN_VIEW = 3.0
LEGEND_ROOM = 1.8  # BatchNorm's means: the axis runs to 1.8x the range above 0, a strip for the legend over the lines
LN_VIEW = 2.5
CHANGE_VIEW = 4.0
TRACE_VIEW = 2.0
OUTPUT_VIEW = 3.0


def _largest(*arrays) -> float:
    """The largest |value| in any of the arrays."""
    return max(float(np.abs(a).max(initial=0.0)) for a in arrays)


def plot_padding_effect(fig, r) -> Update:
    ax1, ax3, ax2 = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    means = [ax1.plot([], [], ls, marker=marker, color=colour, label=label)[0] for ls, marker, colour, label in (
        (":", "o", "k", "sentence 0 alone"), ("-", "s", "#1b9e77", "batch, pads masked"),
        ("-", "^", "#d95f02", "batch, pads included"))]
    ax1.set(xlabel="feature", ylabel="mean BatchNorm subtracts")
    ax1.legend(fontsize=7, loc="upper right")
    (ln_mean,) = ax3.plot([], [], marker="o", color="#7570b3", label="mean")
    (ln_std,) = ax3.plot([], [], marker="s", color="#7570b3", ls="--", label="std")
    ax3.set(xlabel="position in sentence 0", ylabel="statistic over its features",
            title="LayerNorm's statistics per token\n(the same alone or in any batch)")
    ax3.legend(fontsize=7, loc="lower left")
    bars = ax2.bar(range(3), np.zeros(3), color=["#7570b3", "#d95f02", "#1b9e77"])
    numbers = [ax2.text(b.get_x() + b.get_width() / 2, 0, "", ha="center", va="bottom", fontsize=8) for b in bars]
    ax2.set_xticks(range(3), ["LayerNorm", "BN pads\nincluded", "BN pads\nmasked"])
    ax2.set(ylabel="mean |output in batch - output alone|")
    live(*means, ln_mean, ln_std, *bars, *numbers, ax1.title, ax2.title)

    def update(r) -> Change | None:
        features = np.arange(len(r["bn_mean"]))
        for line, key in zip(means, ("own_mean", "bn_mean_masked", "bn_mean")):
            line.set_data(features, r[key])
        positions = np.arange(len(r["ln_mean"]))
        ln_mean.set_data(positions, r["ln_mean"])
        ln_std.set_data(positions, r["ln_std"])
        changes = list(r["change"].values())  # LayerNorm, BN pads included, BN pads masked: the bars' order
        for bar, number, value in zip(bars, numbers, changes):
            bar.set_height(value)
            number.set_y(value)
            number.set_text(f"{value:.3g}")
        ax1.set_title(f"BatchNorm's mean per feature\n(pads: {r['pad_share']:.0%} of the batch)")
        ax2.set_title(f"Change of sentence 0's output\n({r['batch_size'] - 1} neighbours vs alone)")
        mean_view = fixed_or_nice(_largest(r["own_mean"], r["bn_mean_masked"], r["bn_mean"]), MEAN_VIEW)
        ln_view = fixed_or_nice(_largest(r["ln_mean"], r["ln_std"]), LN_VIEW)
        # the means' axis leaves MEAN_VIEW only for a small batch with a large outlier; its tick labels may then get
        # wider (-10, -20), and only a new figure lays the panels out again
        moved = set_limits(ax1, xlim=(-0.5, len(features) - 0.5), ylim=(-mean_view, LEGEND_ROOM * mean_view))
        return most(Change.FIGURE if moved else None,
                    set_limits(ax3, xlim=(-0.5, len(positions) - 0.5), ylim=(-ln_view, ln_view)),
                    set_limits(ax2, ylim=(0, fixed_or_nice(1.15 * max(changes), CHANGE_VIEW))))  # room for the top label

    update(r)
    return update


# -- the sphere ---------------------------------------------------------------------------------
@torch.no_grad()
def sphere_geometry(d: int = 64, n: int = 256, seed: int = 0) -> dict:
    """LayerNorm and RMSNorm outputs (gamma=1, beta=0) of random tokens with random scales and offsets."""
    int_in("d", d, 2, 4096)
    int_in("n", n, 1, 100_000)
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(2 * torch.randn(n, 1, generator=g))  # token norms spread over orders of magnitude
    shift = 3 * torch.randn(n, 1, generator=g)
    x = (scale * torch.randn(n, d, generator=g) + shift).double()
    ln = normalize(x, (-1,))
    rms = RMSNorm(d, eps=1e-12).double()
    r = rms(x)
    a, b = 7.3, -2.1  # any positive scale and any shift
    return {
        "d": d, "x_norm": x.norm(dim=-1).numpy(),
        "ln_norm": ln.norm(dim=-1).numpy(), "ln_mean": ln.mean(-1).numpy(),
        "rms_norm": r.norm(dim=-1).numpy(), "rms_mean": r.mean(-1).numpy(),
        "ln_scale_shift_change": float((normalize(a * x + b, (-1,)) - ln).abs().max()),
        "rms_scale_change": float((rms(a * x) - r).abs().max()),
        "rms_shift_change": float((rms(x + b) - r).abs().max()),
    }


def plot_sphere(fig, r):
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    ax1.scatter(r["x_norm"], r["ln_norm"], s=8, color="#7570b3", label="LayerNorm")
    ax1.scatter(r["x_norm"], r["rms_norm"], s=8, marker="x", color="#d95f02", label="RMSNorm")
    ax1.axhline(math.sqrt(r["d"]), color="k", ls=":", label=f"sqrt(d) = {math.sqrt(r['d']):.2f}")
    ax1.set(xscale="log", xlabel="||x|| of the input token", ylabel="||output||", ylim=(0, 1.3 * math.sqrt(r["d"])),
            title="Every token lands at radius sqrt(d)")
    ax1.legend(fontsize=7)
    ax2.hist(r["rms_mean"], bins=30, color="#d95f02", alpha=0.7, label="RMSNorm")
    ax2.axvline(0, color="#7570b3", lw=2, label="LayerNorm (all exactly 0)")
    ax2.set(xlabel="mean of the output's features", ylabel="tokens", title="Only LayerNorm centres")
    ax2.legend(fontsize=7)


# -- running statistics ---------------------------------------------------------------------------
@torch.no_grad()
def running_stats_trace(momentum: float = 0.1, train_mode: bool = True, steps: int = 60, batch_size: int = 8,
                        drift: float = 1.5, seed: int = 0) -> dict:
    """Feed a stream of padded batches through a pads-included BatchNorm in train mode, then normalise a
    fixed test sentence with the batch's statistics (train mode) or the running ones (eval mode).

    The activations' true mean drifts by `drift` over the stream (weights change during training) and
    each batch has a random share of padding, which pulls its statistics toward the [PAD] vector.
    """
    float_in("momentum", momentum, 0.0, 1.0)
    int_in("steps", steps, 1, 10_000)
    int_in("batch_size", batch_size, 1, 1024)
    g = torch.Generator().manual_seed(seed)
    d, length = 4, 10
    bn = TokenBatchNorm(d, momentum=momentum)
    pad_vec = torch.full((d,), -2.0)
    batch_mean, running_mean, true_mean = [], [], []
    for s in range(steps):
        centre = drift * s / max(steps - 1, 1)
        x = centre + torch.randn(batch_size, length, d, generator=g)
        lengths = torch.randint(2, length + 1, (batch_size,), generator=g)
        keep = torch.arange(length)[None] < lengths[:, None]
        x = torch.where(keep[..., None], x, pad_vec)
        batch_mean.append(float(x[..., 0].mean()))
        bn(x, keep)  # train mode: normalises with the batch's statistics, then updates the running ones
        running_mean.append(float(bn.running_mean[0]))
        true_mean.append(centre)
    test = drift + torch.randn(1, length, d, generator=g)  # a sentence from the end of training, no padding
    out_eval = bn.eval()(test)[0, :, 0]  # the running statistics
    out_train = bn.train()(test)[0, :, 0]  # batch size 1: the sentence's own statistics
    result = {"step": np.arange(steps), "batch_mean": np.array(batch_mean), "running_mean": np.array(running_mean),
              "true_mean": np.array(true_mean), "momentum": momentum, "train_mode": bool(train_mode),
              "out_train": out_train.numpy(), "out_eval": out_eval.numpy(),
              "gap": float((out_train - out_eval).abs().mean())}
    if momentum == 0:
        result["note"] = "momentum 0: the running statistics never move from their start (mean 0, variance 1)"
    return result


def plot_running_stats(fig, r) -> Update:
    """Left: the stream; right: the test sentence in both modes, coloured like the statistics each mode uses (the
    batch's own in train mode, the running ones in eval mode), the selected mode drawn bold."""
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    (batch,) = ax1.plot([], [], ".", color="#d95f02", ms=4, label="batch mean (pads included)")
    (running,) = ax1.plot([], [], color="#1b9e77", lw=2, label="running mean")
    (true,) = ax1.plot([], [], "k:", label="mean of the real tokens' distribution")
    ax1.set(xlabel="training step", ylabel="feature 0: mean")
    ax1.legend(fontsize=7, loc="lower right")  # an empty corner: the means stay above -1
    (train,) = ax2.plot([], [], color="#d95f02", marker="o", label="train mode: the sentence's own statistics")
    (evaluation,) = ax2.plot([], [], color="#1b9e77", marker="o", label="eval mode: the running statistics")
    ax2.set(xlabel="position in the test sentence", ylabel="BatchNorm output, feature 0")
    # made before update styles the lines, so both entries are plain; lower right stays empty (outputs >= -2.1)
    ax2.legend(fontsize=7, loc="lower right")
    live(batch, running, true, train, evaluation, ax1.title, ax2.title)

    def update(r) -> Change | None:
        batch.set_data(r["step"], r["batch_mean"])
        running.set_data(r["step"], r["running_mean"])
        true.set_data(r["step"], r["true_mean"])
        positions = np.arange(len(r["out_train"]))
        for line, key, selected in ((train, "out_train", r["train_mode"]), (evaluation, "out_eval", not r["train_mode"])):
            line.set_data(positions, r[key])
            line.set(lw=2.5 if selected else 1.0, ms=6 if selected else 3, alpha=1.0 if selected else 0.5)
        ax1.set_title(f"Batch vs running statistics (momentum {r['momentum']:.2f})")
        ax2.set_title(f"Train vs eval ({'train' if r['train_mode'] else 'eval'} bold): mean gap {r['gap']:.2f}")
        trace_view = fixed_or_nice(_largest(r["batch_mean"], r["running_mean"], r["true_mean"]), TRACE_VIEW)
        output_view = fixed_or_nice(_largest(r["out_train"], r["out_eval"]), OUTPUT_VIEW)
        return most(set_limits(ax1, xlim=(-1, len(r["step"])), ylim=(-trace_view, trace_view)),
                    set_limits(ax2, xlim=(-0.5, len(positions) - 0.5), ylim=(-output_view, output_view)))

    update(r)
    return update


# -- BatchNorm in a CNN: one mean and variance per channel, over images and locations -----------------------------
@dataclass(frozen=True)
class ConvNormShift:
    """A 3x3 convolution (circular padding) followed by a normalisation, applied to a batch of images, then again
    with the first image shifted by (dy, dx) and the others left where they were. `equivariance_error`: for that
    image, max |f(shift(x))_0 - shift(f(x)_0)| per normaliser
    ("per channel": nn.BatchNorm2d, statistics over images and locations; "per location": one mean and variance per
    (channel, row, column), over the images only). `values_per_statistic`: how many numbers each mean is taken
    over."""
    equivariance_error: dict[str, float]
    values_per_statistic: dict[str, int]


def per_location_norm(y: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Normalise (N, C, H, W) over the images only: one mean and variance per (channel, row, column)."""
    mean, var = y.mean(0, keepdim=True), y.var(0, unbiased=False, keepdim=True)   # (1, C, H, W) each
    return (y - mean) / (var + eps).sqrt()


@torch.no_grad()
def conv_norm_shift(batch: int = 8, channels: int = 4, size: int = 16, shift: tuple[int, int] = (3, 5),
                    seed: int = 0) -> ConvNormShift:
    """Does conv + norm commute with shifting one image of the batch? (Ioffe & Szegedy's "convolutional property":
    a feature is normalised the same way wherever it appears). Float64."""
    batch, channels = int_in("batch", batch, 2, 512), int_in("channels", channels, 1, 64)
    size = int_in("size", size, 3, 256)
    g = torch.Generator().manual_seed(int(seed))
    x = torch.randn(batch, 1, size, size, generator=g, dtype=torch.float64)
    conv = torch.nn.Conv2d(1, channels, 3, padding=1, padding_mode="circular").double()
    with torch.random.fork_rng():
        torch.manual_seed(int(seed))
        conv.reset_parameters()
    bn = torch.nn.BatchNorm2d(channels).double().train()      # batch statistics, per channel
    roll = lambda t: torch.roll(t, shifts=shift, dims=(2, 3))  # noqa: E731
    moved = x.clone()
    moved[:1] = roll(x[:1])                                    # only the first image moves
    err = {}
    for name, norm in (("per channel", bn), ("per location", per_location_norm)):
        err[name] = float((norm(conv(moved))[:1] - roll(norm(conv(x))[:1])).abs().max())
    return ConvNormShift(err, {"per channel": batch * size * size, "per location": batch})

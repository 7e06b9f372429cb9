"""Notebook 08: how do relative position embeddings work?

Compute functions (pure, seeded) for the score bias each relative scheme adds, the checks of each
scheme's defining property, and the two demos.

    bias_matrix("shaw", t=24, clip=4)     # what Shaw et al. add to the (T, T) scores, and the attention it gives
    toeplitz_deviation(scores)            # 0 when a (T, T) matrix depends on j - i only
    rotary_scores(q, k, t)                # R_m q . R_n k for the same q, k at every position
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import torch

from qalib.nn.positions import Rotary, alibi_slopes, relative_offsets, t5_buckets
from qalib.nn.validate import choice, int_in, sinusoid_base, sinusoid_width
from qalib.notebook.drawing import Change, Update, live, live_title, most, set_limits


METHODS = ("shaw", "relative_key_query", "t5", "rotary", "alibi")
LABELS = {"shaw": "Shaw et al. (q.a)", "relative_key_query": "Huang m4 (q.a + k.a)", "t5": "T5 buckets",
          "rotary": "rotary (RoPE)", "alibi": "ALiBi"}


def clipped_offsets(t: int, clip: int) -> torch.Tensor:
    """Shaw et al. eq. 5: clip(j - i, k) = max(-k, min(k, j - i)). -> (T, T) long, 2k+1 distinct labels at most."""
    int_in("t", t, 1, 4096)
    int_in("clip", clip, 0, 4096)
    return relative_offsets(t).clamp(-clip, clip)


def toeplitz_deviation(m: torch.Tensor) -> float:
    """Largest spread (max - min) along any diagonal of a square matrix: 0 iff m[i, j] depends on j - i only."""
    if m.dim() != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"m must be a square (T, T) matrix, got shape {tuple(m.shape)}")
    t = m.shape[0]
    spreads = [float(d.max() - d.min()) for d in (torch.diagonal(m, off) for off in range(-t + 1, t))]
    return max(spreads)


def rotary_scores(q: torch.Tensor, k: torch.Tensor, t: int, base: float = 10000.0) -> torch.Tensor:
    """S[m, n] = (R_m q) . (R_n k): the same query and key vectors placed at every position 0..T-1. -> (T, T)."""
    if q.dim() != 1 or q.shape != k.shape or q.shape[0] % 2:
        raise ValueError(f"q and k must be 1-d vectors of the same even size, got {tuple(q.shape)}, {tuple(k.shape)}")
    int_in("t", t, 1, 4096)
    rot = Rotary(q.shape[0], base)
    rq = rot.rotate(q.double().expand(1, 1, t, -1).float())[0, 0]  # (T, d)
    rk = rot.rotate(k.double().expand(1, 1, t, -1).float())[0, 0]
    return rq @ rk.T


def bias_matrix(method: str = "shaw", t: int = 24, clip: int = 4, d_head: int = 16, n_heads: int = 4, head: int = 0,
                same_content: bool = True, seed: int = 0) -> dict:
    """What one head's position scheme adds to the scaled scores, for random q, k and random position weights.

    same_content=True puts the same query and key vector at every position, so anything that is not a
    function of j - i would show up as a non-Toeplitz pattern. Rotary adds no bias term; its "bias" here
    is the change it makes: scores with rotation minus scores without.
    Returns offsets (T, T), content scores, bias, their sum, the softmax probabilities and the middle row.
    """
    choice("method", method, METHODS)
    int_in("t", t, 2, 512)
    int_in("clip", clip, 0, 512)
    int_in("n_heads", n_heads, 1, 64)
    int_in("head", head, 0, n_heads - 1)
    sinusoid_width("d_head", d_head)  # rotary turns pairs of dimensions
    g = torch.Generator().manual_seed(seed)
    rows = 1 if same_content else t
    q = torch.randn(rows, d_head, generator=g).expand(t, -1)  # (T, d_head)
    k = torch.randn(rows, d_head, generator=g).expand(t, -1)
    scale = 1 / math.sqrt(d_head)
    content = q @ k.T * scale  # (T, T)
    offsets = relative_offsets(t)
    note = ""
    if method in ("shaw", "relative_key_query"):
        table = torch.randn(2 * clip + 1, d_head, generator=g)  # w_{-k} .. w_{k}
        a = table[clipped_offsets(t, clip) + clip]  # (T, T, d_head)
        bias = torch.einsum("id,ijd->ij", q, a)
        if method == "relative_key_query":
            bias = bias + torch.einsum("jd,ijd->ij", k, a)
        bias = bias * scale
        note = f"{2 * clip + 1} learned vectors; every |j - i| >= {clip} shares the edge vector" if clip else \
            "k = 0: one vector for every pair, so the bias is constant along each row and softmax ignores it"
    elif method == "t5":
        buckets = t5_buckets(offsets, 32, 128)
        weights = torch.randn(32, generator=g)  # one learned scalar per bucket and head (shared by all layers)
        bias = weights[buckets]
        note = "T5: 32 buckets (16 per direction), exact below distance 8, log-spaced to 128; the clip slider is unused"
    elif method == "rotary":
        bias = rotary_scores(q[0], k[0], t) * scale - content if same_content else _rotary_delta(q, k, scale)
        note = "rotary adds no parameter and no bias: shown is (score with rotation) - (score without)"
    else:
        slopes = alibi_slopes(n_heads)
        bias = -slopes[head] * offsets.abs().float()
        note = f"ALiBi head {head}: slope m = {float(slopes[head]):.4g}, bias = -m |j - i| (no parameter); clip unused"
    scores = content + bias
    probs = torch.softmax(scores, dim=-1)
    mid = t // 2
    return {"method": method, "t": t, "clip": clip, "offsets": offsets, "content": content, "bias": bias,
            "scores": scores, "probs": probs, "row_offsets": offsets[mid], "row_bias": bias[mid], "note": note}


def _rotary_delta(q, k, scale):
    rot = Rotary(q.shape[-1])
    rq, rk = rot.rotate(q[None, None])[0, 0], rot.rotate(k[None, None])[0, 0]
    return (rq @ rk.T - q @ k.T) * scale


# Largest |bias| on the middle row for any method, length, clip and content of bias_demo: ALiBi's -m |j - i| with
# m = 1/4 (head 0 of 4) reaches 8 at T = 64; the random tables of the other schemes stay within 7.6 (seed 0).
ROW_BIAS_VIEW = 8.5


BIAS_MAX_T = 64  # bias_demo's longest sequence


def plot_bias(fig, r: dict) -> Update:
    """Fixed axes, so that every change redraws only the maps, the row, the clip lines and the numbers: each T x T
    map is stretched over its whole panel (query 0 at the top, key 0 at the left) and coloured relative to its
    largest value (printed above its colour bar), as a colour scale fitted to the data would colour it; the
    middle row's offset axis spans the longest T on the slider, its bias axis every method."""
    axes = fig.subplots(1, 3)
    bias = axes[0].imshow(np.zeros((1, 1)), cmap="RdBu_r", vmin=-1, vmax=1, extent=(0, 1, 1, 0), aspect="auto")
    bias_bar = fig.colorbar(bias, ax=axes[0], fraction=0.046, label="bias / max |bias|")
    probs = axes[1].imshow(np.zeros((1, 1)), cmap="viridis", vmin=0, vmax=1, extent=(0, 1, 1, 0), aspect="auto")
    axes[1].set_title("attention softmax(content + bias)")
    probs_bar = fig.colorbar(probs, ax=axes[1], fraction=0.046, label="probability / max")
    for ax in axes[:2]:
        ax.grid(False)
        ax.set(xticks=[], yticks=[], xlabel="key position j = 0 .. T-1", ylabel="query position i = 0 .. T-1")
    (row,) = axes[2].plot([], [], "o-", ms=3, color="C0")
    clips = [axes[2].axvline(0, color="0.5", ls="--", lw=1) for _ in range(2)]
    axes[2].set(xlabel="offset j - i (tokens)", ylabel="bias (logit)",
                xlim=(-BIAS_MAX_T // 2 - 1, BIAS_MAX_T // 2), ylim=(-ROW_BIAS_VIEW, ROW_BIAS_VIEW))
    # left-aligned over each colour bar: clear of the map's title, which may reach past the map
    maxima = [bar.ax.set_title("", loc="left", fontsize="small", fontweight="normal") for bar in (bias_bar, probs_bar)]
    live(bias, probs, row, *clips, axes[0].title, axes[2].title, *maxima)

    def update(r) -> None:
        lim = float(r["bias"].abs().max()) or 1.0
        top = float(r["probs"].max())
        bias.set_data(r["bias"].numpy() / lim)  # (T, T)
        probs.set_data(r["probs"].numpy() / top)
        axes[0].set_title(f"{LABELS[r['method']]}: bias added")
        axes[2].set_title(f"T = {r['t']}: middle row i = {r['t'] // 2}")
        maxima[0].set_text(f"max {lim:.3g}")
        maxima[1].set_text(f"max {top:.3g}")
        row.set_data(r["row_offsets"].numpy(), r["row_bias"].numpy())  # offsets -T//2 .. T - 1 - T//2
        for line, x in zip(clips, (-r["clip"], r["clip"])):
            line.set_xdata([x, x])
            line.set_visible(r["method"] in ("shaw", "relative_key_query"))

    update(r)
    return update


def rotary_profile(d_head: int = 32, base: float = 10000.0, start: int = 0, t: int = 64, seed: int = 0) -> dict:
    """q.k after rotation as a function of the offset n - m, for a query at `start` and at `start + 17`:
    the two curves coincide (only the offset matters). Also two curves that decay with the offset: the score of
    q = k = all ones divided by d (the mean of cos((n-m) theta_i)), and Su et al.'s sec. 3.4.3 bound (`su_bound`)."""
    sinusoid_width("d_head", d_head)  # rotary turns pairs of dimensions
    sinusoid_base("base", base)
    int_in("start", start, 0, 4096)
    int_in("t", t, 2, 1024)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(d_head, generator=g), torch.randn(d_head, generator=g)
    n = start + 17 + t
    s = rotary_scores(q, k, n, base) / math.sqrt(d_head)  # (n, n)
    offs = np.arange(t)
    first = s[start, start:start + t].numpy()
    second = s[start + 17, start + 17:start + 17 + t].numpy()
    ones = rotary_scores(torch.ones(d_head), torch.ones(d_head), t, base)[0] / d_head  # cos-sum, 1 at offset 0
    return {"offsets": offs, "first": first, "second": second, "ones": ones.numpy(), "bound": su_bound(d_head, base, t),
            "start": start,
            "max_gap": float(np.abs(first - second).max()), "d_head": d_head, "base": base}


def su_bound(d_head: int, base: float, t: int) -> np.ndarray:
    """Su et al.'s long-term decay bound (RoFormer sec. 3.4.3), relative to its value at offset 0, for offsets 0..t-1.

    By Abel summation |sum_i h_i e^{i r theta_i}| <= (max_i |h_{i+1} - h_i|) sum_j |S_j| with the partial sums
    S_j = sum_{i<j} e^{i r theta_i} at offset r; the paper plots the mean of |S_j| over the d/2 pairs. It is a bound on
    every q, k, not the score of one pair."""
    sinusoid_width("d_head", d_head)
    sinusoid_base("base", base)
    int_in("t", t, 1, 4096)
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * theta
    partial = torch.cumsum(torch.polar(torch.ones_like(angles), angles), -1).abs()  # |S_j|, j = 1 .. d/2
    mean = partial.mean(-1)
    return (mean / mean[0]).numpy()


# Largest |rotated q.k/sqrt(d)| of rotary_profile's seeded q, k over every head size and base of rotary_demo: 3.73;
# the band above it holds the legend.
ROTARY_SCORE_VIEW = 5.0


def plot_rotary(fig, r: dict) -> Update:
    """Fixed axes: the scores' range covers every head size and base of the demo, and a mean of cosines lies in
    [-1, 1], so a change redraws only the three curves and the numbers above them."""
    ax1, ax2 = fig.subplots(1, 2)
    (first,) = ax1.plot([], [], color="C0", lw=2, label="query at m")
    (second,) = ax1.plot([], [], color="C1", ls="--", label="query at m + 17")
    ax1.set(xlabel="offset n - m (tokens)", ylabel="score (logit)", ylim=(-ROTARY_SCORE_VIEW, ROTARY_SCORE_VIEW))
    ax1.legend(fontsize=8, loc="upper center", ncols=2)  # in the band no score reaches
    gap = live_title(ax1, "rotated q.k/sqrt(d)")
    (ones,) = ax2.plot([], [], color="C2", label="mean of cos(offset θ_i): q = k = 1")
    (bound,) = ax2.plot([], [], color="C3", ls="--", label="Su et al. sec. 3.4.3 bound (relative)")
    ax2.set(xlabel="offset n - m (tokens)", ylabel="relative to offset 0", ylim=(-1.05, 1.05))
    ax2.legend(fontsize=8, loc="lower left")
    sizes = live_title(ax2, "decay with distance")
    live(first, second, ones, bound)

    def update(r) -> Change | None:
        first.set_data(r["offsets"], r["first"])
        second.set_data(r["offsets"], r["second"])
        ones.set_data(r["offsets"], r["ones"])
        bound.set_data(r["offsets"], r["bound"])
        gap.set_text(f"m = {r['start']}: max gap {r['max_gap']:.1e}")
        sizes.set_text(f"d={r['d_head']}, base={r['base']:.0f}")
        span = (0, len(r["offsets"]) - 1)
        return most(set_limits(ax1, xlim=span), set_limits(ax2, xlim=span))

    update(r)
    return update


def slopes_and_buckets(n_heads: int = 8, n_buckets: int = 32, max_distance: int = 128) -> dict:
    """ALiBi's per-head slopes and T5's bucket of every offset in [-2 max_distance, 2 max_distance]."""
    int_in("n_heads", n_heads, 1, 64)
    int_in("n_buckets", n_buckets, 4, 256, even=True)  # half per direction
    exact = n_buckets // 4
    int_in("max_distance", max_distance, exact + 1, 4096)
    offsets = torch.arange(-2 * max_distance, 2 * max_distance + 1)
    return {"slopes": alibi_slopes(n_heads).numpy(), "offsets": offsets.numpy(),
            "buckets": t5_buckets(offsets, n_buckets, max_distance).numpy(), "max_distance": max_distance,
            "n_buckets": n_buckets}


ALIBI_MAX_HEADS = 32  # the heads slider's maximum
ALIBI_DISTANCE = 32  # the distances drawn, 0 .. 32 tokens


def plot_slopes_and_buckets(fig, r: dict) -> Update:
    """Fixed axes: the ALiBi bias axis reaches the steepest slope of any head count on the slider, and the T5 panel is
    drawn in units of the max distance M and the bucket count N (printed above it), so a change redraws only the
    lines, the slope list and those two numbers."""
    ax1, ax2 = fig.subplots(1, 2)
    dist = np.arange(0, ALIBI_DISTANCE + 1)
    heads = [ax1.plot(dist, np.zeros_like(dist))[0] for _ in range(max(ALIBI_MAX_HEADS, len(r["slopes"])))]
    steepest = max(float(alibi_slopes(n)[0]) for n in range(1, ALIBI_MAX_HEADS + 1)) * ALIBI_DISTANCE
    ax1.set(title="ALiBi bias per head (darkest: head 0)", xlabel="distance |j - i| (tokens)", ylabel="bias (logit)",
            xlim=(0, ALIBI_DISTANCE), ylim=(-1.05 * steepest, 0.05 * steepest))
    # the slopes, in place of a legend (a legend is drawn once, and its entries change with the head count)
    slopes = ax1.text(0.03, 0.04, "", transform=ax1.transAxes, fontsize=8, va="bottom",
                      bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.8"})
    (buckets,) = ax2.plot([], [], drawstyle="steps-mid", color="C0")
    for x in (-1, 1):
        ax2.axvline(x, color="0.5", ls="--", lw=1)
    ax2.set(xlabel="offset j - i (M = max distance)", ylabel="bucket index (N = buckets)", xlim=(-2.1, 2.1),
            ylim=(-0.05, 1.05), xticks=[-2, -1, 0, 1, 2], xticklabels=["-2M", "-M", "0", "M", "2M"],
            yticks=[0, 0.25, 0.5, 0.75, 1], yticklabels=["0", "N/4", "N/2", "3N/4", "N"])
    sizes = live_title(ax2, "T5 buckets")
    live(*heads, slopes, buckets)

    def update(r) -> Change | None:
        n = len(r["slopes"])
        if n > len(heads):
            return Change.FIGURE  # more heads than lines
        colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, n))
        for h, line in enumerate(heads):
            line.set_visible(h < n)
            if h < n:
                line.set_ydata(-r["slopes"][h] * dist)
                line.set_color(colours[h])
        shown = ", ".join(f"{m:.3g}" for m in r["slopes"][:4])
        slopes.set_text(f"{n} head{'s' * (n > 1)}: m = {shown}{', ...' * (n > 4)}")
        buckets.set_data(r["offsets"] / r["max_distance"], r["buckets"] / r["n_buckets"])
        sizes.set_text(f"N = {r['n_buckets']}, M = {r['max_distance']}")
        return None

    update(r)
    return update


def plot_gallery(fig, results: list[dict]) -> None:
    """One bias matrix per method, side by side (signed colour map centred on 0)."""
    axes = fig.subplots(1, len(results))
    for ax, r in zip(np.atleast_1d(axes), results):
        lim = float(r["bias"].abs().max()) or 1.0
        ax.imshow(r["bias"].numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set(title=LABELS[r["method"]], xlabel="key j")
        ax.set_xticks([]), ax.set_yticks([])
    np.atleast_1d(axes)[0].set_ylabel("query i")
    fig.suptitle("the bias each scheme adds to the scores (red > 0 > blue; same token everywhere)")

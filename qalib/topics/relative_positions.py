"""Notebook 08: how do relative position embeddings work?

Compute functions (pure, seeded) for the score bias each relative scheme adds, the checks of each
scheme's defining property, and the two demos. The training experiments live in
relative_positions_experiment.py.

    bias_matrix("shaw", t=24, clip=4)     # what Shaw et al. add to the (T, T) scores, and the attention it gives
    toeplitz_deviation(scores)            # 0 when a (T, T) matrix depends on j - i only
    rotary_scores(q, k, t)                # R_m q . R_n k for the same q, k at every position
"""

from __future__ import annotations

import math

import ipywidgets as W
import matplotlib
import numpy as np
import torch

from qalib.positions import Rotary, alibi_slopes, relative_offsets, t5_buckets
from qalib.widgets import Demo

METHODS = ("shaw", "relative_key_query", "t5", "rotary", "alibi")
LABELS = {"shaw": "Shaw et al. (q.a)", "relative_key_query": "Huang m4 (q.a + k.a)", "t5": "T5 buckets",
          "rotary": "rotary (RoPE)", "alibi": "ALiBi"}


def _int_in(name: str, value, lo: int, hi: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")
    return int(value)


def clipped_offsets(t: int, clip: int) -> torch.Tensor:
    """Shaw et al. eq. 5: clip(j - i, k) = max(-k, min(k, j - i)). -> (T, T) long, 2k+1 distinct labels at most."""
    _int_in("t", t, 1, 4096)
    _int_in("clip", clip, 0, 4096)
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
    _int_in("t", t, 1, 4096)
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
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    _int_in("t", t, 2, 512)
    _int_in("clip", clip, 0, 512)
    _int_in("n_heads", n_heads, 1, 64)
    _int_in("head", head, 0, n_heads - 1)
    if not isinstance(d_head, int) or d_head < 2 or d_head % 2:
        raise ValueError(f"d_head must be an even int >= 2, got {d_head!r}")
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


def plot_bias(fig, r: dict) -> None:
    axes = fig.subplots(1, 3)
    lim = float(r["bias"].abs().max()) or 1.0
    im = axes[0].imshow(r["bias"].numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
    axes[0].set(title=f"{LABELS[r['method']]}: bias added", xlabel="key position j", ylabel="query position i")
    fig.colorbar(im, ax=axes[0], fraction=0.046, label="logit")
    im = axes[1].imshow(r["probs"].numpy(), cmap="viridis", vmin=0)
    axes[1].set(title="attention softmax(content + bias)", xlabel="key position j", ylabel="query position i")
    fig.colorbar(im, ax=axes[1], fraction=0.046, label="probability")
    axes[2].plot(r["row_offsets"].numpy(), r["row_bias"].numpy(), "o-", ms=3, color="C0")
    if r["method"] in ("shaw", "relative_key_query"):
        for x in (-r["clip"], r["clip"]):
            axes[2].axvline(x, color="0.5", ls="--", lw=1)
    axes[2].set(title=f"middle row i = {r['t'] // 2}", xlabel="offset j - i (tokens)", ylabel="bias (logit)")


def bias_demo() -> Demo:
    methods = [(LABELS[m], m) for m in METHODS]
    return Demo(lambda method, clip, t, same_content: bias_matrix(method, t, clip, same_content=same_content),
                plot_bias,
                {"method": W.Dropdown(options=methods, value="shaw"),
                 "clip": W.IntSlider(value=3, min=0, max=16, description="clip k"),
                 "t": W.IntSlider(value=20, min=2, max=64, description="length T"),
                 "same_content": W.Checkbox(value=True, description="same token everywhere")},
                title="What each scheme adds to the attention scores", figsize=(11, 3.4))


def rotary_profile(d_head: int = 32, base: float = 10000.0, start: int = 0, t: int = 64, seed: int = 0) -> dict:
    """q.k after rotation as a function of the offset n - m, for a query at `start` and at `start + 17`:
    the two curves coincide (only the offset matters). Also the bound of Su et al. sec. 3.4.3: the mean
    |sum of partial sums of e^{i(n-m)theta}| that decays with distance, for q = k = all ones."""
    if not isinstance(d_head, int) or d_head < 2 or d_head % 2:
        raise ValueError(f"d_head must be an even int >= 2, got {d_head!r}")
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    _int_in("start", start, 0, 4096)
    _int_in("t", t, 2, 1024)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(d_head, generator=g), torch.randn(d_head, generator=g)
    n = start + 17 + t
    s = rotary_scores(q, k, n, base) / math.sqrt(d_head)  # (n, n)
    offs = np.arange(t)
    first = s[start, start:start + t].numpy()
    second = s[start + 17, start + 17:start + 17 + t].numpy()
    ones = rotary_scores(torch.ones(d_head), torch.ones(d_head), t, base)[0] / d_head  # cos-sum, 1 at offset 0
    return {"offsets": offs, "first": first, "second": second, "ones": ones.numpy(), "start": start,
            "max_gap": float(np.abs(first - second).max()), "d_head": d_head, "base": base}


def plot_rotary(fig, r: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(r["offsets"], r["first"], color="C0", lw=2, label=f"query at m = {r['start']}")
    ax1.plot(r["offsets"], r["second"], color="C1", ls="--", label=f"query at m = {r['start'] + 17}")
    ax1.set(title=f"rotated q.k/sqrt(d): max gap {r['max_gap']:.1e}", xlabel="offset n - m (tokens)",
            ylabel="score (logit)")
    ax1.legend(fontsize=8)
    ax2.plot(r["offsets"], r["ones"], color="C2")
    ax2.set(title=f"q = k = 1: mean cos(offset x theta_i), d={r['d_head']}, base={r['base']:.0f}",
            xlabel="offset n - m (tokens)", ylabel="score / d")


def rotary_demo() -> Demo:
    return Demo(rotary_profile, plot_rotary,
                {"d_head": W.IntSlider(value=32, min=2, max=128, step=2, description="head size d"),
                 "base": W.FloatLogSlider(value=10000.0, base=10, min=1, max=6, step=0.25, description="base"),
                 "start": W.IntSlider(value=0, min=0, max=200, description="query position m")},
                title="Rotary: the score depends on the offset only", figsize=(10, 3.3))


def slopes_and_buckets(n_heads: int = 8, n_buckets: int = 32, max_distance: int = 128) -> dict:
    """ALiBi's per-head slopes and T5's bucket of every offset in [-2 max_distance, 2 max_distance]."""
    _int_in("n_heads", n_heads, 1, 64)
    _int_in("n_buckets", n_buckets, 4, 256)
    if n_buckets % 2:
        raise ValueError(f"n_buckets must be even (half per direction), got {n_buckets}")
    exact = n_buckets // 4
    _int_in("max_distance", max_distance, exact + 1, 4096)
    offsets = torch.arange(-2 * max_distance, 2 * max_distance + 1)
    return {"slopes": alibi_slopes(n_heads).numpy(), "offsets": offsets.numpy(),
            "buckets": t5_buckets(offsets, n_buckets, max_distance).numpy(), "max_distance": max_distance,
            "n_buckets": n_buckets}


def plot_slopes_and_buckets(fig, r: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    dist = np.arange(0, 33)
    colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(r["slopes"])))
    for h, (m, c) in enumerate(zip(r["slopes"], colours)):
        ax1.plot(dist, -m * dist, color=c, label=f"head {h}: m={m:.3g}" if h < 4 else None)
    ax1.set(title="ALiBi bias per head", xlabel="distance |j - i| (tokens)", ylabel="bias (logit)")
    ax1.legend(fontsize=7)
    ax2.plot(r["offsets"], r["buckets"], drawstyle="steps-mid", color="C0")
    for x in (-r["max_distance"], r["max_distance"]):
        ax2.axvline(x, color="0.5", ls="--", lw=1)
    ax2.set(title=f"T5: {r['n_buckets']} buckets, max distance {r['max_distance']}", xlabel="offset j - i (tokens)",
            ylabel="bucket index")


def slopes_demo() -> Demo:
    return Demo(slopes_and_buckets, plot_slopes_and_buckets,
                {"n_heads": W.IntSlider(value=8, min=1, max=32, description="ALiBi heads"),
                 "n_buckets": W.IntSlider(value=32, min=4, max=64, step=2, description="T5 buckets"),
                 "max_distance": W.IntSlider(value=128, min=20, max=512, description="T5 max distance")},
                title="ALiBi slopes and T5 buckets", figsize=(10, 3.3))



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


DEMOS = [bias_demo, rotary_demo, slopes_demo]

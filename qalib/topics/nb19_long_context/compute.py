"""Notebook 19: why is BERT capped at 512 tokens, and how do sparse attention patterns get past it?

Compute functions (pure, seeded) for sparse attention patterns as masks on qalib's encoder, the reach of
information through stacked masked layers, the cost of full and banded attention, and the two demos.

    pattern_mask(33, window=2, n_global=1, n_random=0)   # (T, T) bool: which keys each query may read
    reach(mask, layers=2)                                # (T, T) bool: which positions' tokens can reach which
    hops(mask, src=1, dst=32)                            # fewest layers that carry token 1 to position 32
    sparse_model(cfg, mask)                              # a MiniBert whose every layer attends through the mask
    banded_attention(q, k, v, radius)                    # a sliding window computed in O(n w d), not O(n^2 d)
"""

from __future__ import annotations

import math

import matplotlib
import matplotlib.ticker
import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.data import CLS, IGNORE, N_SPECIAL, Batch
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert, SelfAttention
from qalib.lab.device import best_ms
from qalib.nn.validate import int_in
from qalib.notebook.drawing import Change, bar_polygons, live, live_bars, live_title, log_ticks, most, set_limits

MAX_T = 4096  # the longest pattern a demo or a cost sweep draws


# ---------------------------------------------------------------------------------------------
# Patterns as masks
# ---------------------------------------------------------------------------------------------
def pattern_mask(t: int, window: int | None = None, n_global: int = 0, n_random: int = 0, seed: int = 0) -> torch.Tensor:
    """(T, T) bool, True where query i may read key j.

    window: each query reads the keys within `window` positions on either side (Longformer's sliding window of
    size w = 2 * window); None reads every key (full attention). n_global: the first n_global positions ([CLS]
    first) read every key and are read by every query (Longformer's and BigBird's global tokens). n_random: each
    query also reads n_random keys drawn at random (BigBird), fixed by `seed`. Every query reads itself."""
    int_in("t", t, 1, MAX_T)
    int_in("n_global", n_global, 0, t)
    int_in("n_random", n_random, 0, t)
    pos = torch.arange(t)
    if window is None:
        return torch.ones(t, t, dtype=torch.bool)
    int_in("window", window, 0, MAX_T)
    mask = (pos[:, None] - pos[None, :]).abs() <= window
    if n_global:
        mask[:n_global, :] = True
        mask[:, :n_global] = True
    if n_random:
        g = torch.Generator().manual_seed(seed)
        picks = torch.rand(t, t, generator=g).argsort(dim=1)[:, :n_random]  # n_random distinct keys per query
        mask[pos[:, None].expand(-1, n_random), picks] = True
    return mask


def reach(mask: torch.Tensor, layers: int) -> torch.Tensor:
    """(T, T) bool: R[i, j] is True when the token at position j can influence position i after `layers` layers
    that each attend through `mask` (the residual path keeps each position's own token: R starts at the identity)."""
    _square(mask)
    int_in("layers", layers, 0)
    step = (mask | torch.eye(mask.shape[0], dtype=torch.bool)).float()
    r = torch.eye(mask.shape[0])
    for _ in range(layers):
        r = ((step @ r) > 0).float()
    return r.bool()


def hops(mask: torch.Tensor, src: int, dst: int, max_layers: int = 4096) -> float:
    """The fewest layers through `mask` that carry the token at `src` to position `dst`; inf when none do."""
    _square(mask)
    t = mask.shape[0]
    int_in("src", src, 0, t - 1)
    int_in("dst", dst, 0, t - 1)
    step = mask | torch.eye(t, dtype=torch.bool)
    seen = torch.zeros(t, dtype=torch.bool)
    seen[src] = True
    for layer in range(max_layers + 1):
        if seen[dst]:
            return float(layer)
        new = (step.float() @ seen.float()) > 0
        if torch.equal(new, seen):
            return math.inf
        seen = new
    return math.inf


def _square(mask: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(f"mask must be a square (T, T) bool tensor, got {getattr(mask, 'shape', type(mask))}")


def score_entries(mask: torch.Tensor) -> int:
    """The query-key scores a pattern computes: the True entries of the mask (full attention: T^2)."""
    _square(mask)
    return int(mask.sum())


# ---------------------------------------------------------------------------------------------
# The encoder with a pattern
# ---------------------------------------------------------------------------------------------
class PatternAttention(SelfAttention):
    """SelfAttention whose keys are restricted by a fixed (T_max, T_max) pattern, on top of padding (and the other
    masks the config asks for). The same weights as SelfAttention; only the mask differs."""

    pattern: torch.Tensor

    def _mask(self, keep, t_q, t_k, device):
        if t_k > self.pattern.shape[0]:
            raise ValueError(f"the attention pattern covers {self.pattern.shape[0]} positions, the input has {t_k}")
        base = super()._mask(keep, t_q, t_k, device)
        p = self.pattern[t_k - t_q:t_k, :t_k].to(device)[None, None]
        return p.expand(1, 1, t_q, t_k) if base is None else base & p


def sparse_model(cfg: MiniBertConfig, mask: torch.Tensor | None) -> MiniBert:
    """A MiniBert (weights drawn as MiniBert(cfg) draws them) whose every layer attends through `mask`, (T, T) bool
    with T >= the longest input; mask None: the plain model (full attention)."""
    model = MiniBert(cfg)
    if mask is None:
        return model
    _square(mask)
    for layer in model.layers:
        layer.attention.__class__ = PatternAttention
        layer.attention.pattern = mask.clone()
    return model


# ---------------------------------------------------------------------------------------------
# The task: the first token, read at every later position
# ---------------------------------------------------------------------------------------------
class FirstTokenTask:
    """[CLS] x_1 .. x_T on uniformly random tokens; the label at every position t >= 2 is x_1, so position t must
    fetch a token t - 1 places away. Nothing in the other tokens predicts it: chance is 1 / (vocab_size - 5)."""

    def __init__(self, vocab_size: int = 16, seq_len: int = 32) -> None:
        self.vocab_size = int_in("vocab_size", vocab_size, N_SPECIAL + 2)
        self.seq_len = int_in("seq_len", seq_len, 3)

    @property
    def chance(self) -> float:
        return 1 / (self.vocab_size - N_SPECIAL)

    def batch(self, batch_size: int, generator: torch.Generator | None = None, first: torch.Tensor | None = None) -> Batch:
        x = torch.randint(N_SPECIAL, self.vocab_size, (batch_size, self.seq_len), generator=generator)
        if first is not None:
            x[:, 0] = first
        labels = torch.full_like(x, IGNORE)
        labels[:, 1:] = x[:, :1]
        ids = torch.cat([torch.full((batch_size, 1), CLS), x], dim=1)
        labels = torch.cat([torch.full((batch_size, 1), IGNORE), labels], dim=1)
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


@torch.no_grad()
def accuracy_by_distance(model: MiniBert, task: FirstTokenTask, n: int = 512, seed: int = 12345) -> np.ndarray:
    """Held-out accuracy at each distance 1 .. T-1 from the first token (positions 2 .. T): (T - 1,)."""
    model.eval()
    batch = task.batch(n, torch.Generator().manual_seed(seed))
    device = next(model.parameters()).device
    hidden = model(batch.input_ids.to(device)).last_hidden_state[:, 2:]
    pred = model.mlm_logits(hidden).argmax(-1).cpu()
    return (pred == batch.labels[:, 2:]).float().mean(0).numpy()


@torch.no_grad()
def first_token_influence(model: MiniBert, task: FirstTokenTask, n: int = 64, seed: int = 0) -> np.ndarray:
    """Largest change of each position's output (over n sequences) when only the first token changes: (T + 1,)."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    a = task.batch(n, g).input_ids
    b = a.clone()
    b[:, 1] = N_SPECIAL + (a[:, 1] - N_SPECIAL + 1) % (task.vocab_size - N_SPECIAL)
    device = next(model.parameters()).device
    diff = model(a.to(device)).last_hidden_state - model(b.to(device)).last_hidden_state
    return diff.abs().amax(dim=(0, 2)).cpu().numpy()


# ---------------------------------------------------------------------------------------------
# Cost: full against banded attention, naive against fused
# ---------------------------------------------------------------------------------------------
def banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, radius: int) -> torch.Tensor:
    """A sliding window of ±radius computed as one, in blocks (the chunked layout Longformer and BigBird describe):
    (B, H, T, dh) each -> (B, H, T, dh). Queries go in blocks of `radius`; each block scores only the keys of its own
    block and the two beside it (3 radius keys), so time and memory grow as T * 3 radius * d, never T^2."""
    int_in("radius", radius, 1)
    b, h, t, d = q.shape
    nb = -(-t // radius)                                        # blocks of `radius` positions
    pad = nb * radius - t
    blocks = lambda x: F.pad(x, (0, 0, 0, pad)).view(b, h, nb, radius, d)
    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    side = lambda x: torch.cat([F.pad(x, (0, 0, 0, 0, 1, 0))[:, :, :-1], x, F.pad(x, (0, 0, 0, 0, 0, 1))[:, :, 1:]],
                               dim=3)                            # (B, H, nb, 3 radius, d): previous, own, next block
    kw, vw = side(kb), side(vb)
    scores = qb @ kw.transpose(-1, -2) / math.sqrt(d)          # (B, H, nb, radius, 3 radius)
    qpos = torch.arange(nb * radius).view(nb, radius, 1)
    kpos = (torch.arange(nb)[:, None, None] - 1) * radius + torch.arange(3 * radius).view(1, 1, -1)
    allowed = ((qpos - kpos).abs() <= radius) & (kpos >= 0) & (kpos < t)
    scores = scores.masked_fill(~allowed.to(q.device), float("-inf"))
    out = scores.softmax(-1) @ vw                               # (B, H, nb, radius, d)
    return out.reshape(b, h, nb * radius, d)[:, :, :t]


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v with the (T, T) score matrix stored, as the formula reads."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


@torch.no_grad()
def attention_costs(lengths, radius: int = 32, heads: int = 4, d_head: int = 32, repeats: int = 3, seed: int = 0) -> dict:
    """For each length n: score entries and best-of-`repeats` time (ms) of full attention computed naively (the
    (n, n) matrix stored), by torch's fused scaled_dot_product_attention, and a banded window of `radius`."""
    out = {k: [] for k in ("n", "full_entries", "band_entries", "naive_ms", "fused_ms", "band_ms")}
    g = torch.Generator().manual_seed(seed)
    for n in lengths:
        int_in("n", n, 1, MAX_T)
        q, k, v = (torch.randn(1, heads, n, d_head, generator=g) for _ in range(3))
        out["n"].append(n)
        out["full_entries"].append(heads * n * n)
        out["band_entries"].append(heads * score_entries(pattern_mask(n, window=radius)))
        out["naive_ms"].append(best_ms(lambda: naive_attention(q, k, v), repeats))
        out["fused_ms"].append(best_ms(lambda: F.scaled_dot_product_attention(q, k, v), repeats))
        out["band_ms"].append(best_ms(lambda: banded_attention(q, k, v, radius), repeats))
    return {key: np.asarray(val) for key, val in out.items()}


def layer_flops(n: int, d: int, d_ff: int | None = None) -> dict[str, float]:
    """Multiply-adds per encoder layer at length n, width d (BERT: d_ff = 4d): the projections q, k, v, o
    (4 n d^2), the FFN (2 n d d_ff), and the two n x n products, q k^T and P v (2 n^2 d)."""
    d_ff = 4 * d if d_ff is None else d_ff
    return {"projections": 4 * n * d * d, "ffn": 2 * n * d * d_ff, "scores": 2 * n * n * d}


# ---------------------------------------------------------------------------------------------
# Demo 1: the pattern, and how far a token's information has travelled after each layer
# ---------------------------------------------------------------------------------------------
def pattern_view(t: int = 64, window: int = 4, n_global: int = 0, n_random: int = 0, layers: int = 2,
                 seed: int = 0) -> dict:
    """The mask, and the positions that hold token 1's information after `layers` layers."""
    t = int_in("t", t, 4, 512)
    layers = int_in("layers", layers, 1, 64)
    mask = pattern_mask(t, window=window, n_global=n_global, n_random=n_random, seed=seed)
    r = reach(mask, layers)[:, 1].numpy()  # which positions the first real token reached
    return {"mask": mask.numpy(), "reached": r, "t": t, "window": window, "layers": layers, "n_global": n_global,
            "n_random": n_random, "entries": score_entries(mask), "needs": _layers_needed(hops(mask, 1, t - 1))}


def _layers_needed(h: float) -> str:
    return "never" if math.isinf(h) else f"{int(h)} layers"


def plot_pattern(fig: matplotlib.figure.Figure, view: dict):
    """The mask (left) and the positions holding token 1 (right); returns update(view), which redraws only the image,
    the bars and the titles (and a panel whose limits moved with T)."""
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
    img = ax1.imshow(view["mask"], cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
    live(img)
    ax1.set(xlabel="key j", ylabel="query i")
    title1 = live_title(ax1, "mask")
    bars = live_bars(ax2, facecolors="C0")
    ax2.axvline(1, color="C3", lw=1, ls=":")
    ax2.set(ylim=(0, 1.1), yticks=[0, 1], yticklabels=["no", "yes"], xlabel="position", ylabel="holds token 1")
    title2 = live(ax2.text(0.02, 1.02, "", transform=ax2.transAxes, fontsize="small", va="bottom"))[0]

    def update(v: dict):
        t = v["t"]
        img.set_data(v["mask"])
        img.set_extent((-0.5, t - 0.5, t - 0.5, -0.5))
        bars.set_verts(bar_polygons(np.arange(t), v["reached"].astype(float), width=1.0))
        title1.set_text(f"{v['entries']:,} of {t * t:,} scores")
        title2.set_text(f"after {v['layers']} layers {int(v['reached'].sum())} of {t} positions hold token 1; "
                        f"the last needs {v['needs']}")
        moved = most(set_limits(ax1, (-0.5, t - 0.5), (t - 0.5, -0.5)), set_limits(ax2, (-0.5, t - 0.5)))
        return None if moved is None else Change.AXES

    update(view)
    return update


# ---------------------------------------------------------------------------------------------
# Demo 2: what the score matrix costs against the rest of a layer
# ---------------------------------------------------------------------------------------------
COST_N = (64, 65536)  # the lengths the cost demo draws


def cost_view(d: int = 768, heads: int = 12, window: int = 256) -> dict:
    """Per layer, against n: multiply-adds of full and windowed scores, of the rest of the layer, and the bytes of
    one fp32 score matrix per head set (what naive attention stores)."""
    d = int_in("d", d, 16, 8192)
    heads = int_in("heads", heads, 1, 128)
    window = int_in("window", window, 1, MAX_T)
    n = np.unique(np.geomspace(*COST_N, 40).astype(int))
    rest = 4 * n * d * d + 8 * n * d * d
    full = 2.0 * n * n * d
    band = 2.0 * n * np.minimum(2 * window + 1, n) * d
    return {"n": n, "rest": rest.astype(float), "full": full, "band": band, "score_bytes": 4.0 * heads * n * n,
            "d": d, "heads": heads, "window": window,
            "crossover": 6 * d}  # 2 n^2 d = 12 n d^2 at n = 6 d


def _decades(lo: float, hi: float) -> tuple[float, float]:
    return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))


def plot_costs(fig: matplotlib.figure.Figure, view: dict):
    """Multiply-adds against n (left) and the stored scores' memory (right); returns update(view), which redraws the
    lines and titles, and a panel only when its limits cross a decade."""
    ax1, ax2 = fig.subplots(1, 2)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(*COST_N)
        log_ticks(ax, "x", [100, 1000, 10000], ["100", "1,000", "10,000"])
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.axvline(512, color="0.6", ls=":", lw=1)
    rest, = ax1.plot([], [], color="0.3", label="projections + FFN (12 n d²)")
    full, = ax1.plot([], [], color="C3", label="full scores (2 n² d)")
    band, = ax1.plot([], [], color="C0", ls="--", label="window")
    cross = ax1.axvline(1, color="C3", lw=1, ls="-.")
    mem, = ax2.plot([], [], color="C3")
    live(rest, full, band, cross, mem)
    ax1.set(xlabel="sequence length n (tokens)", ylabel="multiply-adds per layer")
    ax2.set(xlabel="sequence length n (tokens)", ylabel="MiB (fp32)")
    ax1.legend(fontsize=8, loc="upper left")
    title1, title2 = live_title(ax1, "per layer"), live_title(ax2, "stored scores")

    def update(v: dict):
        n = v["n"]
        rest.set_data(n, v["rest"])
        full.set_data(n, v["full"])
        band.set_data(n, v["band"])
        cross.set_xdata([v["crossover"]] * 2)
        mem.set_data(n, v["score_bytes"] / 2 ** 20)
        title1.set_text(f"d = {v['d']}, window ±{v['window']}; scores pass the rest at n = 6d = {v['crossover']:,}")
        title2.set_text(f"{v['heads']} heads, one sequence, one layer")
        lo = min(v["rest"].min(), v["band"].min())
        return most(set_limits(ax1, None, _decades(lo, v["full"].max())),
                    set_limits(ax2, None, _decades(v["score_bytes"].min() / 2 ** 20, v["score_bytes"].max() / 2 ** 20)))

    update(view)
    return update

"""Notebook 02: why sin AND cos in the positional encoding, why 10000, and encoding versus learned embedding.

Compute functions take sizes (or a table) and return dicts of tensors and numbers; plot functions draw such a dict
on a figure. The sinusoid
itself lives in qalib.nn.positions (Vaswani et al. 2017, sec. 3.5); nothing here re-derives it. Its base follows
qalib.nn.validate.sinusoid_base: base 1 is allowed, the first (sin p, cos p) pair repeated."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.ticker
import numpy as np
import torch

from qalib.nn.positions import (Rotary, frequencies, interleaved_to_concat, offset_matrix, sinusoidal,
                                sinusoidal_concat)
from qalib.nn.validate import int_in, sinusoid_base, sinusoid_width
from qalib.notebook.drawing import LiveTickLabels, Update, live, live_title, log_ticks, power_of_two_window


# ---------------------------------------------------------------------------------------------
# The table, any base >= 1
# ---------------------------------------------------------------------------------------------
def omegas(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """omega_i = base^(-2i/d) (float64). At base 1 every frequency is 1."""
    d, b = sinusoid_width("d_model", d_model), sinusoid_base("base", base)
    return frequencies(d, b)


def pe_table(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """qalib.nn.positions.sinusoidal in float64. -> (n, d); at base 1 every pair is the omega = 1 pair."""
    n, d, b = int_in("n_positions", n_positions, 1), sinusoid_width("d_model", d_model), sinusoid_base("base", base)
    return sinusoidal(n, d, b).double()


# ---------------------------------------------------------------------------------------------
# 1. Binary counter analogy
# ---------------------------------------------------------------------------------------------
def counter_vs_sinusoid(n_positions: int = 64, d_model: int = 16, base: float = 10000.0) -> dict:
    """Bits of p (bit j flips every 2^j steps) next to the sinusoid's pairs (pair i turns by omega_i per step).

    step_change[i] = mean ||pair_i(p+1) - pair_i(p)|| over p, measured from the table; closed form 2 sin(omega_i / 2).
    """
    n, d = int_in("n_positions", n_positions, 2, 4096), sinusoid_width("d_model", d_model)
    n_bits = max(1, math.ceil(math.log2(n)))
    p = torch.arange(n)
    bits = ((p[:, None] >> torch.arange(n_bits)[None, :]) & 1).double()  # (n, n_bits), bit 0 = fastest
    pe = pe_table(n, d, base)
    pairs = pe.view(n, d // 2, 2)
    step_change = (pairs[1:] - pairs[:-1]).norm(dim=-1).mean(0)  # (d/2,)
    w = omegas(d, base)
    return {"bits": bits, "pe": pe, "bit_periods": 2.0 ** (torch.arange(n_bits) + 1),
            "wavelengths": 2 * math.pi / w, "step_change": step_change, "step_change_expected": 2 * torch.sin(w / 2),
            "bit_flip_rate": (bits[1:] != bits[:-1]).double().mean(0)}


# ---------------------------------------------------------------------------------------------
# 2. One matrix per offset: PE(p + k) = M_k PE(p); and the sin-only counterexample
# ---------------------------------------------------------------------------------------------
def shift_check(k: int, d_model: int = 64, n_positions: int = 256, base: float = 10000.0) -> dict:
    """Apply M_k (qalib.nn.positions.offset_matrix, built without any p) to every PE(p); compare with PE(p + k)."""
    n, d = int_in("n_positions", n_positions, 2), sinusoid_width("d_model", d_model)
    k = int_in("k", k, -(n - 1), n - 1)
    pe = pe_table(n, d, base)
    m = offset_matrix(k, d, sinusoid_base("base", base))  # (d, d)
    p = torch.arange(max(0, -k), min(n, n - k))  # positions with p + k inside the table
    err = (pe[p] @ m.T - pe[p + k]).abs().amax(dim=1)  # (len(p),)
    orthogonal = (m @ m.T - torch.eye(d, dtype=torch.float64)).abs().max()
    return {"k": k, "positions": p, "error": err, "max_error": float(err.max()), "orthogonality_error": float(orthogonal)}


def sin_only_fit(k: int, d_model: int = 64, n_positions: int = 256, base: float = 10000.0) -> dict:
    """Best least-squares linear map A with S(p + k) ~ A S(p) over all p, for S = the sin half alone and for the
    full [sin, cos] table. relative_residual = ||S A - S_k|| / ||S_k||; error = per-position max abs error."""
    n, d = int_in("n_positions", n_positions, 2), sinusoid_width("d_model", d_model)
    k = int_in("k", k, -(n - 2), n - 2)
    pe = pe_table(n, d, base)
    p = torch.arange(max(0, -k), min(n, n - k))
    out = {"k": k, "positions": p}
    for name, cols in (("sin_only", slice(0, d, 2)), ("sin_cos", slice(0, d))):
        x, y = pe[p][:, cols], pe[p + k][:, cols]
        a = torch.from_numpy(np.linalg.lstsq(x.numpy(), y.numpy(), rcond=None)[0])  # (d', d'); numpy: fast when small
        resid = x @ a - y
        out[name] = {"relative_residual": float(resid.norm() / y.norm()), "error": resid.abs().amax(dim=1)}
    return out


# ---------------------------------------------------------------------------------------------
# 3. Dot products: only p - q matters; ||PE||^2 = d/2; blind to the sign of the offset
# ---------------------------------------------------------------------------------------------
def dot_product_structure(n_positions: int = 128, d_model: int = 64, base: float = 10000.0) -> dict:
    n, d = int_in("n_positions", n_positions, 3), sinusoid_width("d_model", d_model)
    pe = pe_table(n, d, base)
    gram = pe @ pe.T  # (n, n)
    offsets = torch.arange(n)
    diag_spread = torch.stack([gram.diagonal(int(k)).std(unbiased=False) for k in offsets[:-1]])  # per offset
    by_offset = torch.stack([gram.diagonal(int(k)).mean() for k in offsets])
    closed_form = torch.cos(offsets[:, None].double() * omegas(d, base)[None, :]).sum(1)  # sum_i cos(omega_i k)
    p, k = n // 2, n // 4
    return {"gram": gram, "by_offset": by_offset, "closed_form": closed_form,
            "max_diagonal_spread": float(diag_spread.max()),
            "norms_sq": gram.diagonal(), "asymmetry": float((gram - gram.T).abs().max()),
            "p": p, "k": k, "forward_backward": (float(gram[p, p + k]), float(gram[p, p - k])),
            "vector_gap": float((pe[p + k] - pe[p - k]).norm())}


def rotation_form_scores(n_positions: int = 64, d_model: int = 64, a: float = 1.0, b: float = 1.0,
                         base: float = 10000.0) -> dict:
    """Position-position scores PE(p)^T A PE(q) for A = blockdiag([[a, b], [-b, a]]), one block per pair.

    Per pair the score is a cos(omega (p - q)) + b sin(omega (p - q)): still a function of p - q only, and with
    b != 0 it differs between q = p + k and q = p - k. So W_Q^T W_K = I (a = 1, b = 0) is not the only
    translation-invariant form, and not every such form is blind to the sign of the offset."""
    n, d = int_in("n_positions", n_positions, 3), sinusoid_width("d_model", d_model)
    block = torch.tensor([[a, b], [-b, a]], dtype=torch.float64)
    pe = pe_table(n, d, base)
    s = pe @ torch.block_diag(*[block] * (d // 2)) @ pe.T  # (n, n)
    offsets = torch.arange(1 - n, n)
    w = omegas(d, base)
    closed_form = (a * torch.cos(offsets[:, None].double() * w) + b * torch.sin(offsets[:, None].double() * w)).sum(1)
    by_offset = torch.stack([s.diagonal(int(-k)).mean() for k in offsets])  # diagonal -k holds q - p = -k
    spread = max(float(s.diagonal(int(k)).std(unbiased=False)) for k in range(2 - n, n - 1))
    p, k = n // 2, n // 4
    return {"scores": s, "offsets": offsets, "by_offset": by_offset, "closed_form": closed_form,
            "max_diagonal_spread": spread, "p": p, "k": k,
            "forward_backward": (float(s[p, p + k]), float(s[p, p - k]))}


# ---------------------------------------------------------------------------------------------
# 4. The base: wavelengths, uniqueness, distance against offset
# ---------------------------------------------------------------------------------------------
def wavelengths(d_model: int = 512, base: float = 10000.0, spacing: str = "paper") -> torch.Tensor:
    """2 pi / omega_i, in positions."""
    return 2 * math.pi / frequencies(sinusoid_width("d_model", d_model), sinusoid_base("base", base), spacing)


def distance_profile(d_model: int, base: float, max_offset: int) -> torch.Tensor:
    """||PE(p + k) - PE(p)|| = sqrt(d - 2 sum_i cos(omega_i k)) for k = 0 .. max_offset (independent of p)."""
    m = int_in("max_offset", max_offset, 1)
    d = sinusoid_width("d_model", d_model)
    k = torch.arange(m + 1, dtype=torch.float64)
    return (d - 2 * torch.cos(k[:, None] * omegas(d, base)[None, :]).sum(1)).clamp(min=0).sqrt()


def _spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    rx, ry = x.argsort().argsort().double(), y.argsort().argsort().double()
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))


def base_sweep(bases=(1, 20, 100, 10000), d_model: int = 512, lengths=(64, 128, 256, 512, 1024, 2048)) -> dict:
    """For each base: nearest-distinct-position distance min_{0 < |p - q| < n} ||PE(p) - PE(q)|| at each length n,
    the offset where it happens, the positions one turn of the slowest pair takes, and the rank correlation
    between distance and offset over the longest length (1: farther always looks farther)."""
    d = sinusoid_width("d_model", d_model)
    if not bases or not lengths:
        raise ValueError("bases and lengths must be non-empty")
    lengths = [int_in("lengths", n, 2) for n in lengths]
    out = {"bases": [sinusoid_base("base", b) for b in bases], "lengths": lengths, "d_model": d, "per_base": {}}
    for b in out["bases"]:
        prof = distance_profile(d, b, max(lengths) - 1)
        nearest = [float(prof[1:n].min()) for n in lengths]
        at = [int(prof[1:n].argmin()) + 1 for n in lengths]
        out["per_base"][b] = {"profile": prof, "nearest": nearest, "nearest_offset": at, "neighbour": float(prof[1]),
                              "slowest_turn": float(2 * math.pi / omegas(d, b).min()),
                              "spearman": _spearman(torch.arange(1, len(prof)).double(), prof[1:])}
    return out


def slowest_turn_measured(n_positions: int, d_model: int, base: float) -> int:
    """First position at which the slowest pair, read from the table, has completed a full turn (sin back to >= 0
    after going negative); n_positions if it never does within the table."""
    pe = pe_table(n_positions, d_model, base)
    s = pe[:, -2]  # sin of the slowest pair
    neg = (s < 0).nonzero()
    if len(neg) == 0:
        return n_positions
    after = (s[int(neg[0]):] >= 0).nonzero()
    return int(neg[0]) + int(after[0]) if len(after) else n_positions


# ---------------------------------------------------------------------------------------------
# 5. Layouts: interleaved (paper) and [sin | cos] (tensor2tensor, fairseq)
# ---------------------------------------------------------------------------------------------
def layout_check(n_positions: int = 128, d_model: int = 64, base: float = 10000.0) -> dict:
    n, d = int_in("n_positions", n_positions, 1), sinusoid_width("d_model", d_model)
    inter, concat = sinusoidal(n, d, base), sinusoidal_concat(n, d, base)
    perm = interleaved_to_concat(d)
    w = frequencies(d, base, "t2t")
    ang = torch.arange(n, dtype=torch.float64)[:, None] * w[None, :]
    t2t = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1).float()  # tensor2tensor's own frequencies
    return {"perm": perm, "permutation_gap": float((inter[:, perm] - concat).abs().max()),
            "raw_gap": float((inter - concat).abs().max()),
            "gram_gap": float((inter @ inter.T - concat @ concat.T).abs().max()),
            "t2t_gap": float((t2t - concat).abs().max())}


# ---------------------------------------------------------------------------------------------
# 6. A real model's learned table, next to the sinusoid
# ---------------------------------------------------------------------------------------------
def offset_explained(scores: torch.Tensor) -> float:
    """The share of a (T, T) position-position matrix's off-diagonal variance that its offset j - i alone explains
    (1: it depends on the offset only). Signed offsets: i before j and i after j are kept apart."""
    t = scores.shape[0]
    offsets = torch.arange(t)[None, :] - torch.arange(t)[:, None]          # (T, T): j - i
    means = torch.stack([scores.diagonal(k).mean() for k in range(-(t - 1), t)])  # one mean per offset
    off = offsets != 0
    return 1 - float((scores - means[offsets + t - 1])[off].var() / scores[off].var())


@dataclass(frozen=True)
class PositionCriteria:
    """Three schemes against the requirements guides list for a position encoding (see position_criteria)."""
    scheme: str
    nearest_over_norm: float   # the closest two positions' distance, over the median vector norm (0: two positions collide)
    offset_explained: float    # share of the position-position scores explained by the offset alone (1: offset only)
    norm_range: tuple[float, float]  # smallest and largest vector norm over the positions it has (bounded?)
    positions: int | None      # how many positions it is defined for (None: any)


def position_criteria(table: torch.Tensor, d_rotary: int = 64, seed: int = 0) -> list[PositionCriteria]:
    """A learned (T, d) table, the sinusoid of the same shape, and rotary positions (d_rotary wide, one random q and
    k rotated to every position) against: unique vectors, scores that depend on the offset only, bounded norms, and
    how many positions each defines. For the two tables the scores are PE(i) . PE(j); for rotary (R_i q) . (R_j k)."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] < 3:
        raise ValueError(f"table must be a (T >= 3, d) tensor, got {getattr(table, 'shape', type(table))}")
    d_rotary = int_in("d_rotary", d_rotary, 2, 4096)
    if d_rotary % 2:
        raise ValueError(f"d_rotary must be even (rotary turns pairs of dimensions), got {d_rotary}")
    t, d = table.shape
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, d_rotary, generator=g, dtype=torch.float64)
    rotate = Rotary(d_rotary).double().rotate
    q_at, k_at = (rotate(v.expand(1, 1, t, d_rotary)).reshape(t, d_rotary) for v in (q, k))  # (1, 1, T, d) -> (T, d)

    def criteria(scheme, vectors, scores, positions):
        dist = torch.cdist(vectors, vectors)
        dist.fill_diagonal_(float("inf"))
        norms = vectors.norm(dim=1)
        return PositionCriteria(scheme, float(dist.min() / norms.median()), offset_explained(scores),
                                (float(norms.min()), float(norms.max())), positions)

    learned, sinus = table.detach().double(), sinusoidal(t, d).double()
    return [criteria("learned table", learned, learned @ learned.T, t),
            criteria("sinusoid", sinus, sinus @ sinus.T, None),
            criteria("rotary (relative)", q_at, q_at @ k_at.T, None)]


def position_similarity(table: torch.Tensor, max_offset: int = 128) -> dict:
    """Cosine similarity of every pair of rows of a (T, d) position table, its mean against offset (rows >= 1,
    so position 0 does not weigh in), and how far position 0 stands out."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] < 3:
        raise ValueError(f"table must be a (T >= 3, d) tensor, got {getattr(table, 'shape', type(table))}")
    t = table.shape[0]
    m = int_in("max_offset", max_offset, 1, t - 2)
    x = table.detach().double()
    norms = x.norm(dim=1)
    unit = x / norms[:, None]
    sim = unit @ unit.T  # (T, T)
    rest = sim[1:, 1:]
    by_offset = torch.stack([rest.diagonal(k).mean() for k in range(m + 1)])
    spread = torch.stack([rest.diagonal(k).std(unbiased=False) for k in range(m + 1)])
    # share of the off-diagonal similarity's variance (rows/cols >= 1) explained by the offset alone (1: sinusoid)
    offset_mean = torch.stack([rest.diagonal(k).mean() for k in range(t - 1)])
    idx = (torch.arange(t - 1)[None, :] - torch.arange(t - 1)[:, None]).abs()
    off = idx > 0  # the diagonal is 1 for any table: leave it out
    explained = 1 - float((rest - offset_mean[idx])[off].var() / rest[off].var())
    return {"sim": sim, "by_offset": by_offset, "spread": spread, "norms": norms, "offset_explained": explained,
            "norm0_over_median": float(norms[0] / norms[1:].median()), "max_norm_rest": float(norms[1:].max()),
            "cos01": float(sim[0, 1]), "adjacent_mean": float(rest.diagonal(1).mean()),
            "adjacent_min": float(rest.diagonal(1).min())}


def checkpoint_position_tensors(folder) -> dict:
    """What a checkpoint folder itself says about positions: the shape of every tensor in model.safetensors whose
    name mentions "position" (read from the file, not from a model built around it) and config.json's
    max_position_embeddings and position_embedding_type (Hugging Face's default: "absolute")."""
    from safetensors import safe_open

    folder = Path(folder)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        tensors = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys() if "position" in k}
    cfg = json.loads((folder / "config.json").read_text())
    return {"tensors": tensors, "max_position_embeddings": cfg.get("max_position_embeddings"),
            "position_embedding_type": cfg.get("position_embedding_type", "absolute")}


def nearest_distinct(table: torch.Tensor) -> float:
    """min over p != q of ||table[p] - table[q]||: 0 means two positions share one vector."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] < 2:
        raise ValueError(f"table must be a (T >= 2, d) tensor, got {getattr(table, 'shape', type(table))}")
    dist = torch.cdist(table.double(), table.double())
    return float(dist.masked_fill(torch.eye(len(table), dtype=torch.bool), float("inf")).min())


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------
def plot_counter(fig, r: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    ax1.imshow(r["bits"].T.numpy(), aspect="auto", cmap="cividis", interpolation="nearest", origin="lower")
    ax1.grid(False)
    ax2.grid(False)
    ax1.set(title="binary counter: bit j of p", xlabel="position p", ylabel="bit j (0 = fastest)")
    im = ax2.imshow(r["pe"].T.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest", origin="lower")
    ax2.set(title="sinusoid: PE(p, j)", xlabel="position p", ylabel="dimension j (0 = fastest)")
    fig.colorbar(im, ax=ax2, label="value")


def plot_sin_only(fig, r: dict) -> None:
    ax = fig.add_subplot()
    p = r["positions"].numpy()
    ax.semilogy(p, r["sin_cos"]["error"].clamp(min=1e-17).numpy(), label="sin and cos: best linear map")
    ax.semilogy(p, r["sin_only"]["error"].clamp(min=1e-17).numpy(), label="sin only: best linear map")
    ax.set(title=f"predicting PE(p + {r['k']}) linearly from PE(p)", xlabel="position p",
           ylabel="max |error| over dimensions")
    ax.legend()


def plot_dot(fig, r: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    im = ax1.imshow(r["gram"].numpy(), cmap="RdBu_r", origin="lower")
    ax1.grid(False)
    ax1.set(title="PE(p) . PE(q)", xlabel="position q", ylabel="position p")
    fig.colorbar(im, ax=ax1)
    ax2.plot(r["by_offset"].numpy(), label="measured (mean over p)")
    ax2.plot(r["closed_form"].numpy(), "--", label=r"$\sum_i \cos(\omega_i k)$")
    ax2.set(title="dot product against offset", xlabel="offset k = q - p (positions)", ylabel="PE(p) . PE(p + k)")
    ax2.legend()


def plot_bases(fig, r: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    for b, v in r["per_base"].items():
        k = np.arange(1, len(v["profile"]))
        faint = {"lw": 0.5, "alpha": 0.35, "zorder": 0} if b == 1.0 else {"lw": 1.2}  # base 1 oscillates wildly
        ax1.plot(k, v["profile"][1:].numpy(), label=f"base {b:g}", **faint)
        ax2.semilogy(r["lengths"], np.maximum(v["nearest"], 1e-6), "o-", label=f"base {b:g}")
    ax1.set(title=f"distance against offset (d = {r['d_model']})", xlabel="offset k (positions, log scale)",
            ylabel="||PE(p + k) - PE(p)||", xscale="log")
    ax2.set(title="nearest distinct position", xlabel="sequence length n", ylabel="min distance (log)", xscale="log")
    ax1.legend(fontsize="small")
    ax2.legend(fontsize="small")


def plot_position_similarity(fig, learned: dict, sinus: dict) -> None:
    axes = fig.subplots(1, 3)
    for ax, r, name in ((axes[0], learned, "learned (MiniLM)"), (axes[1], sinus, "sinusoid")):
        im = ax.imshow(r["sim"].numpy(), cmap="RdBu_r", vmin=-1, vmax=1, origin="lower")
        ax.grid(False)
        ax.set(title=f"cosine similarity: {name}", xlabel="position q", ylabel="position p")
    fig.colorbar(im, ax=axes[1], label="cosine")
    for r, name in ((learned, "learned (MiniLM)"), (sinus, "sinusoid, same d")):
        mean, sd = r["by_offset"].numpy(), r["spread"].numpy()
        k = np.arange(len(mean))
        axes[2].plot(k, mean, label=name)
        axes[2].fill_between(k, mean - sd, mean + sd, alpha=0.25)
    axes[2].set(title="similarity against offset (mean ± sd)", xlabel="offset (positions)", ylabel="cosine")
    axes[2].legend(fontsize="small")


# ---------------------------------------------------------------------------------------------
# Demos
# ---------------------------------------------------------------------------------------------
PE_DEMO_MAX_LENGTH = 512
# the offset axis: linear up to 16 positions (a few turns of the fastest pair, 2 pi each), base-2 log beyond
OFFSET_LINEAR_UP_TO = 16


def pe_compute(base: float = 10000.0, d_model: int = 64, length: int = 128) -> dict:
    n, d, b = int_in("length", length, 2, PE_DEMO_MAX_LENGTH), sinusoid_width("d_model", d_model), sinusoid_base("base", base)
    pe = pe_table(n, d, b)
    dot = (pe[0] @ pe.T) / (d / 2)  # PE(0) . PE(k), normalised; same for any starting p
    turn = 2 * math.pi / float(omegas(d, b).min())
    note = None
    if b == 1.0:
        note = "base 1: every pair turns at the same speed, so the d dimensions repeat one (sin p, cos p) pair."
    elif turn < n:
        note = f"the slowest pair completes a turn every {turn:.0f} positions, shorter than the length {n}."
    return {"pe": pe, "dot": dot, "base": b, "d_model": d, "slowest_turn": turn, "note": note}


def pe_plot(fig, r: dict) -> Update:
    """Row j of the table is drawn at height j/d .. (j+1)/d, so every width d fills the panel; positions run to the
    next power of two of the length (grey beyond it), labelled by live glyphs (qalib.notebook.drawing), so no move of
    the length draws a static part again: the offsets on the right have one axis for every length, linear near 0
    (where the fastest pairs turn) and logarithmic out to the longest length (where the slowest ones do)."""
    ax1, ax2 = fig.subplots(1, 2)
    image = ax1.imshow(np.zeros((1, 1)), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower",
                       interpolation="nearest")
    ax1.grid(False)
    ax1.set_autoscale_on(False)  # set_extent must not move the limits: update sets them
    ax1.set_facecolor("0.7")  # beyond the length; not white, which is PE = 0 in this colour map
    ax1.set(xlabel="position p (grey: beyond the length)", ylabel="dimension j / d (0 = fastest)", ylim=(0, 1))
    positions = LiveTickLabels(ax1, "x", size=matplotlib.rcParams["xtick.labelsize"], rotation=0, width_chars=3)
    position_ticks = matplotlib.ticker.MaxNLocator(nbins=5, steps=[1, 2, 5, 10], integer=True)
    sizes = live_title(ax1, "PE (blue -1, red +1)")
    (dot,) = ax2.plot([], [])
    ax2.axhline(0, color="grey", lw=0.8)
    ax2.set_xscale("symlog", base=2, linthresh=OFFSET_LINEAR_UP_TO, linscale=2)
    ticks = [0, 8, 16, 32, 64, 128, 256, PE_DEMO_MAX_LENGTH]
    ax2.set(title="PE(p) . PE(p + k) / (d/2)", xlabel=f"offset k (positions; log scale beyond {OFFSET_LINEAR_UP_TO})",
            ylabel="normalised dot product", xlim=(0, PE_DEMO_MAX_LENGTH), ylim=(-1.05, 1.05))
    log_ticks(ax2, "x", ticks, [str(t) for t in ticks])
    live(image, dot)

    def update(r) -> None:
        n, d = r["pe"].shape
        image.set_data(r["pe"].T.numpy())  # (d, n): one row per dimension
        image.set_extent((-0.5, n - 0.5, 0, 1))
        dot.set_data(np.arange(n), r["dot"].numpy())
        sizes.set_text(f"base {r['base']:.4g}, d = {d}")
        window = power_of_two_window(n, 8)
        ax1.set_xlim(-0.5, window - 0.5)  # no ticks on this axis: the limits change no static pixel
        ticks = position_ticks.tick_values(0, window - 1)
        ticks = ticks[(ticks >= 0) & (ticks <= window - 1)]
        positions.set([f"{t:.0f}" for t in ticks], positions=ticks)

    update(r)
    return update


ROTATION_D, ROTATION_N = 32, 128


@functools.lru_cache(maxsize=1)
def _rotation_table() -> torch.Tensor:
    return pe_table(ROTATION_N, ROTATION_D)  # the demo's fixed table, built once


@functools.lru_cache(maxsize=256)
def _rotation_errors(k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(positions, error of M_k, error of the best sin-only linear map) for the demo's fixed table; cached per k."""
    n = ROTATION_N
    pe = _rotation_table()
    p = torch.arange(max(0, -k), min(n, n - k))
    rotated = pe[p] @ offset_matrix(k, ROTATION_D).T  # (len(p), d)
    x, y = pe[p][:, 0::2].numpy(), pe[p + k][:, 0::2].numpy()
    a = np.linalg.lstsq(x, y, rcond=None)[0]
    sin_only = torch.from_numpy(np.abs(x @ a - y).max(axis=1))
    return p, (rotated - pe[p + k]).abs().amax(dim=1), sin_only


def rotation_compute(k: int = 5, pair: int = 2, position: int = 20) -> dict:
    n, d = ROTATION_N, ROTATION_D
    k = int_in("k", k, -(n - 2), n - 2)
    pair = int_in("pair", pair, 0, d // 2 - 1)
    p = int_in("position", position, 0, n - 1)
    if not 0 <= p + k < n:
        raise ValueError(f"position + k must lie in [0, {n - 1}] (the table has {n} rows), got {p} + {k} = {p + k}")
    pe = _rotation_table()
    m = offset_matrix(k, d)
    positions, err_rot, err_sin = _rotation_errors(k)
    w = float(omegas(d)[pair])
    cols = slice(2 * pair, 2 * pair + 2)
    return {"k": k, "pair": pair, "p": p, "omega": w, "circle": pe[:, cols], "start": pe[p, cols],
            "rotated": (m @ pe[p])[cols], "target": pe[p + k, cols], "positions": positions,
            "error_rotation": err_rot, "error_sin_only": err_sin,
            "note": f"|M_k PE(p) - PE(p+k)| at p = {p}: max {float((m @ pe[p] - pe[p + k]).abs().max()):.1e}"}


def rotation_plot(fig, r: dict) -> Update:
    """Fixed axes (the circle's square; every position of the demo's table), so a change redraws only the points,
    the arrow, the markers, the two error curves, the position line and the titles."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.4])
    circle = ax1.scatter(*r["circle"].numpy().T, c=np.arange(len(r["circle"])), cmap="viridis", s=8)
    arrow = ax1.annotate("", xy=(0, 0), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": "C3", "lw": 2})
    (start,) = ax1.plot([], [], "o", color="C3", label="PE(p)")
    (target,) = ax1.plot([], [], "o", ms=12, mfc="none", color="k", label="PE(p + k)")
    (rotated,) = ax1.plot([], [], "x", color="C1", ms=9, label="M_k PE(p)")
    ax1.set(xlabel="sin(ωp)", ylabel="cos(ωp)", xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), aspect="equal")
    ax1.legend(fontsize="x-small", loc="lower left")
    (rotation_error,) = ax2.plot([], [], label="sin+cos: M_k (rotations)")
    (sin_only_error,) = ax2.plot([], [], label="sin only: best linear map")
    position = ax2.axvline(r["p"], color="grey", lw=0.8)
    ax2.set(xlabel="position p", ylabel="log10 max |error|", xlim=(0, ROTATION_N - 1), ylim=(-17.5, 0.5))
    offset = live_title(ax2, "error of predicting PE(p + k) at every p")
    # a fixed place (a legend is drawn once): the empty band between the curves at every k of the demo
    # (sin only: log10 error >= -1.4; rotations: <= -7.1, or both <= -14 at k = 0)
    ax2.legend(fontsize="small", loc="center right", bbox_to_anchor=(1, 0.74))
    live(circle, arrow, start, target, rotated, rotation_error, sin_only_error, position, ax1.title)

    def update(r) -> None:
        circle.set_offsets(r["circle"].numpy())
        s, t, x = r["start"].numpy(), r["target"].numpy(), r["rotated"].numpy()
        arrow.xy, arrow.xyann = x, s
        start.set_data([s[0]], [s[1]])
        target.set_data([t[0]], [t[1]])
        rotated.set_data([x[0]], [x[1]])
        ax1.set_title(f"pair {r['pair']}: turn by ωk = {r['omega'] * r['k']:.3g} rad")
        p = r["positions"].numpy()
        rotation_error.set_data(p, np.log10(r["error_rotation"].clamp(min=1e-17).numpy()))
        sin_only_error.set_data(p, np.log10(r["error_sin_only"].clamp(min=1e-17).numpy()))
        position.set_xdata([r["p"], r["p"]])
        offset.set_text(f"k = {r['k']}")

    update(r)
    return update

"""Notebook 09: attention as a Markov chain, the Gaussian-kernel identity, and rank collapse.

Compute functions (tensors in, dicts out, seeded, float64 where round-off matters) and plot functions
`plot_x(fig, result)`.

    P = softmax(Q K^T / sqrt(d))          rows sum to 1: a transition matrix (Coifman & Lafon 2006)
    exp(q.k/s) = exp(-|q-k|^2/2s) exp(|q|^2/2s) exp(|k|^2/2s)   exact; the query factor cancels in each row
    pure attention stacks lose rank doubly exponentially with depth (Dong, Cordonnier, Loukas 2021, Thm 2.2)
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.device import one_thread
from qalib.nn.validate import float_in, int_in, seed_list
from qalib.notebook.drawing import Change, Update, bar_polygons, limits_with_margins, live, live_bars, log_ticks, set_limits


FLOAT_FLOOR = 1e-16  # float64 round-off: a mean-removed ratio below this is "fully collapsed"
MARKOV_STEPS = 128  # markov_demo's largest t; its distance curve always runs this far, so its axis stays put
COLLAPSE_DEPTH = 32  # collapse_demo's largest depth: its layer axis always spans 0..32
COLLAPSE_TOKENS = COLLAPSE_DIM = 32  # collapse_demo's stack: n tokens of width d, hence effective rank <= 32
LOG_AXIS_TICKS = (1e-16, 1e-12, 1e-8, 1e-4, 1.0)  # the log axes span 16 decades: one labelled tick every 4


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
def _matrix(name: str, x, square: bool = False) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or (square and x.shape[0] != x.shape[1]):
        kind = "square (n, n)" if square else "(n, d)"
        raise ValueError(f"{name} must be a {kind} tensor, got {getattr(x, 'shape', type(x))}")
    return x.double()


# ---------------------------------------------------------------------------------------------
# Tokens on the LayerNorm sphere, the kernel identity, the transition matrix
# ---------------------------------------------------------------------------------------------
def sphere_tokens(n: int = 24, d: int = 16, n_clusters: int = 3, spread: float = 0.5, seed: int = 0) -> torch.Tensor:
    """(n, d) float64 tokens after a LayerNorm without gain and bias: every row has mean 0 and norm sqrt(d).
    Rows are drawn around `n_clusters` random centres (noise std `spread`), sorted by cluster."""
    n, d = int_in("n", n, 2, 512), int_in("d", d, 2, 4096)
    n_clusters = int_in("n_clusters", n_clusters, 1, n)
    spread = float_in("spread", spread, 0.0, 100.0)
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(n_clusters, d, generator=g, dtype=torch.float64)
    label = torch.arange(n) * n_clusters // n  # 0 0 .. 1 1 .. 2 2: contiguous blocks
    x = centres[label] + spread * torch.randn(n, d, generator=g, dtype=torch.float64)
    return F.layer_norm(x, (d,), eps=1e-12)


def kernel_identity(q: torch.Tensor, k: torch.Tensor, s: float) -> dict:
    """Both sides of exp(q.k/s) = exp(-|q-k|^2/2s) * exp(|q|^2/2s) * exp(|k|^2/2s) for every pair (float64)."""
    q, k = _matrix("q", q), _matrix("k", k)
    s = float_in("s", s, 1e-6, 1e6)
    lhs = torch.exp(q @ k.T / s)                                                   # (n_q, n_k)
    gauss = torch.exp(-torch.cdist(q, k).pow(2) / (2 * s))                         # Gaussian kernel, bandwidth s
    q_fac, k_fac = torch.exp(q.pow(2).sum(-1) / (2 * s)), torch.exp(k.pow(2).sum(-1) / (2 * s))
    return {"lhs": lhs, "gauss": gauss, "q_factor": q_fac, "k_factor": k_fac,
            "rhs": gauss * q_fac[:, None] * k_fac[None, :]}


def transition_matrix(x: torch.Tensor, temperature: float = 1.0, tied: bool = True, seed: int = 0) -> torch.Tensor:
    """(n, n) float64 P = softmax(q k^T / (sqrt(d) * temperature)).
    tied: q = k = x (the seed article's Q = K setting, a symmetric kernel). Otherwise separate random
    projections W_q != W_k with N(0, 1/d) entries, as in a real head."""
    x = _matrix("x", x)
    temperature = float_in("temperature", temperature, 1e-3, 1e3)
    d = x.shape[1]
    if tied:
        q = k = x
    else:
        g = torch.Generator().manual_seed(seed + 1000)
        w_q, w_k = (torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d) for _ in range(2))
        q, k = x @ w_q, x @ w_k
    return torch.softmax(q @ k.T / (math.sqrt(d) * temperature), dim=-1)


def stationary(p: torch.Tensor) -> torch.Tensor:
    """pi with pi P = pi, sum 1: the left eigenvector of the eigenvalue of largest modulus (1 for a stochastic P).
    A softmax matrix has every entry > 0, so pi is unique and positive (Perron-Frobenius)."""
    p = _matrix("p", p, square=True)
    if (p < 0).any() or not torch.allclose(p.sum(-1), torch.ones(p.shape[0], dtype=p.dtype), atol=1e-8):
        raise ValueError("p must be row-stochastic: entries >= 0 and every row summing to 1")
    vals, vecs = torch.linalg.eig(p.T)
    pi = vecs[:, vals.abs().argmax()].real
    pi = pi / pi.sum()
    return pi.clamp_min(0) / pi.clamp_min(0).sum()


@one_thread()
def markov_summary(p: torch.Tensor, t_max: int = 64) -> dict:
    """Powers of P: pi, the second-largest eigenvalue modulus |lambda_2|, and for t = 0..t_max the worst-row
    total-variation distance max_i TV(P^t[i], pi), the mean row entropy of P^t (nats) and the worst-row divergence
    max_i KL(P^t[i] || pi) (nats). The KL never rises from one t to the next (the data-processing inequality, since
    pi P = pi); the entropy can fall at some t when pi is not uniform."""
    p = _matrix("p", p, square=True)
    t_max = int_in("t_max", t_max, 0, 100_000)
    pi = stationary(p)
    mods = torch.linalg.eigvals(p).abs().sort(descending=True).values
    lam2 = float(mods[1]) if len(mods) > 1 else 0.0
    log_pi = pi.clamp_min(torch.finfo(p.dtype).tiny).log()
    pt, tv, ent, kl = torch.eye(p.shape[0], dtype=p.dtype), [], [], []
    for _ in range(t_max + 1):
        tv.append(float(0.5 * (pt - pi).abs().sum(-1).max()))
        ent.append(float(-(torch.special.xlogy(pt, pt)).sum(-1).mean()))
        kl.append(float((torch.special.xlogy(pt, pt) - pt * log_pi).sum(-1).max()))  # sum_j P_ij ln(P_ij / pi_j)
        pt = pt @ p
    return {"pi": pi.numpy(), "lam2": lam2, "t": np.arange(t_max + 1), "tv": np.array(tv), "entropy": np.array(ent),
            "kl": np.array(kl), "entropy_pi": float(-(torch.special.xlogy(pi, pi)).sum())}


def matrix_power(p: torch.Tensor, t: int) -> torch.Tensor:
    p = _matrix("p", p, square=True)
    return torch.linalg.matrix_power(p, int_in("t", t, 0, 100_000))


# ---------------------------------------------------------------------------------------------
# Rank collapse: measures and a random-weight stack
# ---------------------------------------------------------------------------------------------
def _token_matrices(h) -> torch.Tensor:
    if not isinstance(h, torch.Tensor) or h.dim() < 2:
        raise ValueError(f"h must be a (..., T, d) tensor, got {getattr(h, 'shape', type(h))}")
    return h.double()


def collapse_ratios(h: torch.Tensor) -> torch.Tensor:
    """(...): ||h - 1 mean(h)||_F / ||h||_F of each (T, d) matrix, the mean taken over the token axis (-2).
    1 for tokens with mean 0, 0 when every token is the same vector (rank-1 'collapse')."""
    h = _token_matrices(h)
    res = (h - h.mean(-2, keepdim=True)).flatten(-2).norm(dim=-1)
    return res / h.flatten(-2).norm(dim=-1).clamp_min(1e-300)


def collapse_ratio(h: torch.Tensor) -> float:
    """collapse_ratios averaged over any leading batch axes."""
    return float(collapse_ratios(h).mean())


def effective_ranks(h: torch.Tensor) -> torch.Tensor:
    """(...): exp(entropy of the normalised singular values) of each (T, d) matrix (Roy & Vetterli 2007):
    1 for a rank-1 matrix, min(T, d) for a flat spectrum."""
    s = torch.linalg.svdvals(_token_matrices(h))
    p = s / s.sum(-1, keepdim=True).clamp_min(1e-300)
    return torch.exp(-(torch.special.xlogy(p, p)).sum(-1))


def effective_rank(h: torch.Tensor) -> float:
    """effective_ranks averaged over any leading batch axes."""
    return float(effective_ranks(h).mean())


@functools.lru_cache(maxsize=1024)
def _layer_weights(seed: int, layer: int, d: int) -> tuple:
    """Random weights of one layer, N(0, 1/fan_in): W_q, W_k, W_v, W_o (d x d) and an MLP d -> 4d -> d.
    Seeded per (seed, layer), so a deeper stack starts with the same layers as a shallower one."""
    g = torch.Generator().manual_seed(seed * 100_003 + layer)
    r = lambda a, b: torch.randn(a, b, generator=g, dtype=torch.float64) / math.sqrt(a)  # noqa: E731
    return r(d, d), r(d, d), r(d, d), r(d, d), r(d, 4 * d), r(4 * d, d)


@one_thread()
def attention_stack(depth: int = 12, residual: bool = False, mlp: bool = False, layer_norm: bool = False,
                    n: int = 32, d: int = 64, n_heads: int = 4, qk_gain: float = 1.0, seed: int = 0) -> dict:
    """Run random tokens (n, d) through `depth` random multi-head attention layers (float64) and return the
    collapse ratio and the effective rank after each layer (index 0 = input). Each layer is
    x <- [x +] MHA(x), then optional LayerNorm, then optional [x +] MLP(x) and LayerNorm (post-norm, as BERT)."""
    depth = int_in("depth", depth, 1, 256)
    n, d = int_in("n", n, 2, 1024), int_in("d", d, 2, 1024)
    n_heads = int_in("n_heads", n_heads, 1, d)
    if d % n_heads:
        raise ValueError(f"d ({d}) must be divisible by n_heads ({n_heads})")
    qk_gain = float_in("qk_gain", qk_gain, 0.0, 100.0)
    dh = d // n_heads
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(10_000 + seed), dtype=torch.float64)
    states = [x]
    for layer in range(depth):
        w_q, w_k, w_v, w_o, w_1, w_2 = _layer_weights(seed, layer, d)
        q, k, v = ((x @ w).view(n, n_heads, dh).transpose(0, 1) for w in (w_q * qk_gain, w_k, w_v))  # (H, n, dh)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)                          # (H, n, n)
        a = (p @ v).transpose(0, 1).reshape(n, d) @ w_o
        x = x + a if residual else a
        if layer_norm:
            x = F.layer_norm(x, (d,))
        if mlp:
            f = F.gelu(x @ w_1) @ w_2
            x = x + f if residual else f
            if layer_norm:
                x = F.layer_norm(x, (d,))
        states.append(x)
    states = torch.stack(states)  # (depth + 1, n, d): measured in one batched call, 3x quicker than layer by layer
    return {"layer": np.arange(depth + 1), "ratio": collapse_ratios(states).numpy(),
            "erank": effective_ranks(states).numpy()}


def collapse_sweep(depth: int = 12, seeds=range(3), **variants) -> dict:
    """{variant name: {"ratio": (n_seeds, depth+1), "erank": ...}} for named keyword dicts of attention_stack."""
    seeds = seed_list("seeds", seeds)
    if not variants:
        raise ValueError("variants must be non-empty")
    out = {"layer": np.arange(depth + 1), "seeds": seeds, "variants": {}}
    for name, kw in variants.items():
        runs = [attention_stack(depth=depth, seed=s, **kw) for s in seeds]
        out["variants"][name] = {key: np.stack([r[key] for r in runs]) for key in ("ratio", "erank")}
    return out


def log_drops(ratio: np.ndarray) -> np.ndarray:
    """Per-layer drop of ln(ratio): constant for an exponential decay, growing for a doubly exponential one."""
    r = np.maximum(np.asarray(ratio, dtype=float), 1e-300)
    return -np.diff(np.log(r), axis=-1)


def averaging_walk(p: torch.Tensor, x: torch.Tensor, t_max: int = 32) -> dict:
    """Two readings of the chain: the walker's distribution P^t e_i approaches pi (its KL to pi never rises), while
    the tokens updated by the expectation, x <- P x, contract towards one point (spread falls)."""
    p, x = _matrix("p", p, square=True), _matrix("x", x)
    t_max = int_in("t_max", t_max, 1, 10_000)
    spread, cur = [], x
    for _ in range(t_max + 1):
        spread.append(float((cur - cur.mean(0)).pow(2).sum(-1).mean()))  # mean squared distance to the centroid
        cur = p @ cur
    chain = markov_summary(p, t_max)
    return {"t": np.arange(t_max + 1), "spread": np.array(spread), "entropy": chain["entropy"], "kl": chain["kl"]}


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------
def _seed_bands(variant: dict) -> dict:
    """{"ratio" | "erank": (centre, lowest, highest) per layer over the seeds}: the collapse ratio's geometric mean
    (floored at float64 round-off, so that a fully collapsed seed does not give log 0) and the effective rank's mean."""
    r = np.maximum(variant["ratio"], FLOAT_FLOOR)
    e = variant["erank"]
    return {"ratio": (np.exp(np.log(r).mean(0)), r.min(0), r.max(0)), "erank": (e.mean(0), e.min(0), e.max(0))}


def plot_markov_powers(fig, p: torch.Tensor, ts=(1, 4, 16, 64)) -> None:
    """P^t as heatmaps for a few t: diffusion over the token graph."""
    axes = fig.subplots(1, len(ts))
    for ax, t in zip(axes, ts):
        im = ax.imshow(matrix_power(p, t).numpy(), cmap="viridis", vmin=0)
        ax.set(title=f"P^{t}", xlabel="to token j", ylabel="from token i" if t == ts[0] else "")
        ax.grid(False)
    fig.colorbar(im, ax=axes, label="probability", shrink=0.8)


def plot_collapse(fig, sweep: dict, title: str = "") -> None:
    """Collapse ratio (log) and effective rank per layer: mean over seeds, band = min..max."""
    ax1, ax2 = fig.subplots(1, 2)
    for i, (name, v) in enumerate(sweep["variants"].items()):
        for ax, (centre, lo, hi) in zip((ax1, ax2), _seed_bands(v).values()):
            ax.plot(sweep["layer"], centre, "-o", ms=3, color=f"C{i}", label=name)
            ax.fill_between(sweep["layer"], lo, hi, color=f"C{i}", alpha=0.2)
    ax1.axhline(FLOAT_FLOOR, color="0.5", ls=":", lw=1)
    ax1.set(yscale="log", ylim=(FLOAT_FLOOR / 3, 2), xlabel="layer", ylabel="||X - 1 mean|| / ||X||  (log)",
            title=title or f"Rank collapse ({len(sweep['seeds'])} seeds, band = min..max)")
    log_ticks(ax1, "y", LOG_AXIS_TICKS)
    ax2.set(xlabel="layer", ylabel="effective rank of X", ylim=(0, None), title="Effective rank (exp entropy of SVs)")
    ax1.legend(fontsize=7)


# ---------------------------------------------------------------------------------------------
# Demo 1: temperature and t -> P^t and its stationary distribution
# ---------------------------------------------------------------------------------------------
@one_thread()
def markov_demo_compute(temperature: float = 1.0, t: int = 8, kernel: str = "Q = K = X (symmetric)") -> dict:
    tied = kernel.startswith("Q = K")
    x = sphere_tokens(24, 16, 3, 0.6, seed=0)
    p = transition_matrix(x, temperature, tied=tied)
    summary = markov_summary(p, t_max=max(MARKOV_STEPS, t))
    pt = matrix_power(p, t)
    note = ""
    if summary["lam2"] > 1 - 1e-6:
        note = f"|λ2| = {summary['lam2']:.8f}: at this temperature the chain barely moves; π is reached only after ~1/(1-|λ2|) steps"
    elif tied:
        deg = torch.exp(x @ x.T / (4.0 * temperature)).sum(-1)  # symmetric kernel: pi is proportional to the degree
        note = f"symmetric kernel: π ∝ row sums of exp(x·x'/(τ√d)) (max error {np.abs(summary['pi'] - (deg / deg.sum()).numpy()).max():.1e})"
    return {"pt": pt.numpy(), "row0": pt[0].numpy(), "t_now": t, "temperature": temperature, "kernel": kernel,
            **summary, "note": note}


# plot_markov_demo's legends are static, so the live curves would be drawn over them: they sit in room left above
# the largest value the axes can show (probabilities: 35% more; distances, at most 1: 5 more decades)
LEGEND_ROOM = 1.35


def plot_markov_demo(fig, r) -> Update:
    """Fixed axes but one coarse step (Change.AXES): the probability axis shows 0..0.2 while every probability shown
    is <= 0.2 (from a few steps on, at all but low temperatures), else 0..1. The steps axis spans the slider's range
    (the summary always runs that far). The bars are one collection of rectangles: 24 bar patches take ~20 ms to
    draw one by one."""
    ax1, ax2, ax3 = fig.subplots(1, 3)
    n = len(r["pi"])
    tokens, ticks = np.arange(n), np.arange(0, n, 8)
    # no colour bar: the middle panel gives the numbers; the colours span 0..max of P^t (set in update)
    image = ax1.imshow(np.zeros((n, n)), cmap="viridis", vmin=0, vmax=1)
    ax1.set(xlabel="to token j", ylabel="from token i", xticks=ticks, yticks=ticks)
    ax1.grid(False)
    (walker,) = ax2.plot(tokens, np.zeros(n), "o-", ms=3, color="C0", label="row 0 of P^t")
    bars = live_bars(ax2, facecolors="0.7", label="stationary π")
    ax2.set(title="Walker from token 0 vs π", xlabel="token j", ylabel="probability", xticks=ticks, xlim=(-1, n))
    (tv,) = ax3.semilogy([], [], color="C1", label="max_i TV(P^t[i], π)")
    (rate,) = ax3.semilogy([], [], "--", color="0.4", label="|λ2|^t")
    (now,) = ax3.plot([0, 0], [1e-17, 1], color="C0", lw=1)  # the current t, up to 1: not across the legend
    ax3.set(xlabel="steps t", ylabel="total variation (log)", xlim=limits_with_margins(0, MARKOV_STEPS),
            ylim=(1e-17, 1e5))
    log_ticks(ax3, "y", LOG_AXIS_TICKS)  # the ticks stop at 1: above is the legend's room
    for ax in (ax2, ax3):
        ax.legend(fontsize=7, loc="upper right")
    live(image, walker, tv, rate, now, ax1.title, ax3.title)

    def update(r) -> Change | None:
        image.set_data(r["pt"])
        image.set_clim(0, r["pt"].max())
        ax1.set_title(f"P^{r['t_now']}, τ = {r['temperature']:.3g} (bright = likely)")
        bars.set_verts(bar_polygons(tokens, r["pi"]))
        walker.set_ydata(r["row0"])
        steps = r["t"].astype(float)
        tv.set_data(steps, np.maximum(r["tv"], 1e-17))
        rate.set_data(steps, np.maximum(r["lam2"] ** steps, 1e-17))
        now.set_xdata([r["t_now"], r["t_now"]])
        ax3.set_title(f"Distance to π, |λ2| = {r['lam2']:.3f}")
        top = 0.2 if max(r["pi"].max(), r["row0"].max()) <= 0.2 else 1.0
        ax2.set_yticks(np.linspace(0, top, 5))  # no tick above the largest probability: above is the legend's room
        return set_limits(ax2, ylim=(0, LEGEND_ROOM * top))

    update(r)
    return update


# ---------------------------------------------------------------------------------------------
# Demo 2: depth and residual on/off -> the collapse curve
# ---------------------------------------------------------------------------------------------
def collapse_demo_compute(depth: int = 12, residual: bool = False, mlp: bool = False, layer_norm: bool = False,
                          qk_gain: float = 1.0) -> dict:
    sweep = collapse_sweep(depth, seeds=range(3), current=dict(residual=residual, mlp=mlp, layer_norm=layer_norm,
                                                                n=COLLAPSE_TOKENS, d=COLLAPSE_DIM, qk_gain=qk_gain))
    v = sweep["variants"].pop("current")
    name = " + ".join(["attention"] + [s for s, on in (("MLP", mlp), ("LayerNorm", layer_norm)) if on])
    name += ", residual" if residual else ", no residual"
    sweep["variants"][name] = v
    last = v["ratio"][:, -1]
    note = "the ratio reached float64 round-off (1e-16): every token is the same vector" if last.max() < 1e-14 else ""
    return {**sweep, "last_ratio": last, "note": note}


def plot_collapse_demo(fig, r) -> Update:
    """plot_collapse for the demo's one variant, updated in place on fixed axes: the layers span the depth slider's
    range, the rank 0..min(n, d). The variant's name is the left title (a legend would be static)."""
    ax1, ax2 = fig.subplots(1, 2)
    curves = {}
    for ax, key in ((ax1, "ratio"), (ax2, "erank")):
        (line,) = ax.plot([], [], "-o", ms=3, color="C0")
        curves[key] = line, ax.fill_between([0, 1], [0, 0], [0, 0], color="C0", alpha=0.2)
        live(*curves[key])
        ax.set_xlim(limits_with_margins(0, COLLAPSE_DEPTH))
    ax1.axhline(FLOAT_FLOOR, color="0.5", ls=":", lw=1)
    ax1.set(yscale="log", ylim=(FLOAT_FLOOR / 3, 2), xlabel="layer", ylabel="||X - 1 mean|| / ||X||  (log)")
    log_ticks(ax1, "y", LOG_AXIS_TICKS)
    ax2.set(xlabel="layer", ylabel="effective rank of X", ylim=(0, min(COLLAPSE_TOKENS, COLLAPSE_DIM)),
            title="Effective rank (exp entropy of SVs)")
    live(ax1.title)

    def update(r) -> None:
        ((name, variant),) = r["variants"].items()
        for key, (centre, lo, hi) in _seed_bands(variant).items():
            line, band = curves[key]
            line.set_data(r["layer"], centre)
            band.set_data(r["layer"], lo, hi)
        ax1.set_title(name)

    update(r)
    return update


# -- the second-order myth: what K-FAC approximates ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FisherCheck:
    """A softmax regression p(y | x) = softmax(W x), W: (C, D), on n inputs, with its parameters flattened
    row-major (index c * D + d). `fisher`: E_x E_{y ~ p} [g g^T] with g = d log p(y | x) / d vec(W); `kl_hessian`:
    the Hessian of E_x KL(p_W || p_W') in W' at W' = W; `kfac`: K-FAC's factorised block E[x x^T] (x) E[G] with
    G = diag(p) - p p^T, laid out like the others. All (C D, C D)."""
    fisher: torch.Tensor
    kl_hessian: torch.Tensor
    kfac: torch.Tensor

    @property
    def kfac_error(self) -> float:
        """||K-FAC - F|| / ||F|| (Frobenius): what assuming x and G independent costs on this data."""
        return float((self.kfac - self.fisher).norm() / self.fisher.norm())


def fisher_vs_kl_hessian(n: int = 64, d: int = 5, c: int = 4, seed: int = 0) -> FisherCheck:
    """The Fisher of a softmax regression three ways: by its definition, as the KL's Hessian (autograd), and
    K-FAC's Kronecker approximation. In float64 so that the first two agree to rounding."""
    n, d, c = int_in("n", n, 1, 4096), int_in("d", d, 1, 64), int_in("c", c, 2, 64)
    g = torch.Generator().manual_seed(int(seed))
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    w0 = torch.randn(c, d, generator=g, dtype=torch.float64)
    p = torch.softmax(x @ w0.T, -1)                                     # (n, C)
    # d log p(y|x) / dW[c', :] = (1[y = c'] - p_c') x  ->  per-class gradient (n, C_y, C, D), flattened to (n, C, C D)
    eye = torch.eye(c, dtype=torch.float64)
    grads = ((eye[None] - p[:, None, :])[..., None] * x[:, None, None, :]).reshape(n, c, c * d)
    fisher = torch.einsum("ny,nyi,nyj->ij", p, grads, grads) / n

    def kl(w_flat: torch.Tensor) -> torch.Tensor:
        logq = torch.log_softmax(x @ w_flat.reshape(c, d).T, -1)
        return (p * (p.log() - logq)).sum(-1).mean()

    hess = torch.autograd.functional.hessian(kl, w0.reshape(-1))       # (C D, C D)
    gmat = (torch.diag_embed(p) - p[:, :, None] * p[:, None, :]).mean(0)  # E[G]: (C, C)
    xx = x.T @ x / n                                                     # E[x x^T]: (D, D)
    kfac = torch.kron(gmat, xx)   # row-major vec(W): the class index is the outer one
    return FisherCheck(fisher, hess, kfac)


def kfac_storage(d_in: int, d_out: int) -> dict[str, int]:
    """Entries stored for one linear layer's Fisher block: in full, (d_in d_out)^2; K-FAC's two factors,
    d_in^2 + d_out^2."""
    d_in, d_out = int_in("d_in", d_in, 1, 1 << 20), int_in("d_out", d_out, 1, 1 << 20)
    return {"full": (d_in * d_out) ** 2, "kfac": d_in ** 2 + d_out ** 2}

"""Notebook 10: residual connections, the feed-forward layer, masking and the cost of attention.

Compute functions (tensors or numbers in, dicts out) and plots `plot_x(fig, result)`.

    init_gradients(n_layers=8, residual=False)   # per-layer gradients at initialisation, several seeds
    identity_at_zero(residual=True)              # a block whose sublayers output 0: identity or erasure?
    superposition(a=0.7, b=-1.3)                 # f(aX + bY) vs a f(X) + b f(Y): value path, softmax, FFN
    leak_map("causal", position=5)               # which outputs change when one input token changes
    linformer_attention(q, k, v, E, F)           # Wang et al. 2020: keys and values projected to k rows
    cost_curve((256, 512, 1024, 2048), k=64)     # bytes of the scores tensor and time against T
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
import functools
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from qalib.lab.data import IGNORE, N_SPECIAL, PAD, ProbeTask
from qalib.lab.device import one_thread
from qalib.lab.fits import fit_exponent
from qalib.lab.train import layer_grad_norms
from qalib.nn.attention import AttentionResult, attention
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choice, float_in, int_in, seed_list
from qalib.notebook.drawing import Change, Update, decade_ticks, limits_with_margins, live, seed_band


MASKS = ("none", "causal", "padding", "causal + padding")


def block_config(n_layers: int = 2, residual: bool = True, norm: str = "layer", causal: bool = False,
                 d_model: int = 32, init_std: float = 0.02) -> MiniBertConfig:
    """The small mini-BERT of this notebook: vocabulary 32, d=32, 4 heads, d_ff=64, post-norm like BERT."""
    int_in("n_layers", n_layers, 1, 48)
    return MiniBertConfig(vocab_size=32, d_model=d_model, n_layers=n_layers, n_heads=4, d_ff=2 * d_model, max_len=32,
                          residual=residual, norm=norm, causal=causal, init_std=init_std)


# -- 1. residual connections: gradients at initialisation ---------------------------------------
def _check_wiring(n_layers: int, norm: str, hi: int = 48) -> int:
    choice("norm", norm, ("layer", "none"))
    return int_in("n_layers", n_layers, 1, hi)


def _probe_loss(model: MiniBert, batch, n_layers: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The hidden states h_0 (embeddings output) .. h_n of the stack's first n layers, and the MLM loss on top."""
    out = model(**batch.model_inputs(), output_hidden_states=True, stop_at_layer=n_layers)
    keep = batch.labels != IGNORE
    return list(out.hidden_states), F.cross_entropy(model.mlm_logits(out.last_hidden_state[keep]), batch.labels[keep])


def _hidden_gradient_stats(grads) -> tuple[list[float], list[float]]:
    """Per depth: ||dLoss/dh|| and its token-specific share ||g - mean_t g|| / ||g|| (g: (B, T, d);
    0/0, an underflowed gradient, counts as 0)."""
    norms = [float(g.norm()) for g in grads]
    shares = [float((g - g.mean(1, keepdim=True)).norm()) / n if n > 0 else 0.0 for g, n in zip(grads, norms)]
    return norms, shares


@one_thread()
def init_gradients(n_layers: int = 8, residual: bool = True, norm: str = "layer", seeds=(0, 1, 2),
                   batch_size: int = 8, seq_len: int = 12) -> dict:
    """One backward pass per seed at initialisation (ProbeTask 'previous').

    param: (S, L) gradient norm of each layer's parameters (qalib.lab.train.layer_grad_norms);
    act:   (S, L+1) norm of dLoss/dh at the embeddings output (depth 0) and after each layer;
    share: (S, L+1) token-specific share ||g - mean_t g|| / ||g||: 0 means every position receives the same gradient.
    """
    n_layers = _check_wiring(n_layers, norm)
    seeds = seed_list("seeds", seeds)
    task = ProbeTask("previous", vocab_size=32, seq_len=int_in("seq_len", seq_len, 2, 30))
    param, act, share = [], [], []
    for seed in seeds:
        torch.manual_seed(seed)
        model = MiniBert(block_config(n_layers, residual, norm))
        batch = task.batch(int_in("batch_size", batch_size, 1, 512), torch.Generator().manual_seed(seed))
        hs, loss = _probe_loss(model, batch, n_layers)
        for h in hs:
            h.retain_grad()
        loss.backward()
        g = layer_grad_norms(model)
        param.append([g[f"layer{i}"] for i in range(n_layers)])
        norms, shares = _hidden_gradient_stats([h.grad for h in hs])
        act.append(norms)
        share.append(shares)
    return {"param": np.array(param), "act": np.array(act), "share": np.array(share), "n_layers": n_layers,
            "residual": residual, "norm": norm, "seeds": list(seeds)}


GRAD_FLOOR = 1e-30  # a gradient that underflowed to 0 is drawn at the floor of the log axis


def _label_gradient_axes(ax1, ax2) -> None:
    ax1.set(title="gradient reaching each depth (min-max over seeds)", xlabel="depth (0 = embeddings output)",
            ylabel="||dLoss/dh||  (log)")
    ax2.set(title="token-specific part of that gradient", xlabel="depth (0 = embeddings output)",
            ylabel="||g - mean over positions|| / ||g||", ylim=(-0.05, 1.05))


def plot_init_gradients(fig, results: dict) -> None:
    """results: {label: init_gradients(...)}. Gradient size and its token-specific share against depth."""
    ax1, ax2 = fig.subplots(1, 2)
    for label, r in results.items():
        depths = np.arange(r["n_layers"] + 1)
        seed_band(ax1, depths, np.maximum(r["act"], GRAD_FLOOR), log=True, label=label, marker="o", ms=3)
        seed_band(ax2, depths, r["share"], label=label, marker="o", ms=3)
    decade_ticks(ax1, "y",
                 np.log10(np.concatenate([np.maximum(r["act"], GRAD_FLOOR).ravel() for r in results.values()])))
    _label_gradient_axes(ax1, ax2)
    ax2.legend(fontsize=8)


@torch.no_grad()
@one_thread()
def identity_at_zero(residual: bool = True, n_layers: int = 2, seed: int = 0) -> dict:
    """Zero the attention and FFN output projections: what does the stack do to its input?

    Post-norm with residual: x -> LN(x + 0) = LN(x), and x is already normalised (embedding LayerNorm), so the
    stack is the identity (up to LayerNorm's eps). Without residual: LN(0) = beta = 0, every token is erased.
    """
    torch.manual_seed(seed)
    model = MiniBert(block_config(n_layers, residual)).eval()
    for layer in model.layers:
        for lin in (layer.attention.output, layer.ffn.output):
            lin.weight.zero_(), lin.bias.zero_()
    ids = torch.randint(N_SPECIAL, 32, (2, 10), generator=torch.Generator().manual_seed(seed))
    out = model(ids, return_internals=True)
    x0, xl = out.internals["embeddings.out"], out.last_hidden_state
    return {"max_change": float((xl - x0).abs().max()), "input_norm": float(x0.norm(dim=-1).mean()),
            "output_norm": float(xl.norm(dim=-1).mean())}


# -- 2. where the nonlinearity is ---------------------------------------------------------------
@one_thread()
def superposition(a: float = 0.7, b: float = -1.3, seq_len: int = 8, seed: int = 0, layer=None) -> dict:
    """Superposition error ||f(aX+bY) - a f(X) - b f(Y) - (1-a-b) f(0)|| / ||f(aX+bY) - f(0)|| in float64.

    The (1-a-b) f(0) term makes the test exact for affine maps (biases). Maps tested on one encoder layer
    (a fresh one with init std d^-1/2, or `layer` from a real model):
      value path, probs frozen:  X -> W_O (P X W_V), P computed once from a reference input
      attention, probs from X:   the whole attention sublayer, softmax recomputed for every input
      attention, one token:      the same with T = 1 (the only key gets probability 1)
      FFN:                       W_2 GELU(W_1 x)
    """
    float_in("a", a, -10, 10), float_in("b", b, -10, 10)
    int_in("seq_len", seq_len, 2, 256)
    if layer is None:
        torch.manual_seed(seed)
        layer = MiniBert(block_config(1, init_std=32 ** -0.5)).layers[0]
    layer = copy.deepcopy(layer).double().eval()
    att, d, h = layer.attention, layer.attention.output.in_features, layer.attention.cfg.n_heads
    g = torch.Generator().manual_seed(seed)
    x, y, z = (torch.randn(1, seq_len, d, generator=g, dtype=torch.float64) for _ in range(3))
    with torch.no_grad():
        probs = _probs(att, z)  # (1, H, T, T), frozen

        def value_path(u):  # W_O (P V) with the probabilities of z
            v = F.linear(u, att.w_v, att.b_v).view(1, -1, h, d // h).transpose(1, 2)  # (1, T, d) -> (1, H, T, dh)
            return att.output(torch.matmul(probs, v).transpose(1, 2).reshape(1, -1, d))

        maps = {"value path, probs frozen": value_path,
                "attention, probs from X": lambda u: att(u, None),
                "attention, one token": lambda u: att(u[:, :1], None),
                "FFN": layer.ffn}
        err = {}
        for name, f in maps.items():
            zero = f(torch.zeros_like(x))
            lhs = f(a * x + b * y) - zero
            rhs = a * (f(x) - zero) + b * (f(y) - zero)
            err[name] = float((lhs - rhs).norm() / lhs.norm().clamp_min(1e-300))
    return {"error": err, "a": a, "b": b, "eps": float(np.finfo(np.float64).eps)}


def _probs(att, x):
    b, t, d = x.shape
    cfg = att.cfg
    qkv = att.qkv(x).view(b, t, att.n_proj, cfg.n_heads, cfg.d_head).permute(2, 0, 3, 1, 4)
    q, k = qkv[0], (qkv[0] if att.n_proj == 2 else qkv[1])
    return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * cfg.scale, dim=-1)  # (B, H, T, T)


def plot_superposition(fig, res: dict) -> None:
    ax = fig.subplots()
    names = list(res["error"])
    vals = np.log10(np.maximum([res["error"][n] for n in names], 1e-18))
    ax.barh(names, vals + 18, left=-18, color=["#2166ac" if v < -10 else "#b35806" for v in vals])
    ax.axvline(math.log10(res["eps"]), color="grey", ls="--", lw=1, label="float64 machine epsilon")
    decade_ticks(ax, "x", [-18, 1])
    ax.set(title=f"superposition test, a={res['a']:g}, b={res['b']:g}", xlabel="relative error (log scale; ~1e-16 = linear)")
    ax.legend(fontsize=8)


# -- 3. masks ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _leak_model(causal: bool) -> MiniBert:
    torch.manual_seed(0)
    return MiniBert(block_config(2, causal=causal, init_std=0.2)).eval()  # larger init: visible attention patterns


@torch.no_grad()
@one_thread()
def leak_map(mask: str = "causal", position: int = 5, n_pad: int = 0, seq_len: int = 12, seed: int = 0) -> dict:
    """Change the token at `position`; report max |change| of every hidden state (depth x position).

    mask: 'none' (bidirectional, pads attended), 'causal' (GPT-style), 'padding' (attention_mask hides the last
    n_pad tokens, as BERT does), or both. diff: (n_layers + 1, T), row 0 = embeddings output.
    """
    choice("mask", mask, MASKS)
    int_in("seq_len", seq_len, 2, 32)
    int_in("position", position, 0, seq_len - 1)
    int_in("n_pad", n_pad, 0, seq_len - 1)  # at least one real token
    model = _leak_model("causal" in mask)
    ids = torch.randint(N_SPECIAL, 32, (1, seq_len), generator=torch.Generator().manual_seed(seed))
    real = torch.arange(seq_len) < seq_len - n_pad
    ids[0, ~real] = PAD
    changed = ids.clone()
    changed[0, position] = N_SPECIAL + (int(ids[0, position]) - N_SPECIAL + 7) % (32 - N_SPECIAL)  # another content token
    attn = real.long()[None] if "padding" in mask else None
    runs = [model(i, attention_mask=attn, return_internals=True).internals for i in (ids, changed)]
    names = ["embeddings.out"] + [f"layer{i}.hidden" for i in range(model.cfg.n_layers)]
    diff = torch.stack([(runs[1][n] - runs[0][n]).abs().amax(-1)[0] for n in names]).numpy()  # (L+1, T)
    moved = diff[-1] > 0
    others = real.numpy() & (np.arange(seq_len) != position)
    result = {"diff": diff, "real": real.numpy(), "position": position, "mask": mask,
              "earlier_changed": int(moved[:position].sum()), "unmasked_changed": int((moved & others).sum()),
              "max_earlier": float(diff[-1, :position].max()) if position else 0.0}
    if not real[position]:
        result["note"] = (f"position {position} is padding: with the padding mask no real token may change; "
                          "without it the pad is attended like any token")
    elif position == 0 and "causal" in mask:
        result["note"] = "position 0 has no earlier positions: pick a later one to see what the causal mask protects"
    return result


def plot_leak_map(fig, res: dict) -> Update:
    """A fixed colour scale and one cell per (depth, position): changing the mask, the position or the padding
    redraws only the image, the dashed line, the pad labels and the title (another shape: a new figure)."""
    ax = fig.subplots()
    floor = -9.0
    depth, t = res["diff"].shape
    im = ax.imshow(np.full((depth, t), floor), cmap="viridis", vmin=floor, vmax=1, aspect="auto",
                   interpolation="nearest")
    fig.colorbar(im, ax=ax, label="log10 max |change|  (-9 = unchanged)")
    changed = ax.axvline(res["position"], color="white", ls="--", lw=1.5)
    # "pad" as a text marker near the bottom of each padded column: one line's markers, however many pads
    pads, = ax.plot([], [], ls="none", marker=r"$\mathregular{pad}$", ms=13.4, color="#b35806", mew=0)
    ax.set_yticks(range(depth), ["embeddings"] + [f"layer {i}" for i in range(depth - 1)])
    ax.set_xticks(range(t))
    ax.set(xlabel="position (dashed: the token that was changed)", ylabel="hidden state")
    ax.grid(False)  # grid lines would cut through the cells (and the live image hides them in the demo anyway)
    live(im, changed, pads, ax.title)

    def update(res) -> Change | None:
        if res["diff"].shape != (depth, t):
            return Change.FIGURE  # another length or depth: other ticks
        im.set_data(np.log10(np.maximum(res["diff"], 10 ** floor)))
        changed.set_xdata([res["position"]] * 2)
        padded = np.flatnonzero(~res["real"])
        pads.set_data(padded, np.full(len(padded), depth - 0.62))
        ax.set_title(f"mask = {res['mask']}: {res['earlier_changed']} earlier outputs changed, "
                     f"{res['unmasked_changed']} other real outputs changed")
        return None

    update(res)
    return update


# -- 4. cost: full attention vs Linformer ------------------------------------------------------
def linformer_attention(q, k, v, E, F_, scale=None) -> AttentionResult:
    """Linformer (Wang et al. 2020, sec. 4, eq. 7): softmax(Q (E K)^T / sqrt(d)) (F V).

    q, k, v: (..., T, d_head); E, F_: (k_proj, T) project the *length* axis of K and V to k_proj rows.
    scores and probs are (..., T, k_proj): memory and time O(T k), not O(T^2).
    """
    if E.shape != F_.shape or E.dim() != 2 or E.shape[1] != k.shape[-2]:
        raise ValueError(f"E and F must both be (k_proj, T={k.shape[-2]}), got {tuple(E.shape)} and {tuple(F_.shape)}")
    return attention(q, torch.matmul(E, k), torch.matmul(F_, v), scale=scale)  # E K: (..., k_proj, d_head)


class LinformerSelfAttention(nn.Module):
    """Multi-head self-attention with Linformer's length projections, shared across heads (their 'headwise' sharing).

    Sequences shorter than max_len use the first T columns of E and F (as if padded to max_len).
    """

    def __init__(self, d_model: int, n_heads: int, max_len: int, k_proj: int) -> None:
        super().__init__()
        int_in("k_proj", k_proj, 1, 1 << 20), int_in("max_len", max_len, 1, 1 << 20)
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        self.n_heads, self.max_len = n_heads, max_len
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.output = nn.Linear(d_model, d_model)
        self.E = nn.Parameter(torch.randn(k_proj, max_len) / math.sqrt(k_proj))  # JL-style random init
        self.F = nn.Parameter(torch.randn(k_proj, max_len) / math.sqrt(k_proj))

    def forward(self, x):
        b, t, d = x.shape
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len={self.max_len}: E and F have max_len columns")
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)  # each (B, H, T, dh)
        res = linformer_attention(q, k, v, self.E[:, :t], self.F[:, :t])
        return self.output(res.out.transpose(1, 2).reshape(b, t, d)), res.scores  # scores (B, H, T, k_proj)


def _time_min(fns, repeats):
    """Best wall time of each function over `repeats` rounds; the functions alternate, so a burst of load
    from another process hits both rather than one."""
    best = [math.inf] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


@torch.no_grad()
@one_thread()
def cost_curve(lengths=(256, 512, 1024, 2048), batch: int = 1, heads: int = 2, d_head: int = 32, k_proj=64,
               repeats: int = 3, seed: int = 0) -> dict:
    """Bytes of the scores tensor and wall time (best of `repeats`, one CPU thread) of full attention and of
    Linformer, for each sequence length, with fitted exponents (exact least squares for bytes, Theil-Sen for time).
    k_proj: an int, or a callable T -> k (to test 'k^2 = T')."""
    lengths = [int_in("length", t, 2, 8192) for t in lengths]
    int_in("repeats", repeats, 1, 20)
    g = torch.Generator().manual_seed(seed)
    out = {"T": np.array(lengths), "bytes_full": [], "bytes_lin": [], "time_full": [], "time_lin": [], "k": []}
    for t in lengths:
        kp = int(k_proj(t)) if callable(k_proj) else int_in("k_proj", k_proj, 1, 8192)
        q, k, v = (torch.randn(batch, heads, t, d_head, generator=g) for _ in range(3))
        E, F_ = (torch.randn(kp, t, generator=g) / math.sqrt(kp) for _ in range(2))
        full, lin = attention(q, k, v), linformer_attention(q, k, v, E, F_)
        out["bytes_full"].append(full.scores.element_size() * full.scores.numel())
        out["bytes_lin"].append(lin.scores.element_size() * lin.scores.numel())
        t_full, t_lin = _time_min([lambda: attention(q, k, v), lambda: linformer_attention(q, k, v, E, F_)], repeats)
        out["time_full"].append(t_full)
        out["time_lin"].append(t_lin)
        out["k"].append(kp)
    out = {key: np.array(val) if isinstance(val, list) else val for key, val in out.items()}
    for key in ("bytes_full", "bytes_lin", "time_full", "time_lin"):
        if len(lengths) >= 2:  # one length (the demo's single timing) has no slope
            out["exp_" + key] = fit_exponent(out["T"], out[key], robust=key.startswith("time"))
    return out


def plot_cost(fig, res: dict, mark: int | None = None) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    lt = np.log10(res["T"])
    for ax, key, unit, scale in ((ax1, "bytes", "MB", 1e-6), (ax2, "time", "ms", 1e3)):
        full, lin = np.log10(res[f"{key}_full"] * scale), np.log10(res[f"{key}_lin"] * scale)
        ax.plot(lt, full, "o-", label=f"full: T^{res[f'exp_{key}_full']:.2f}")
        ax.plot(lt, lin, "s-", label=f"Linformer: T^{res[f'exp_{key}_lin']:.2f}")
        if mark is not None:
            ax.axvline(math.log10(mark), color="grey", ls="--", lw=1)
        ax.set_xticks(lt, [str(t) for t in res["T"]])
        decade_ticks(ax, "y", np.concatenate([full, lin]))
        ax.set(xlabel="sequence length T (log scale)", ylabel=f"{unit} (log scale)")
        ax.legend(fontsize=8)
    ax1.set_title("scores tensor (B, H, T, T) vs (B, H, T, k)")
    ax2.set_title("attention forward, 1 CPU thread (best of repeats)")


# -- demos ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _one_timing(T: int, k: int) -> tuple[float, float]:
    """One measured forward pass (ms) of full attention and of Linformer, 1 head; kept per setting, so coming
    back to a setting redraws the same picture and costs nothing."""
    res = cost_curve((T,), batch=1, heads=1, d_head=32, k_proj=k, repeats=1)
    return float(res["time_full"][0] * 1e3), float(res["time_lin"][0] * 1e3)


def cost_view(T: int = 512, k: int = 64) -> dict:
    """Exact memory curves for BERT-base sizes (12 heads, float32, batch 1) and one short timing at T (1 head,
    measured the first time a setting is shown)."""
    int_in("T", T, 16, 4096), int_in("k", k, 1, 4096)
    grid = np.unique(np.geomspace(16, 4096, 25).astype(int))
    ms_full, ms_lin = _one_timing(int(T), int(k))
    out = {"grid": grid, "mb_full": 12 * grid ** 2 * 4 / 1e6, "mb_lin": 12 * grid * k * 4 / 1e6, "T": T, "k": k,
           "ms_full": ms_full, "ms_lin": ms_lin}
    if k >= T:
        out["note"] = f"k = {k} >= T = {T}: the projection does not shorten anything; Linformer only pays off for T >> k"
    return out


# log10 of the time axis, 0.01 ms to 1 s: one head at T <= 1024 on a CPU lies well inside (a time outside would be
# drawn at the end of the axis; the title gives the measured numbers)
MS_VIEW = (-2.0, 3.0)


def plot_cost_view(fig, r: dict) -> Update:
    """Fixed axes: the memory panel spans cost_view's whole grid, and for 16 <= k <= 4096 Linformer's 12 T k lies
    between the smallest and largest 12 T^2; the times share one log axis. Changing T or k redraws only the
    Linformer curve, the T mark, the two bars and the titles."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.6, 1])
    lg, full = np.log10(r["grid"]), np.log10(r["mb_full"])
    ax1.plot(lg, full, label="full: 12 T^2 x 4 bytes")
    lin, = ax1.plot(lg, np.log10(r["mb_lin"]), label="Linformer: 12 T k x 4 bytes")
    mark = ax1.axvline(math.log10(r["T"]), color="grey", ls="--", lw=1)
    ax1.set_xticks(np.log10([16, 64, 256, 1024, 4096]), ["16", "64", "256", "1024", "4096"])
    decade_ticks(ax1, "y", full)
    ax1.set(xlim=limits_with_margins(lg[0], lg[-1]), ylim=limits_with_margins(full[0], full[-1]),
            xlabel="sequence length T (log scale)", ylabel="MB (log scale)")
    ax1.legend(fontsize=8, loc="upper left")
    # bars of log10(ms) standing on the bottom of the axis (0.01 ms)
    bars = ax2.bar(["full", "Linformer"], [0, 0], bottom=MS_VIEW[0], color=["#2166ac", "#b35806"])
    decade_ticks(ax2, "y", MS_VIEW)
    ax2.set(ylim=MS_VIEW, ylabel="wall time (ms, one run; log scale)")
    live(lin, mark, *bars, ax1.title, ax2.title)

    def update(r) -> None:
        lin.set_ydata(np.log10(r["mb_lin"]))
        mark.set_xdata([math.log10(r["T"])] * 2)
        for bar, ms in zip(bars, (r["ms_full"], r["ms_lin"])):
            bar.set_height(np.clip(math.log10(ms), *MS_VIEW) - MS_VIEW[0])
        mb_full, mb_lin = 12 * r["T"] ** 2 * 4 / 1e6, 12 * r["T"] * r["k"] * 4 / 1e6
        ax1.set_title(f"scores per layer, BERT-base heads, at T={r['T']}:\n"
                      f"full {mb_full:.3g} MB, Linformer (k={r['k']}) {mb_lin:.3g} MB")
        ax2.set_title(f"measured, 1 head, T={r['T']}:\nfull {r['ms_full']:.2g} ms, Linformer {r['ms_lin']:.2g} ms")

    update(r)
    return update


RESIDUAL_DEMO_LAYERS = 12
RESIDUAL_DEMO_SEEDS = (0, 1, 2)
# log10 of the gradient axis in the residual demo: from the underflow floor to above the largest gradient any of its
# settings produces (about 1e3, at the top of a stack without residuals or norm)
GRAD_VIEW = (math.log10(GRAD_FLOOR) - 1.5, 4.5)


@functools.lru_cache(maxsize=4)  # one entry per wiring: 2 residual settings x 2 norms
def seeded_stacks(residual: bool, norm: str) -> tuple[MiniBert, ...]:
    """The residual demo's models: for each seed, a RESIDUAL_DEMO_LAYERS-deep stack at initialisation, wired as
    asked. Built once per wiring, not per change: building is a third of a change's cost. The switches add no
    random parameters, so a seed's stacks hold the same weights in every wiring (tests check it), and the demo's
    layers slider cuts the same stacks (MiniBert's stop_at_layer). Never trained: the demo takes gradients with
    torch.autograd.grad, which leaves the parameters' .grad empty."""
    _check_wiring(RESIDUAL_DEMO_LAYERS, norm)
    stacks = []
    for seed in RESIDUAL_DEMO_SEEDS:
        torch.manual_seed(seed)
        stacks.append(MiniBert(block_config(RESIDUAL_DEMO_LAYERS, bool(residual), norm)))
    return tuple(stacks)


def residual_view(n_layers: int = 8, residual: bool = True, norm: str = "layer") -> dict:
    """init_gradients' act and share for the demo: the first n_layers of each seed's stack (seeded_stacks), 4
    sentences of 8 tokens per seed. Only the hidden states' gradients are taken: the parameters' are not drawn."""
    n_layers = _check_wiring(n_layers, norm, RESIDUAL_DEMO_LAYERS)
    task = ProbeTask("previous", vocab_size=32, seq_len=8)
    act, share = [], []
    for seed, model in zip(RESIDUAL_DEMO_SEEDS, seeded_stacks(bool(residual), norm)):
        hs, loss = _probe_loss(model, task.batch(4, torch.Generator().manual_seed(seed)), n_layers)
        norms, shares = _hidden_gradient_stats(torch.autograd.grad(loss, hs))
        act.append(norms)
        share.append(shares)
    label = f"{'with' if residual else 'without'} residual, norm={norm}"
    return {label: {"act": np.array(act), "share": np.array(share), "n_layers": n_layers, "residual": residual,
                    "norm": norm, "seeds": list(RESIDUAL_DEMO_SEEDS)}}


def plot_residual_view(fig, results: dict) -> Update:
    """plot_init_gradients for the demo's one setting, on fixed axes (every depth the demo allows, gradients from
    the underflow floor to above 1e4), so that any change redraws only the two bands and the setting's label."""
    ax1, ax2 = fig.subplots(1, 2)
    (label, r), = results.items()
    depths = np.arange(r["n_layers"] + 1)
    *grad, move_grad = seed_band(ax1, depths, np.maximum(r["act"], GRAD_FLOOR), log=True, label=label, marker="o", ms=3)
    *share, move_share = seed_band(ax2, depths, r["share"], label=label, marker="o", ms=3)
    setting = ax1.text(0.97, 0.05, label, transform=ax1.transAxes, ha="right", va="bottom", fontsize=8,
                       bbox={"fc": "white", "ec": "0.8"})  # bottom right: the bands rise from bottom left
    decade_ticks(ax1, "y", [math.log10(GRAD_FLOOR), 0])
    _label_gradient_axes(ax1, ax2)
    for ax in (ax1, ax2):
        ax.set(xlim=(-0.5, RESIDUAL_DEMO_LAYERS + 0.5), xticks=range(0, RESIDUAL_DEMO_LAYERS + 1, 2))
    ax1.set_ylim(GRAD_VIEW)
    live(*grad, *share, setting)

    def update(results) -> None:
        (label, r), = results.items()
        depths = np.arange(r["n_layers"] + 1)
        move_grad(depths, np.maximum(r["act"], GRAD_FLOOR))
        move_share(depths, r["share"])
        setting.set_text(label)

    update(results)
    return update


# -- the residual stream, read as a sum: what each sublayer contributes to the output ----------------------------
@dataclass(frozen=True)
class StreamContributions:
    """A post-norm model's output for one sentence, written exactly as a sum of what each part wrote.

    With every LayerNorm's per-token mean and std frozen at their values in the forward pass, LN(y) = g (y - mu) / s
    + b is affine in y, so the output splits into one term per writer: the embeddings, each attention and FFN
    update, and the LayerNorm biases. components: (K, T, d) in the order of `names`; output: (T, d) the model's
    last hidden state; gains: (K, d) the product of |gamma| over the LayerNorms applied after each writer (how much
    the later norms stretch each feature of what it wrote, before the per-token 1 / s)."""
    names: tuple[str, ...]
    components: torch.Tensor
    output: torch.Tensor
    gains: torch.Tensor

    @property
    def shares(self) -> torch.Tensor:
        """(K, T): each writer's projection on the output, <c_k, h> / ||h||^2, per token; they sum to 1."""
        h = self.output
        return (self.components * h).sum(-1) / (h * h).sum(-1)

    def gain_spread(self, name: str) -> float:
        """How unevenly the later norms stretch `name`'s features: the 90th over the 10th percentile of its gains."""
        g = self.gains[self.names.index(name)]
        return float(torch.quantile(g, 0.9) / torch.quantile(g, 0.1))


@torch.no_grad()
def stream_contributions(model: MiniBert, input_ids: torch.Tensor) -> StreamContributions:
    """Split a post-norm MiniBert's last hidden state for one unpadded sentence (input_ids (1, T)) into what the
    embeddings, every attention and FFN sublayer, and the LayerNorm biases wrote (StreamContributions)."""
    if model.cfg.norm_placement != "post" or model.cfg.norm != "layer" or not model.cfg.residual:
        raise ValueError("stream_contributions follows a post-norm model with residuals and LayerNorm (BERT's layout)")
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be one sentence, shape (1, T); got {tuple(input_ids.shape)}")
    out = model(input_ids, return_internals=True)
    x = out.internals["embeddings.out"][0]                                   # (T, d)
    names, parts, gains = ["embeddings"], [x], [torch.ones(x.shape[-1])]
    bias = torch.zeros_like(x)

    def normalise(norm, stream):
        """Apply `norm` to the stream and, with its statistics frozen, to every part and the bias sum."""
        nonlocal bias
        s = (stream.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (T, 1): the per-token std
        centre = lambda c: (c - c.mean(-1, keepdim=True)) / s * norm.weight  # noqa: E731
        parts[:] = [centre(c) for c in parts]
        gains[:] = [gn * norm.weight.abs() for gn in gains]
        bias = centre(bias) + norm.bias
        return norm(stream)

    for i, layer in enumerate(model.layers):
        a = layer.attention(x[None], None)[0]                                 # (T, d)
        names.append(f"attention {i}"); parts.append(a); gains.append(torch.ones_like(gains[0]))
        x = normalise(layer.attention_norm, x + a)
        f = layer.ffn(x[None])[0]
        names.append(f"FFN {i}"); parts.append(f); gains.append(torch.ones_like(gains[0]))
        x = normalise(layer.ffn_norm, x + f)
    names.append("LayerNorm biases"); parts.append(bias); gains.append(torch.ones_like(gains[0]))
    return StreamContributions(tuple(names), torch.stack(parts), out.last_hidden_state[0], torch.stack(gains))

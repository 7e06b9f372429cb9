"""Notebook 07: why do Transformers need several heads?

Compute functions (numbers in, dicts out) and plots `plot_x(fig, result)`.

    attention_parameter_count(384, 12)      # 4 d^2 + 4 d, whatever the number of heads
    attention_flops(512, 8, 128)            # the same matmul FLOPs for every h; h T^2 softmax entries
    minilm_attention("The cat sat.")        # tokens, probs (L, H, T, T) from the pretrained checkpoint
    head_masses(probs)                      # (L, H, 5): mass on previous / next / self / [CLS] / [SEP]
    head_distances(probs)                   # (L, H, H) Jensen-Shannon distances between heads of a layer
"""

from __future__ import annotations

import functools
import math
import time

import matplotlib
import numpy as np
import torch
from matplotlib.collections import PathCollection
from matplotlib.textpath import TextPath

from qalib.nn.attention import attention
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import SelfAttention
from qalib.nn.pretrained import real_model
from qalib.nn.validate import float_in, int_in
from qalib.notebook.drawing import LiveTickLabels, Update, live, points_to_pixels


# Vaswani et al. 2017, Table 3 row (A): base model, d_model = 512, dev set newstest2013 (EN-DE).
VASWANI_TABLE3_A = {"n_heads": [1, 4, 8, 16, 32], "d_k": [512, 128, 64, 32, 16],
                    "ppl": [5.29, 5.00, 4.92, 4.91, 5.01], "bleu": [24.9, 25.5, 25.8, 25.8, 25.4]}
CATEGORIES = ("previous", "next", "self", "[CLS]", "[SEP]")
SENTENCES = (
    "The cat sat on the mat because it was tired.",
    "Interviewers like to ask why a Transformer needs several attention heads.",
    "She gave the book to her brother, who had asked for it twice.",
    "Paris is the capital of France and has many old museums.",
    "If the train is late again, we will take a taxi to the airport.",
)


# -- parameters and cost ---------------------------------------------------------------------------
def attention_parameter_count(d_model: int, n_heads: int) -> int:
    """Parameters of one attention block (W_Q, W_K, W_V, W_O and biases), counted on qalib's module."""
    int_in("d_model", d_model, 1)
    int_in("n_heads", n_heads, 1)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
    cfg = MiniBertConfig(vocab_size=8, d_model=d_model, n_heads=n_heads, d_ff=4, n_layers=1)
    return sum(p.numel() for p in SelfAttention(cfg).parameters())


def attention_flops(d_model: int, n_heads: int, seq_len: int) -> dict:
    """Multiply-add FLOPs (2 per MAC) of one self-attention block for one sequence, and the score count."""
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("seq_len", seq_len)):
        int_in(name, v, 1)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
    d_h, t = d_model // n_heads, seq_len
    return {"projections": 2 * 4 * t * d_model * d_model,       # Q, K, V and output: four (T, d) x (d, d)
            "scores": 2 * n_heads * t * t * d_h,                 # h products (T, d_h) x (d_h, T)
            "weighted_sum": 2 * n_heads * t * t * d_h,           # h products (T, T) x (T, d_h)
            "softmax_entries": n_heads * t * t}                  # what grows with h: h score matrices


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, d) -> (B, H, T, d/H): a reshape, no computation."""
    b, t, d = x.shape
    if d % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide the last dim {d}")
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def loop_vs_batched(n_heads: int = 8, d_model: int = 64, seq_len: int = 16, seed: int = 0) -> dict:
    """Heads computed one by one in a Python loop vs as one batched call: the same numbers."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, seq_len, d_model, generator=g) for _ in range(3))
    qh, kh, vh = (split_heads(x, n_heads) for x in (q, k, v))
    batched = attention(qh, kh, vh).out  # (B, H, T, d_h): one call over all heads
    looped = torch.stack([attention(qh[:, h], kh[:, h], vh[:, h]).out for h in range(n_heads)], dim=1)
    return {"max_abs_diff": float((batched - looped).abs().max())}


def time_attention(n_heads: int, d_model: int = 256, seq_len: int = 128, batch: int = 8, reps: int = 15) -> float:
    """Median seconds of one multi-head attention call (projections excluded) at fixed d_model."""
    int_in("reps", reps, 1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (split_heads(torch.randn(batch, seq_len, d_model, generator=g), n_heads) for _ in range(3))
    times = []
    with torch.no_grad():
        for _ in range(reps + 2):
            start = time.perf_counter()
            attention(q, k, v)
            times.append(time.perf_counter() - start)
    return float(np.median(times[2:]))  # the first two calls warm up the allocator


# -- what one head can and cannot do -----------------------------------------------------------------
def pair_readout(m: int = 5, d_model: int = 16, left_weight: float | None = 0.5, seed: int = 0) -> dict:
    """Representations of all m^2 ordered pairs (a, b) = (x[t-1], x[t+1]) after one attention layer.

    left_weight=p: one head with weights (p, 1 - p) on the two neighbours: out = p v_a + (1 - p) v_b.
    left_weight=None: two heads of d_model/2, one per neighbour: out = [W_1 v_a ; W_2 v_b].
    Returns the number of colliding pairs and the smallest distance between different pairs
    (relative to the mean norm)."""
    int_in("m", m, 2)
    int_in("d_model", d_model, 2)
    if left_weight is not None:  # None: two heads
        float_in("left_weight", left_weight, 0, 1)
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(m, d_model, generator=g, dtype=torch.float64)  # value vectors of the m symbols
    a, b = (i.reshape(-1) for i in torch.meshgrid(torch.arange(m), torch.arange(m), indexing="ij"))
    if left_weight is None:
        w1, w2 = (torch.randn(d_model, d_model // 2, generator=g, dtype=torch.float64) for _ in range(2))
        out = torch.cat([v[a] @ w1, v[b] @ w2], dim=-1)  # (m^2, d): each head keeps its own half
    else:
        out = left_weight * v[a] + (1 - left_weight) * v[b]  # (m^2, d): one convex mix
    dist = torch.cdist(out, out).fill_diagonal_(float("inf"))
    centred = out - out.mean(0)
    xy = centred @ torch.linalg.svd(centred, full_matrices=False).Vh[:2].T  # (m^2, 2): the two main directions
    return {"collisions": int((dist < 1e-9).sum()) // 2, "min_distance": float(dist.min() / out.norm(dim=-1).mean()),
            "xy": xy.numpy(), "pairs": [(int(i), int(j)) for i, j in zip(a, b)], "m": m, "left_weight": left_weight}


def favourite_keys_rank1(seq_len: int = 32, seed: int = 0) -> int:
    """With d_k = 1 the scores s_ij = q_i k_j have rank 1: count the distinct argmax keys over all queries."""
    int_in("seq_len", seq_len, 2)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(seq_len, 1, generator=g), torch.randn(seq_len, 1, generator=g)
    return int(torch.unique((q @ k.T).argmax(-1)).numel())


def score_rank(layer: int = 0, head: int = 0) -> dict:
    """Rank of one MiniLM head's bilinear score form W_Q^h^T W_K^h (d x d), and the bound d_k."""
    model, _ = real_model()
    cfg = model.cfg
    int_in("layer", layer, 0, cfg.n_layers - 1), int_in("head", head, 0, cfg.n_heads - 1)
    att = model.layers[layer].attention
    rows = slice(head * cfg.d_head, (head + 1) * cfg.d_head)  # this head's rows of W_Q and of W_K
    wq, wk = (w.detach().double()[rows] for w in (att.w_q, att.w_k))  # (d_k, d) each
    return {"rank": int(torch.linalg.matrix_rank(wq.T @ wk)), "d_k": cfg.d_head, "d_model": cfg.d_model}


@torch.no_grad()
def head_contributions(layer: int = 0, text: str = SENTENCES[0]) -> dict:
    """MiniLM's attention sublayer output vs the sum over heads of head_h W_O[:, slice_h]^T (+ bias)."""
    model, tok = real_model()
    int_in("layer", layer, 0, model.cfg.n_layers - 1)
    internals = model(**tok(text), return_internals=True).internals
    x = internals["embeddings.out"] if layer == 0 else internals[f"layer{layer - 1}.hidden"]  # (1, T, d)
    heads = internals[f"layer{layer}.probs"] @ internals[f"layer{layer}.v"]  # (1, H, T, d_k)
    out = model.layers[layer].attention.output
    dk = model.cfg.d_head
    parts = torch.stack([heads[0, h] @ out.weight[:, h * dk:(h + 1) * dk].T for h in range(model.cfg.n_heads)])
    full = model.layers[layer].attention(x, None)[0]  # (T, d): the module's own forward (fused kernel)
    return {"max_abs_diff": float((parts.sum(0) + out.bias - full).abs().max()),
            "part_norms": parts.norm(dim=-1).mean(-1).numpy(), "full_norm": float(full.norm(dim=-1).mean())}


# -- the pretrained model ------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def minilm_attention(text: str, max_tokens: int = 48) -> dict:
    """Word pieces and attention probabilities (L, H, T, T) of all-MiniLM-L6-v2 for one sentence."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty sentence")
    model, tok = real_model()
    enc = tok(text, max_length=max_tokens)
    with torch.no_grad():
        internals = model(**enc, return_internals=True).internals
    probs = torch.stack([internals[f"layer{i}.probs"][0] for i in range(model.cfg.n_layers)])  # (L, H, T, T)
    tokens = tok.backend.id_to_token
    return {"tokens": [tokens(int(i)) for i in enc["input_ids"][0]], "probs": probs.numpy(),
            "truncated": len(tok.encode(text).ids) > max_tokens}


def head_masses(probs) -> np.ndarray:
    """(L, H, 5): mean attention mass per head on the previous token, the next token, itself, [CLS]
    (position 0) and [SEP] (last position), averaged over the queries where the category exists."""
    p = torch.as_tensor(np.asarray(probs), dtype=torch.float64)
    if p.dim() != 4 or p.shape[-1] != p.shape[-2] or p.shape[-1] < 3:
        raise ValueError(f"probs must be (L, H, T, T) with T >= 3, got {tuple(p.shape)}")
    diag = lambda o: torch.diagonal(p, offset=o, dim1=-2, dim2=-1).mean(-1)  # noqa: E731 (query i, key i+o)
    return torch.stack([diag(-1), diag(1), diag(0), p[..., 0].mean(-1), p[..., -1].mean(-1)], dim=-1).numpy()


def classify_heads(masses: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """(L, H) labels: the category holding >= threshold of the mass, else 'broad'."""
    float_in("threshold", threshold, 0, 1, lo_open=True)
    best = masses.argmax(-1)
    labels = np.array(CATEGORIES, dtype=object)[best]
    return np.where(masses.max(-1) >= threshold, labels, "broad")


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in nats along the last dim (0 .. ln 2)."""
    m = (p + q) / 2
    kl = lambda a, b: (torch.special.xlogy(a, a) - torch.special.xlogy(a, b)).sum(-1)  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def head_distances(probs) -> np.ndarray:
    """(L, H, H): JS divergence between two heads' attention rows, averaged over queries."""
    p = torch.as_tensor(np.asarray(probs), dtype=torch.float64)  # (L, H, T, T)
    if p.dim() != 4:
        raise ValueError(f"probs must be (L, H, T, T), got {tuple(p.shape)}")
    return js_divergence(p[:, :, None], p[:, None, :]).mean(-1).numpy()  # (L, H, H)


def layer_spread(distances: np.ndarray) -> np.ndarray:
    """(L,): mean JS divergence over distinct head pairs of each layer."""
    h = distances.shape[-1]
    if h < 2:
        raise ValueError("layer_spread needs at least 2 heads")
    return distances.sum(axis=(-1, -2)) / (h * (h - 1))


def survey(sentences=SENTENCES) -> dict:
    """Head masses (L, H, 5) and layer spreads (L,) averaged over sentences, plus per-sentence spreads."""
    if not sentences:
        raise ValueError("sentences must be non-empty")
    runs = [minilm_attention(s)["probs"] for s in sentences]
    masses = np.mean([head_masses(p) for p in runs], axis=0)
    spreads = np.array([layer_spread(head_distances(p)) for p in runs])  # (n_sentences, L)
    return {"masses": masses, "labels": classify_heads(masses), "spread": spreads.mean(0), "spread_runs": spreads}


# -- plots -----------------------------------------------------------------------------------------
def plot_offsets(fig, profiles: dict) -> None:
    """Heatmaps head x offset of attention mass, one panel per model (keys: titles)."""
    axes = np.atleast_1d(fig.subplots(1, len(profiles)))
    for ax, (title, prof) in zip(axes, profiles.items()):
        im = ax.imshow(prof, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set(xticks=range(prof.shape[1]), xticklabels=["-2", "-1", "0", "+1", "+2"], yticks=range(prof.shape[0]),
               xlabel="key offset from the query (tokens)", ylabel="head", title=title)
    fig.colorbar(im, ax=list(axes), label="attention mass")


def plot_pruning(fig, effects: dict) -> None:
    """Accuracy with one head removed (bars) and with one head kept alone (dots), per model."""
    axes = np.atleast_1d(fig.subplots(1, len(effects)))
    for ax, (title, e) in zip(axes, effects.items()):
        h = np.arange(len(e["without"]))
        ax.bar(h, e["without"], color="C0", label="this head removed")
        ax.plot(h, e["only"], "D", color="C3", label="only this head kept")
        ax.axhline(e["full"], ls="--", color="k", label="all heads")
        ax.set(xticks=h, xlabel="head", ylabel="held-out accuracy", ylim=(0, 1.05), title=title)
    axes[0].legend(fontsize=8, loc="lower left")


def plot_survey(fig, s: dict) -> None:
    """Left: what each MiniLM head attends to (category, or broad). Right: how different heads of a layer are."""
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.4, 1]})
    names = list(CATEGORIES) + ["broad"]
    codes = np.vectorize(names.index)(s["labels"])
    ax1.imshow(codes, cmap="cividis", vmin=0, vmax=len(names) - 1, aspect="auto")
    for (l, h), lab in np.ndenumerate(s["labels"]):
        ax1.text(h, l, lab.strip("[]")[:4], ha="center", va="center", fontsize=7,
                 color="w" if codes[l, h] < 3 else "k")
    ax1.set(xticks=range(codes.shape[1]), yticks=range(codes.shape[0]), xlabel="head", ylabel="layer",
            title="MiniLM: where each head's mass goes (>= 50%)")
    layers = np.arange(len(s["spread"]))
    for run in s["spread_runs"]:
        ax2.plot(layers, run, ".", color="grey", alpha=0.6)
    ax2.plot(layers, s["spread"], "o-", color="C0", label="mean over sentences")
    ax2.set(xlabel="layer", ylabel="mean JS divergence between heads (nats)", title="How different the heads are",
            ylim=(0, math.log(2)))
    ax2.legend(fontsize=8)


# -- demos -----------------------------------------------------------------------------------------
def attention_map(layer: int, head, text: str) -> dict:
    """One MiniLM head's attention map for a typed sentence (head='mean' averages the layer's heads)."""
    r = minilm_attention(text)
    n_layers, n_heads = r["probs"].shape[:2]
    int_in("layer", layer, 0, n_layers - 1)
    if head != "mean" and not (isinstance(head, (int, np.integer)) and 0 <= head < n_heads):
        raise ValueError(f"head must be 'mean' or in [0, {n_heads - 1}], got {head!r}")
    p = r["probs"][layer].mean(0) if head == "mean" else r["probs"][layer, head]
    masses = head_masses(p[None, None])[0, 0]
    label = classify_heads(masses[None])[0]
    note = f"truncated to {len(r['tokens'])} word pieces" if r["truncated"] else ""
    if len(r["tokens"]) <= 3:
        note = "a very short input: only [CLS], one piece and [SEP], so every head looks alike"
    return {"tokens": r["tokens"], "map": p, "masses": masses, "label": str(label), "layer": layer, "head": head,
            "note": note}


def plot_attention_map(fig, r: dict) -> Update:
    """Another layer or head changes only the map, the bars and the titles; a new sentence also changes the map's
    size and the word pieces on its axes, which are live too (the map's axes have no ticks, so its limits change
    no static pixel): no redraw draws a static part again."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.4, 1])
    image = ax1.imshow(r["map"], cmap="viridis", vmin=0, vmax=1)
    ax1.grid(False)  # no colour bar: it doubles the drawing time; the scale is fixed at 0..1 (viridis)
    keys = LiveTickLabels(ax1, "x", size=8, rotation=90, width_chars=10, most=28)
    queries = LiveTickLabels(ax1, "y", size=8, width_chars=10, most=28)
    ax1.set(xlabel="key (attended to)", ylabel="query")
    bars = ax2.bar(range(5), np.zeros(5), color="C0")
    ax2.axhline(0.5, ls=":", color="k")
    ax2.set(xticks=range(5), ylim=(0, 1), ylabel="mean mass per query")
    ax2.set_xticklabels(CATEGORIES, rotation=30, fontsize=8)
    live(image, *bars, ax1.title, ax2.title)

    def update(r: dict) -> None:
        image.set_data(r["map"])
        for bar, mass in zip(bars, r["masses"]):
            bar.set_height(mass)
        ax1.set_title(f"layer {r['layer']}, head {r['head']} (dark 0, yellow 1)")
        ax2.set_title(f"kind: {r['label']}")
        if r["tokens"] != keys.labels:
            n = len(r["tokens"])
            image.set_extent((-0.5, n - 0.5, n - 0.5, -0.5))  # one cell per word piece, query 0 at the top
            ax1.set(xlim=(-0.5, n - 0.5), ylim=(n - 0.5, -0.5))
            size = 8 if n <= 20 else 6
            keys.set(r["tokens"], size=size)
            queries.set(r["tokens"], size=size)

    update(r)
    return update


def plot_heads_view(fig, r: dict) -> Update:
    """The trained models' accuracies are static; the star, the chosen model's profile and the left title are live
    (and the legend, which does not change, so that it stays drawn over the star). The profile has a row for every
    head of the largest model (grey where the chosen one has fewer), so that every choice keeps the axes."""
    res = r["res"]
    fig.set_layout_engine("none")  # fixed margins: constrained layout would cost as much as the drawing
    ax1, ax2 = fig.add_axes((0.08, 0.15, 0.38, 0.72)), fig.add_axes((0.58, 0.15, 0.32, 0.72))
    x = np.arange(len(res.n_heads))
    ax1.errorbar(x, res.mean(), yerr=[res.mean() - res.accuracy.min(1), res.accuracy.max(1) - res.mean()],
                 fmt="o-", capsize=4, label="trained (mean, min-max)")
    (star,) = ax1.plot([0], [0], "*", ms=14, color="C3", label="the chosen model (title)")
    ax1.set(xticks=x, xticklabels=res.n_heads, xlabel="heads", ylabel="held-out accuracy", ylim=(0, 1.05))
    legend = ax1.legend(fontsize=8, loc="lower right")
    most_heads = max(res.n_heads)
    image = ax2.imshow(np.zeros((most_heads, 5)), cmap=matplotlib.colormaps["viridis"].with_extremes(bad="0.85"),
                       vmin=0, vmax=1, aspect="auto")
    ax2.set(xticks=range(5), xticklabels=["-2", "-1", "0", "+1", "+2"], yticks=range(most_heads),
            xlabel="key offset (tokens)", ylabel="head (grey: none)",
            title="Attention mass per offset (dark 0, yellow 1)")
    ax2.grid(False)
    live(star, legend, image, ax1.title)

    def update(r: dict) -> None:
        star.set_data([res.n_heads.index(r["n_heads"])], [r["pruned_acc"]])
        profile = np.full((most_heads, 5), np.nan)  # rows past the chosen model's heads stay NaN: drawn grey
        profile[: r["n_heads"]] = r["profile"]
        image.set_data(profile)
        removed = "" if r["remove"] == "none" else f", head {r['remove']} removed"
        ax1.set_title(f"★ {r['n_heads']} head{'s' * (r['n_heads'] > 1)}, seed {r['seed']}{removed}")

    update(r)
    return update


def readout_view(m: int, heads: str, left_weight: float) -> dict:
    """pair_readout for the demo: heads='one head' uses left_weight, 'two heads' gives each neighbour its own head."""
    r = pair_readout(m, 16, None if heads == "two heads" else left_weight)
    r["note"] = (f"{r['collisions']} of {m * m * (m * m - 1) // 2} pairs of pairs land on the same vector"
                 if r["collisions"] else "every ordered pair has its own vector")
    return r


READOUT_VIEW = 1.15  # plot_readout's axes: ±1 (the farthest point) plus room for its label


@functools.lru_cache(maxsize=64)
def _point_label(text: str) -> TextPath:
    """`text` in 8 pt as a path, in points, 4 pt up and right of the point it labels (as an annotation would be)."""
    return TextPath((4, 4), text, size=8)


def plot_readout(fig, r: dict) -> Update:
    """Everything that moves is live: the points, their labels and the title. The points are scaled so that the
    farthest one from their centre is at distance 1: the output of two heads is about 4x larger than one head's
    mix (its projections are not normalised), and the axes could not be fixed otherwise. The scale is arbitrary
    anyway; what the figure shows is which pairs coincide."""
    fig.set_layout_engine("none")  # fixed margins: constrained layout would cost as much as the drawing
    ax = fig.add_axes((0.12, 0.14, 0.84, 0.74))
    points = ax.scatter([0.0], [0.0], c=[0.0], cmap="viridis", s=60, alpha=0.6)
    # The labels as one collection of text paths: 25 annotations would take ~150 ms to draw on every change.
    labels = PathCollection([], offsets=np.zeros((0, 2)), offset_transform=ax.transData,
                            transform=points_to_pixels(fig),
                            facecolor=matplotlib.rcParams["text.color"], edgecolor="none", zorder=3)
    ax.add_collection(labels, autolim=False)
    ax.set(xlim=(-READOUT_VIEW, READOUT_VIEW), ylim=(-READOUT_VIEW, READOUT_VIEW),
           xlabel="first principal direction (farthest point = 1)", ylabel="second principal direction")
    live(points, labels, ax.title)

    def update(r: dict) -> None:
        farthest = np.linalg.norm(r["xy"], axis=1).max()
        xy = r["xy"] / max(farthest, 1e-12)  # (m^2, 2), centred by pair_readout: within the unit disc (0 if all coincide)
        m = r["m"]
        points.set_offsets(xy)
        points.set_array(np.array([a for a, _ in r["pairs"]], dtype=float))
        points.set_clim(0, m - 1)
        labelled = r["pairs"] if m <= 5 else []  # labels stay readable up to 25 pairs
        labels.set_paths([_point_label(f"{a + 1}{b + 1}") for a, b in labelled])
        labels.set_offsets(xy[: len(labelled)])
        w = r["left_weight"]
        who = "two heads" if w is None else f"one head, weights ({w:.2f}, {1 - w:.2f})"
        ax.set_title(f"Each pair ab = (x[t-1], x[t+1]), colour = a: {who}", fontsize=10)

    update(r)
    return update

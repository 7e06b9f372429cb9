"""Notebook 05: why do queries and keys use different weight matrices?

Compute functions (tensors in, dicts out, seeded), plot functions `plot_x(fig, result)` and the demos.

With one matrix W for both, the score matrix S = X W W^T X^T is symmetric positive semi-definite, and by
Cauchy-Schwarz S_ii = ||q_i||^2 beats S_ij = q_i.q_j unless q_j is longer: the diagonal tends to win.
A symmetric S also scores "i looks at j" exactly as "j looks at i", so it cannot express a directed
relation such as "attend to the previous token" without a mask or position-dependent tricks.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from qalib.nn.positions import offset_matrix, sinusoidal
from qalib.nn.pretrained import real_model
from qalib.nn.validate import choice, int_in, positive, seed_list
from qalib.notebook.drawing import Change, Update, fixed_or_nice, live, set_limits


INPUT_KINDS = ("gaussian", "layernorm", "pretrained")
FORMS = ("separate", "symmetric part", "shared (PSD)", "shared + mask self", "shared + causal + mask self")
MAX_TOKENS = 48  # where the demos' n sliders end
SENTENCE = (
    "The interviewer asked why a transformer keeps two different matrices for queries and keys, and the "
    "candidate answered that one shared matrix would make every token prefer itself, so the attention map "
    "would collapse onto its diagonal and could not tell the previous word from the next one."
)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def pretrained_embeddings(text: str = SENTENCE) -> torch.Tensor:
    """(T, 384) output of all-MiniLM-L6-v2's embedding layer (word + segment + position, LayerNorm) for `text`."""
    model, tok = real_model()
    with torch.no_grad():
        out = model(**tok(text), return_internals=True)
    return out.internals["embeddings.out"][0].clone()


def make_inputs(kind: str, n: int, d: int, seed: int = 0) -> torch.Tensor:
    """(n, d) token vectors: iid N(0, 1); LayerNorm of N(0, 1) rows with very different norms (every row then
    has norm sqrt(d)); or the checkpoint's embeddings of SENTENCE (d is then 384, its first n word pieces)."""
    choice("kind", kind, INPUT_KINDS)
    n = int_in("n", n, 2, 4096)
    d = int_in("d", d, 1, 4096)
    if kind == "pretrained":
        x = pretrained_embeddings()
        if n > x.shape[0]:
            raise ValueError(f"n must be <= {x.shape[0]} for kind='pretrained' (the sentence has {x.shape[0]} word pieces), got {n}")
        return x[:n]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    if kind == "layernorm":
        x = x * torch.exp(torch.randn(n, 1, generator=g))  # norms spread over a factor ~ e^2 ...
        x = F.layer_norm(x, (d,), eps=1e-12)                 # ... and LayerNorm (BERT eps) makes them all sqrt(d)
    return x


def random_scores(x: torch.Tensor, tied: bool, d_head: int | None = None, seed: int = 0) -> torch.Tensor:
    """S = (x W_q)(x W_k)^T / sqrt(d_head) with W entries N(0, 1/d) (unit-variance projections); W_k = W_q if tied."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a (n, d) tensor, got {getattr(x, 'shape', type(x))}")
    d = x.shape[1]
    d_head = d if d_head is None else int_in("d_head", d_head, 1, 4096)
    g = torch.Generator().manual_seed(seed + 1000)
    w_q = torch.randn(d, d_head, generator=g) / math.sqrt(d)
    w_k = w_q if tied else torch.randn(d, d_head, generator=g) / math.sqrt(d)
    x = x.float()
    return (x @ w_q) @ (x @ w_k).T / math.sqrt(d_head)  # (n, n)


def diagonal_stats(scores: torch.Tensor) -> dict[str, float]:
    """Fraction of rows whose maximum is on the diagonal, mean softmax probability on the diagonal, chance 1/n."""
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square (n, n) tensor, got {getattr(scores, 'shape', type(scores))}")
    n = scores.shape[0]
    argmax_diag = (scores.argmax(-1) == torch.arange(n)).float().mean()
    p_diag = scores.float().softmax(-1).diagonal().mean()
    return {"argmax_diag": float(argmax_diag), "p_diag": float(p_diag), "chance": 1.0 / n}


def diagonal_sweep(ds, ns, kind: str = "gaussian", seeds=range(5)) -> dict:
    """Fraction of rows with argmax on the diagonal for every (d, n), tied and separate: mean and std over seeds."""
    seeds = seed_list("seeds", seeds)
    if not ds or not ns:
        raise ValueError("ds and ns must be non-empty")
    out = {"ds": list(ds), "ns": list(ns), "kind": kind, "n_seeds": len(seeds)}
    for tied in (True, False):
        vals = np.array([[[diagonal_stats(random_scores(make_inputs(kind, n, d, s), tied, seed=s))["argmax_diag"]
                           for s in seeds] for n in ns] for d in ds])  # (len(ds), len(ns), seeds)
        key = "shared" if tied else "separate"
        out[key], out[key + "_std"] = vals.mean(-1), vals.std(-1)
    return out


def plot_diagonal_sweep(fig, r) -> None:
    ax = fig.add_subplot()
    colours = [f"C{i}" for i in range(len(r["ns"]))]
    for j, n in enumerate(r["ns"]):
        for key, style in (("shared", "-o"), ("separate", "--s")):
            m, s = r[key][:, j], r[key + "_std"][:, j]
            ax.errorbar(r["ds"], m, yerr=s, fmt=style, color=colours[j], capsize=3, ms=4,
                        label=f"{key}, n={n}")
    ax.set(xscale="log", xlabel="width d = d_head (log scale)", ylabel="rows whose max is on the diagonal",
           ylim=(-0.03, 1.03), title=f"Diagonal wins with tied W ({r['kind']} inputs, {r['n_seeds']} seeds, ± std)")
    ax.set_xticks(r["ds"], [str(d) for d in r["ds"]])
    ax.legend(fontsize=7, ncol=2)


# ---------------------------------------------------------------------------------------------
# Demo 1: tied or separate, d, n, inputs -> attention heatmap and diagonal statistics
# ---------------------------------------------------------------------------------------------
def diagonal_demo_compute(d: int = 32, n: int = 16, kind: str = "gaussian", tied: bool = True, seed: int = 0) -> dict:
    x = make_inputs(kind, n, d, seed)
    scores = random_scores(x, tied, d_head=min(x.shape[1], 64), seed=seed)
    stats = diagonal_stats(scores)
    note = f"kind='pretrained' uses the checkpoint's d = {x.shape[1]} (the d slider is ignored)" if kind == "pretrained" else ""
    return {"probs": scores.softmax(-1).numpy(), "scores": scores.numpy(), **stats, "d": x.shape[1], "n": n,
            "kind": kind, "tied": tied, "note": note}


def _attention_map(fig, ax, probs):
    """An (n, n) attention map stretched over its whole square panel whatever n is: the axes run from 0 to 1
    with no position ticks, so a new n only swaps the image's data (same axes, ticks and colour bar)."""
    image = ax.imshow(probs, cmap="viridis", vmin=0, vmax=1, extent=(0, 1, 1, 0))  # query 0 in the top row
    fig.colorbar(image, ax=ax, label="attention probability")
    ax.set(xticks=[], yticks=[], xlabel="key position j (0 at the left)", ylabel="query position i (0 at the top)")
    ax.grid(False)
    return image


def plot_diagonal_demo(fig, r) -> Update:
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    image = _attention_map(fig, ax1, r["probs"])
    labels = ["rows with argmax\non the diagonal", "mean p(i -> i)", "chance 1/n"]
    bars = ax2.bar(labels, np.zeros(len(labels)), color=["C0", "C1", "0.6"])
    ax2.set(ylim=(0, 1.05), ylabel="fraction / probability")
    ax2.tick_params(axis="x", labelsize=8)
    live(image, *bars, ax1.title, ax2.title)

    def update(r) -> None:
        image.set_data(r["probs"])
        for bar, height in zip(bars, (r["argmax_diag"], r["p_diag"], r["chance"])):
            bar.set_height(height)
        name = "shared W_q = W_k" if r["tied"] else "separate W_q, W_k"
        ax1.set_title(f"{name}: softmax(S), n={r['n']}, d={r['d']}")
        ax2.set_title(f"Diagonal statistics ({r['kind']} inputs)")

    update(r)
    return update


# ---------------------------------------------------------------------------------------------
# Directed relations: "attend k tokens back" with positions only
# ---------------------------------------------------------------------------------------------
def offset_form(k: int, d: int, form: str, base: float = 100.0) -> torch.Tensor:
    """Bilinear form A (d, d) on sinusoidal positions with score_ij = PE(i)^T A PE(j).

    separate: A = M_k, so score_ij = PE(i).PE(j + k) peaks at j = i - k (W_q = I, W_k = M_k^T: a rotation).
    symmetric part: (A + A^T) / 2, the best any symmetric form can do in the least-squares sense.
    shared (PSD): the symmetric part with negative eigenvalues clipped: what W W^T can realise.
    """
    choice("form", form, FORMS)
    m = offset_matrix(k, d, base)
    if form == "separate":
        return m
    sym = (m + m.T) / 2
    if form == "symmetric part":
        return sym
    evals, evecs = torch.linalg.eigh(sym)
    return evecs @ torch.diag(evals.clamp(min=0)) @ evecs.T


def directed_scores(n: int = 16, k: int = 1, form: str = "separate", sharpness: float = 1.0, d: int = 64,
                    base: float = 100.0) -> dict:
    """Scores, masked attention and per-row margins of 'k back' over 'k forward' for a positions-only form."""
    n = int_in("n", n, 3, 512)
    k = int_in("k", k, 1, n - 1)
    sharpness = positive("sharpness", sharpness)
    pe = sinusoidal(n, d, base).double()
    scores = sharpness * pe @ offset_form(k, d, form, base) @ pe.T / math.sqrt(d)  # (n, n)
    mask = torch.ones(n, n, dtype=torch.bool)
    if "mask self" in form:
        mask &= ~torch.eye(n, dtype=torch.bool)
    if "causal" in form:
        mask &= torch.ones(n, n, dtype=torch.bool).tril()
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)  # row 0 of causal+mask: empty
    rows = torch.arange(k, max(k, n - k))  # rows where both i - k and i + k exist (none if n <= 2k)
    margin = scores[rows, rows - k] - scores[rows, rows + k]
    target = torch.arange(k, n)
    return {"scores": scores.numpy(), "probs": probs.numpy(), "margin": margin.numpy(), "n": n, "k": k, "form": form,
            "p_target": float(probs[target, target - k].mean()), "asymmetry": float((scores - scores.T).norm() / scores.norm()),
            "note": "" if len(rows) else f"n={n} is too short to have a token k={k} back and k forward: no margins to show"}


# The margin is linear in the sharpness (0.1 to 10) and at most 2.3 logits at sharpness 1 (k = 4): a symlog axis up
# to MARGIN_VIEW shows it at every sharpness without moving, with a symmetric form's margin of 0 on the 0 line.
MARGIN_VIEW = 30.0
MARGIN_LINEAR = 0.1  # the symlog axis is linear within +-0.1 logits (the strip below 0 would show a negative margin)


def plot_directed(fig, r) -> Update:
    ax1, ax2 = fig.subplots(1, 2)
    image = _attention_map(fig, ax1, r["probs"])
    targets = ax1.scatter([], [], s=12, facecolors="none", edgecolors="C3")
    ax1.set_xlabel("key position j (0 at the left)\ncircles: the target j = i - k")  # not a legend: the live map would cover it
    ax2.axhline(0, color="0.5", lw=1)
    (margin,) = ax2.plot([], [], "o-", ms=3)
    ax2.set_yscale("symlog", linthresh=MARGIN_LINEAR)
    ticks = [0, 0.1, 1, 10]
    ax2.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax2.set(xlabel="query position i", ylabel="S[i, i-k] - S[i, i+k] (logits, symlog)")
    live(image, targets, margin, ax1.title, ax2.title)

    def update(r) -> Change | None:
        n, k = r["n"], r["k"]
        image.set_data(r["probs"])
        i = np.arange(k, n)
        targets.set_offsets(np.column_stack([i - k, i]) / n + 0.5 / n)  # (n - k, 2): cell centres (j, i), panel units
        margin.set_data(np.arange(k, n - k), r["margin"])  # rows k .. n-k-1 have a token k back and k forward
        ax1.set_title(f"{r['form']}: mass on target {r['p_target']:.2f}")
        ax2.set_title(f"Back-over-forward margin\n(||S - S^T|| / ||S|| = {r['asymmetry']:.2f})")
        largest = float(np.abs(r["margin"]).max(initial=0.0))
        top = fixed_or_nice(largest, MARGIN_VIEW)  # beyond the demo's range: 1-2-5 steps
        return set_limits(ax2, xlim=(-0.5, max(n, MAX_TOKENS) - 0.5), ylim=(-MARGIN_LINEAR, top))

    update(r)
    return update


# ---------------------------------------------------------------------------------------------
# In a real model: the per-head bilinear forms W_q^h^T W_k^h of all-MiniLM-L6-v2
# ---------------------------------------------------------------------------------------------
def qk_forms(model) -> torch.Tensor:
    """(L, H, d, d) bilinear forms A = W_q^h^T W_k^h: score_ij = x_i^T A x_j (+ bias terms) / sqrt(d_head)."""
    cfg = model.cfg
    if cfg.qk != "separate":
        raise ValueError(f"model.cfg.qk must be 'separate' to read W_q and W_k apart, got {cfg.qk!r}")
    d, h, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    forms = []
    for layer in model.layers:
        att = layer.attention
        wq, wk = (w.detach().double().view(h, dh, d) for w in (att.w_q, att.w_k))  # (d, d) -> (H, dh, d) per head
        forms.append(wq.transpose(1, 2) @ wk)              # (H, d, d)
    return torch.stack(forms)


def asymmetry(a: torch.Tensor) -> torch.Tensor:
    """||A - A^T||_F / ||A||_F over the last two dims: 0 symmetric, sqrt(2) for independent random factors, 2 antisymmetric."""
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"a must be square in its last two dims, got {tuple(a.shape)}")
    return (a - a.transpose(-1, -2)).flatten(-2).norm(dim=-1) / a.flatten(-2).norm(dim=-1).clamp_min(1e-30)


def pretrained_asymmetry(model, seed: int = 0) -> dict:
    """Per (layer, head) asymmetry of the checkpoint's forms, and the same for random W_q, W_k of equal shapes."""
    forms = qk_forms(model)
    l, h, d, _ = forms.shape
    g = torch.Generator().manual_seed(seed)
    dh = model.cfg.d_head
    rand = torch.randn(h, dh, d, generator=g, dtype=torch.float64)
    rand_k = torch.randn(h, dh, d, generator=g, dtype=torch.float64)
    rand_forms = rand.transpose(1, 2) @ rand_k           # independent random W_q, W_k
    rand_shared = rand.transpose(1, 2) @ rand            # random W_q = W_k
    return {"asym": asymmetry(forms).numpy(), "random": asymmetry(rand_forms).numpy(),
            "self_z": self_preference(forms).numpy(), "random_self_z": self_preference(rand_forms).numpy(),
            "random_shared_self_z": self_preference(rand_shared).numpy(),
            "forms_example": forms[0, 0, :48, :48].numpy()}


def self_preference(a: torch.Tensor) -> torch.Tensor:
    """tr(A) / ||A||_F: for isotropic x, y, the mean self-score E[x^T A x] in units of the std of a cross-score x^T A y.
    >= 1 for any A = W W^T (shared), about sqrt(rank) for a random one; near 0 for independent random factors."""
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"a must be square in its last two dims, got {tuple(a.shape)}")
    return a.diagonal(dim1=-2, dim2=-1).sum(-1) / a.flatten(-2).norm(dim=-1).clamp_min(1e-30)


def plot_pretrained_asymmetry(fig, r) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    im = ax1.imshow(r["asym"], cmap="cividis", vmin=0, vmax=2)
    fig.colorbar(im, ax=ax1, label="||A - A^T|| / ||A||  (0 = symmetric)")
    ax1.set(title="Asymmetry of W_q^T W_k per head", xlabel="head", ylabel="layer")
    ax1.grid(False)
    a = r["forms_example"]
    lim = float(np.abs(a).max())
    im2 = ax2.imshow(a, cmap="RdBu_r", vmin=-lim, vmax=lim)
    fig.colorbar(im2, ax=ax2, label="entry of A")
    ax2.set(title="Layer 0, head 0: A[:48, :48]", xlabel="key feature", ylabel="query feature")
    ax2.grid(False)


def pretrained_diagonal(model, tok, text: str = SENTENCE) -> dict:
    """Layer 0 of the checkpoint on `text`: per head, rows whose score argmax is the diagonal, with the real
    separate q, k and with k replaced by q (what a shared W_q would give on the same embeddings)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    with torch.no_grad():
        internals = model(**tok(text), return_internals=True).internals
    q, k = internals["layer0.q"][0], internals["layer0.k"][0]  # (H, T, dh)
    t = q.shape[1]
    eye = torch.arange(t)

    def frac(s):  # (H, T, T) -> (H,)
        return (s.argmax(-1) == eye).double().mean(-1).numpy()

    return {"separate": frac(q @ k.transpose(-1, -2)), "shared_q": frac(q @ q.transpose(-1, -2)),
            "shared_k": frac(k @ k.transpose(-1, -2)), "n_tokens": t, "chance": 1.0 / t}


@torch.no_grad()
def init_diagonal(cfg, n_tokens: int = 64, seed: int = 0) -> dict[str, float]:
    """A freshly initialised MiniBert(cfg) on random tokens: layer-0 rows whose argmax is the diagonal, and the
    mean attention probability on the diagonal (the softmax mass the source article says 'approaches 1')."""
    from qalib.nn.model import MiniBert

    n_tokens = int_in("n_tokens", n_tokens, 2, cfg.max_len)
    torch.manual_seed(seed)
    model = MiniBert(cfg).eval()
    ids = torch.randint(5, cfg.vocab_size, (4, n_tokens), generator=torch.Generator().manual_seed(seed))
    probs = model(ids, return_internals=True).internals["layer0.probs"]  # (B, H, T, T)
    eye = torch.arange(n_tokens)
    return {"argmax_diag": float((probs.argmax(-1) == eye).float().mean()),
            "p_diag": float(probs.diagonal(dim1=-2, dim2=-1).mean()), "chance": 1.0 / n_tokens}

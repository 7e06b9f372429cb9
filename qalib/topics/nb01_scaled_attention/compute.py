"""Notebook 01: why divide q.k by sqrt(d_k) before the softmax? (Vaswani et al. 2017, sec. 3.2.1, footnote 4)

Compute functions (tensors/numbers in, dicts out, seeded), their plots, and the two demos.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from qalib.nn.attention import attention, entropy, softmax_jacobian
from qalib.nn.config import SCALINGS
from qalib.nn.validate import choice, float_in, int_in, slider_int
from qalib.notebook.drawing import Change, Update, live


INITS = ("xavier_head", "xavier_full", "bert_0.02")


def scale_factor(scaling: str, d_k: int) -> float:
    """The number q.k is multiplied by: 1/sqrt(d_k) (the paper), 1 (none) or 1/d_k."""
    choice("scaling", scaling, SCALINGS)
    int_in("d_k", d_k, 1, 1 << 20)
    return {"inv_sqrt_dk": d_k ** -0.5, "none": 1.0, "inv_dk": 1.0 / d_k}[scaling]


# ---------------------------------------------------------------------------------------------
# 1. Var(q.k) = d_k under the footnote's assumptions, and what projections do to it
# ---------------------------------------------------------------------------------------------
def dot_product_variance(d_ks=(4, 16, 64, 256, 1024), n: int = 8000, seed: int = 0) -> dict:
    """q, k with independent N(0, 1) components: sample variance of q.k and of q.k / sqrt(d_k)."""
    int_in("n", n, 100, 10**6)
    d_ks = [int_in("d_k", d, 1, 1 << 14) for d in d_ks]
    g = torch.Generator().manual_seed(seed)
    raw, mean = [], []
    for d in d_ks:
        dots = (torch.randn(n, d, generator=g, dtype=torch.float64) * torch.randn(n, d, generator=g, dtype=torch.float64)).sum(1)
        raw.append(float(dots.var()))
        mean.append(float(dots.mean()))
    raw = np.array(raw)
    return {"d_k": np.array(d_ks), "var_raw": raw, "var_scaled": raw / np.array(d_ks), "mean_raw": np.array(mean)}


def projected_score_variance(x: torch.Tensor, d_k: int = 32, init: str = "xavier_head", seed: int = 0) -> dict:
    """Scores (x W_q)(x W_k)^T / sqrt(d_k) for inputs x (N, d_in) and random projections.

    init: "xavier_head" Glorot normal for a (d_in, d_k) head matrix, std sqrt(2 / (d_in + d_k));
          "xavier_full" Glorot for the full (d_in, d_in) matrix a head takes d_k columns of, std sqrt(1 / d_in);
          "bert_0.02" BERT's N(0, 0.02^2).
    Returns the variance of the scaled scores over all pairs (i, j), of q's components, and E[x^2].
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be a (N >= 2, d_in) tensor, got {getattr(x, 'shape', type(x))}")
    choice("init", init, INITS)
    d_k = int_in("d_k", d_k, 1, 4096)
    d_in = x.shape[1]
    std = {"xavier_head": math.sqrt(2 / (d_in + d_k)), "xavier_full": math.sqrt(1 / d_in), "bert_0.02": 0.02}[init]
    g = torch.Generator().manual_seed(seed)
    x = x.detach().double()
    w_q = torch.randn(d_in, d_k, generator=g, dtype=torch.float64) * std
    w_k = torch.randn(d_in, d_k, generator=g, dtype=torch.float64) * std
    q, k = x @ w_q, x @ w_k  # (N, d_k)
    scores = q @ k.T / math.sqrt(d_k)  # (N, N)
    return {"init": init, "std": std, "var_scaled": float(scores.var()), "var_q": float(q.var()),
            "x_sq": float(x.pow(2).mean()), "predicted_var_scaled": (d_in * std**2 * float(x.pow(2).mean())) ** 2}


# ---------------------------------------------------------------------------------------------
# 2. Saturation: softmax([a, a, 2a]) and the Jacobian diag(y) - y y^T
# ---------------------------------------------------------------------------------------------
def saturation(a: float, temperature: float = 1.0) -> dict:
    """softmax([a, a, 2a] / T), its Jacobian J, ||J||_F and dy_3/dz (the last row of J), in float64."""
    a, temperature = float_in("a", a, 0, 1e4), float_in("temperature", temperature, 1e-3, 1e3)
    z = torch.tensor([a, a, 2 * a], dtype=torch.float64) / temperature
    y = torch.softmax(z, dim=0)
    jac = softmax_jacobian(y)
    out = {"a": float(a), "temperature": float(temperature), "logits": z.numpy(), "probs": y.numpy(),
           "jacobian": jac.numpy(), "jac_norm": float(jac.norm()), "grad_y3": jac[2].numpy()}
    if out["jac_norm"] < 1e-6:
        out["note"] = "saturated: y is one-hot to machine precision and every gradient through the softmax is ~0"
    return out


def saturation_curve(a_values) -> dict:
    """y_3 and ||J||_F for softmax([a, a, 2a]) at each a (vectorised, float64)."""
    a = np.asarray(a_values, dtype=float)
    if a.ndim != 1 or not np.all(np.isfinite(a)) or (a < 0).any():
        raise ValueError("a_values must be a 1-d sequence of finite numbers >= 0")
    z = np.stack([a, a, 2 * a], axis=1)                        # (n, 3)
    y = np.exp(z - z.max(1, keepdims=True))
    y /= y.sum(1, keepdims=True)
    jac = y[:, :, None] * np.eye(3) - y[:, :, None] * y[:, None, :]  # (n, 3, 3) = diag(y) - y y^T
    return {"a": a, "y3": y[:, 2], "jac_norm": np.linalg.norm(jac, axis=(1, 2))}


# ---------------------------------------------------------------------------------------------
# 3. Attention with random unit-variance q, k: entropy, max prob, ||J|| versus d_k and the scaling
# ---------------------------------------------------------------------------------------------
def attention_stats(d_k: int, scaling: str = "inv_sqrt_dk", n_queries: int = 8, n_keys: int = 16, seed: int = 0) -> dict:
    """Logits, probabilities, mean entropy (nats), mean max probability and mean per-row ||J||_F."""
    d_k = int_in("d_k", d_k, 1, 4096)
    n_queries = int_in("n_queries", n_queries, 1, 4096)
    n_keys = int_in("n_keys", n_keys, 2, 1024)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_queries, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(n_keys, d_k, generator=g, dtype=torch.float64)
    res = attention(q, k, k, scale=scale_factor(scaling, d_k))
    jac = softmax_jacobian(res.probs)  # (n_queries, n_keys, n_keys)
    out = {"d_k": d_k, "scaling": scaling, "scores": res.scores.numpy(), "probs": res.probs.numpy(),
           "entropy": float(entropy(res.probs).mean()), "max_entropy": math.log(n_keys),
           "max_prob": float(res.probs.max(-1).values.mean()), "jac_norm": float(jac.flatten(1).norm(dim=1).mean()),
           "score_std": float(res.scores.std())}
    if out["max_prob"] > 0.99:
        out["note"] = "near one-hot: almost no gradient flows back through the softmax"
    elif out["entropy"] > 0.99 * out["max_entropy"]:
        out["note"] = "near uniform: every key gets about the same weight, the query hardly matters"
    return out


def attention_sweep(d_ks=(4, 16, 64, 256, 1024), scalings=SCALINGS, n_queries: int = 512, n_keys: int = 16,
                    seed: int = 0) -> dict:
    """{scaling: {"entropy", "max_prob", "jac_norm": arrays over d_k}} plus "d_k" and "max_entropy"."""
    out = {"d_k": np.array(d_ks), "max_entropy": math.log(n_keys)}
    for s in scalings:
        rows = [attention_stats(d, s, n_queries, n_keys, seed) for d in d_ks]
        out[s] = {m: np.array([r[m] for r in rows]) for m in ("entropy", "max_prob", "jac_norm")}
    return out


def additive_vs_dot(d_ks=(4, 16, 64, 256, 1024), d_a: int = 64, n_queries: int = 256, n_keys: int = 16,
                    seed: int = 0) -> dict:
    """Score standard deviation against d_k for unit-variance q, k: the dot product unscaled and scaled by
    1/sqrt(d_k), and additive scores v . tanh(W_q q + W_k k) (Bahdanau et al.) with W ~ N(0, 1/d_k) (so each
    pre-activation has unit variance) and one v ~ N(0, 1/d_a) for every d_k. |additive score| <= ||v||_1 at any d_k."""
    d_a = int_in("d_a", d_a, 1, 4096)
    n_queries = int_in("n_queries", n_queries, 1, 4096)
    n_keys = int_in("n_keys", n_keys, 1, 1024)
    out = {"d_k": np.array(d_ks), "dot": [], "scaled": [], "additive": [], "additive_max": [], "bound": []}
    v = torch.randn(d_a, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) / math.sqrt(d_a)
    for d_k in d_ks:
        d_k = int_in("d_ks", d_k, 1, 4096)
        g = torch.Generator().manual_seed(seed + 1)
        q = torch.randn(n_queries, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(n_keys, d_k, generator=g, dtype=torch.float64)
        w_q, w_k = (torch.randn(d_k, d_a, generator=g, dtype=torch.float64) / math.sqrt(d_k) for _ in range(2))
        dot = q @ k.T                                                        # (queries, keys)
        additive = torch.tanh((q @ w_q)[:, None, :] + (k @ w_k)[None, :, :]) @ v  # (queries, keys, d_a) -> (queries, keys)
        out["dot"].append(float(dot.std()))
        out["scaled"].append(float((dot / math.sqrt(d_k)).std()))
        out["additive"].append(float(additive.std()))
        out["additive_max"].append(float(additive.abs().max()))
        out["bound"].append(float(v.abs().sum()))
    return {k: (np.array(v) if isinstance(v, list) else v) for k, v in out.items()}


def layernorm_after_saturation(scales=(1.0, 10.0, 100.0), n_keys: int = 16, d: int = 64, seed: int = 0) -> dict:
    """Attention out = softmax(a z) V for one query, then a LayerNorm (no learned gain) on it. z: random scores
    divided by the gap between the best and the second-best, so that at scale a the best key leads by exactly a;
    V: (n_keys, d). For each scale a: the gradient norm with respect to z of <g, out> and of <g, LN(out)> for a
    random upstream g, and how far LN(out) is from LN of the single value row the softmax picked."""
    n_keys = int_in("n_keys", n_keys, 2, 1024)
    d = int_in("d", d, 2, 4096)
    g = torch.Generator().manual_seed(seed)
    z0 = torch.randn(n_keys, generator=g, dtype=torch.float64)
    top2 = z0.topk(2).values
    z0 = z0 / (top2[0] - top2[1])  # the best key leads the runner-up by 1 (a tie has probability 0)
    values = torch.randn(n_keys, d, generator=g, dtype=torch.float64)
    upstream = torch.randn(d, generator=g, dtype=torch.float64)
    norm = lambda x: torch.nn.functional.layer_norm(x, (d,))  # noqa: E731
    out = {"scale": np.array(scales, dtype=float), "grad_plain": [], "grad_ln": [], "ln_gap": [], "max_prob": []}
    for a in scales:
        a = float_in("scales", a, 0)
        for key, head in (("grad_plain", lambda o: o), ("grad_ln", norm)):
            z = z0.clone().requires_grad_(True)
            (head(torch.softmax(a * z, 0) @ values) @ upstream).backward()
            out[key].append(float(z.grad.norm()))
        p = torch.softmax(a * z0, 0)
        out["max_prob"].append(float(p.max()))
        out["ln_gap"].append(float((norm(p @ values) - norm(values[p.argmax()])).abs().max()))
    return {k: (np.array(v) if isinstance(v, list) else v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# 4. Softmax + cross-entropy does not saturate; softmax + squared error does
# ---------------------------------------------------------------------------------------------
def ce_vs_mse(gaps=(1.0, 5.0, 10.0, 20.0), n_classes: int = 10) -> dict:
    """Logits z = gap at class 0, 0 elsewhere; target class 1 (confidently wrong).
    Gradient norm w.r.t. z of CE = -log y_1 (closed form y - t) and of MSE = 1/2 ||y - t||^2 (closed form J (y - t))."""
    n_classes = int_in("n_classes", n_classes, 2, 10000)
    ce, mse, mse_closed = [], [], []
    for gap in gaps:
        gap = float_in("gaps", gap, 0)
        t = torch.zeros(n_classes, dtype=torch.float64)
        t[1] = 1.0
        norms = []
        for loss_fn in (lambda y: -torch.log(y[1]), lambda y: 0.5 * (y - t).pow(2).sum()):
            z = torch.zeros(n_classes, dtype=torch.float64)
            z[0] = gap
            z.requires_grad_(True)
            loss_fn(torch.softmax(z, 0)).backward()
            norms.append(float(z.grad.norm()))
        y = torch.softmax(torch.tensor([gap] + [0.0] * (n_classes - 1), dtype=torch.float64), 0)
        ce.append(norms[0])
        mse.append(norms[1])
        mse_closed.append(float((softmax_jacobian(y) @ (y - t)).norm()))
    return {"gap": np.array(gaps, dtype=float), "grad_ce": np.array(ce), "grad_mse": np.array(mse),
            "grad_mse_closed": np.array(mse_closed)}


# ---------------------------------------------------------------------------------------------
# 5. A real model: pre-softmax scores per layer and per head
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def real_score_stats(model, enc: dict) -> dict:
    """Scores of every layer of a MiniBert on one unpadded input (scaled by the model's 1/sqrt(d_head)).

    Returns per layer: variance of the scaled scores (all heads pooled), per-head std, and the variance
    the same scores would have without the scaling (times d_head)."""
    if enc["attention_mask"].min() < 1:
        raise ValueError("enc must be one unpadded input (padding puts -inf into the scores)")
    internals = model(**enc, return_internals=True).internals
    cfg = model.cfg
    var_layer, head_std, ent, rows = [], [], [], []
    for i in range(cfg.n_layers):
        s = internals[f"layer{i}.scores"][0].double()  # (H, T, T), already times cfg.scale
        var_layer.append(float(s.var()))
        head_std.append(s.flatten(1).std(1).numpy())
        ent.append(float(entropy(internals[f"layer{i}.probs"][0].double()).mean()))
        rows.append(s.flatten().numpy())
    var_layer = np.array(var_layer)
    return {"scale": cfg.scale, "d_head": cfg.d_head, "var_scaled": var_layer, "var_unscaled": var_layer / cfg.scale**2,
            "head_std": np.stack(head_std), "entropy": np.array(ent), "scores": rows,
            "n_tokens": int(enc["input_ids"].shape[1])}


@torch.no_grad()
def component_dependence(model, enc: dict, seed: int = 0) -> dict:
    """How far a trained model's query components are from the footnote's "independent, mean 0, variance 1", per
    layer: the mean |correlation| between two components of one head's q over the input's tokens, the same after
    shuffling each component's values over the tokens on its own (what independence with these marginals would give
    at this many tokens), the mean |mean| / std of a component, and the mean component variance."""
    if enc["attention_mask"].min() < 1:
        raise ValueError("enc must be one unpadded input (padding tokens would enter the statistics)")
    internals = model(**enc, return_internals=True).internals
    g = torch.Generator().manual_seed(seed)
    out = {"corr": [], "corr_shuffled": [], "mean_over_std": [], "variance": []}
    for i in range(model.cfg.n_layers):
        q = internals[f"layer{i}.q"][0].double()                      # (H, T, d_head)
        H, T, d = q.shape
        shuffled = torch.stack([q[h, torch.randperm(T, generator=g), j] for h in range(H) for j in range(d)])
        shuffled = shuffled.reshape(H, d, T).transpose(1, 2)         # (H, d, T) -> (H, T, d_head)
        off = ~torch.eye(d, dtype=torch.bool)
        for key, x in (("corr", q), ("corr_shuffled", shuffled)):
            out[key].append(float(torch.stack([torch.corrcoef(x[h].T)[off].abs().mean() for h in range(H)]).mean()))
        out["mean_over_std"].append(float((q.mean(1).abs() / q.std(1)).mean()))
        out["variance"].append(float(q.var(1).mean()))
    return {k: np.array(v) for k, v in out.items()} | {"n_tokens": int(enc["input_ids"].shape[1])}


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------
def plot_variance(fig, res) -> None:
    ax = fig.add_subplot()
    ax.loglog(res["d_k"], res["var_raw"], "o-", label="Var(q·k)")
    ax.loglog(res["d_k"], res["var_scaled"], "s-", label="Var(q·k / √d_k)")
    ax.loglog(res["d_k"], res["d_k"], "k:", label="d_k (footnote 4)")
    ax.set(xlabel="d_k (dimensions)", ylabel="variance over random q, k", title="Dot-product variance grows like d_k")
    ax.legend()


def plot_sweep(fig, res) -> None:
    axes = fig.subplots(1, 3)
    for i, s in enumerate(SCALINGS):
        if s not in res:
            continue
        for ax, m in zip(axes, ("entropy", "max_prob", "jac_norm")):
            ax.semilogx(res["d_k"], res[s][m], "o-", color=f"C{i}", label=s, base=2)
    axes[0].axhline(res["max_entropy"], color="grey", ls=":", label="uniform")
    axes[0].set(xlabel="d_k", ylabel="entropy (nats)", title="attention entropy")
    axes[1].set(xlabel="d_k", ylabel="mean max probability", title="largest weight", ylim=(0, 1.02))
    axes[2].set(xlabel="d_k", ylabel="mean ||J||_F", title="softmax Jacobian norm")
    axes[0].legend(fontsize=8)


LOGIT_VIEW = 10.0  # the histogram shows logits in [-10, 10]: beyond that a softmax row is one-hot in all but name


def plot_attention(fig, r) -> Update:
    """Fixed axes (unit-width bins over [-10, 10], outliers counted in the end bins; y = share of all logits),
    so moving d_k or the scaling only redraws the bars, the curve, the image and the titles."""
    ax1, ax2 = fig.subplots(1, 2)
    edges = np.arange(-LOGIT_VIEW, LOGIT_VIEW + 1)
    bars = ax1.bar(edges[:-1], np.zeros(len(edges) - 1), width=1.0, align="edge", color="C0", alpha=0.8)
    grid = np.linspace(-LOGIT_VIEW, LOGIT_VIEW, 200)
    # N(0, 1) as a share per unit-width bin (pdf x bin width): what unit-variance logits would give
    ax1.plot(grid, np.exp(-grid**2 / 2) / math.sqrt(2 * math.pi), "k:", label="N(0, 1)")
    ax1.set(xlim=(-LOGIT_VIEW, LOGIT_VIEW), ylim=(0, 1), xlabel="logit (scaled q·k), clipped to ±10",
            ylabel="share of logits per unit bin")
    ax1.legend(fontsize=8, loc="upper right")
    image = ax2.imshow(r["probs"], cmap="viridis", vmin=0, vmax=1, aspect="auto")  # dark = 0, yellow = 1
    ax2.set(xlabel="key", ylabel="query")
    live(*bars, image, ax1.title, ax2.title)

    def update(r) -> Change | None:
        s = np.clip(r["scores"].ravel(), -LOGIT_VIEW, LOGIT_VIEW)
        counts, _ = np.histogram(s, bins=edges)
        for bar, share in zip(bars, counts / s.size):
            bar.set_height(share)
        ax1.set_title(f"logits, std {r['score_std']:.3g}")
        ax2.set_title(f"weights (0..1): H={r['entropy']:.2f}/{r['max_entropy']:.2f} nats\n"
                      f"max p={r['max_prob']:.2f}, ||J||={r['jac_norm']:.3f}")
        if image.get_array().shape != r["probs"].shape:
            return Change.FIGURE  # another number of queries or keys: new axes
        image.set_data(r["probs"])
        return None

    update(r)
    return update


def plot_saturation(fig, r) -> Update:
    ax1, ax2 = fig.subplots(1, 2)
    probs = ax1.bar(["y1 (a)", "y2 (a)", "y3 (2a)"], r["probs"], color=["C0", "C0", "C1"])
    ax1.set(ylim=(0, 1), ylabel="probability")
    grads = ax2.bar(["∂y3/∂z1", "∂y3/∂z2", "∂y3/∂z3"], r["grad_y3"], color="C2")
    ax2.set(ylim=(-0.3, 0.3), ylabel="gradient (per unit logit)")
    live(*probs, *grads, ax1.title, ax2.title)

    def update(r) -> None:
        for bar, height in zip(probs, r["probs"]):
            bar.set_height(height)
        for bar, height in zip(grads, r["grad_y3"]):
            bar.set_height(height)
        ax1.set_title(f"softmax([a,a,2a]/T), a={r['a']:.3g}, T={r['temperature']:.3g}")
        ax2.set_title(f"row 3 of J; ||J||_F = {r['jac_norm']:.2e}")

    update(r)
    return update


def plot_saturation_curve(fig, c) -> None:
    ax1 = fig.add_subplot()
    ax1.semilogx(c["a"], c["y3"], color="C1", label="y3 = softmax([a,a,2a])_3")
    ax1.semilogx(c["a"], c["jac_norm"], color="C3", label="||J||_F")
    ax1.set(xlabel="a (logit magnitude)", ylabel="value", title="The softmax saturates as the logits grow")
    ax1.legend()


def plot_real_scores(fig, r) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    layers = np.arange(len(r["var_scaled"]))
    ax1.boxplot(r["scores"], positions=layers, showfliers=False)
    ax1.axhline(0, color="grey", lw=0.8)
    ax1.set(xlabel="layer", ylabel="scaled score q·k/√d_k", title="pre-softmax scores (whiskers 1.5 IQR)")
    im = ax2.imshow(r["head_std"], cmap="viridis", aspect="auto")
    fig.colorbar(im, ax=ax2, label="std of scaled scores")
    ax2.set(xlabel="head", ylabel="layer", title="score std per head")


# ---------------------------------------------------------------------------------------------
# Demos
# ---------------------------------------------------------------------------------------------
def attention_compute(d_k, scaling):
    return attention_stats(slider_int("d_k", d_k), scaling)  # the FloatLogSlider's 2.0 ** k

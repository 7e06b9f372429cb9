"""Notebook 03: why does the original Transformer multiply its embeddings by sqrt(d_model)?

Vaswani et al. 2017 sec. 3.4 ties the embedding table to the pre-softmax layer and multiplies it by
sqrt(d_model) on the way in. Whether that factor helps depends on how the table was initialised:
with std d^-1/2 (tensor2tensor, fairseq) a row has norm ~1 while a sinusoid has norm sqrt(d/2), and the
factor lifts the token to the same footing. This module measures norms, how well the token (and the
position) can be read back from embedding + PE, and what the tied output layer sees.

Compute functions are pure and seeded; plots take (fig, result).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from qalib.nn.positions import sinusoidal
from qalib.nn.validate import choice, int_in, positive, seed_list, sinusoid_width
from qalib.notebook.drawing import Change, Update, live, nice_ceiling, set_limits


# name -> (what it is, who uses it)
INITS = {
    "t2t": "normal, std d^-1/2 (tensor2tensor, fairseq)",
    "xavier": "Xavier uniform over (vocab, d) (Annotated Transformer)",
    "bert": "normal, std 0.02 (BERT)",
    "torch": "normal, std 1 (nn.Embedding default)",
}
D_CHOICES = (16, 32, 64, 128, 256, 512, 1024)
DEMO_D = (16, 64, 256, 512, 1024)  # the demos' slider: fewer stops, each one a visible change


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def init_std(init: str, vocab_size: int, d_model: int) -> float:
    """Standard deviation of one entry of a (vocab, d) table under each scheme (Xavier uniform: bound/sqrt(3))."""
    choice("init", init, INITS)
    int_in("vocab_size", vocab_size, 2)
    d = sinusoid_width("d_model", d_model)
    return {"t2t": d ** -0.5, "xavier": math.sqrt(2.0 / (vocab_size + d)), "bert": 0.02, "torch": 1.0}[init]


def init_table(init: str, vocab_size: int, d_model: int, seed: int = 0) -> torch.Tensor:
    """A freshly initialised (vocab, d) embedding table, float32."""
    std = init_std(init, vocab_size, d_model)
    g = torch.Generator().manual_seed(seed)
    if init == "xavier":  # uniform on [-a, a], a = sqrt(6 / (fan_in + fan_out)): torch.nn.init.xavier_uniform_
        a = math.sqrt(3.0) * std
        return (torch.rand(vocab_size, d_model, generator=g) * 2 - 1) * a
    return torch.randn(vocab_size, d_model, generator=g) * std


def expected_row_norm(init: str, vocab_size: int, d_model: int) -> float:
    """sqrt(E||e||^2) = sqrt(d) * std: 1 for t2t, whatever d is."""
    return math.sqrt(d_model) * init_std(init, vocab_size, d_model)


def scale_factor(d_model: int, scaled: bool) -> float:
    """The number the original Transformer multiplies the embedding rows by: sqrt(d_model), or 1."""
    return math.sqrt(sinusoid_width("d_model", d_model)) if scaled else 1.0


def norm_table(d_models=D_CHOICES, init: str = "t2t", vocab_size: int = 1000, n_positions: int = 128,
               seed: int = 0) -> dict:
    """Mean row norm of the token table (with and without sqrt(d)) and of the sinusoid, per d_model."""
    int_in("n_positions", n_positions, 1)
    ds = [sinusoid_width("d_model", d) for d in d_models]
    if not ds:
        raise ValueError("d_models must name at least one d_model")
    tok, pe = [], []
    for d in ds:
        tok.append(float(init_table(init, vocab_size, d, seed).norm(dim=1).mean()))
        pe.append(float(sinusoidal(n_positions, d).norm(dim=1).mean()))
    d_arr, tok, pe = np.array(ds), np.array(tok), np.array(pe)
    return {"d_model": d_arr, "init": init, "token": tok, "token_scaled": tok * np.sqrt(d_arr), "position": pe,
            "ratio": tok / pe, "ratio_scaled": tok * np.sqrt(d_arr) / pe}


# ---------------------------------------------------------------------------------------------
# Reading the token (and the position) back from embedding + PE
# ---------------------------------------------------------------------------------------------
def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def mixed_inputs(d_model: int, init: str = "t2t", factor: float = 1.0, vocab_size: int = 1000,
                 n_positions: int = 128, n_samples: int = 512, seed: int = 0) -> dict:
    """Sample (token, position) pairs and form x = factor * E[token] + PE[position] (the encoder's input)."""
    d = sinusoid_width("d_model", d_model)
    factor = positive("factor", factor)
    int_in("vocab_size", vocab_size, 2)
    int_in("n_positions", n_positions, 2)
    int_in("n_samples", n_samples, 1)
    table = init_table(init, vocab_size, d, seed)
    pe = sinusoidal(n_positions, d)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(vocab_size, (n_samples,), generator=g)
    positions = torch.randint(n_positions, (n_samples,), generator=g)
    x = factor * table[tokens] + pe[positions]  # (N, d)
    return {"table": table, "pe": pe, "tokens": tokens, "positions": positions, "x": x, "factor": factor}


def recovery(d_model: int, init: str = "t2t", factor: float = 1.0, vocab_size: int = 1000, n_positions: int = 128,
             n_samples: int = 512, seed: int = 0) -> dict:
    """How well x = factor * E[t] + PE[p] still tells t and p apart.

    token accuracy: the row of E with the largest cosine to x is E[t] (a tied output layer scores rows by dot product;
        cosine removes the row norms' own spread). position accuracy: the same against the PE rows.
    cos_token: cosine between x and the (scaled) token embedding; ratio: ||factor * e|| / ||PE||.
    """
    m = mixed_inputs(d_model, init, factor, vocab_size, n_positions, n_samples, seed)
    x_unit = _unit_rows(m["x"])
    tok_hat = (x_unit @ _unit_rows(m["table"]).T).argmax(dim=1)
    pos_hat = (x_unit @ _unit_rows(m["pe"]).T).argmax(dim=1)
    token_part = m["factor"] * m["table"][m["tokens"]]
    cos = (x_unit * _unit_rows(token_part)).sum(dim=1)
    ratio = token_part.norm(dim=1).mean() / m["pe"].norm(dim=1).mean()
    return {"d_model": d_model, "init": init, "factor": m["factor"],
            "token_accuracy": float((tok_hat == m["tokens"]).float().mean()),
            "position_accuracy": float((pos_hat == m["positions"]).float().mean()),
            "cos_token": cos.numpy(), "ratio": float(ratio), "chance": 1.0 / vocab_size}


def projected_recovery(d_model: int, init: str = "t2t", factor: float = 1.0, vocab_size: int = 1000,
                       n_positions: int = 128, n_samples: int = 512, seed: int = 0, tol: float = 1e-6) -> dict:
    """Is the token lost in x = factor * E[t] + PE[p], or only hard to read? One fixed linear map first: the projection
    P onto the orthogonal complement of the positions' span (the rows of PE, whose numerical rank is far below d), then
    the same nearest-row read-out as recovery(), on P x against the rows of E P. -> {"token_accuracy": with the
    projection, "rank": the positions' numerical rank (singular values above tol x the largest), "d_model"}"""
    m = mixed_inputs(d_model, init, factor, vocab_size, n_positions, n_samples, seed)
    _, sv, vt = torch.linalg.svd(m["pe"].double(), full_matrices=False)
    rank = int((sv > tol * sv[0]).sum())
    basis = vt[:rank]                                               # (rank, d): the positions' span
    proj = torch.eye(m["pe"].shape[1], dtype=torch.float64) - basis.T @ basis   # (d, d): removes it
    x, table = (m["x"].double() @ proj), (m["table"].double() @ proj)
    tok_hat = (_unit_rows(x) @ _unit_rows(table).T).argmax(dim=1)
    return {"token_accuracy": float((tok_hat == m["tokens"]).float().mean()), "rank": rank, "d_model": d_model}


def predicted_token_accuracy(ratio: float, d_model: int, vocab_size: int) -> float:
    """Gaussian approximation of recovery(...)['token_accuracy'] for random tables.

    With x = a u_t + p (||p|| = 1, a = token/position norm ratio, u unit rows), the score of the right row is
    a + N(0, 1/d) and each of the other V-1 rows scores N(0, (1 + a^2)/d). So accuracy =
    E_z[ Phi((a sqrt(d) + z) / sqrt(1 + a^2))^(V-1) ]: a signal-to-noise ratio sqrt(d) a / sqrt(1 + a^2).
    """
    ratio = positive("ratio", ratio)
    d = sinusoid_width("d_model", d_model)
    v = int_in("vocab_size", vocab_size, 2)
    z = torch.linspace(-8, 8, 801, dtype=torch.float64)
    w = torch.exp(-z**2 / 2) / math.sqrt(2 * math.pi) * (z[1] - z[0])  # standard normal density x dz
    log_phi = torch.special.log_ndtr((ratio * math.sqrt(d) + z) / math.sqrt(1 + ratio**2))
    return float(torch.sum(w * torch.exp((v - 1) * log_phi)))


def recovery_vs_d(init: str = "t2t", d_models=D_CHOICES, vocab_size: int = 1000, n_samples: int = 256,
                  seeds=(0,)) -> dict:
    """Token and position accuracy with and without sqrt(d), for each d_model: the mean over `seeds` (each seed
    draws its own table and samples, so n_samples x len(seeds) draws in all)."""
    seeds = seed_list("seeds", seeds)
    rows = {k: [] for k in ("token_none", "token_scaled", "pos_none", "pos_scaled", "cos_none", "cos_scaled")}
    for d in d_models:
        for tag, scaled in (("none", False), ("scaled", True)):
            runs = [recovery(d, init, scale_factor(d, scaled), vocab_size, n_samples=n_samples, seed=s) for s in seeds]
            rows[f"token_{tag}"].append(float(np.mean([r["token_accuracy"] for r in runs])))
            rows[f"pos_{tag}"].append(float(np.mean([r["position_accuracy"] for r in runs])))
            rows[f"cos_{tag}"].append(float(np.mean([r["cos_token"].mean() for r in runs])))
    return {"d_model": np.array(list(d_models)), "init": init, "draws": n_samples * len(seeds),
            **{k: np.array(v) for k, v in rows.items()}}


def recovery_vs_factor(d_model: int, init: str = "t2t", factors=None, vocab_size: int = 1000, n_positions: int = 128,
                       n_samples: int = 256, seed: int = 0) -> dict:
    """Token and position accuracy as the multiplier sweeps over many decades: too small loses the token,
    too large loses the position."""
    d = sinusoid_width("d_model", d_model)
    factors = np.logspace(-1, 3, 25) if factors is None else np.asarray(factors, dtype=float)
    m = mixed_inputs(d, init, 1.0, vocab_size, n_positions, n_samples, seed)
    e_unit, pe_unit = _unit_rows(m["table"]), _unit_rows(m["pe"])
    tok_part, pos_part = m["table"][m["tokens"]], m["pe"][m["positions"]]
    # x = f * tok + pos is linear in f: score every row once for each part, then mix (argmax ignores ||x||)
    tok_on_e, pos_on_e = tok_part @ e_unit.T, pos_part @ e_unit.T      # (N, V)
    tok_on_pe, pos_on_pe = tok_part @ pe_unit.T, pos_part @ pe_unit.T  # (N, P)
    tok_acc, pos_acc = [], []
    for f in factors:
        f = positive("factor", float(f))
        tok_acc.append(float(((f * tok_on_e + pos_on_e).argmax(1) == m["tokens"]).float().mean()))
        pos_acc.append(float(((f * tok_on_pe + pos_on_pe).argmax(1) == m["positions"]).float().mean()))
    return {"d_model": d, "init": init, "factors": factors, "token": np.array(tok_acc), "position": np.array(pos_acc),
            "row_norm": float(tok_part.norm(dim=1).mean()), "pe_norm": float(pos_part.norm(dim=1).mean())}


# ---------------------------------------------------------------------------------------------
# The tied output layer: logits = h E^T
# ---------------------------------------------------------------------------------------------
def tied_logits(d_model: int, init: str = "t2t", vocab_size: int = 1000, n_samples: int = 256, seed: int = 0) -> dict:
    """Logits of a LayerNorm-like hidden state (unit-variance entries, norm sqrt(d)) against a fresh table.

    Their std is sqrt(d) * std_init: 1 for t2t. Reports the initial cross-entropy against random labels next to
    log(V), the loss of a uniform guess."""
    d = sinusoid_width("d_model", d_model)
    table = init_table(init, vocab_size, d, seed)
    g = torch.Generator().manual_seed(seed + 2)
    h = torch.randn(int_in("n_samples", n_samples, 1), d, generator=g)
    logits = h @ table.T  # (N, V)
    labels = torch.randint(vocab_size, (n_samples,), generator=g)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    return {"d_model": d, "init": init, "logits": logits.flatten()[:4096].numpy(), "logit_std": float(logits.std()),
            "loss": float(loss), "uniform_loss": math.log(vocab_size)}


def component_variance(init: str, d_model: int, vocab_size: int, scaled: bool = True, seed: int = 0) -> float:
    """Variance of one entry of factor * E: 1 after sqrt(d) only when std_init = d^-1/2."""
    return float((scale_factor(d_model, scaled) * init_table(init, vocab_size, d_model, seed)).var())


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------
def plot_norms(fig, result: dict) -> None:
    ax = fig.add_subplot()
    d = result["d_model"]
    ax.loglog(d, result["token"], "o-", label="token row, no factor")
    ax.loglog(d, result["token_scaled"], "s-", label=r"token row $\times\sqrt{d}$")
    ax.loglog(d, result["position"], "^--", color="k", label=r"sinusoid $\sqrt{d/2}$")
    ax.set(xlabel="d_model", ylabel="mean L2 norm of a row", title=f"Row norms, init = {result['init']}")
    ax.legend(fontsize=8)


def plot_recovery_vs_d(fig, result: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    d = result["d_model"]
    ax1.semilogx(d, result["token_none"], "o-", label="token, no factor")
    ax1.semilogx(d, result["token_scaled"], "s-", label=r"token, $\times\sqrt{d}$")
    ax1.semilogx(d, result["pos_scaled"], "^:", label=r"position, $\times\sqrt{d}$")
    ax1.set(xlabel="d_model", ylabel="accuracy (nearest row by cosine)", ylim=(-0.02, 1.02),
            title=f"Read back from e + PE ({result['init']})")
    ax1.legend(fontsize=8)
    ax2.semilogx(d, result["cos_none"], "o-", label="no factor")
    ax2.semilogx(d, result["cos_scaled"], "s-", label=r"$\times\sqrt{d}$")
    ax2.set(xlabel="d_model", ylabel="mean cos(e + PE, e)", ylim=(0, 1), title="How much of the input is the token")
    ax2.legend(fontsize=8)


NORM_VIEW = (0.02, 5000.0)  # the demo's row norms run from 0.08 (std 0.02 at d=16) to 1024 (std 1 times sqrt(1024))


def plot_setting(fig, r: dict) -> Update:
    """The demo's three panels: norms, cosine histogram, accuracies.

    Fixed axes, so every setting redraws only the bars, the histogram and the numbers: the norms span four decades
    over the demo's settings (log scale), and the histogram's tallest bin holds from a tenth to all of the samples
    (square-root count scale, up to the number of samples)."""
    ax1, ax2, ax3 = fig.subplots(1, 3)
    norms = ax1.bar(["token\n(after factor)", "position"], [1.0, 1.0], color=["C0", "0.4"])
    values = [ax1.text(i, 1.0, "", ha="center", va="bottom", fontsize=9) for i in range(2)]
    ax1.set(yscale="log", ylim=NORM_VIEW, ylabel="mean L2 norm (log scale)")
    bins = np.linspace(-1, 1, 41)
    hist = ax2.stairs(np.zeros(len(bins) - 1), bins, fill=True, color="C1")
    n = len(r["cos_token"])
    ax2.set_yscale("function", functions=(lambda y: np.sqrt(np.maximum(y, 0)), np.square))
    ax2.set_yticks([t for t in (0, 10, 50, 100, 200, 500, 1000) if t <= n])
    ax2.set(xlim=(-1, 1), ylim=(0, n), xlabel="cos(e + PE, e)", ylabel="samples (square-root scale)",
            title="Token share of the input")
    accuracies = ax3.bar(["token", "position"], [0.0, 0.0], color=["C0", "0.4"])
    chance = ax3.axhline(r["chance"], color="k", ls=":", lw=1, label="token chance")
    # room above the bars for the legend: it is drawn once, under the bars that are redrawn
    ax3.set(ylim=(0, 1.2), yticks=np.linspace(0, 1, 5), ylabel="accuracy (nearest row)", title="Read back from e + PE")
    ax3.legend(fontsize=8, loc="upper center")
    live(*norms, *values, ax1.title, hist, *accuracies, chance)

    def update(r: dict) -> Change | None:
        for bar, text, v in zip(norms, values, (r["ratio"] * r["pe_norm"], r["pe_norm"])):
            bar.set_height(v)
            text.set(y=v, text=f"{v:.3g}")
        ax1.set_title(f"Norms: token/position {r['ratio']:.3g}")
        hist.set_data(np.histogram(r["cos_token"], bins=bins)[0])
        for bar, v in zip(accuracies, (r["token_accuracy"], r["position_accuracy"])):
            bar.set_height(v)
        chance.set_ydata([r["chance"]] * 2)
        return Change.FIGURE if len(r["cos_token"]) != n else None  # another sample count: another count axis

    update(r)
    return update


def plot_factor_sweep(fig, r: dict) -> Update:
    """Accuracy against the multiplier. The axes are fixed by the multipliers swept, so moving d, the init or your
    factor redraws only the curves, the vertical lines and the title (which carries their values)."""
    ax = fig.add_subplot()
    token = ax.semilogx(r["factors"], r["token"], "o-", label="token recovered")[0]
    position = ax.semilogx(r["factors"], r["position"], "s-", color="0.4", label="position recovered")[0]
    lines = [token, position, ax.axvline(1.0, color="C2", ls="--", label=r"$\sqrt{d}$"),
             ax.axvline(1.0, color="C3", ls=":", label="equal norms")]
    if "factor" in r:
        lines.append(ax.axvline(1.0, color="k", lw=2, alpha=0.5, label="your factor"))
    ax.set(xlabel="multiplier on the token rows", ylabel="accuracy (nearest row by cosine)", ylim=(-0.02, 1.02))
    ax.minorticks_off()  # keeps a full draw fast: log axes otherwise label many minor ticks
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: the curves never cover it
    live(*lines, ax.title)

    def update(r: dict) -> Change | None:
        token.set_data(r["factors"], r["token"])
        position.set_data(r["factors"], r["position"])
        sqrt_d, balance = math.sqrt(r["d_model"]), r["pe_norm"] / r["row_norm"]
        for line, x in zip(lines[2:], (sqrt_d, balance, r.get("factor"))):  # the last only where there is a factor
            line.set_xdata([x, x])
        yours = f", yours {r['factor']:.3g}" if "factor" in r else ""
        ax.set_title(f"Token vs position: d = {r['d_model']}, init = {r['init']}\n"
                     f"√d = {sqrt_d:.3g}, equal norms at {balance:.3g}{yours}")
        # the swept multipliers, with the margin autoscaling would give a log axis
        return set_limits(ax, xlim=(r["factors"].min() / 1.6, r["factors"].max() * 1.6))

    update(r)
    return update


LOGIT_VIEW = (1e-3, 1e3)  # |logit| over the demo's settings: std 0.08 (std-0.02 rows at d=16) to 32 (std 1 at d=1024)
COUNT_VIEW = 600  # the tallest bin of 4096 logits holds about 450 at every setting (see plot_tied_logits)


def plot_tied_logits(fig, r: dict) -> Update:
    """The size of the initial logits, |h . e_j|, on a fixed log axis with 10 bins per decade.

    Their std runs from 0.08 to 32 over the demo's settings; on a linear axis each would need its own scale. On a log
    axis every setting is a hump of the same height (a scaled |Gaussian|) sitting at its own size, and the count
    axis can stay fixed: its peak holds about 4096 * 0.11 = 450 of the 4096 logits."""
    ax = fig.add_subplot()
    edges = np.logspace(*np.log10(LOGIT_VIEW), 61)
    hist = ax.stairs(np.zeros(len(edges) - 1), edges, fill=True, color="C0")
    ax.set(xscale="log", xlim=LOGIT_VIEW, xlabel="|initial logit h . e_j| (log scale, clipped to 1e-3..1e3)",
           ylabel="count per 0.1 decade")
    live(hist, ax.title)

    def update(r: dict) -> Change | None:
        counts = np.histogram(np.clip(np.abs(r["logits"]), *LOGIT_VIEW), bins=edges)[0]
        hist.set_data(counts)
        ax.set_title(f"Tied output, init {r['init']}: std {r['logit_std']:.3g}, loss {r['loss']:.3g} "
                     f"vs log V {r['uniform_loss']:.3g}")
        return set_limits(ax, ylim=(0, max(COUNT_VIEW, nice_ceiling(counts.max()))))  # grows only past 500 in a bin

    update(r)
    return update


# ---------------------------------------------------------------------------------------------
# Demos
# ---------------------------------------------------------------------------------------------
def setting(d_model: int, init: str, scaled: bool) -> dict:
    r = recovery(d_model, init, scale_factor(d_model, scaled), vocab_size=1000, n_samples=256)
    r["pe_norm"] = math.sqrt(d_model / 2)
    if r["ratio"] < 0.2:
        r["note"] = f"the position is {1 / r['ratio']:.3g}x longer than the token: the token is a small perturbation"
    elif r["ratio"] > 5:
        r["note"] = f"the token is {r['ratio']:.3g}x longer than the position: the position is drowned"
    return r


@functools.lru_cache(maxsize=8)
def _sweep(d_model: int, init: str) -> dict:
    return recovery_vs_factor(d_model, init, np.logspace(-1, 3, 21), vocab_size=500, n_positions=64, n_samples=128)


def factor_sweep(d_model: int, init: str, log10_factor: float) -> dict:
    """The sweep does not depend on your factor: moving its slider reuses the sweep for (d_model, init)."""
    return {**_sweep(d_model, init), "factor": 10.0 ** log10_factor}


def tied(d_model: int, init: str) -> dict:
    return tied_logits(d_model, init, vocab_size=1000, n_samples=64)

"""Notebook 04: why BERT can add its token, segment and position embeddings.

Compute functions are pure and seeded (tables in, numbers out); plot functions draw on a figure.

    lookup_identity      E[t] + S[s] + P[p] == [onehot(t) | onehot(s) | onehot(p)] @ vstack(E, S, P)
    param_counts         summing vs concatenating-then-projecting, for any sizes (BERT-base in BERT_BASE)
    fold_concat          a concat-then-project MiniBert rewritten as a sum of three projected tables
    gradient_check       autograd: every table row receives the same upstream gradient dL/dx
    probe_sum            random tables, summed; a least-squares probe reads each part back out
    nearest_code         random tables, summed (plus noise); decode (t, s, p) as the closest of all V*S*P sums
    embedding_parts      the real model's word / segment / position parts, sum and LayerNorm output
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.probes import fit_probe, probe_accuracy
from qalib.nn.pretrained import real_model
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.drawing import LiveTickLabels, Update, bar_polygons, live, live_bars


BERT_BASE = {"vocab_size": 30522, "n_segments": 2, "n_positions": 512, "d_model": 768}  # released bert-base config


def random_tables(vocab_size: int, n_segments: int, n_positions: int, d_model: int, seed: int = 0,
                  dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three Gaussian tables with entries N(0, 1/d): every row has norm about 1."""
    for name, v in (("vocab_size", vocab_size), ("n_segments", n_segments), ("n_positions", n_positions), ("d_model", d_model)):
        int_in(name, v, 1)
    g = torch.Generator().manual_seed(seed)
    std = d_model ** -0.5
    return tuple(torch.randn(n, d_model, generator=g, dtype=dtype) * std for n in (vocab_size, n_segments, n_positions))


# ---------------------------------------------------------------------------------------------
# 1. The identity, the parameter count, the concat view, the gradient view
# ---------------------------------------------------------------------------------------------
def lookup_identity(E, S, P, tokens, segments, positions) -> dict:
    """Sum of three lookups vs one big one-hot vector times the stacked tables."""
    tokens, segments, positions = (torch.as_tensor(x).long().reshape(-1) for x in (tokens, segments, positions))
    if not (len(tokens) == len(segments) == len(positions)):
        raise ValueError(f"tokens, segments, positions must have equal length, got {len(tokens)}, {len(segments)}, {len(positions)}")
    for name, ids, table in (("tokens", tokens, E), ("segments", segments, S), ("positions", positions, P)):
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= table.shape[0]):
            raise ValueError(f"{name} must lie in [0, {table.shape[0]}), got [{int(ids.min())}, {int(ids.max())}]")
    lookups = E[tokens] + S[segments] + P[positions]                                  # (n, d)
    onehot = torch.cat([F.one_hot(tokens, E.shape[0]), F.one_hot(segments, S.shape[0]),
                        F.one_hot(positions, P.shape[0])], dim=-1).to(E.dtype)       # (n, V + S + P)
    stacked = torch.cat([E, S, P], dim=0)                                             # (V + S + P, d)
    product = onehot @ stacked
    return {"lookups": lookups, "product": product, "ones_per_row": onehot.sum(-1),
            "max_abs_diff": float((lookups - product).abs().max())}


def param_counts(vocab_size: int, n_segments: int, n_positions: int, d_model: int) -> dict:
    """Embedding parameters: three d-wide tables summed, vs the same tables concatenated and projected 3d -> d."""
    v, s, p, d = (int_in(n, x, 1) for n, x in (("vocab_size", vocab_size), ("n_segments", n_segments),
                                              ("n_positions", n_positions), ("d_model", d_model)))
    tables = (v + s + p) * d
    projection = 3 * d * d + d  # weight (d, 3d) + bias (d,)
    return {"sum": tables, "concat_project": tables + projection, "extra": projection,
            "extra_fraction": projection / tables}


@torch.no_grad()
def fold_concat(model, input_ids, token_type_ids) -> dict:
    """A concat-then-project model equals a summing model with tables E W_E^T + b, S W_S^T, P W_P^T.

    W = [W_E | W_S | W_P] is the (d, 3d) projection; a linear map of a concatenation is a sum of
    per-part maps, so the concat variant is a sum of three re-parameterised tables (BERT's sum is W = [I | I | I]).
    """
    emb = model.embeddings
    if model.cfg.embed_combine != "concat":
        raise ValueError("fold_concat needs a MiniBert with embed_combine='concat'")
    d = model.cfg.d_model
    w, b = emb.combine.weight, emb.combine.bias                     # (d, 3d), (d,)
    t = input_ids.shape[1]
    E2 = emb.word_embeddings.weight @ w[:, :d].T + b                # bias folded into the word table
    S2 = emb.token_type_embeddings.weight @ w[:, d:2 * d].T
    P2 = emb.position_table(t, input_ids.device) @ w[:, 2 * d:].T
    folded = E2[input_ids] + S2[token_type_ids] + P2[None, :t]
    summed = model(input_ids, token_type_ids, return_internals=True).internals["embeddings.sum"]
    return {"folded": folded, "model_sum": summed, "max_abs_diff": float((folded - summed).abs().max())}


def gradient_check(seq_len: int = 6, d_model: int = 8, seed: int = 0) -> dict:
    """Autograd through LayerNorm + a random readout: the gradient reaching E[t], S[s], P[p] at one token is dL/dx."""
    int_in("seq_len", seq_len, 1, 64)
    int_in("d_model", d_model, 2)
    E, S, P = (t.requires_grad_() for t in random_tables(20, 2, 64, d_model, seed))
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(20, (seq_len,), generator=g)
    segments = (torch.arange(seq_len) >= seq_len // 2).long()
    positions = torch.arange(seq_len)
    x = E[tokens] + S[segments] + P[positions]                       # (T, d)
    x.retain_grad()
    readout = torch.randn(d_model, 3, generator=g, dtype=x.dtype)
    loss = torch.tanh(F.layer_norm(x, (d_model,)) @ readout).pow(2).sum()
    loss.backward()
    up = x.grad                                                      # (T, d): the upstream gradient dL/dx
    expected_E = torch.zeros_like(E).index_add_(0, tokens, up)       # a token used twice collects both gradients
    expected_S = torch.zeros_like(S).index_add_(0, segments, up)
    return {"upstream": up.detach(), "position_rows": P.grad[:seq_len].detach(),
            "err_position": float((P.grad[:seq_len] - up).abs().max()),
            "err_word": float((E.grad - expected_E).abs().max()), "err_segment": float((S.grad - expected_S).abs().max()),
            "unused_position_grad": float(P.grad[seq_len:].abs().max()) if seq_len < 64 else 0.0,
            "upstream_norm": float(up.norm())}


# ---------------------------------------------------------------------------------------------
# 2. Why the parts survive the sum: near-orthogonality and a linear probe
# ---------------------------------------------------------------------------------------------
def cosines(A: torch.Tensor, B: torch.Tensor | None = None) -> torch.Tensor:
    """All pairwise cosines between rows of A and rows of B, flattened; without B, between distinct rows of A
    (each row's cosine with itself, 1, left out)."""
    c = F.normalize(A, dim=-1) @ F.normalize(A if B is None else B, dim=-1).T
    if B is None:
        c = c[~torch.eye(len(A), dtype=torch.bool)]
    return c.reshape(-1)


def probe_sum(d_model: int = 64, n_tokens: int = 100, n_positions: int = 64, n_segments: int = 2,
              n_train: int = 2000, n_test: int = 500, seed: int = 0) -> dict:
    """Sum random token/segment/position rows; fit one linear probe per part on the sums; test on fresh sums."""
    d = int_in("d_model", d_model, 1, 4096)
    v, p, s = int_in("n_tokens", n_tokens, 1, 5000), int_in("n_positions", n_positions, 1, 5000), int_in("n_segments", n_segments, 1, 64)
    int_in("n_train", n_train, 2)
    int_in("n_test", n_test, 1)
    E, S, P = random_tables(v, s, p, d, seed, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed + 1)
    n = n_train + n_test
    ids = {"token": torch.randint(v, (n,), generator=g), "segment": torch.randint(s, (n,), generator=g),
           "position": torch.randint(p, (n,), generator=g)}
    X = E[ids["token"]] + S[ids["segment"]] + P[ids["position"]]     # (N, d): all the probe ever sees
    sizes = {"token": v, "segment": s, "position": p}
    Wall = fit_probe(X[:n_train], [y[:n_train] for y in ids.values()], list(sizes.values()))
    acc, start = {}, 0
    for part, y in ids.items():
        acc[part] = probe_accuracy(Wall[:, start:start + sizes[part]], X[n_train:], y[n_train:])
        start += sizes[part]
    k = min(100, v)
    cos = {"word-word": cosines(E[:k]), "word-position": cosines(E[:k], P[:100]),
           "word-segment": cosines(E[:k], S)}
    out = {"d_model": d, "sizes": sizes, "accuracy": acc, "chance": {part: 1.0 / m for part, m in sizes.items()},
           "cos": {key: c.numpy() for key, c in cos.items()},
           "cos_std": {key: float(c.std()) if len(c) > 1 else 0.0 for key, c in cos.items()},
           "rows": v + s + p}
    if d >= v + s + p:
        out["note"] = (f"d_model = {d} ≥ {v + s + p} rows in all: the stacked tables are independent, "
                       "linear recovery is exact.")
    elif d < 8:
        out["note"] = (f"d_model = {d}: far fewer dimensions than rows ({v + s + p}); a linear probe cannot "
                       "separate the parts.")
    return out


def nearest_code(d_model: int = 16, n_tokens: int = 100, n_positions: int = 64, n_segments: int = 2,
                 n_test: int = 500, noise: float = 0.25, seed: int = 0) -> dict:
    """Decode (token, segment, position) from a noisy sum of random rows as the nearest of all V*S*P possible sums.

    The bound d >= V + S + P is for exact *linear* unmixing. For tables in general position the V*S*P sums are
    distinct points even for small d, so a decoder that searches over codes (the compressed-sensing view) can
    identify the parts far below it. `noise` is the norm of a Gaussian perturbation added to each sum, relative to
    a row's norm (about 1): with noise the decoding can fail, so its accuracy is a measurement.
    """
    d = int_in("d_model", d_model, 1, 4096)
    v, p, s = int_in("n_tokens", n_tokens, 1, 1000), int_in("n_positions", n_positions, 1, 1000), int_in("n_segments", n_segments, 1, 64)
    if v * s * p > 200_000:
        raise ValueError(f"n_tokens * n_segments * n_positions must be <= 200000 (one row per code), got {v * s * p}")
    int_in("n_test", n_test, 1, 100_000)
    if not (isinstance(noise, (int, float)) and 0 <= noise <= 10):
        raise ValueError(f"noise must be a number in [0, 10] (relative to a row norm of about 1), got {noise!r}")
    E, S, P = random_tables(v, s, p, d, seed, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed + 1)
    ids = {"token": torch.randint(v, (n_test,), generator=g), "segment": torch.randint(s, (n_test,), generator=g),
           "position": torch.randint(p, (n_test,), generator=g)}
    X = E[ids["token"]] + S[ids["segment"]] + P[ids["position"]]
    X = X + noise * d ** -0.5 * torch.randn(n_test, d, generator=g)
    codes = (E[:, None, None] + S[None, :, None] + P[None, None]).reshape(-1, d)     # (V*S*P, d), index t*S*P + s*P + p
    best = (2 * X @ codes.T - codes.pow(2).sum(-1)).argmax(-1)                       # argmin ||x - code||^2
    decoded = {"token": best // (s * p), "segment": (best // p) % s, "position": best % p}
    acc = {part: float((decoded[part] == ids[part]).float().mean()) for part in ids}
    return {"d_model": d, "rows": v + s + p, "codes": v * s * p, "noise": float(noise), "accuracy": acc,
            "all_three": float(torch.stack([decoded[k] == ids[k] for k in ids]).all(0).float().mean())}


def cosine_spread(d_values, n: int = 200, seed: int = 0) -> dict:
    """Standard deviation of the cosine between two random rows, per d (theory: 1/sqrt(d))."""
    out = {}
    for d in d_values:
        E = random_tables(n, 1, 1, int_in("d", d, 2), seed)[0]
        out[int(d)] = float(cosines(E).std())
    return out


def probe_curve(d_values, seeds=(0, 1, 2), **kwargs) -> dict:
    """probe_sum over a grid of d_model and several seeds: accuracy (seeds, len(d_values)) per part."""
    d_values, seeds = list(d_values), seed_list("seeds", seeds)
    if not d_values:
        raise ValueError("d_values must be non-empty")
    runs = [[probe_sum(d_model=d, seed=s, **kwargs) for d in d_values] for s in seeds]
    parts = runs[0][0]["accuracy"].keys()
    return {"d": np.array(d_values), "rows": runs[0][0]["rows"],
            "accuracy": {p: np.array([[r["accuracy"][p] for r in row] for row in runs]) for p in parts}}


def plot_probe_curve(fig, r) -> None:
    ax = fig.add_subplot()
    for i, (part, a) in enumerate(r["accuracy"].items()):
        m = a.mean(0)
        ax.errorbar(r["d"], m, yerr=[m - a.min(0), a.max(0) - m], marker="o", capsize=3, label=part, color=f"C{i}")
    ax.axvline(r["rows"], color="0.4", ls="--", lw=1, label=f"d = V+S+P = {r['rows']}")
    ax.set(xscale="log", xlabel="d_model (dimensions, log scale)", ylabel="probe test accuracy",
           title="Reading each part back out of the sum (mean, min-max over seeds)", ylim=(0, 1.05))
    ax.legend(fontsize=8)


def plot_probe(fig, r) -> Update:
    """Probe accuracies and the cosines between rows, on fixed axes; the legends sit where no redrawn artist covers
    them. The density axis goes up to the most a density over these bins can be (every cosine in one bin: 1 / bin
    width, which the few cosines of a tiny table reach), on a square-root scale so that the wide, low histograms of
    a small d stay readable next to the narrow, tall ones of a large d."""
    ax1, ax2 = fig.subplots(1, 2)
    parts = list(r["accuracy"])
    bars = ax1.bar(parts, np.zeros(len(parts)), color=["C0", "C1", "C2"])
    chance = ax1.scatter(parts, np.zeros(len(parts)), marker="_", s=600, color="k", label="chance", zorder=3)
    # room above the bars for the legend: it is drawn once, under the bars that are redrawn
    ax1.set(ylim=(0, 1.2), yticks=np.linspace(0, 1, 5), ylabel="probe test accuracy")
    ax1.legend(fontsize=8, loc="upper center")
    bins = np.linspace(-1, 1, 61)
    band = ax2.axvspan(-1, 1, color="0.5", alpha=0.3, lw=0, zorder=0, label="±2/√d")  # see-through: grid shows
    hists = {key: ax2.stairs(np.zeros(len(bins) - 1), bins, fill=True, alpha=0.5, label=key) for key in r["cos"]}
    ax2.set_yscale("function", functions=(lambda y: np.sqrt(np.maximum(y, 0)), np.square))
    ax2.set(xlim=(-1, 1), xticks=np.linspace(-1, 1, 5), ylim=(0, 1 / (bins[1] - bins[0])), yticks=[0, 1, 5, 10, 20],
            xlabel="cosine between rows", ylabel="density (square-root scale)",
            title="Random rows are nearly orthogonal")
    ax2.legend(handles=[*hists.values(), band], fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    spread = ax2.text(1.02, 0, "", transform=ax2.transAxes, fontsize=7, va="bottom")
    live(*bars, chance, ax1.title, band, *hists.values(), spread)

    def update(r) -> None:
        for bar, part in zip(bars, parts):
            bar.set_height(r["accuracy"][part])
        chance.set_offsets(np.column_stack([np.arange(len(parts)), [r["chance"][p] for p in parts]]))
        ax1.set_title(f"Linear probe on the sum, d = {r['d_model']}")
        half = 2 / math.sqrt(r["d_model"])
        band.set(x=-half, width=2 * half)
        for key, hist in hists.items():
            hist.set_data(np.histogram(r["cos"][key], bins=bins, density=True)[0])
        spread.set_text("cos std\n" + "\n".join(f"{key} {std:.3f}" for key, std in r["cos_std"].items()))

    update(r)
    return update


# ---------------------------------------------------------------------------------------------
# 3. The real model (all-MiniLM-L6-v2): its embedding parts and its word pieces
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def embedding_parts(model, enc: dict) -> dict:
    """The three looked-up parts, their sum and the LayerNorm output for one encoded text (pair)."""
    internals = model(**enc, return_internals=True, stop_at_layer=0).internals  # the embedding layer only
    keys = ("word", "segment", "position", "sum", "out")
    # detach: "embeddings.position" is a view of the position table, and a view of a parameter keeps
    # requires_grad even under no_grad
    return {k: internals[f"embeddings.{k}"][0].detach() for k in keys}  # each (T, d)


def wordpiece_view(tok, text: str, pair: str | None = None) -> dict:
    """Tokens, ids, segment ids and position ids as BERT receives them."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text (sentence A) must be a non-empty string")
    enc = tok.encode(text, pair if pair and pair.strip() else None)
    return {"tokens": list(enc.tokens), "ids": list(enc.ids), "segments": list(enc.type_ids),
            "positions": list(range(len(enc.ids)))}


def format_wordpiece(view: dict) -> str:
    width = [max(len(t), 5) for t in view["tokens"]]
    rows = [("token", view["tokens"]), ("segment", view["segments"]), ("position", view["positions"])]
    return "\n".join(f"{name:>9} " + " ".join(f"{str(v):>{w}}" for v, w in zip(vals, width)) for name, vals in rows)


# ---------------------------------------------------------------------------------------------
# 4. The sentence-pair demo on the real model
# ---------------------------------------------------------------------------------------------
def pair_parts(text: str, pair: str, token: int, after_norm: bool = False) -> dict:
    """Tokens of a typed pair, and the word / segment / position parts and their sum for one chosen token."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("sentence A is empty: type a sentence")
    model, tok = real_model()
    enc = tok(text, pair if pair and pair.strip() else None, max_length=model.cfg.max_len)
    parts = embedding_parts(model, enc)
    n = enc["input_ids"].shape[1]
    note = None
    if not 0 <= token < n:
        note = f"token index {token} is past the last token; showing token {n - 1} of {n}"
        token = n - 1
    view = wordpiece_view(tok, text, pair)
    rows = ["word", "segment", "position", "out" if after_norm else "sum"]
    return {"tokens": view["tokens"][:n], "segments": view["segments"][:n], "token": token, "rows": rows,
            "vectors": torch.stack([parts[k][token] for k in rows]).numpy(),
            "norms": {k: parts[k].norm(dim=-1).numpy() for k in ("word", "segment", "position", "sum")},
            "cos_to_sum": {k: float(F.cosine_similarity(parts[k][token], parts["sum"][token], dim=0))
                           for k in ("word", "segment", "position")},
            "max_abs_diff": float((parts["word"] + parts["segment"] + parts["position"] - parts["sum"]).abs().max()),
            "note": note}


PAIR_NORM_VIEW = 3.5  # the pair demo's fixed size axis. Every pair starts with [CLS] at position 0: its sum has norm
# 3.34; at any later position no sum exceeds 1.69 + 0.48 + 0.97 = 3.15 (the largest word, segment and position rows:
# the triangle inequality). So the axis holds every typed pair (tests/topics/test_nb04_bert_embedding_sum.py checks both).
PART_VIEW = 0.2  # colour scale of the strip, +-PART_VIEW: one for every token, with or without the LayerNorm
# 99% of the first 96 values of MiniLM's word, segment and position rows and their sum lie within +-0.2 (all within
# +-0.8); the LayerNorm output has a std near 1 and saturates the scale, which is the point: it is far larger


def plot_pair(fig, r) -> Update:
    """The chosen token's four vectors (left) and the size of each part at every token (right). Moving the token or
    the LayerNorm box redraws only the strip, its labels and the marker; another sentence also replaces the bars,
    the sum and the word pieces, which are live too, on a size axis fixed at PAIR_NORM_VIEW."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.1, 1])
    n_rows = len(r["rows"])
    # a mesh of (rows, 96) cells: redrawn in half the time of an image; row 0 on top, as in an image
    strip = ax1.pcolormesh(r["vectors"][:, :96], cmap="RdBu_r", vmin=-PART_VIEW, vmax=PART_VIEW)
    ax1.set(ylim=(n_rows, 0), yticks=np.arange(n_rows) + 0.5, yticklabels=[*r["rows"][:-1], ""],
            xlabel="dimension (first 96 of 384)")
    ax1.grid(False)
    fig.colorbar(strip, ax=ax1, shrink=0.8, label=f"value (clipped to ±{PART_VIEW})")
    # redrawn with the strip: the last row's label (sum or LayerNorm output) where its tick label would be, and
    # each part's cosine to the sum in a column right of the strip
    last_row = ax1.text(-0.01, n_rows - 0.5, "", transform=ax1.get_yaxis_transform(), ha="right", va="center",
                        fontsize=matplotlib.rcParams["ytick.labelsize"])
    ax1.text(1.01, 0, "cos to sum", transform=ax1.get_yaxis_transform(), ha="left", va="bottom", fontsize=8)
    cosines_to_sum = [ax1.text(1.01, i + 0.5, "", transform=ax1.get_yaxis_transform(), ha="left", va="center",
                               fontsize=matplotlib.rcParams["ytick.labelsize"]) for i in range(n_rows - 1)]
    parts = {k: live_bars(ax2, facecolors=f"C{i}", label=k) for i, k in enumerate(("word", "segment", "position"))}
    (sum_line,) = ax2.plot([], [], "k.-", label="sum")
    marker = ax2.axvline(r["token"], color="0.5", ls=":")
    pieces = LiveTickLabels(ax2, "x", most=30)
    ax2.set(ylabel="L2 norm", title="Size of each part per token", ylim=(0, PAIR_NORM_VIEW))
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: no bar can run into it
    live(strip, last_row, *cosines_to_sum, ax1.title, *parts.values(), sum_line, marker)

    def update(r) -> None:
        strip.set_array(r["vectors"][:, :96])
        last_row.set_text(r["rows"][-1])
        for text, k in zip(cosines_to_sum, r["rows"]):
            text.set_text(f"{r['cos_to_sum'][k]:+.2f}")
        i = r["token"]
        ax1.set_title(f"token {i}: {r['tokens'][i]!r} (segment {r['segments'][i]})")
        marker.set_xdata([i, i])
        # the bars, the sum and the word pieces are live too: without x ticks, the x limits change no static pixel
        x = np.arange(len(r["tokens"]))
        for j, (k, bars) in enumerate(parts.items()):
            bars.set_verts(bar_polygons(x + (j - 1) * 0.27, r["norms"][k], width=0.27))
        sum_line.set_data(x, r["norms"]["sum"])
        pieces.set(r["tokens"])
        ax2.set_xlim(-0.6, len(x) - 0.4)

    update(r)
    return update

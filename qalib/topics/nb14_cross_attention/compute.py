"""Notebook 14: the encoder-decoder's three attentions, where cross-attention's K and V come from, label smoothing.

Compute functions (tensors or numbers in, dicts out) and plots `plot_x(fig, result)`.

    task = ReversalTask()                        # target = the source reversed: target i aligns with source S-1-i
    src, tgt_in, labels = task.batch(32, generator)
    alignment_share(probs, task.alignment)       # (B, H, T, S) cross-attention -> (H,) mass on the true source position
    attention_masks(src_len=6, tgt_len=5, n_src_pad=2)   # which (query, key) pairs each of the three attentions allows
    module_rows(model)                           # the model's module tree, from named_modules
    smoothing(eps=0.1, vocab_size=24)            # label smoothing's target and the loss it forces on the true token
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from qalib.lab.data import CLS, N_SPECIAL
from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import CrossAttention, EncoderDecoder
from qalib.nn.validate import float_in, int_in
from qalib.notebook.drawing import Change, Update, live


BOS = CLS  # the target's start token: any special id the data never uses as content


def reversal_config(tie_embeddings: bool = True, vocab_size: int = 24, d_model: int = 32) -> DecoderConfig:
    """The notebook's encoder-decoder: Vaswani's post-norm, ReLU layout (sec. 3.1, 3.3), 2 + 2 layers, 4 heads,
    d = 32, d_ff = 2d, learned positions (in trial runs a sinusoidal table had not learned the task within the
    notebook's step budget), one shared vocabulary (sec. 3.4), the LM head tied to the embeddings unless
    tie_embeddings=False."""
    return DecoderConfig(vocab_size=vocab_size, d_model=d_model, n_layers=2, n_heads=4, d_ff=2 * d_model, max_len=32,
                         norm_placement="post", activation="relu", final_norm=False, tie_embeddings=tie_embeddings)


@dataclass(frozen=True)
class ReversalTask:
    """Source: src_len uniform content tokens. Target: the source reversed, read after a start token.

    Decoder position i is fed [BOS, y_0 .. y_{i-1}] and predicts y_i = source[S-1-i]: it cannot guess y_i from
    the prefix (the tokens are independent), so it must read source position S-1-i through cross-attention.
    Chance accuracy is 1 / (vocab_size - N_SPECIAL)."""

    vocab_size: int = 24
    src_len: int = 8

    def __post_init__(self):
        int_in("vocab_size", self.vocab_size, N_SPECIAL + 2, 10_000)
        int_in("src_len", self.src_len, 2, 31)

    @property
    def n_content(self) -> int:
        return self.vocab_size - N_SPECIAL

    @property
    def alignment(self) -> torch.Tensor:
        """(T,) the source position each target position copies: S-1-i."""
        return torch.arange(self.src_len - 1, -1, -1)

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """-> source (B, S), decoder input (B, S) = [BOS, y_0 .. y_{S-2}], labels (B, S) = y."""
        b = int_in("batch_size", batch_size, 1, 1 << 16)
        source = torch.randint(N_SPECIAL, self.vocab_size, (b, self.src_len), generator=generator)
        labels = source.flip(1)  # (B, S): y_i = source[S-1-i]
        decoder_in = torch.cat([torch.full((b, 1), BOS), labels[:, :-1]], dim=1)  # shifted right by one (sec. 3.1)
        return source, decoder_in, labels


def alignment_share(probs: torch.Tensor, alignment: torch.Tensor) -> torch.Tensor:
    """probs (B, H, T, S) cross-attention -> (H,): the mean probability each head puts on the true source position."""
    t = probs.shape[2]
    return probs[:, :, torch.arange(t), alignment[:t]].mean(dim=(0, 2))  # (B, H, T) -> (H,)


# -- the three attentions: which (query, key) pairs each allows ---------------------------------------
def attention_masks(src_len: int = 6, tgt_len: int = 5, n_src_pad: int = 0) -> dict:
    """Allowed (query, key) pairs, True = may attend (Vaswani sec. 3.2.3), for a source whose last n_src_pad tokens
    are padding: encoder self-attention (S x S, pads hidden as keys), masked decoder self-attention (T x T, causal)
    and cross-attention (T x S, every target position sees every real source position)."""
    s = int_in("src_len", src_len, 1, 32)
    t = int_in("tgt_len", tgt_len, 1, 32)
    pad = int_in("n_src_pad", n_src_pad, 0, s - 1)  # at least one real source token, or a row has nothing to read
    real = torch.arange(s) < s - pad  # (S,)
    masks = {"encoder self-attention": real[None, :].expand(s, s),
             "decoder self-attention (masked)": torch.ones(t, t, dtype=torch.bool).tril(),
             "cross-attention": real[None, :].expand(t, s)}
    return {"masks": {k: v.numpy() for k, v in masks.items()}, "src_len": s, "tgt_len": t, "n_src_pad": pad,
            "allowed": {k: int(v.sum()) for k, v in masks.items()}}


MASK_AXES = {"encoder self-attention": ("source key", "source query"),
             "decoder self-attention (masked)": ("target key", "target query"),
             "cross-attention": ("source key (memory)", "target query")}


def plot_masks(fig, res: dict) -> Update:
    """Three panels, allowed pairs dark, forbidden light; changing the sizes redraws the figure, changing only the
    padding redraws the images and titles."""
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [res["src_len"], res["tgt_len"], res["src_len"]]})
    images, titles = [], []
    for ax, (name, m) in zip(axes, res["masks"].items()):
        images.append(ax.imshow(m.astype(float), cmap="Greys", vmin=-0.15, vmax=1.15, interpolation="nearest"))
        xlabel, ylabel = MASK_AXES[name]
        ax.set(xlabel=xlabel, ylabel=ylabel, xticks=range(m.shape[1]), yticks=range(m.shape[0]))
        ax.tick_params(labelsize=7)
        ax.grid(False)
        titles.append(ax.title)
    live(*images, *titles)
    shape = (res["src_len"], res["tgt_len"])

    def update(res) -> Change | None:
        if (res["src_len"], res["tgt_len"]) != shape:
            return Change.FIGURE
        for im, ax, (name, m) in zip(images, axes, res["masks"].items()):
            im.set_data(m.astype(float))
            ax.set_title(f"{name}\n{res['allowed'][name]} of {m.size} pairs allowed", fontsize=9)
        return None

    update(res)
    return update


# -- the architecture, read from the model's own module tree -------------------------------------------
def module_rows(model: nn.Module, max_depth: int = 3) -> list[dict]:
    """One row per module of model.named_modules() down to max_depth dots: its name, class, depth, own parameter
    count (its subtree's) and whether it is a cross-attention."""
    int_in("max_depth", max_depth, 1, 16)
    rows = []
    for name, module in model.named_modules():
        depth = 0 if not name else name.count(".") + 1
        if 0 < depth <= max_depth:
            rows.append({"name": name, "type": type(module).__name__, "depth": depth,
                         "params": sum(p.numel() for p in module.parameters()),
                         "cross": isinstance(module, CrossAttention)})
    return rows


def _layer_boxes(rows: list[dict], prefix: str) -> list[list[dict]]:
    """The sublayers of each numbered layer under `prefix` ("encoder." or "decoder.layers."), in module order."""
    layers: dict[int, list[dict]] = {}
    for r in rows:
        if r["name"].startswith(prefix) and r["params"]:
            rest = r["name"][len(prefix):].split(".")
            if len(rest) == 2 and rest[0].isdigit():
                layers.setdefault(int(rest[0]), []).append(r)
    return [layers[i] for i in sorted(layers)]


def plot_architecture(fig, model: EncoderDecoder) -> None:
    """The encoder's and the decoder's layers as stacks of boxes, one per parameterised sublayer found in
    named_modules (label: the attribute name, class and parameter count), bottom to top in module order, with an
    arrow from the memory (the encoder's last output) to every module that is a CrossAttention."""
    rows = module_rows(model, max_depth=4)
    encoder, decoder = _layer_boxes(rows, "encoder."), _layer_boxes(rows, "decoder.layers.")
    ax = fig.subplots()
    ax.set_axis_off()
    height = max(sum(len(layer) + 1 for layer in stack) for stack in (encoder, decoder)) + 1.5
    ax.set(xlim=(0, 10), ylim=(0, height))
    cross_boxes = []

    def stack(layers, x, colour, title):
        y = 0.3
        for i, layer in enumerate(layers):
            for r in layer:
                ax.add_patch(_box(x - 1.9, y, 3.8, 0.8, "#fdd0a2" if r["cross"] else colour))
                ax.text(x, y + 0.4, f"{r['name'].split('.')[-1]}  ({r['type']}, {r['params']:,})", ha="center",
                        va="center", fontsize=7)
                if r["cross"]:
                    cross_boxes.append((x - 1.9, y + 0.4))
                y += 1
            ax.text(x - 2.05, y - 0.5 * (len(layer) + 1), f"layer {i}", ha="right", va="center", fontsize=8,
                    color="0.35", rotation=90)
            y += 1
        ax.text(x, y - 0.6, title, ha="center", va="bottom", fontsize=10, weight="bold")
        return y

    top = stack(encoder, 2.3, "#c6dbef", f"encoder: {len(encoder)} layers")
    stack(decoder, 7.7, "#d9f0d3", f"decoder: {len(decoder)} layers")
    memory = (5.0, top - 1.6)  # just above the encoder's last layer: its output
    ax.text(*memory, "memory\n(final encoder\noutput)", ha="center", va="center", fontsize=8, weight="bold",
            color="#d94801")
    for x, y in cross_boxes:
        ax.annotate("", xy=(x, y), xytext=(memory[0] + 0.6, memory[1]),
                    arrowprops={"arrowstyle": "->", "color": "#d94801", "lw": 1.2})
    ax.set_title(f"{type(model).__name__}, drawn from model.named_modules(): "
                 f"{len(cross_boxes)} CrossAttention modules, one memory", fontsize=10)


def _box(x, y, w, h, face):
    from matplotlib.patches import FancyBboxPatch
    return FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=face, ec="0.4", lw=0.8)


# -- label smoothing (Vaswani sec. 5.4, citing Szegedy et al. 2016) -------------------------------------
def smoothing(eps: float = 0.1, vocab_size: int = 24) -> dict:
    """The smoothed target q = (1 - eps) onehot + eps / V (torch's cross_entropy(label_smoothing=eps)), and what
    the loss-minimising model pays on the true token: p_true = 1 - eps + eps / V, so -log p_true > 0 however well
    it has learned; the smoothed loss's own floor is the entropy H(q)."""
    eps = float_in("eps", eps, 0.0, 1.0)
    v = int_in("vocab_size", vocab_size, 2, 100_000)
    p_true, p_other = 1 - eps + eps / v, eps / v
    entropy = -p_true * math.log(p_true) - ((v - 1) * p_other * math.log(p_other) if p_other > 0 else 0.0)
    grid = np.linspace(0, 1, 101)
    return {"eps": eps, "vocab_size": v, "p_true": p_true, "p_other": p_other, "nll_true": -math.log(p_true),
            "entropy": entropy, "grid": grid, "nll_grid": -np.log(1 - grid + grid / v)}


def plot_smoothing(fig, res: dict) -> Update:
    ax1, ax2 = fig.subplots(1, 2)
    shown = 12  # the true token and the first others: the rest look the same
    bars = ax1.bar(range(shown), np.zeros(shown), color=["C1"] + ["C0"] * (shown - 1))
    ax1.set(ylim=(0, 1.05), xlabel="token (0 = the true one; the others all alike)", ylabel="target probability",
            xticks=range(shown))
    curve, = ax2.plot([], [], color="C0")
    dot, = ax2.plot([], [], "o", color="C1")
    ax2.set(xlim=(0, 1), ylim=(0, 4), xlabel="eps", ylabel="-log p(true) at the smoothed optimum (nats)")
    live(*bars, curve, dot, ax1.title, ax2.title)

    def update(res) -> None:
        heights = [res["p_true"]] + [res["p_other"]] * (shown - 1)
        for bar, h in zip(bars, heights):
            bar.set_height(h)
        curve.set_data(res["grid"], np.minimum(res["nll_grid"], 4))
        dot.set_data([res["eps"]], [min(res["nll_true"], 4)])
        ax1.set_title(f"eps = {res['eps']:.2f}, V = {res['vocab_size']}: p(true) = {res['p_true']:.3f}", fontsize=9)
        ax2.set_title(f"a perfect model still pays {res['nll_true']:.3f} nats (perplexity {math.exp(res['nll_true']):.2f})",
                      fontsize=9)

    update(res)
    return update

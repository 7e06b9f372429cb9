"""Notebook 20: can a Transformer read an image? Patches as tokens.

Compute functions (pure, seeded) for a small Vision Transformer built on qalib's encoder layers, the handwritten
digits it reads, a small CNN of about its size, the cost of patches against pixels as tokens, and the two demos.

    images, labels = load_digits()                        # (1797, 8, 8) float in [0, 1], (1797,) int 0-9
    tokens = patchify(images, 2)                          # (B, 16, 4): a 4 x 4 grid of 2 x 2 patches
    model = ViT(ViTConfig(patch=2, pos="learned"))        # patches -> linear map -> [CLS] + positions -> encoder
    logits = model(images)                                # (B, 10), read from [CLS]
    shuffle_patches(images, 2, generator)                 # the same patches in a random order
    grid_similarity(model.position_rows())                # neighbours' cosine minus the others'

The digits: UCI "Optical Recognition of Handwritten Digits" (Alpaydin & Kaynak 1998), the 1,797-image test part as
scikit-learn ships it (digits.csv.gz here: 64 pixel counts 0-16 and the label per line). Licence: CC BY 4.0.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

import matplotlib
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from qalib.nn.config import MiniBertConfig
from qalib.nn.model import EncoderLayer, init_weights
from qalib.nn.norms import make_norm
from qalib.lab.device import best_ms
from qalib.nn.validate import choice, int_in
from qalib.notebook.drawing import live, live_title, most, set_limits

DIGITS = Path(__file__).with_name("digits.csv.gz")
SIDE = 8            # the digits are 8 x 8
N_CLASSES = 10
PATCHES = (1, 2, 4, 8)  # the patch sizes that tile an 8 x 8 image
N_TEST = 497        # held out once, by a fixed shuffle; the other 1,300 are the training pool

PosKind = Literal["learned", "sin2d", "none"]
POSITIONS = get_args(PosKind)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(DIGITS, "rt") as f:
        raw = np.loadtxt(f, delimiter=",", dtype=np.float32)  # (1797, 65): 64 pixel counts, then the label
    return raw[:, :64].reshape(-1, SIDE, SIDE) / 16.0, raw[:, 64].astype(np.int64)  # (N, 64) -> (N, 8, 8)


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits: images (N, 8, 8) float in [0, 1] (pixel counts / 16) and labels (N,) int 0-9."""
    x, y = _digits()
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


@dataclass(frozen=True)
class Split:
    """The training pool and the held-out test set (a fixed shuffle: the same for every seed and offset)."""
    train_x: torch.Tensor  # (1300, 8, 8)
    train_y: torch.Tensor  # (1300,)
    test_x: torch.Tensor   # (497, 8, 8)
    test_y: torch.Tensor   # (497,)


@lru_cache(maxsize=1)
def split() -> Split:
    x, y = load_digits()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(20_2003))
    test, train = order[:N_TEST], order[N_TEST:]
    return Split(x[train], y[train], x[test], y[test])


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int):
    """Endless minibatches (images (B, 8, 8), labels (B,)) drawn without replacement, a new shuffle each pass."""
    g = torch.Generator().manual_seed(seed)
    n = len(y)
    batch_size = min(batch_size, n)
    while True:
        order = torch.randperm(n, generator=g)
        for i in range(0, n - batch_size + 1, batch_size):
            idx = order[i:i + batch_size]
            yield x[idx], y[idx]


# ---------------------------------------------------------------------------------------------
# Patches
# ---------------------------------------------------------------------------------------------
def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, H, W) -> (B, n, p*p) with n = (H/p)(W/p): row-major over the grid of patches, each patch row-major."""
    if images.dim() != 3:
        raise ValueError(f"images must be (B, H, W), got {tuple(images.shape)}")
    b, h, w = images.shape
    int_in("patch", patch, 1, min(h, w))
    if h % patch or w % patch:
        raise ValueError(f"patch {patch} does not tile a {h} x {w} image")
    g_h, g_w = h // patch, w // patch
    x = images.reshape(b, g_h, patch, g_w, patch)       # (B, gh, p, gw, p)
    x = x.permute(0, 1, 3, 2, 4)                          # (B, gh, gw, p, p)
    return x.reshape(b, g_h * g_w, patch * patch)        # (B, n, p*p)


def unpatchify(tokens: torch.Tensor, patch: int, side: int = SIDE) -> torch.Tensor:
    """(B, n, p*p) -> (B, side, side): patchify's inverse."""
    b = tokens.shape[0]
    g = side // patch
    x = tokens.reshape(b, g, g, patch, patch)             # (B, gh, gw, p, p)
    return x.permute(0, 1, 3, 2, 4).reshape(b, side, side)  # (B, gh, p, gw, p) -> (B, H, W)


def shuffle_patches(images: torch.Tensor, patch: int, generator: torch.Generator) -> torch.Tensor:
    """The same images with their p x p patches put in a random order (one permutation per image)."""
    tokens = patchify(images, patch)                      # (B, n, p*p)
    b, n, _ = tokens.shape
    perm = torch.rand(b, n, generator=generator).argsort(dim=1)  # (B, n)
    shuffled = torch.gather(tokens, 1, perm[:, :, None].expand_as(tokens))
    return unpatchify(shuffled, patch, images.shape[-1])


def sincos_2d(grid: int, d: int) -> torch.Tensor:
    """(grid*grid, d) fixed 2-D sinusoidal positions: the first d/2 dimensions encode the row with the sinusoid of
    Vaswani et al. (base 10000), the other d/2 the column (as MAE's get_2d_sincos_pos_embed)."""
    int_in("grid", grid, 1)
    if d % 4:
        raise ValueError(f"2-D sinusoidal positions need d divisible by 4, got {d}")
    q = d // 4
    freq = 1.0 / 10000 ** (torch.arange(q, dtype=torch.float32) / q)          # (d/4,)
    pos = torch.arange(grid, dtype=torch.float32)
    one = torch.cat([torch.sin(pos[:, None] * freq), torch.cos(pos[:, None] * freq)], dim=1)  # (grid, d/2)
    rows = one[:, None, :].expand(grid, grid, d // 2)                          # (gh, gw, d/2): the row's code
    cols = one[None, :, :].expand(grid, grid, d // 2)                          # (gh, gw, d/2): the column's
    return torch.cat([rows, cols], dim=-1).reshape(grid * grid, d)             # (n, d)


# ---------------------------------------------------------------------------------------------
# The model: patches -> tokens -> qalib's encoder layers -> [CLS]
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ViTConfig:
    """A small ViT (Dosovitskiy et al. 2021, sec. 3.1) on square one-channel images. Pre-norm layers with a final
    LayerNorm, as ViT; the classifier reads [CLS]. pos: "learned" (ViT's 1-D table, one row per patch),
    "sin2d" (fixed 2-D sinusoid) or "none" (a bag of patches)."""
    image: int = SIDE
    patch: int = 2
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 64
    pos: PosKind = "learned"
    n_classes: int = N_CLASSES
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("image", "patch", "d_model", "n_layers", "n_heads", "d_ff", "n_classes"):
            int_in(f"ViTConfig.{name}", getattr(self, name), 1)
        if self.image % self.patch:
            raise ValueError(f"ViTConfig.patch ({self.patch}) must divide image ({self.image})")
        choice("ViTConfig.pos", self.pos, POSITIONS)
        if self.pos == "sin2d" and self.d_model % 4:
            raise ValueError(f"ViTConfig.d_model must be divisible by 4 for sin2d, got {self.d_model}")
        if not (isinstance(self.init_std, float) and self.init_std > 0):
            raise ValueError(f"ViTConfig.init_std must be a float > 0, got {self.init_std!r}")

    @property
    def grid(self) -> int:
        return self.image // self.patch

    @property
    def n_patches(self) -> int:
        return self.grid ** 2

    def replace(self, **changes) -> "ViTConfig":
        return replace(self, **changes)

    def encoder(self) -> MiniBertConfig:
        """The encoder layers' config: qalib's EncoderLayer, pre-norm, no position scheme of its own."""
        return MiniBertConfig(vocab_size=5, d_model=self.d_model, n_layers=self.n_layers, n_heads=self.n_heads,
                              d_ff=self.d_ff, max_len=self.n_patches + 1, pos="none", norm_placement="pre",
                              init_std=self.init_std, layer_norm_eps=1e-6)


class ViT(nn.Module):
    """images (B, H, W) -> logits (B, n_classes). Each p x p patch is one token (a linear map of its p^2 pixels,
    ViT's patch embedding); a learned [CLS] token goes first; positions are added; qalib's EncoderLayer stack runs;
    a LayerNorm and a linear head read [CLS]."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        if not isinstance(cfg, ViTConfig):
            raise TypeError(f"ViT needs a ViTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        enc = cfg.encoder()
        d = cfg.d_model
        self.patch_embed = nn.Linear(cfg.patch ** 2, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        if cfg.pos == "learned":
            self.pos = nn.Parameter(torch.zeros(1, cfg.n_patches + 1, d))
        else:
            self.pos = None
        # fixed positions: [CLS] gets none (zeros), patch i its grid cell's sinusoid
        self.register_buffer("fixed_pos", torch.cat([torch.zeros(1, d), sincos_2d(cfg.grid, d)])[None]
                             if cfg.pos == "sin2d" else torch.zeros(1, cfg.n_patches + 1, d), persistent=False)
        self.layers = nn.ModuleList(EncoderLayer(enc) for _ in range(cfg.n_layers))
        self.final_norm = make_norm("layer", d, enc.layer_norm_eps)
        self.head = nn.Linear(d, cfg.n_classes)
        self.apply(lambda m: init_weights(m, cfg.init_std))
        # the patch embedding at fan-in scale (LeCun), so a patch's token is of order 1 as a fixed sinusoid is
        nn.init.normal_(self.patch_embed.weight, std=cfg.patch ** -1.0)
        nn.init.normal_(self.cls, std=cfg.init_std)
        if self.pos is not None:
            nn.init.normal_(self.pos, std=cfg.init_std)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """(B, H, W) -> (B, n + 1, d): [CLS], then the embedded patches, positions added."""
        if images.dim() != 3 or images.shape[1:] != (self.cfg.image, self.cfg.image):
            raise ValueError(f"images must be (B, {self.cfg.image}, {self.cfg.image}), got {tuple(images.shape)}")
        x = self.patch_embed(patchify(images, self.cfg.patch))          # (B, n, p*p) -> (B, n, d)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)  # (B, n + 1, d)
        return x + (self.pos if self.pos is not None else self.fixed_pos)

    def forward(self, images: torch.Tensor, internals: dict | None = None) -> torch.Tensor:
        x = self.tokens(images)                                           # (B, n + 1, d)
        for i, layer in enumerate(self.layers):
            x = layer(x, None, internals, f"layer{i}")
        return self.head(self.final_norm(x, None, internals, "final_norm")[:, 0])  # [CLS]: (B, d) -> (B, classes)

    def cls_attention(self, images: torch.Tensor) -> torch.Tensor:
        """(B, L, n): each layer's attention from [CLS] to the n patches, mean over heads."""
        internals: dict = {}
        with torch.no_grad():
            self(images, internals)
        probs = torch.stack([internals[f"layer{i}.probs"] for i in range(self.cfg.n_layers)], 1)  # (B, L, H, T, T)
        return probs[:, :, :, 0, 1:].mean(2)                              # (B, L, n)

    def position_rows(self) -> torch.Tensor:
        """(n, d): the position vectors of the n patches (not [CLS]'s)."""
        table = self.pos if self.pos is not None else self.fixed_pos
        return table[0, 1:].detach().clone()


class SmallCNN(nn.Module):
    """Three 3 x 3 convolutions (16, 32, `width` channels, ReLU, 2 x 2 max-pool after the second), global average
    pooling, a linear head: (B, 8, 8) -> (B, 10). Locality and translation equivariance are built in."""

    def __init__(self, width: int = 48, n_classes: int = N_CLASSES) -> None:
        super().__init__()
        int_in("width", width, 1)
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(width, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.body(images[:, None])            # (B, H, W) -> (B, 1, H, W) -> (B, width, 1, 1)
        return self.head(x.flatten(1))            # (B, width) -> (B, classes)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    device = next(model.parameters()).device
    return float((model(x.to(device)).argmax(-1).cpu() == y).float().mean())


# ---------------------------------------------------------------------------------------------
# Cost: tokens, score entries, multiply-adds, time
# ---------------------------------------------------------------------------------------------
def n_tokens(image: int, patch: int, cls: bool = True) -> int:
    """Tokens of an image x image picture cut into patch x patch patches: (image/patch)^2 (+ [CLS])."""
    int_in("image", image, 1)
    int_in("patch", patch, 1, image)
    if image % patch:
        raise ValueError(f"patch {patch} does not tile an image of side {image}")
    return (image // patch) ** 2 + int(cls)


def layer_cost(n: int, d: int, d_ff: int | None = None) -> dict[str, float]:
    """Multiply-adds per encoder layer at n tokens of width d: projections 4 n d^2, FFN 2 n d d_ff, and the two
    n x n products q k^T and P v, 2 n^2 d."""
    d_ff = 4 * d if d_ff is None else d_ff
    return {"projections": 4.0 * n * d * d, "ffn": 2.0 * n * d * d_ff, "scores": 2.0 * n * n * d}


def step_ms(cfg: ViTConfig, batch_size: int = 64, repeats: int = 5, seed: int = 0) -> float:
    """Best-of time (ms) of one training step (forward, backward) of a ViT at `cfg`, one thread."""
    torch.manual_seed(seed)
    model = ViT(cfg)
    x = torch.rand(batch_size, cfg.image, cfg.image, generator=torch.Generator().manual_seed(seed))
    y = torch.arange(batch_size) % cfg.n_classes

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return best_ms(step, repeats)
    finally:
        torch.set_num_threads(prev)


# ---------------------------------------------------------------------------------------------
# Positions: does the learned table recover the grid?
# ---------------------------------------------------------------------------------------------
def cosine_matrix(rows: torch.Tensor) -> np.ndarray:
    """(n, d) -> (n, n) cosine similarity of every pair of rows."""
    x = F.normalize(rows.float(), dim=1)
    return (x @ x.T).numpy()


def grid_neighbours(grid: int) -> np.ndarray:
    """(n, n) bool, n = grid^2: True where two cells share an edge (4-neighbours)."""
    r, c = np.divmod(np.arange(grid * grid), grid)
    return (np.abs(r[:, None] - r[None]) + np.abs(c[:, None] - c[None])) == 1


def grid_similarity(rows: torch.Tensor) -> float:
    """Mean cosine of position rows of grid neighbours minus the mean over all other pairs (self excluded):
    > 0 when the table has learned which patches sit next to each other."""
    n = rows.shape[0]
    grid = int_in("grid", int(round(math.sqrt(n))), 1)
    if grid * grid != n or grid < 3:
        raise ValueError(f"position rows must form a square grid of at least 3 x 3, got {n} rows")
    sim = cosine_matrix(rows)
    nb = grid_neighbours(grid)
    other = ~nb & ~np.eye(n, dtype=bool)
    return float(sim[nb].mean() - sim[other].mean())


# ---------------------------------------------------------------------------------------------
# Demo 1: an image, its patches, and where [CLS] looks
# ---------------------------------------------------------------------------------------------
def patch_view(models: dict, index: int = 0, patch: int = 2, layer: int = 2) -> dict:
    """The test image `index`, its patch grid, and the trained model's [CLS] attention to each patch (mean over
    heads) in `layer` (1-based), upsampled to pixels. models: {patch size: trained ViT}."""
    s = split()
    index = int_in("index", index, 0, len(s.test_y) - 1)
    if patch not in models:
        raise ValueError(f"no trained model for patch size {patch}; there are {sorted(models)}")
    model = models[patch]
    layer = int_in("layer", layer, 1, model.cfg.n_layers)
    img = s.test_x[index:index + 1]                                     # (1, 8, 8)
    with torch.no_grad():
        probs = model(img).softmax(-1)[0]
    att = model.cls_attention(img)[0, layer - 1]                        # (n,)
    g = model.cfg.grid
    att_img = att.reshape(g, g).repeat_interleave(patch, 0).repeat_interleave(patch, 1)  # (g, g) -> (8, 8)
    n = n_tokens(SIDE, patch)
    return {"image": img[0].numpy(), "attention": att_img.numpy(), "patch": patch, "label": int(s.test_y[index]),
            "pred": int(probs.argmax()), "p_pred": float(probs.max()), "tokens": n, "scores": n * n,
            "index": index, "layer": layer, "att_max": float(att.max()), "n_layers": model.cfg.n_layers}


def plot_patches(fig: matplotlib.figure.Figure, view: dict):
    """The digit with its patch grid (left), [CLS] attention over the patches (right); returns update(view)."""
    ax1, ax2 = fig.subplots(1, 2)
    img = ax1.imshow(view["image"], cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
    att = ax2.imshow(view["attention"], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    fig.colorbar(att, ax=ax2, label="[CLS]'s weight / its largest")
    lines = []
    for ax in (ax1, ax2):
        ax.set(xticks=[], yticks=[])
        for k in range(1, SIDE):
            lines += [ax.axhline(k - 0.5, color="C1", lw=1), ax.axvline(k - 0.5, color="C1", lw=1)]
    live(img, att, *lines)
    ax1.set_title("the digit as tokens", loc="left")
    ax2.set_title("where [CLS] looks", loc="left")
    caption = dict(ha="center", va="top", fontsize="small", linespacing=1.4)
    t1 = live(ax1.text(0.5, -0.04, "", transform=ax1.transAxes, **caption))[0]
    t2 = live(ax2.text(0.5, -0.04, "", transform=ax2.transAxes, **caption))[0]

    def update(v: dict):
        p = v["patch"]
        img.set_data(v["image"])
        att.set_data(v["attention"] / max(v["att_max"], 1e-12))
        for i, line in enumerate(lines):
            k = i // 2 % (SIDE - 1) + 1
            line.set_visible(k % p == 0)
        t1.set_text(f"test digit {v['index']}, a {v['label']}\n{p}x{p} patches: {v['tokens']} tokens with [CLS], "
                    f"{v['scores']:,} scores per head")
        t2.set_text(f"layer {v['layer']} of {v['n_layers']}, largest weight {v['att_max']:.2f}\n"
                    f"the model says {v['pred']} (p = {v['p_pred']:.2f})")
        return None

    update(view)
    return update


# ---------------------------------------------------------------------------------------------
# Demo 3: which patches a position table treats as neighbours (ViT's Fig. 7)
# ---------------------------------------------------------------------------------------------
TABLES = ("trained", "untrained", "2-D sinusoid")


def position_view(model: ViT, cell: int = 5, table: str = "trained") -> dict:
    """The cosine between the position row of grid cell `cell` and every other cell's row, as a (grid, grid) map,
    for the trained model's learned table, the same table at its initialisation (weights drawn from seed 0, as the
    demo's model was), or the fixed 2-D sinusoid of the same size."""
    choice("table", table, TABLES)
    g = model.cfg.grid
    if g < 2 or model.cfg.pos != "learned":
        raise ValueError("the position demo needs a model with a learned table over at least a 2x2 grid")
    cell = int_in("cell", cell, 0, g * g - 1)
    if table == "trained":
        rows = model.position_rows()
    elif table == "untrained":
        torch.manual_seed(0)
        rows = ViT(model.cfg).position_rows()
    else:
        rows = sincos_2d(g, model.cfg.d_model)
    sim = cosine_matrix(rows)
    return {"map": sim[cell].reshape(g, g), "cell": cell,  # (n,) -> (grid, grid)
            "grid": g, "table": table,
            "score": grid_similarity(rows) if g >= 3 else float("nan")}


def plot_positions(fig: matplotlib.figure.Figure, view: dict):
    """The chosen cell's cosine to every cell (one panel, the chosen cell ringed); returns update(view)."""
    ax = fig.subplots()
    g = view["grid"]
    img = ax.imshow(view["map"], cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    fig.colorbar(img, ax=ax, label="cosine to the ringed cell's position row")
    mark, = ax.plot([], [], "o", ms=18, mfc="none", mec="C3", mew=2)
    ax.set(xticks=range(g), yticks=range(g), xlabel="patch column", ylabel="patch row")
    live(img, mark)
    title = live_title(ax)

    def update(v: dict):
        img.set_data(v["map"])
        r, c = divmod(v["cell"], v["grid"])
        mark.set_data([c], [r])
        score = "" if np.isnan(v["score"]) else f": neighbours minus others {v['score']:+.2f}"
        title.set_text(f"{v['table']} table{score}")
        return None

    update(view)
    return update


# ---------------------------------------------------------------------------------------------
# Demo 2: what pixels as tokens cost
# ---------------------------------------------------------------------------------------------
def cost_view(image: int = 224, patch: int = 16, d: int = 768) -> dict:
    """For every patch size that tiles an image x image picture: tokens, score entries per head and layer, and the
    share of a layer's multiply-adds the n x n products take at width d (FFN 4d)."""
    image = int_in("image", image, 8, 1024)
    d = int_in("d", d, 16, 4096)
    sizes = np.array([p for p in range(1, image + 1) if image % p == 0])
    patch = int(sizes[np.argmin(np.abs(sizes - patch))])   # the nearest size that tiles the image
    n = np.array([n_tokens(image, int(p)) for p in sizes], dtype=float)
    costs = [layer_cost(int(k), d) for k in n]
    total = np.array([sum(c.values()) for c in costs])
    share = np.array([c["scores"] for c in costs]) / total
    i = int(np.where(sizes == patch)[0][0])
    return {"sizes": sizes, "n": n, "scores": n * n, "total": total, "share": share, "patch": patch,
            "image": image, "d": d, "i": i, "pixel_scores": float(n[0] ** 2)}


def plot_costs(fig: matplotlib.figure.Figure, view: dict):
    """Tokens and score entries against the patch size (left, log-log), the scores' share of a layer (right)."""
    ax1, ax2 = fig.subplots(1, 2)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
    ax1.set_yscale("log")
    tok, = ax1.plot([], [], "o-", color="C0", ms=3, label="tokens n")
    sc, = ax1.plot([], [], "s-", color="C3", ms=3, label="score entries n²")
    mark1, = ax1.plot([], [], "o", color="k", ms=8, mfc="none")
    sh, = ax2.plot([], [], "o-", color="C3", ms=3)
    mark2, = ax2.plot([], [], "o", color="k", ms=8, mfc="none")
    live(tok, sc, mark1, sh, mark2)
    ax1.set(xlabel="patch side p (pixels)", ylabel="count (scores: per head and layer)")
    ax2.set(xlabel="patch side p (pixels)", ylabel="share of a layer's multiply-adds", ylim=(0, 1))
    ax1.legend(fontsize=8, loc="upper right")
    t1, t2 = live_title(ax1, "per image"), live_title(ax2, "scores' share")

    def update(v: dict):
        p, i = v["sizes"], v["i"]
        tok.set_data(p, v["n"])
        sc.set_data(p, v["scores"])
        mark1.set_data([p[i]], [v["scores"][i]])
        sh.set_data(p, v["share"])
        mark2.set_data([p[i]], [v["share"][i]])
        t1.set_text(f"{v['image']}² at p = {v['patch']}: n = {int(v['n'][i]):,}, n² = {v['scores'][i]:.3g}")
        t2.set_text(f"{v['share'][i]:.1%} at p = {v['patch']}, d = {v['d']}")
        lo, hi = 1.0, max(v["scores"].max(), 10.0)
        xlim = (0.8, p.max() * 1.25)
        return most(set_limits(ax1, xlim, (lo * 0.7, hi * 2)), set_limits(ax2, xlim))

    update(view)
    return update

"""Notebook 11: BERT's pre-training objectives, masked-LM (15%, 80/10/10) and next-sentence prediction.

Compute functions are pure and seeded; plot functions draw on a figure.

    expected_fractions    closed form: share of ALL tokens that become [MASK] / random / stay (and are predicted)
    sampled_fractions     qalib.lab.data.mask_tokens on many random tokens: the same shares, measured
    visible_token_trust   how often a visible (non-[MASK]) input token is the true one
    mask_sentence         the rule on a typed sentence through the real WordPiece tokenizer
    pair_stats            qalib.lab.data.PairTask: label rate, segment layout, a one-transition NSP shortcut
    segment_effect        all-MiniLM-L6-v2: how much changing token_type_ids moves the hidden states
"""

from __future__ import annotations

import functools

import matplotlib as mpl
import numpy as np
import torch
from matplotlib.collections import PathCollection
from matplotlib.font_manager import FontProperties
from matplotlib.patches import BoxStyle
from matplotlib.path import Path
from matplotlib.textpath import TextPath, text_to_path

from qalib.lab.data import IGNORE, MASK, N_SPECIAL, PairTask, mask_tokens, masking_rates
from qalib.lab.device import one_thread
from qalib.lab.stats import binomial_tolerance
from qalib.notebook.drawing import (Change, LiveTickLabels, Panels, Update, bar_polygons, fixed_or_nice, live, live_bars, most,
                           nice_ceiling, points_to_pixels, set_limits)
from qalib.nn.pretrained import real_model
from qalib.nn.validate import int_in, seed_int


# Paper tables quoted in the notebook (dev-set numbers). Sources in the notebook's references.
BERT_TABLE8 = {  # Devlin et al. 2019, appendix C.2, Table 8: masking rates MASK/SAME/RND
    "80/10/10": {"MNLI fine-tune": 84.2, "NER fine-tune": 95.4, "NER feature-based": 94.9},
    "100/0/0": {"MNLI fine-tune": 84.3, "NER fine-tune": 94.9, "NER feature-based": 94.0},
}
BERT_TABLE5 = {  # Devlin et al. 2019, sec. 5.1, Table 5 (BERT-base sized ablations)
    "BERT-base (MLM + NSP)": {"MNLI-m": 84.4, "QNLI": 88.4, "SQuAD 1.1 F1": 88.5},
    "No NSP": {"MNLI-m": 83.9, "QNLI": 84.9, "SQuAD 1.1 F1": 87.9},
}
ROBERTA_TABLE2 = {  # Liu et al. 2019, sec. 4.2, Table 2 (BASE models, BOOKCORPUS + WIKIPEDIA)
    "SEGMENT-PAIR (+NSP)": {"SQuAD 1.1": 90.4, "SQuAD 2.0": 78.7, "MNLI-m": 84.0, "SST-2": 92.9, "RACE": 64.2},
    "SENTENCE-PAIR (+NSP)": {"SQuAD 1.1": 88.7, "SQuAD 2.0": 76.2, "MNLI-m": 82.9, "SST-2": 92.1, "RACE": 63.0},
    "FULL-SENTENCES (no NSP)": {"SQuAD 1.1": 90.4, "SQuAD 2.0": 79.1, "MNLI-m": 84.7, "SST-2": 92.5, "RACE": 64.8},
    "DOC-SENTENCES (no NSP)": {"SQuAD 1.1": 90.6, "SQuAD 2.0": 79.7, "MNLI-m": 84.7, "SST-2": 92.7, "RACE": 65.6},
}
KINDS = ("mask", "random", "keep")  # what happens to a chosen (predicted) position


# ---------------------------------------------------------------------------------------------
# 1. The masking rule: closed form and sampled
# ---------------------------------------------------------------------------------------------
def expected_fractions(mlm_prob=0.15, mask_frac=0.8, random_frac=0.1, n_random_choices: int | None = None) -> dict:
    """Share of all (maskable) tokens per outcome. With n_random_choices, a random replacement equals the
    original with probability 1/n_random_choices (BERT samples from the whole vocabulary), so the token you
    SEE unchanged is keep + random/n; without it, outcomes are counted by the action taken."""
    p, m, r = masking_rates(mlm_prob, mask_frac, random_frac)
    same = 0.0 if n_random_choices is None else 1.0 / int_in("n_random_choices", n_random_choices, 1)
    return {"predicted": p, "mask": p * m, "random": p * r * (1 - same), "keep": p * (1 - m - r + r * same),
            "untouched": 1 - p}


def _outcomes(ids: torch.Tensor, corrupted: torch.Tensor, labels: torch.Tensor, mask_id: int) -> dict:
    chosen = labels != IGNORE
    masked = chosen & (corrupted == mask_id)
    return {"mask": masked, "random": chosen & ~masked & (corrupted != ids), "keep": chosen & (corrupted == ids),
            "predicted": chosen}


def sampled_fractions(n_tokens: int = 200_000, vocab_size: int = 32, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1,
                      seed: int = 0) -> dict:
    """mask_tokens on n_tokens random content tokens: measured share per outcome, the closed form, and 4-sigma tolerances."""
    n = int_in("n_tokens", n_tokens, 1)
    v = int_in("vocab_size", vocab_size, N_SPECIAL + 1)
    p, m, r = masking_rates(mlm_prob, mask_frac, random_frac)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(N_SPECIAL, v, (1, n), generator=g)                    # (1, N) content tokens only
    corrupted, labels = mask_tokens(ids, v, g, p, m, r)
    outcome = _outcomes(ids, corrupted, labels, MASK)
    measured = {k: float(x.double().mean()) for k, x in outcome.items()}
    expected = expected_fractions(p, m, r, n_random_choices=v - N_SPECIAL)   # random ids are drawn from the content tokens
    chosen = max(int(outcome["predicted"].sum()), 1)
    of_chosen = {k: float(outcome[k].sum()) / chosen for k in KINDS}
    return {"n_tokens": n, "measured": measured, "expected": {k: expected[k] for k in measured},
            "tolerance": {k: binomial_tolerance(expected[k], n) for k in measured}, "of_chosen": of_chosen}


def visible_token_trust(mlm_prob=0.15, mask_frac=0.8, random_frac=0.1) -> dict:
    """Among input tokens that are not [MASK]: the share that is the true token, and the share that is a target.

    P(shown token is wrong | not [MASK]) = p r / (1 - p m); BERT's numbers: 0.015 / 0.88 = 1.7%."""
    p, m, r = masking_rates(mlm_prob, mask_frac, random_frac)
    visible = 1 - p * m
    if visible <= 0:
        return {"visible": 0.0, "wrong": 0.0, "target": 0.0, "note": "every token is [MASK]: nothing is visible"}
    return {"visible": visible, "wrong": p * r / visible, "target": p * (1 - m) / visible}


# ---------------------------------------------------------------------------------------------
# 2. The rule on a typed sentence (real WordPiece tokenizer)
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def cached_tokenizer():
    """The real model's WordPiece tokenizer (all-MiniLM-L6-v2's, or $QALIB_MODEL's), built once per process."""
    return real_model()[1]


def maskable_pieces(ids: torch.Tensor, tok) -> torch.Tensor:
    """True for word pieces, False for [PAD] [UNK] [CLS] [SEP] [MASK] (BERT never masks those)."""
    special = torch.tensor([tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id, tok.backend.token_to_id("[UNK]")])
    return ~torch.isin(ids, special)


def mask_wordpiece(ids: torch.Tensor, tok, generator, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    """mask_tokens on real WordPiece ids: special tokens are never chosen, [MASK] is the tokenizer's id (103),
    random replacements come from the whole vocabulary (as in google-research/bert create_pretraining_data.py)."""
    corrupted, labels = mask_tokens(ids, tok.vocab_size, generator, mlm_prob, mask_frac, random_frac,
                                    maskable=maskable_pieces(ids, tok))
    # qalib.lab.data writes its own [MASK] id (4, "[unused3]" in this vocabulary); the tokenizer never emits 4
    corrupted = torch.where((labels != IGNORE) & (corrupted == MASK), torch.full_like(ids, tok.mask_id), corrupted)
    return corrupted, labels


def mask_sentence(text: str = "The quick brown fox jumps over the lazy dog near the riverbank.", mlm_prob=0.15,
                  mask_frac=0.8, random_frac=0.1, seed: int = 0, n_redraws: int = 2000) -> dict:
    """One draw of the rule on a typed sentence, and the outcome shares over n_redraws draws of the same sentence."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty: type a sentence to mask")
    p, m, r = masking_rates(mlm_prob, mask_frac, random_frac)
    int_in("n_redraws", n_redraws, 1, 100_000)
    tok = cached_tokenizer()
    ids = tok(text, max_length=128)["input_ids"]                                # (1, T), long texts cut at 128 pieces
    g = torch.Generator().manual_seed(seed_int("seed", seed))
    corrupted, labels = mask_wordpiece(ids, tok, g, p, m, r)
    out = {k: v[0] for k, v in _outcomes(ids, corrupted, labels, tok.mask_id).items()}
    kind = ["keep" if out["keep"][i] else "random" if out["random"][i] else "mask" if out["mask"][i] else "-"
            for i in range(ids.shape[1])]
    many_ids = ids.expand(n_redraws, -1)
    c2, l2 = mask_wordpiece(many_ids, tok, g, p, m, r)
    many = _outcomes(many_ids, c2, l2, tok.mask_id)
    n_maskable = int(maskable_pieces(ids, tok).sum())
    denom = max(n_maskable * n_redraws, 1)
    res = {"tokens": [tok.backend.id_to_token(int(i)) for i in ids[0]],
           "shown": [tok.backend.id_to_token(int(i)) for i in corrupted[0]],
           "kind": kind, "n_maskable": n_maskable,
           "sentence_fraction": {k: float(out[k].sum()) / max(n_maskable, 1) for k in (*KINDS, "predicted")},
           "redraw_fraction": {k: float(many[k].sum()) / denom for k in (*KINDS, "predicted")},
           "expected": {k: v for k, v in expected_fractions(p, m, r).items() if k in (*KINDS, "predicted")},
           "n_redraws": n_redraws, "rates": {"mask": m, "random": r, "keep": 1 - m - r}}
    if n_maskable == 0:
        res["note"] = "nothing to mask: the sentence has no word pieces besides [CLS] and [SEP]"
    elif not out["predicted"].any():
        res["note"] = f"this draw chose none of the {n_maskable} pieces (probability (1 - {p:g})^{n_maskable}); change the seed"
    return res


def split_word_leak(text: str, n_draws: int = 4000, seed: int = 0) -> dict:
    """Per-piece masking vs whole words: among chosen pieces of words split into several pieces, the share
    whose word still shows at least one unchosen sibling piece (a giveaway)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty: type a sentence")
    tok = cached_tokenizer()
    enc = tok.encode(text)
    ids = torch.tensor(enc.ids)[None].expand(int_in("n_draws", n_draws, 1), -1)     # (n_draws, T)
    word = torch.tensor([-1 if w is None else w for w in enc.word_ids])           # piece -> word (-1: special)
    _, labels = mask_wordpiece(ids, tok, torch.Generator().manual_seed(seed))
    chosen = labels != IGNORE
    same = (word[:, None] == word[None, :]) & (word[:, None] >= 0) & ~torch.eye(len(word), dtype=torch.bool)  # (T, T) siblings
    split = same.any(-1)                                                           # piece of a multi-piece word
    sibling_visible = (same[None] & ~chosen[:, None, :]).any(-1)                    # (n_draws, T)
    n_split_chosen = int((chosen & split).sum())
    return {"pieces": list(enc.tokens), "n_split_pieces": int(split.sum()),
            "leak": float((chosen & split & sibling_visible).sum()) / max(n_split_chosen, 1),
            "n_split_chosen": n_split_chosen}


@functools.lru_cache(maxsize=1)
def _monospace_charset() -> frozenset[int]:
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(font_manager.findfont("monospace")).get_charmap())


def _drawable(piece: str) -> str:
    """A word piece as the monospace font can draw it. BERT's vocabulary has pieces in many scripts (a random
    replacement often picks one); characters the font lacks become \\uXXXX escapes instead of empty boxes."""
    chars = _monospace_charset()
    return "".join(c if ord(c) in chars else f"\\u{ord(c):04x}" for c in piece)


_KIND_COLOURS = {"mask": "#fdb863", "random": "#b2abd2", "keep": "#a6dba0", "-": "#f7f7f7"}


_LABEL_SIZE = 8  # points


def _piece_boxes(r):
    """(x, y, label, kind) of each word piece's box (top left, in axes fractions: left to right, wrapped into
    rows), then of the colour key along the bottom."""
    x, y, per_line = 0.0, 0.92, 0.98
    for orig, shown, kind in zip(r["tokens"], r["shown"], r["kind"]):
        orig, shown = _drawable(orig), _drawable(shown)
        w = 0.018 * max(len(orig), len(shown)) + 0.03
        if x + w > per_line:
            x, y = 0.0, y - 0.2
        yield x, y, shown if kind in ("-", "keep") else f"{shown}\n({orig})", kind
        x += w
    for i, (kind, name) in enumerate(zip(KINDS, ("[MASK]", "random", "kept, predicted"))):
        yield 0.34 * i, 0.1, f"{name} ({r['rates'][kind]:.0%})", kind


@functools.lru_cache(maxsize=2048)
def _label_paths(label: str) -> tuple[Path, Path]:
    """A monospace label as glyph outlines, in points from its top left corner, and the round box around it.
    A word piece drawn this way costs microseconds in a PathCollection; a Text with a bbox costs milliseconds
    (glyphs are rasterised one by one), and the demo redraws every piece on every change."""
    font = FontProperties(family="monospace", size=_LABEL_SIZE)
    # line spacing, first baseline and height of a line as a Text with this font lays them out (within ~0.5 pt)
    step, ascent, line_height = 1.3 * _LABEL_SIZE, 0.9 * _LABEL_SIZE, 1.15 * _LABEL_SIZE
    lines = label.split("\n")
    glyphs = Path.make_compound_path(*(TextPath((0, -ascent - i * step), line, prop=font)
                                       for i, line in enumerate(lines)))
    width = max(text_to_path.get_text_width_height_descent(line, font, ismath=False)[0] for line in lines)  # advance
    height = (len(lines) - 1) * step + line_height
    return glyphs, BoxStyle.Round(pad=0.2 * _LABEL_SIZE)(0, -height, width, height, 1.0)


def plot_masked_sentence(fig, r) -> Update:
    """One box per word piece and one bar per share: another draw (a probability or the seed) relabels and moves
    the boxes and changes the bars. The share axis reaches twice mlm_prob (at most 1) in 1-2-5 steps, so it moves
    only when mlm_prob crosses a step (or a draw lies far above it). Another sentence only changes the boxes and
    the title too."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.6, 1])
    ax1.set_axis_off()
    title = ax1.set_title("", fontsize=10)  # live: the count of maskable pieces follows the sentence
    # every box and every label in two collections: paths in points (scaled to pixels at draw time), placed at
    # offsets in axes fractions; not clipped, as a Text would not be
    on_axes = {"offset_transform": ax1.transAxes, "transform": points_to_pixels(fig), "clip_on": False}
    boxes = ax1.add_collection(PathCollection([], edgecolors="0.6", linewidths=1.0, **on_axes), autolim=False)
    labels = ax1.add_collection(PathCollection([], facecolors=mpl.rcParams["text.color"], linewidths=0, **on_axes),
                                autolim=False)
    kinds = [*KINDS, "predicted"]
    xs = np.arange(len(kinds))
    series = (("expected", "expected"), ("redraw_fraction", f"{r['n_redraws']} redraws"),
              ("sentence_fraction", "this draw"))
    groups = {key: ax2.bar(xs + (j - 1) * 0.27, np.zeros(len(kinds)), width=0.27, label=lab, color=f"C{j}")
              for j, (key, lab) in enumerate(series)}
    ax2.set_xticks(xs, ["[MASK]", "random", "kept", "predicted"])
    ax2.set(ylabel="share of maskable tokens", title="outcome shares")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: no bar can run into it
    live(title, boxes, labels, *(bar for bars in groups.values() for bar in bars))
    n_redraws = r["n_redraws"]

    def update(r) -> Panels | Change | None:
        if r["n_redraws"] != n_redraws:
            return Change.FIGURE  # another legend
        title.set_text(f"one draw ({r['n_maskable']} maskable word pieces)")
        lefts, tops, texts, kinds_shown = zip(*_piece_boxes(r))
        glyphs, frames = zip(*map(_label_paths, texts))
        for collection, paths in ((labels, glyphs), (boxes, frames)):
            collection.set_paths(paths)
            collection.set_offsets(np.column_stack([lefts, tops]))  # (n_pieces + 3, 2)
        boxes.set_facecolor([_KIND_COLOURS[kind] for kind in kinds_shown])
        for key, bars in groups.items():
            for bar, kind in zip(bars, kinds):
                bar.set_height(r[key][kind])
        # room for a draw well above the expected share (at most 1, a share)
        highest = max(2 * r["expected"]["predicted"], *(r[key]["predicted"] for key in groups))
        return set_limits(ax2, ylim=(0, min(1.0, nice_ceiling(highest))))

    update(r)
    return update


# ---------------------------------------------------------------------------------------------
# 3. Next-sentence prediction: pairs and segments
# ---------------------------------------------------------------------------------------------
def pair_stats(language, half_len: int = 12, n: int = 4000, seed: int = 0) -> dict:
    """PairTask batches: share of label 1, the segment layout, and a one-transition rule's NSP accuracy.

    The rule says "B continues A" iff B's first token may follow A's last token in the language (a bigram
    successor or, when the language has a lag, the lag-mapped token): the kind of shortcut RoBERTa and ALBERT
    blame for NSP being too easy."""
    half = int_in("half_len", half_len, 1)
    n = int_in("n", n, 2)
    batch = PairTask(language, half).batch(n, torch.Generator().manual_seed(seed))
    ids, labels, types = batch.input_ids, batch.labels, batch.token_type_ids
    a_last, b_first = ids[:, half] - N_SPECIAL, ids[:, half + 2] - N_SPECIAL   # [CLS] A(half) [SEP] B ...
    allowed = (language.successors[a_last] == b_first[:, None]).any(-1)
    if language.p_lag > 0 and half + 1 > language.lag:                          # B[0] may copy lag_map[x_{t-lag}]
        lagged = ids[:, half + 1 - language.lag] - N_SPECIAL
        allowed |= language.lag_map[lagged] == b_first
    rule = allowed.long()
    expected_types = torch.cat([torch.zeros(half + 2), torch.ones(half + 1)]).long()
    return {"n": n, "label_rate": float(labels.double().mean()), "types_ok": bool((types == expected_types).all()),
            "allowed_if_next": float(allowed[labels == 1].double().mean()),
            "allowed_if_random": float(allowed[labels == 0].double().mean()),
            "rule_accuracy": float((rule == labels).double().mean()), "example": ids[0], "example_types": types[0]}


@torch.no_grad()
def hidden_states(model, input_ids, token_type_ids, attention_mask=None) -> torch.Tensor:
    """(L + 1, T, d): the embedding output and every layer's output for the first sequence of a batch."""
    with one_thread():
        states = model(input_ids, token_type_ids, attention_mask, output_hidden_states=True).hidden_states
    return torch.stack([h[0] for h in states])  # L + 1 of (T, d) -> (L + 1, T, d)


def new_segment_ids(types: torch.Tensor, mode: str) -> torch.Tensor:
    """'zero' (everything segment A), 'ones' (everything B) or 'swap' (A <-> B)."""
    if mode == "zero":
        return torch.zeros_like(types)
    if mode == "ones":
        return torch.ones_like(types)
    if mode == "swap":
        return 1 - types
    raise ValueError(f"mode must be 'zero', 'ones' or 'swap', got {mode!r}")


def compare_states(h: torch.Tensor, h2: torch.Tensor, types: torch.Tensor, new: torch.Tensor, mode: str) -> dict:
    """Relative change ||h' - h|| / ||h|| per layer and token; means over tokens whose segment id changed / did not."""
    rel = ((h2 - h).norm(dim=-1) / h.norm(dim=-1)).numpy()                      # (L + 1, T)
    changed = (new != types).reshape(-1).numpy()
    zeros = np.zeros(rel.shape[0])
    cos = torch.nn.functional.cosine_similarity(h[-1].mean(0), h2[-1].mean(0), dim=0)
    return {"mode": mode, "rel_change": rel, "changed": changed, "segments": types.reshape(-1).numpy(),
            "mean_changed": rel[:, changed].mean(1) if changed.any() else zeros,
            "mean_unchanged": rel[:, ~changed].mean(1) if (~changed).any() else zeros,
            "mean_pool_cos": float(cos)}


def segment_effect(model, enc: dict, mode: str = "zero") -> dict:
    """How much every token's hidden state moves, per layer (0 = embedding output), when the token_type_ids of
    one encoded pair are replaced (see new_segment_ids)."""
    types = enc["token_type_ids"][:1]
    new = new_segment_ids(types, mode)
    h = hidden_states(model, enc["input_ids"][:1], types)
    h2 = hidden_states(model, enc["input_ids"][:1], new)
    return compare_states(h, h2, types, new, mode)


@functools.lru_cache(maxsize=64)
def _minilm_states(text_a: str, text_b: str | None, types: tuple) -> tuple[list, torch.Tensor]:
    """Word pieces and MiniLM hidden states of a pair with given segment ids (cached: moving a slider is free)."""
    model, tok = real_model()
    enc = tok(text_a, text_b, max_length=128)
    tokens = [tok.backend.id_to_token(int(i)) for i in enc["input_ids"][0]]  # as truncated
    return tokens, hidden_states(model, enc["input_ids"], torch.tensor([types]))


def segment_view(text_a: str = "The cat sat on the mat.", text_b: str = "It was warm there.", mode: str = "zero",
                 layer: int | None = None) -> dict:
    """segment_effect for a typed pair on the real model (all-MiniLM-L6-v2, or $QALIB_MODEL's), with the tokens,
    for one chosen layer (default: the last)."""
    if not isinstance(text_a, str) or not text_a.strip():
        raise ValueError("sentence A is empty: type a sentence")
    model, tok = real_model()
    layer = model.cfg.n_layers if layer is None else int_in("layer", layer, 0, model.cfg.n_layers)
    text_b = text_b if isinstance(text_b, str) and text_b.strip() else None
    types = tok(text_a, text_b, max_length=128)["token_type_ids"]
    new = new_segment_ids(types, mode)
    tokens, h = _minilm_states(text_a, text_b, tuple(types[0].tolist()))
    _, h2 = _minilm_states(text_a, text_b, tuple(new[0].tolist()))
    r = compare_states(h, h2, types, new, mode)
    r.update(tokens=tokens, layer=layer)
    if not r["changed"].any():
        r["note"] = "these segment ids equal the original ones (no sentence B?): nothing changes"
    return r


SEGMENT_VIEW = 0.3  # the relative changes of typical pairs stay below this at every layer, in every mode


def plot_segment_effect(fig, r) -> Update:
    """One bar per word piece, one point per layer: another mode or layer recolours and resizes the bars and
    moves the two lines; another pair also replaces the bars and their word pieces (all live: a new sentence
    draws no static part again). Both panels share a y axis up to SEGMENT_VIEW, or for a pair that moves more, up
    to the 1-2-5 step above its largest change at any layer: moving the layer never rescales."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.6, 1])
    bars = live_bars(ax1)
    pieces = LiveTickLabels(ax1, "x")
    ax1.set(ylabel="||h' - h|| / ||h||")
    ax1.set_title("orange: segment id changed", loc="right", fontsize=8, fontweight="normal")  # static, beside the live one
    layers = np.arange(len(r["mean_changed"]))
    changed_mean, = ax2.plot(layers, r["mean_changed"], "o-", color="C1", label="tokens whose id changed")
    unchanged_mean, = ax2.plot(layers, r["mean_unchanged"], "s-", color="C0", label="tokens whose id did not")
    ax2.set(xlabel="layer (0 = embedding output)", ylabel="mean relative change", title="through the layers")
    ax2.legend(fontsize=7, loc="upper right")
    live(changed_mean, unchanged_mean, ax1.title)

    def update(r) -> Panels | None:
        n = len(r["tokens"])
        if r["tokens"] != pieces.labels:
            pieces.set(r["tokens"])
            ax1.set_xlim(-0.5, n - 0.5)  # no x ticks: the limits change no static pixel
        bars.set_verts(bar_polygons(np.arange(n), r["rel_change"][r["layer"]]))
        bars.set_facecolor(["C1" if changed else "C0" for changed in r["changed"]])
        changed_mean.set_ydata(r["mean_changed"])
        unchanged_mean.set_ydata(r["mean_unchanged"])
        ax1.set_title(f"layer {r['layer']} ('{r['mode']}')")
        largest = r["rel_change"].max()
        ylim = (0, fixed_or_nice(largest, SEGMENT_VIEW))
        return most(set_limits(ax1, ylim=ylim), set_limits(ax2, ylim=ylim))

    update(r)
    return update

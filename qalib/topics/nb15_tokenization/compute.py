"""Notebook 15: what subword tokenization buys, and what the vocabulary size trades.

Pure functions over trained `tokenizers.Tokenizer` objects and plain numbers.

    corpus = stdlib_corpus()                       # Python's own documentation, train / held-out by document
    words = bert_words(text)                       # BERT's BasicTokenizer words (lower-cased, no accents)
    folds = held_out_folds(corpus.held_out)        # held-out documents dealt into folds, as lines of BERT words
    held_out_stats(tokenizer, folds)               # tokens per word and [UNK] share of words, per fold
    pieces, unknown = encode_marked(tokenizer, lines)  # each word's pieces, and which of them are [UNK] (by id)
    bert_base_params(vocab_size=30522)             # BERT-base's parameter count from its config's shapes
    verdicts(sizes, reached, tokens_per_word)      # a verdict per vocabulary size, from the numbers alone
    split_differences(tok_a, tok_b, words)         # the share of words two tokenizers split differently
    pieces_view(text, tokenizers)                  # demo 1's compute; table_tradeoff(...) is demo 2's
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.patches import BoxStyle
from matplotlib.path import Path
from matplotlib.transforms import blended_transform_factory
from tokenizers import Tokenizer, normalizers, pre_tokenizers

from qalib.notebook.drawing import (Change, Panels, Update, bar_polygons, label_path, live, live_bars, nice_ceiling,
                           points_to_pixels, set_limits, text_width)
from qalib.nn.validate import int_in

UNK = "[UNK]"  # the unknown token of every tokenizer trained here and of MiniLM's; count it by id (encode_marked)
# Modules whose docstrings (with pydoc's language-reference topics) make the corpus: plain-English documentation
# that ships with every Python, so no download. Fixed and sorted, so the corpus depends only on the Python version.
# pdb is left out: its docstrings are assembled at import time and differ inside a Jupyter kernel. No HTTP client
# module either (urllib's request module): the project never imports one (tests/test_safety.py).
MODULES = tuple(sorted((
    "argparse", "bisect", "calendar", "collections", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "difflib", "email.message", "enum", "fractions", "ftplib", "functools", "glob", "gzip", "hashlib",
    "heapq", "hmac", "http.client", "imaplib", "inspect", "ipaddress", "itertools", "json", "locale", "logging",
    "mailbox", "mimetypes", "numbers", "operator", "optparse", "os", "pathlib", "platform", "plistlib",
    "pprint", "queue", "random", "re", "sched", "secrets", "selectors", "shutil", "smtplib", "socket", "ssl",
    "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "timeit",
    "tokenize", "trace", "traceback", "turtle", "types", "typing", "urllib.parse", "uuid", "wave", "weakref",
    "xml.dom.minidom", "xml.etree.ElementTree", "zipfile",
)))
HELD_OUT_EVERY = 5  # every 5th document (in sorted order) is held out: whole modules / topics, never seen in training
N_FOLDS = 4         # the held-out documents, dealt round-robin into folds: the spread of every held-out statistic


@dataclass(frozen=True)
class Corpus:
    """Documents (name, text), split by document: held-out text comes from modules and topics training never saw."""

    train: tuple[tuple[str, str], ...]
    held_out: tuple[tuple[str, str], ...]

    def lines(self, part: str = "train") -> list[str]:
        docs = self.train if part == "train" else self.held_out
        return [line for _, text in docs for line in text.splitlines() if line.strip()]

    def size(self, part: str = "train") -> dict:
        text = "\n".join(t for _, t in (self.train if part == "train" else self.held_out))
        return {"documents": len(self.train if part == "train" else self.held_out), "characters": len(text),
                "words": len(bert_words(text))}


def _docstrings(module_name: str) -> str:
    """The docstrings of a module, its public classes and functions, and their methods, in sorted order."""
    module = importlib.import_module(module_name)
    docs, seen = [], set()
    with warnings.catch_warnings():  # reading typing's deprecated aliases (typing.re, typing.io) warns
        warnings.simplefilter("ignore", DeprecationWarning)
        _collect(module, docs, seen)
    return "\n\n".join(docs)


def _collect(module, docs: list, seen: set) -> None:
    def add(obj) -> None:
        doc = inspect.getdoc(obj)
        if doc and id(obj) not in seen:  # an alias (two names, one object) counts once
            seen.add(id(obj))
            docs.append(doc)

    add(module)
    for name in sorted(vars(module)):
        obj = vars(module)[name]
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue  # private, or imported from elsewhere: documented there
        if inspect.isclass(obj) or inspect.isfunction(obj):
            add(obj)
        if inspect.isclass(obj):
            for method_name in sorted(vars(obj)):
                method = vars(obj)[method_name]
                if not method_name.startswith("_") and inspect.isfunction(method):
                    add(method)


def stdlib_corpus() -> Corpus:
    """pydoc's language-reference topics plus the docstrings of MODULES: English prose on every machine, offline."""
    from pydoc_data.topics import topics

    docs = sorted([(f"reference:{k}", v) for k, v in topics.items()]
                  + [(f"docstrings:{m}", _docstrings(m)) for m in MODULES])
    docs = [(name, text) for name, text in docs if text.strip()]
    held = tuple(d for i, d in enumerate(docs) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1)
    train = tuple(d for i, d in enumerate(docs) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1)
    return Corpus(train=train, held_out=held)


# BERT-uncased's text pipeline, shared by every tokenizer the notebook trains except byte-level BPE (GPT-2 keeps
# the raw text): clean control characters, split CJK characters apart, strip accents, lower-case; then split on
# whitespace and punctuation. The tokenizers then differ only in their model: how a word becomes pieces.
def bert_normalizer():
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)


def bert_pre_tokenizer():
    return pre_tokenizers.BertPreTokenizer()


_NORMALIZER, _PRE_TOKENIZER = bert_normalizer(), bert_pre_tokenizer()


def bert_words(text: str) -> list[str]:
    """The words BERT's BasicTokenizer makes of `text`: the common denominator of 'tokens per word'."""
    return [w for w, _ in _PRE_TOKENIZER.pre_tokenize_str(_NORMALIZER.normalize_str(text))]


def line_words(text: str) -> list[list[str]]:
    """`text` as BERT words, line by line (no word spans a line break), empty lines dropped."""
    return [words for words in (bert_words(line) for line in text.splitlines()) if words]


def encode_marked(tokenizer: Tokenizer, lines: list[list[str]]) -> tuple[list[list[str]], list[list[bool]]]:
    """Each word's pieces under `tokenizer`, for lines already split into BERT words (line_words), and for each
    piece whether it is unknown: its id is the tokenizer's [UNK] id. The id decides, never the piece's text: a
    unigram model keeps the raw unknown character as the text ('°') and puts [UNK] only in the id; WordPiece, BPE
    and word-level models write '[UNK]' as the text too. A tokenizer with no [UNK] (byte-level BPE) marks nothing.
    A byte-level tokenizer sees each word with its leading space, as inside running text: a word is one unit for
    every tokenizer, so 'tokens per word' has one denominator."""
    if isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel):
        lines = [[" " + w for w in words] for words in lines]
    unk_id = tokenizer.token_to_id(UNK)
    pieces, unknown = [], []
    for words, enc in zip(lines, tokenizer.encode_batch(lines, is_pretokenized=True, add_special_tokens=False)):
        p, u = _by_word(enc, len(words), unk_id)
        pieces.extend(p)
        unknown.extend(u)
    return pieces, unknown


def encode_lines(tokenizer: Tokenizer, lines: list[list[str]]) -> list[list[str]]:
    """Each word's pieces under `tokenizer` (encode_marked without the [UNK] marks)."""
    return encode_marked(tokenizer, lines)[0]


def word_stats(pieces: list[list[str]], unknown: list[list[bool]]) -> dict:
    """Tokens per word and the share of words with an unknown piece (encode_marked's marks: by id, not text)."""
    n = len(pieces)
    if len(unknown) != n:
        raise ValueError(f"unknown must have one entry per word ({n}), got {len(unknown)}")
    if n == 0:
        return {"words": 0, "tokens": 0, "tokens_per_word": float("nan"), "unk_rate": float("nan")}
    tokens = sum(len(p) for p in pieces)
    return {"words": n, "tokens": tokens, "tokens_per_word": tokens / n,
            "unk_rate": sum(any(u) for u in unknown) / n}


def held_out_folds(documents, n_folds: int = N_FOLDS) -> list[list[list[str]]]:
    """The held-out documents dealt round-robin into n_folds folds, each fold as line_words (computed once, shared
    by every tokenizer)."""
    int_in("n_folds", n_folds, 1, max(1, len(documents)))
    folds = [[] for _ in range(n_folds)]
    for i, (_, text) in enumerate(documents):
        folds[i % n_folds].extend(line_words(text))
    return folds


def held_out_stats(tokenizer: Tokenizer, folds) -> dict:
    """word_stats per fold (held_out_folds), as arrays (n_folds,)."""
    stats = [word_stats(*encode_marked(tokenizer, fold)) for fold in folds]
    return {k: np.array([s[k] for s in stats]) for k in ("words", "tokens", "tokens_per_word", "unk_rate")}


def unk_words(tokenizer: Tokenizer, folds) -> list[str]:
    """The held-out words (BERT words, lower-cased) that `tokenizer` turns into or through [UNK] (by id), in text
    order."""
    out = []
    for fold in folds:
        words = [w for line in fold for w in line]
        out.extend(w for w, unknown in zip(words, encode_marked(tokenizer, fold)[1]) if any(unknown))
    return out


def unseen_characters(train_lines, words) -> dict:
    """Of `words` (those that hit [UNK]), how many contain a character the normalised training text never has."""
    alphabet = set("".join(_NORMALIZER.normalize_str(line) for line in train_lines))
    return {"words": len(words), "with_unseen_char": sum(any(c not in alphabet for c in w) for w in words),
            "examples": sorted(set(words))[:8]}


def split_differences(tok_a: Tokenizer, tok_b: Tokenizer, words) -> dict:
    """The share of `words` (already BERT words) whose pieces differ between two tokenizers, with examples."""
    words = list(words)
    if not words:
        raise ValueError("words must not be empty")
    a = tok_a.encode(words, is_pretokenized=True, add_special_tokens=False)
    b = tok_b.encode(words, is_pretokenized=True, add_special_tokens=False)
    split_a, split_b = _by_word(a, len(words))[0], _by_word(b, len(words))[0]
    differ = [(w, pa, pb) for w, pa, pb in zip(words, split_a, split_b) if pa != pb]
    return {"words": len(words), "differ": len(differ), "share": len(differ) / len(words), "examples": differ[:6]}


def _by_word(enc, n: int, unk_id: int | None = None) -> tuple[list[list[str]], list[list[bool]]]:
    """An encoding's tokens grouped by word, and for each whether its id is unk_id."""
    pieces: list[list[str]] = [[] for _ in range(n)]
    unknown: list[list[bool]] = [[] for _ in range(n)]
    for token, token_id, word in zip(enc.tokens, enc.ids, enc.word_ids):
        pieces[word].append(token)
        unknown[word].append(unk_id is not None and token_id == unk_id)
    return pieces, unknown


def vocab_overlap(tok_a: Tokenizer, tok_b: Tokenizer) -> dict:
    a, b = set(tok_a.get_vocab()), set(tok_b.get_vocab())
    return {"a": len(a), "b": len(b), "common": len(a & b), "share": len(a & b) / max(len(a), len(b))}


# -- parameters and attention cost ------------------------------------------------------------------------------
def bert_base_params(vocab_size: int = 30522, d: int = 768, layers: int = 12, d_ff: int = 3072,
                     max_positions: int = 512, type_vocab: int = 2) -> dict:
    """BERT-base's parameters from its config's shapes (HF BertModel with pooler): the word table is V x d."""
    int_in("vocab_size", vocab_size, 1)
    word = vocab_size * d
    embeddings = word + (max_positions + type_vocab) * d + 2 * d        # + position, segment tables, LayerNorm
    layer = 4 * (d * d + d) + 2 * d + (d * d_ff + d_ff) + (d_ff * d + d) + 2 * d   # Q, K, V, O; LN; FFN; LN
    pooler = d * d + d
    total = embeddings + layers * layer + pooler
    return {"word_embeddings": word, "embeddings": embeddings, "total": total, "word_share": word / total,
            "non_word": total - word}


def embedding_share(vocab_sizes, d: int = 768, other_params: int | None = None) -> np.ndarray:
    """V d / (V d + the rest), the rest held at BERT-base's non-word-embedding parameters unless given."""
    rest = bert_base_params(d=d)["non_word"] if other_params is None else other_params
    v = np.asarray(vocab_sizes, dtype=float)
    return v * d / (v * d + rest)


def attention_cost(tokens_per_word) -> np.ndarray:
    """Attention's score matrix has n^2 entries; with n = words x tokens per word, its cost relative to the smallest
    tokens-per-word value is (tpw / min tpw)^2."""
    tpw = np.asarray(tokens_per_word, dtype=float)
    return (tpw / tpw.min()) ** 2


SATURATED_GAIN = 0.05  # a doubling that saves under 5% of the tokens is called table-bound


def verdicts(sizes, reached, tokens_per_word, unk_rate, d: int = 768) -> list[str]:
    """One line per vocabulary size, from the numbers only: the [UNK] rate, whether the corpus ran out of pieces,
    and how many tokens (and so how many of the attention scores, n^2) the next size saves against the rows it adds."""
    sizes, reached = list(sizes), list(reached)
    tpw, unk = np.asarray(tokens_per_word, dtype=float), np.asarray(unk_rate, dtype=float)
    out = []
    for i, (size, got) in enumerate(zip(sizes, reached)):
        if unk[i] > 0.01:
            out.append(f"{size}: {100 * unk[i]:.1f}% of words are [UNK]: too small")
        elif got < size:
            out.append(f"{size}: the corpus ran out at {got} pieces: asking for more adds nothing")
        elif i + 1 == len(sizes):
            out.append(f"{size}: the largest tried")
        else:
            gain = 1 - tpw[i + 1] / tpw[i]
            saved_attention = 1 - (tpw[i + 1] / tpw[i]) ** 2
            rows = (reached[i + 1] - got) * d
            kind = "sequence-bound" if gain >= SATURATED_GAIN else "table-bound"
            out.append(f"{size}: {kind}: the next size saves {100 * gain:.1f}% of tokens "
                       f"({100 * saved_attention:.1f}% of the attention scores; the rest of the compute falls with the "
                       f"tokens) for {rows / 1e6:.2f}M more parameters at d={d}")
    return out


# One colour and marker per kind, from qalib's colour-blind-safe palette (seaborn "colorblind"), markers as a second
# cue: WordPiece blue, unigram orange.
KIND_STYLE = {"word": ("0.25", "s"), "wordpiece": ("#0173b2", "o"), "bpe": ("#029e73", "^"),
              "unigram": ("#de8f05", "D"), "byte-level bpe": ("#cc78bc", "v")}


def reached_points(reached, rows) -> tuple[np.ndarray, np.ndarray]:
    """The distinct sizes reached (sizes,) in order, and the columns of rows (folds, sizes) that belong to them: a
    size asked for but not reached repeats the last size reached (the corpus ran out), and is drawn once."""
    reached, rows = np.asarray(reached), np.asarray(rows, dtype=float)
    keep = np.r_[True, reached[1:] != reached[:-1]]
    return reached[keep], rows[:, keep]


def plot_tradeoff(fig, reached: dict, tokens_per_word: dict, unk_rate: dict, d: int = 768,
                  reference: int = 30522) -> None:
    """One figure, three panels against the vocabulary size each tokenizer reached (reached: kind -> (sizes,)):
    held-out [UNK] rate, tokens per word (the score matrix grows with its square), and the word table's share of a
    BERT-base-sized model at WordPiece's sizes reached, with BERT-base's own `reference` size marked. A size asked for
    but not reached adds no point. Lines are fold means, bands min-max (rows: kind -> (sizes, folds))."""
    from qalib.notebook.drawing import seed_band

    ax1, ax2, ax3 = fig.subplots(1, 3)
    for ax, values, scale in ((ax1, unk_rate, 100), (ax2, tokens_per_word, 1)):
        for i, (kind, rows) in enumerate(values.items()):
            colour, marker = KIND_STYLE.get(kind, (f"C{i}", "o"))
            x, y = reached_points(reached[kind], scale * np.asarray(rows).T)
            seed_band(ax, x, y, color=colour, marker=marker, ms=5, label=kind)
        ax.set(xscale="log", xlabel="vocabulary size reached")
        ax.legend(fontsize=7)
    ax1.set(ylabel="held-out words hitting [UNK] (%)", title="Out-of-vocabulary rate")
    ax2.set(ylabel="tokens per word (held-out)", title="Sequence length (score matrix ~ its square)")
    sizes = np.unique(reached["wordpiece"])
    v = np.geomspace(sizes.min(), max(sizes.max(), reference), 50)
    ax3.plot(v, 100 * embedding_share(v, d=d), color="0.2")
    ax3.plot(sizes, 100 * embedding_share(sizes, d=d), KIND_STYLE["wordpiece"][1], color=KIND_STYLE["wordpiece"][0],
             label="WordPiece, sizes reached")
    ax3.plot([reference], 100 * embedding_share([reference], d=d), "*", color="0.2", ms=10,
             label=f"BERT-base, {reference:,}")
    ax3.set(xscale="log", xlabel="vocabulary size V", ylabel="V x d / all parameters (%)",
            title=f"Word table's share (d = {d})")
    ax3.legend(fontsize=7)


# -- the demo's view ------------------------------------------------------------------------------------------
MAX_DEMO_CHARS = 300  # longer text is cut (with a note): the picture stays readable and the redraw fast
ROW_WIDTH = 29.0      # x units of pieces per tokenizer row (a 7-pt character is about 0.3 units); the count covers all


def pieces_view(text: str, tokenizers: dict, caption: str = "") -> dict:
    """Each tokenizer's pieces for `text` (words as BERT splits them), their count, and a note for odd input; the
    figure's title is the word count and `caption` (e.g. the vocabulary size)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    import html

    note = ""
    if len(text) > MAX_DEMO_CHARS:
        text, note = text[:MAX_DEMO_CHARS], f"Only the first {MAX_DEMO_CHARS} characters are tokenized. "
    words = bert_words(text)
    rows = {}
    for name, tok in tokenizers.items():
        by_word, marks = encode_marked(tok, line_words(text))
        pieces, unknown = [p for w in by_word for p in w], [u for w in marks for u in w]
        rows[name] = {"pieces": pieces, "unknown": unknown, "count": len(pieces), "unk": sum(unknown)}
    if not words:
        note += "Type a sentence: this text has no words once BERT's normaliser has cleaned it."
    elif len(text) > 0:
        note += f"{len(words)} BERT words in &laquo;{html.escape(text[:60])}{'…' if len(text) > 60 else ''}&raquo;."
    return {"text": text, "words": len(words), "rows": rows, "note": note,
            "title": f"{len(words)} words" + (f", {caption}" if caption else "")}


PIECE_SIZE = 7.0    # points: a piece's label
PIECES_END = 0.73   # axes fraction where a row's pieces stop; its count follows (room for "123 tokens (+45 not shown), 6 [UNK]")
AXES_SHARE = 0.70   # the part of the figure's width the axes get (y labels on the left): scales points to fractions
_PIECE_PAD = 2.0    # points between a label and its box, on each side
UNK_COLOUR, PIECE_COLOUR = "#fdb863", "#d1e5f0"


def plot_pieces(fig, view: dict) -> Update:
    """One row per tokenizer: its first pieces as boxes (pieces with the [UNK] id in orange), the token count at the right. Pieces,
    boxes and counts are glyph outlines in three live collections, so another sentence or size redraws only them
    over the kept axes (a Text per piece would cost milliseconds each)."""
    ax = fig.subplots()
    names = list(view["rows"])
    ax.set(xlim=(0, 1), ylim=(len(names) - 0.5, -0.5), yticks=range(len(names)), yticklabels=names, xticks=[])
    ax.grid(False)
    title = ax.set_title("", fontsize=9)
    # paths in points (scaled to pixels when drawn), placed at (axes fraction, row); not clipped, as a Text is not
    on_rows = {"offset_transform": blended_transform_factory(ax.transAxes, ax.transData),
               "transform": points_to_pixels(fig), "clip_on": False}
    text_colour = mpl.rcParams["text.color"]
    boxes = ax.add_collection(PathCollection([], edgecolors="0.5", linewidths=0.6, **on_rows), autolim=False)
    labels = ax.add_collection(PathCollection([], facecolors=text_colour, linewidths=0, **on_rows), autolim=False)
    counts = ax.add_collection(PathCollection([], facecolors=text_colour, linewidths=0, **on_rows), autolim=False)
    live(title, boxes, labels, counts)
    per_point = 1 / (fig.get_figwidth() * 72 * AXES_SHARE)  # axes fraction per point, near enough

    def update(view: dict) -> Change | None:
        if list(view["rows"]) != names:
            return Change.FIGURE  # other rows: other tick labels
        title.set_text(view["title"])
        glyphs, frames, fills, places, count_paths, count_places = [], [], [], [], [], []
        for r, name in enumerate(names):
            row, x, shown = view["rows"][name], 0.0, 0
            for piece, unknown in zip(row["pieces"], row["unknown"]):
                label = drawable(piece.replace("\u0120", "\u00b7"))  # byte-level BPE marks a leading space with Ġ
                width = text_width(label, PIECE_SIZE) + 2 * _PIECE_PAD  # points
                if x + width * per_point > PIECES_END:
                    break
                glyphs.append(label_path(label, PIECE_SIZE, ha="center", va="center"))
                frames.append(_piece_frame(width))
                fills.append(UNK_COLOUR if unknown else PIECE_COLOUR)  # by id: unigram keeps the raw character
                places.append((x + width * per_point / 2, r))
                x, shown = x + (width + 2) * per_point, shown + 1
            more = row["count"] - shown
            count = (f"{row['count']} tokens" + (f" (+{more} not shown)" if more else "")
                     + (f", {row['unk']} [UNK]" if row["unk"] else ""))
            count_paths.append(label_path(count, 7.5, ha="left", va="center"))
            count_places.append((PIECES_END + 0.01, r))
        for collection, paths, offsets in ((labels, glyphs, places), (boxes, frames, places),
                                           (counts, count_paths, count_places)):
            collection.set_paths(paths)
            collection.set_offsets(np.array(offsets, dtype=float).reshape(-1, 2))  # (n, 2)
        boxes.set_facecolor(fills)
        return None

    update(view)
    return update


@functools.lru_cache(maxsize=512)
def _piece_frame(width: float, height: float = PIECE_SIZE + 2 * _PIECE_PAD) -> Path:
    """A round box `width` x `height` points, centred on the origin."""
    return BoxStyle.Round(pad=0.0, rounding_size=2.0)(-width / 2, -height / 2, width, height, 1.0)


@functools.cache
def _font():
    from matplotlib import font_manager, ft2font
    return ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties()))


def drawable(label: str) -> str:
    """`label` with each character the plotting font has no glyph for written as U+XXXX (CJK, emoji ...), so the
    figure shows which character it is instead of an empty box."""
    font = _font()
    return "".join(c if font.get_char_index(ord(c)) else f"U+{ord(c):04X}" for c in label)


def _piece_box(x, row, width, unk):
    from matplotlib.patches import FancyBboxPatch
    return FancyBboxPatch((x, row - 0.3), width, 0.6, boxstyle="round,pad=0.02",
                          fc="#fdb863" if unk else "#d1e5f0", ec="0.5", lw=0.6)


# -- demo 2: the table against the body, at any size and width ---------------------------------------------
def table_tradeoff(vocab_size: int, d: int, tied: bool, sizes, tokens_per_word, layers: int = 12) -> dict:
    """The word table (twice, if the output layer is untied) against a BERT-style body of `layers` layers at width
    d (FFN 4d, 512 positions), and the tokens per word measured at the trained sizes, read at vocab_size by
    interpolating in log V (outside the trained range: the nearest measured value, and a note that says so)."""
    v = int_in("vocab_size", vocab_size, 2, 10**7)
    d = int_in("d", d, 1, 100_000)
    body = bert_base_params(vocab_size=1, d=d, layers=layers, d_ff=4 * d)["non_word"]
    tables = (1 if tied else 2) * v * d
    sizes, tpw = np.asarray(sizes, dtype=float), np.asarray(tokens_per_word, dtype=float)
    inside = sizes.min() <= v <= sizes.max()
    at_v = float(np.interp(np.log(v), np.log(sizes), tpw))
    note = "" if inside else (f"V = {v:,} is outside the trained sizes ({int(sizes.min()):,}-{int(sizes.max()):,}): "
                              "tokens per word shows the nearest measured value.")
    return {"vocab_size": v, "d": d, "tied": bool(tied), "body": body, "tables": tables,
            "share": tables / (tables + body), "sizes": sizes, "tpw": tpw, "tpw_at_v": at_v,
            "attention_vs_best": (at_v / tpw.min()) ** 2, "note": note}


def plot_table_tradeoff(fig, r: dict) -> Update:
    """Bars of the body and the table(s), and the measured tokens per word with a marker at this V. The curve and
    the log axis are static; the bars, the marker and the titles are live; the bar axis moves only when the
    parameter count crosses a 1-2-5 step, and the bar labels only when the output layer is (un)tied."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.4])
    bars = live_bars(ax1, facecolors=["0.6", "C1"])
    ax1.set(xticks=[0, 1], xlim=(-0.6, 1.6), ylabel="parameters (millions)")
    ax2.plot(r["sizes"], r["tpw"], "o-", color="C0", label="WordPiece, measured (held-out)")
    (marker,) = ax2.plot([], [], "s", color="C1", ms=9, label="at this V")
    ax2.set(xscale="log", xlabel="vocabulary size", ylabel="tokens per word")
    ax2.legend(fontsize=7)
    title1, title2 = ax1.set_title("", fontsize=9), ax2.set_title("", fontsize=9)
    live(marker, title1, title2)
    tied = [None]  # what the bar labels say now

    def update(r: dict) -> Panels | None:
        bars.set_verts(bar_polygons([0, 1], [r["body"] / 1e6, r["tables"] / 1e6]))
        marker.set_data([min(max(r["vocab_size"], r["sizes"].min()), r["sizes"].max())], [r["tpw_at_v"]])
        title1.set_text(f"V = {r['vocab_size']:,}, d = {r['d']}: table {100 * r['share']:.1f}% of all")
        title2.set_text(f"{r['tpw_at_v']:.2f} tokens per word: attention x{r['attention_vs_best']:.2f} of the best")
        changed = set_limits(ax1, ylim=(0, nice_ceiling(1.05 * max(r["body"], r["tables"]) / 1e6)))
        if r["tied"] != tied[0]:
            tied[0] = r["tied"]
            ax1.set_xticklabels(["body (12 layers)", "word table" + ("" if r["tied"] else "s (untied)")])
            changed = Panels(ax1)
        return changed

    update(r)
    return update

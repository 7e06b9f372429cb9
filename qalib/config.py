"""MiniBertConfig: every size and every design choice the notebooks ablate, validated in one place.

An ablation is one line: `dataclasses.replace(cfg, norm="batch")`. A bad value raises ValueError
naming the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Union, get_args

from qalib.validate import sinusoid_base

Scaling = Literal["inv_sqrt_dk", "none", "inv_dk"]
AttnScale = Union[Scaling, float]
Positions = Literal["learned", "sinusoidal", "none", "shaw", "relative_key_query", "rotary", "alibi"]
EmbedScale = Literal["none", "sqrt_d"]
EmbedCombine = Literal["sum", "concat"]
QKProjection = Literal["separate", "shared"]
Norm = Literal["layer", "batch", "batch_masked", "rms", "none"]
NormPlacement = Literal["post", "pre"]

SCALINGS = get_args(Scaling)  # the named attn_scale choices (a number > 0 is the other kind)


@dataclass(frozen=True)
class MiniBertConfig:
    # sizes
    vocab_size: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    max_len: int = 64          # rows of a learned position table; other schemes run longer
    n_segments: int = 2        # BERT's released configs use 2 (its code default is 16)
    dropout: float = 0.0       # BERT uses 0.1; 0 keeps the small demos deterministic and fast
    n_classes: int = 2
    # design choices, one field each
    attn_scale: AttnScale = "inv_sqrt_dk"  # Vaswani sec. 3.2.1; or "none", "inv_dk", or a number > 0
    pos: Positions = "learned"             # BERT learns its positions; the paper used sinusoids
    rel_clip: int = 16                     # Shaw et al.'s k for shaw / relative_key_query
    pos_base: float = 10000.0              # base of the sinusoid (and of rotary's frequencies)
    embed_scale: EmbedScale = "none"       # original Transformer: word embeddings * sqrt(d_model) (sec. 3.4)
    embed_combine: EmbedCombine = "sum"    # BERT sums; "concat" concatenates the parts, then projects
    embed_norm: bool = True                # BERT normalises the summed embedding (code, not the paper)
    qk: QKProjection = "separate"
    mask_self: bool = False                # Reformer: with shared q/k, a token may not attend to itself
    norm: Norm = "layer"
    norm_placement: NormPlacement = "post"  # BERT and the original Transformer are post-norm
    residual: bool = True
    causal: bool = False
    init_std: float = 0.02                 # BERT: truncated normal 0.02 (here plain normal)
    embed_init_std: float | None = None    # None: init_std. tensor2tensor/fairseq use d_model ** -0.5
    layer_norm_eps: float = 1e-12          # BERT's value

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "n_segments", "n_classes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MiniBertConfig.{name} must be an int >= 1, got {value!r}")
        if self.vocab_size < 5:
            raise ValueError(f"MiniBertConfig.vocab_size must be >= 5 (room for [PAD] [UNK] [CLS] [SEP] [MASK]), got {self.vocab_size}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"MiniBertConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}): "
                "each head gets d_model / n_heads dimensions"
            )
        _check_choice("pos", self.pos, Positions)
        _check_choice("embed_scale", self.embed_scale, EmbedScale)
        _check_choice("embed_combine", self.embed_combine, EmbedCombine)
        _check_choice("qk", self.qk, QKProjection)
        _check_choice("norm", self.norm, Norm)
        _check_choice("norm_placement", self.norm_placement, NormPlacement)
        if isinstance(self.attn_scale, str):
            _check_choice("attn_scale", self.attn_scale, Scaling)
        elif not (isinstance(self.attn_scale, (int, float)) and not isinstance(self.attn_scale, bool)
                  and math.isfinite(self.attn_scale) and self.attn_scale > 0):
            raise ValueError(
                f"MiniBertConfig.attn_scale must be one of {SCALINGS} or a finite number > 0, got {self.attn_scale!r}"
            )
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"MiniBertConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if self.pos in ("sinusoidal",) and self.d_model % 2:
            raise ValueError(f"MiniBertConfig.pos='sinusoidal' needs an even d_model (sin and cos pairs), got {self.d_model}")
        if self.pos == "rotary" and self.d_head % 2:
            raise ValueError(f"MiniBertConfig.pos='rotary' needs an even head size, got d_model/n_heads = {self.d_head}")
        if not isinstance(self.rel_clip, int) or isinstance(self.rel_clip, bool) or self.rel_clip < 0:
            raise ValueError(f"MiniBertConfig.rel_clip must be an int >= 0, got {self.rel_clip!r}")
        sinusoid_base("MiniBertConfig.pos_base", self.pos_base)
        if self.mask_self and self.causal:
            raise ValueError("MiniBertConfig.mask_self and causal cannot both be set: the first token would have nothing to attend to")
        for name in ("init_std", "layer_norm_eps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ValueError(f"MiniBertConfig.{name} must be a finite number > 0, got {value!r}")
        if self.embed_init_std is not None and not (self.embed_init_std > 0 and math.isfinite(self.embed_init_std)):
            raise ValueError(f"MiniBertConfig.embed_init_std must be None or a finite number > 0, got {self.embed_init_std!r}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def scale(self) -> float:
        """The number the logits q.k are multiplied by."""
        if self.attn_scale == "inv_sqrt_dk":
            return 1.0 / math.sqrt(self.d_head)
        if self.attn_scale == "inv_dk":
            return 1.0 / self.d_head
        if self.attn_scale == "none":
            return 1.0
        return float(self.attn_scale)

    def replace(self, **changes) -> "MiniBertConfig":
        """dataclasses.replace with the field names checked, so a typo is an error, not a no-op."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"MiniBertConfig has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


def _check_choice(field: str, value, literal) -> None:
    allowed = get_args(literal)
    if value not in allowed:
        raise ValueError(f"MiniBertConfig.{field} must be one of {allowed}, got {value!r}")

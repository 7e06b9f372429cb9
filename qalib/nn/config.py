"""MiniBertConfig and DecoderConfig: every size and every design choice the notebooks ablate, validated in one place.

An ablation is one line: `dataclasses.replace(cfg, norm="batch")`. A bad value raises ValueError
naming the field and what is allowed. DecoderConfig is MiniBertConfig with the decoder's defaults
(GPT-2's layout) and the few fields only a decoder has; it is validated by the same __post_init__.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Union, get_args

from qalib.nn.validate import sinusoid_base

Scaling = Literal["inv_sqrt_dk", "none", "inv_dk"]
AttnScale = Union[Scaling, float]
Positions = Literal["learned", "sinusoidal", "none", "shaw", "relative_key_query", "huang_unsigned_scalar",
                    "huang_signed_scalar", "huang_vector", "transformer_xl", "transformer_xl_no_bias", "rotary", "alibi"]
EmbedScale = Literal["none", "sqrt_d"]
EmbedCombine = Literal["sum", "concat"]
QKProjection = Literal["separate", "shared"]
Norm = Literal["layer", "batch", "batch_masked", "rms", "none"]
NormPlacement = Literal["post", "pre"]
Activation = Literal["gelu", "gelu_tanh", "relu"]
# the schemes a decoder with a KV cache can use: a table row per absolute position, so a new token needs
# only its own row (tests/test_decoder.py checks this against qalib.nn.positions.ABSOLUTE_POSITIONS)
# the schemes whose score term reads the keys as well as the queries (so keys and queries need the same heads)
KEY_IN_BIAS = ("relative_key_query", "huang_unsigned_scalar", "huang_signed_scalar", "huang_vector", "transformer_xl")
DecoderPositions = Literal["learned", "sinusoidal", "none"]

SCALINGS = get_args(Scaling)  # the named attn_scale choices (a number > 0 is the other kind)


@dataclass(frozen=True)
class MiniBertConfig:
    # sizes
    vocab_size: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads (multi-head). 1: multi-query (Shazeer 2019); between: GQA (Ainslie et al. 2023)
    d_ff: int = 256
    max_len: int = 64          # rows of a learned position table; other schemes run longer
    n_segments: int = 2        # BERT's released configs use 2 (its code default is 16)
    dropout: float = 0.0       # BERT uses 0.1; 0 keeps the small demos deterministic and fast
    n_classes: int = 2
    # design choices, one field each
    attn_scale: AttnScale = "inv_sqrt_dk"  # Vaswani sec. 3.2.1; or "none", "inv_dk", or a number > 0
    pos: Positions = "learned"             # BERT learns its positions; the paper used sinusoids
    rel_clip: int = 16                     # Shaw et al.'s k for shaw / relative_key_query / huang_*
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
    activation: Activation = "gelu"        # BERT's exact (erf) GELU; GPT-2 uses the tanh approximation, Vaswani ReLU
    init_std: float = 0.02                 # BERT: truncated normal 0.02 (here plain normal)
    embed_init_std: float | None = None    # None: init_std. tensor2tensor/fairseq use d_model ** -0.5
    layer_norm_eps: float = 1e-12          # BERT's value

    def __post_init__(self) -> None:
        cls = type(self).__name__
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "n_segments", "n_classes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{cls}.{name} must be an int >= 1, got {value!r}")
        if self.vocab_size < 5:
            raise ValueError(f"{cls}.vocab_size must be >= 5 (room for [PAD] [UNK] [CLS] [SEP] [MASK]), got {self.vocab_size}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"{cls}.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}): "
                "each head gets d_model / n_heads dimensions"
            )
        if self.n_kv_heads is not None and (not isinstance(self.n_kv_heads, int) or isinstance(self.n_kv_heads, bool)
                                            or self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(
                f"{cls}.n_kv_heads must be None or an int >= 1 that divides n_heads ({self.n_heads}): each key/value "
                f"head serves n_heads / n_kv_heads query heads; got {self.n_kv_heads!r}"
            )
        _check_choice(cls, "pos", self.pos, Positions)
        _check_choice(cls, "embed_scale", self.embed_scale, EmbedScale)
        _check_choice(cls, "embed_combine", self.embed_combine, EmbedCombine)
        _check_choice(cls, "qk", self.qk, QKProjection)
        _check_choice(cls, "norm", self.norm, Norm)
        _check_choice(cls, "norm_placement", self.norm_placement, NormPlacement)
        _check_choice(cls, "activation", self.activation, Activation)
        if self.kv_heads != self.n_heads and self.qk == "shared":
            raise ValueError(f"{cls}.qk='shared' needs n_kv_heads == n_heads: k = q has one head per query head")
        if self.kv_heads != self.n_heads and self.pos in KEY_IN_BIAS:
            raise ValueError(f"{cls}.pos={self.pos!r} needs n_kv_heads == n_heads: its position term reads the keys "
                             "and is added to every query head's scores")
        if isinstance(self.attn_scale, str):
            _check_choice(cls, "attn_scale", self.attn_scale, Scaling)
        elif not (isinstance(self.attn_scale, (int, float)) and not isinstance(self.attn_scale, bool)
                  and math.isfinite(self.attn_scale) and self.attn_scale > 0):
            raise ValueError(
                f"{cls}.attn_scale must be one of {SCALINGS} or a finite number > 0, got {self.attn_scale!r}"
            )
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"{cls}.dropout must be in [0, 1), got {self.dropout!r}")
        if self.pos in ("sinusoidal",) and self.d_model % 2:
            raise ValueError(f"{cls}.pos='sinusoidal' needs an even d_model (sin and cos pairs), got {self.d_model}")
        if self.pos in ("rotary", "transformer_xl", "transformer_xl_no_bias") and self.d_head % 2:
            raise ValueError(f"{cls}.pos={self.pos!r} needs an even head size, got d_model/n_heads = {self.d_head}")
        if not isinstance(self.rel_clip, int) or isinstance(self.rel_clip, bool) or self.rel_clip < 0:
            raise ValueError(f"{cls}.rel_clip must be an int >= 0, got {self.rel_clip!r}")
        sinusoid_base(f"{cls}.pos_base", self.pos_base)
        if self.mask_self and self.causal:
            raise ValueError(f"{cls}.mask_self and causal cannot both be set: the first token would have nothing to attend to")
        for name in ("init_std", "layer_norm_eps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{cls}.{name} must be a finite number > 0, got {value!r}")
        if self.embed_init_std is not None and not (self.embed_init_std > 0 and math.isfinite(self.embed_init_std)):
            raise ValueError(f"{cls}.embed_init_std must be None or a finite number > 0, got {self.embed_init_std!r}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads: n_kv_heads, or n_heads when it is None."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

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
            raise ValueError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DecoderConfig(MiniBertConfig):
    """A decoder's config (qalib/nn/decoder.py): the defaults are GPT-2's layout (Radford et al. 2019; HF GPT2Config):
    causal, pre-norm with a final norm, tanh-GELU, LayerNorm eps 1e-5, learned positions, no embedding norm and an
    LM head tied to the word embeddings. Vaswani's base layout is
    `DecoderConfig(norm_placement="post", activation="relu", pos="sinusoidal", embed_scale="sqrt_d", final_norm=False)`.
    n_layers counts the decoder's layers, and the encoder's too in an encoder-decoder. n_segments and n_classes
    are not used."""

    causal: bool = True                    # False is the ablation that lets position i see token i + 1
    norm_placement: NormPlacement = "pre"
    embed_norm: bool = False
    activation: Activation = "gelu_tanh"   # HF's "gelu_new"
    layer_norm_eps: float = 1e-5
    pos: Positions = "learned"
    tie_embeddings: bool = True            # Press & Wolf 2017; Vaswani sec. 3.4; GPT-2
    # a norm after the last layer: pre-norm needs one (its residual stream is never normalised); torch.nn.Transformer
    # has one in both placements, Vaswani's post-norm stack has none
    final_norm: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        cls = type(self).__name__
        if self.pos not in get_args(DecoderPositions):
            raise ValueError(f"{cls}.pos must be one of {get_args(DecoderPositions)}, got {self.pos!r}: with a KV cache "
                             "a new token needs only its own position's row, which the relative schemes here do not give")
        for name, allowed in (("qk", "separate"), ("embed_combine", "sum"), ("mask_self", False)):
            if getattr(self, name) != allowed:
                raise ValueError(f"{cls}.{name} must be {allowed!r} (the decoder has no other), got {getattr(self, name)!r}")
        for name in ("tie_embeddings", "final_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{cls}.{name} must be a bool, got {getattr(self, name)!r}")


def _check_choice(cls: str, field: str, value, literal) -> None:
    allowed = get_args(literal)
    if value not in allowed:
        raise ValueError(f"{cls}.{field} must be one of {allowed}, got {value!r}")

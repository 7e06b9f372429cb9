"""Decoders: a GPT-style decoder-only LM and Vaswani's encoder-decoder, built from the encoder's blocks.

Ordered like the diagram: embeddings -> attentions -> layer -> stack -> models. Attention, feed-forward, norms,
positions and the config are the encoder's (qalib/nn/model.py, norms.py, positions.py, config.py); only what a
decoder adds is here:

    DecoderSelfAttention  SelfAttention over the cached positions plus the new ones, returning their keys and values
    CrossAttention        SelfAttention's fused [W_q | W_k | W_v]: W_q on the decoder stream, W_k and W_v on the
                          encoder output (as torch.nn.MultiheadAttention splits it)
    DecoderLayer          masked self-attention -> (cross-attention) -> FFN, each sublayer post- or pre-norm
                          (model.residual, the encoder layer's wiring)

    model = DecoderLM(DecoderConfig())                       # GPT-2's layout
    out = model(ids, use_cache=True, return_internals=True)
    out.logits                      # (B, T, vocab)
    out.cache.layers[0].k           # (B, H_kv, T, d_head): what the next step reads (qalib/nn/kv_cache.py)
    out.internals["layer0.probs"]   # (B, H, T, T), zero above the diagonal
    out = model(next_ids, cache=out.cache, use_cache=True)   # one more position

    ed = EncoderDecoder(DecoderConfig(norm_placement="post", activation="relu", ...))
    out = ed(source_ids, target_ids, return_internals=True)
    out.internals["layer0.cross.probs"]  # (B, H, T, S): each target position over the source

Generation is qalib/nn/generate.py. tests/test_decoder.py checks DecoderLM against transformers.GPT2LMHeadModel
(qalib/nn/gpt2.py holds the name table) and EncoderDecoder against torch.nn.Transformer, with the same weights.
Sequences are unpadded: every row of a batch has the same length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from qalib.nn.config import DecoderConfig
from qalib.nn.kv_cache import KVCache, LayerKV
from qalib.nn.model import EncoderLayer, FeedForward, SelfAttention, check_ids, init_weights, residual
from qalib.nn.norms import make_norm
from qalib.nn.positions import make_position

__all__ = ["DecoderConfig", "DecoderLM", "EncoderDecoder", "DecoderOutput", "DecoderLayer", "KVCache", "LayerKV"]


@dataclass
class DecoderOutput:
    logits: torch.Tensor                     # (B, T, vocab); (B, 1, vocab) with last_only=True
    cache: KVCache | None = None             # None unless use_cache=True: every position's keys and values
    internals: dict[str, torch.Tensor] = field(default_factory=dict)  # empty unless return_internals=True


class DecoderEmbeddings(nn.Module):
    """word (x sqrt(d_model) with embed_scale="sqrt_d", Vaswani sec. 3.4) + absolute position, then the optional
    norm (embed_norm) and dropout. No segments: a decoder reads one sequence. The first position is `start`,
    the number of positions already cached."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embeddings = make_position(cfg)  # absolute: DecoderConfig.pos allows no other kind
        self.norm = make_norm(cfg.norm if cfg.embed_norm else "none", cfg.d_model, cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.word_scale = math.sqrt(cfg.d_model) if cfg.embed_scale == "sqrt_d" else 1.0

    def forward(self, ids, start=0, internals=None, name="embeddings"):
        t = ids.shape[1]
        word = self.word_embeddings(ids) * self.word_scale  # (B, T, d)
        position = self.position_embeddings.table(start + t, ids.device)[start:].to(word.dtype)  # (T, d): start .. start+T-1
        summed = word + position
        out = self.dropout(self.norm(summed, None, internals, f"{name}.norm"))
        if internals is not None:
            internals.update({f"{name}.word": word, f"{name}.position": position, f"{name}.out": out})
        return out


class DecoderSelfAttention(SelfAttention):
    """Masked self-attention whose keys and values are the cached positions' followed by the new ones'."""

    def forward(self, x, past=None, internals=None, name="layer0"):
        """x (B, T_new, d); past: LayerKV of the T_past earlier positions, or None.
        -> ((B, T_new, d), LayerKV of all T_past + T_new positions: this layer's next cache entry)."""
        q, k, v = self.project(x)  # q (B, H, T_new, dh); k, v (B, H_kv, T_new, dh)
        if past is not None:
            k = torch.cat([past.k, k], dim=2)  # (B, H_kv, T_past + T_new, dh)
            v = torch.cat([past.v, v], dim=2)
        mask = self._mask(None, q.shape[2], k.shape[2], x.device)  # causal: new position i sees keys 0 .. T_past + i
        return self.attend(q, k, v, mask, None, internals, name), LayerKV(k, v)


class CrossAttention(SelfAttention):
    """Vaswani sec. 3.2.3: queries from the decoder, keys and values from the encoder's final output (every decoder
    layer reads the same memory). No mask: each target position may read the whole source."""

    def memory_kv(self, memory: torch.Tensor) -> LayerKV:
        """(B, S, d) encoder output -> LayerKV (B, H_kv, S, dh): computed once per source, then cached."""
        d = self.cfg.d_model
        # rows [d:] of qkv are w_k then w_v, adjacent: one matmul projects the memory to both
        kv = F.linear(memory, self.qkv.weight[d:], self.qkv.bias[d:])  # (B, S, 2 H_kv dh): [k | v]
        k, v = (self.split_heads(part) for part in kv.split(self.widths[1:], dim=-1))
        return LayerKV(k, v)

    def forward(self, x, memory_kv: LayerKV, internals=None, name="layer0.cross"):
        q = self.split_heads(F.linear(x, self.w_q, self.b_q))  # (B, T, d) -> (B, H, T, dh)
        return self.attend(q, memory_kv.k, memory_kv.v, None, None, internals, name)


class DecoderLayer(nn.Module):
    """Masked self-attention, then (encoder-decoder only) cross-attention, then the FFN (Vaswani sec. 3.1), each wired
    by qalib.nn.model.residual as in EncoderLayer: post-norm x = norm(x + sublayer(x)); pre-norm (GPT-2)
    x = x + sublayer(norm(x))."""

    def __init__(self, cfg: DecoderConfig, cross: bool) -> None:
        super().__init__()
        self.cfg = cfg
        norm = partial(make_norm, cfg.norm, cfg.d_model, cfg.layer_norm_eps)
        self.attention = DecoderSelfAttention(cfg)
        self.attention_norm = norm()
        self.cross_attention = CrossAttention(cfg) if cross else None
        self.cross_attention_norm = norm() if cross else None
        self.ffn = FeedForward(cfg)
        self.ffn_norm = norm()
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, past=None, memory_kv=None, internals=None, name="layer0"):
        """x (B, T, d); past: this layer's cached LayerKV or None; memory_kv: the cross-attention's keys and values
        of the encoder output. -> (x (B, T, d), this layer's LayerKV of every position)."""
        # keep=None: a decoder's sequences are unpadded
        sublayer = partial(residual, dropout=self.dropout, placement=self.cfg.norm_placement,
                           add_input=self.cfg.residual, internals=internals)
        present: LayerKV | None = None

        def self_attention(h: torch.Tensor) -> torch.Tensor:
            nonlocal present  # the attention's second output, this layer's next cache entry, which residual drops
            out, present = self.attention(h, past, internals, name)
            return out

        x = sublayer(x, self_attention, self.attention_norm, name=f"{name}.attention_norm")
        if self.cross_attention is not None:
            x = sublayer(x, lambda h: self.cross_attention(h, memory_kv, internals, f"{name}.cross"),
                         self.cross_attention_norm, name=f"{name}.cross_attention_norm")
        x = sublayer(x, self.ffn, self.ffn_norm, name=f"{name}.ffn_norm")
        if internals is not None:
            internals[f"{name}.hidden"] = x
        return x, present


class DecoderStack(nn.Module):
    """The decoder layers and the final norm (final_norm=True)."""

    def __init__(self, cfg: DecoderConfig, cross: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg, cross) for _ in range(cfg.n_layers))
        self.final_norm = make_norm(cfg.norm if cfg.final_norm else "none", cfg.d_model, cfg.layer_norm_eps)

    def forward(self, x, cache=None, memory=None, internals=None):
        """x (B, T, d), the positions after the cache's; memory (B, S, d): the encoder output, read when there is no
        cache yet (the cache holds its projections). -> (B, T, d), the KVCache of every position."""
        self_kv, cross_kv = [], []
        for i, layer in enumerate(self.layers):
            memory_kv = None
            if layer.cross_attention is not None:
                memory_kv = cache.cross[i] if cache is not None else layer.cross_attention.memory_kv(memory)
                cross_kv.append(memory_kv)
            x, present = layer(x, None if cache is None else cache.layers[i], memory_kv, internals, f"layer{i}")
            self_kv.append(present)
        x = self.final_norm(x, None, internals, "final_norm")
        return x, KVCache(tuple(self_kv), tuple(cross_kv))


class _LanguageModel(nn.Module):
    """What both models share: the embeddings, the LM head (tied to the word embeddings by default: Press & Wolf
    2017, Vaswani sec. 3.4, GPT-2; no bias, as GPT-2), the cache check and the initialisation."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        if not isinstance(cfg, DecoderConfig):
            raise TypeError(f"{type(self).__name__} needs a DecoderConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.embeddings = DecoderEmbeddings(cfg)

    def _finish_init(self) -> None:
        cfg = self.cfg
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(partial(init_weights, std=cfg.init_std))
        if cfg.embed_init_std is not None:
            nn.init.normal_(self.embeddings.word_embeddings.weight, std=cfg.embed_init_std)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, vocab)."""
        if self.lm_head is None:
            return F.linear(hidden, self.embeddings.word_embeddings.weight)
        return self.lm_head(hidden)

    def _check_cache(self, cache, batch_size: int, cross: bool) -> None:
        if cache is None:
            return
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (the .cache of an earlier output) or None, got {type(cache).__name__}")
        cache.check(batch_size, self.cfg.n_layers, self.cfg.kv_heads, self.cfg.d_head, cross)

    def _output(self, hidden, cache, use_cache, internals, last_only) -> DecoderOutput:
        if last_only:
            hidden = hidden[:, -1:]  # (B, 1, d): generation reads only the newest position's logits
        return DecoderOutput(self.logits(hidden), cache if use_cache else None, internals if internals is not None else {})


class DecoderLM(_LanguageModel):
    """GPT (Radford et al. 2018, 2019): embeddings -> decoder layers (masked self-attention, FFN) -> final norm ->
    LM head. Position i's logits predict token i + 1."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__(cfg)
        self.decoder = DecoderStack(cfg, cross=False)
        self._finish_init()

    def forward(self, input_ids, cache: KVCache | None = None, use_cache: bool = False, return_internals: bool = False,
                last_only: bool = False) -> DecoderOutput:
        """input_ids (B, T): the tokens after the cache's positions (all of them without a cache). use_cache: return
        the cache of every position. last_only: the logits of the last position only."""
        check_ids("input_ids", input_ids, self.cfg.vocab_size)
        self._check_cache(cache, input_ids.shape[0], cross=False)
        internals = {} if return_internals else None
        x = self.embeddings(input_ids, 0 if cache is None else cache.length, internals)
        hidden, new_cache = self.decoder(x, cache, None, internals)
        return self._output(hidden, new_cache, use_cache, internals, last_only)


class EncoderDecoder(_LanguageModel):
    """Vaswani et al. 2017 (Fig. 1): an encoder (EncoderLayer, unmasked) over the source, and decoder layers with
    masked self-attention, then cross-attention on the encoder's final output, then the FFN. Source and target
    share the embeddings (one vocabulary, sec. 3.4); cfg.n_layers counts the layers of each stack."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__(cfg)
        encoder_cfg = cfg.replace(causal=False)  # the encoder sees the whole source
        self.encoder = nn.ModuleList(EncoderLayer(encoder_cfg) for _ in range(cfg.n_layers))
        self.encoder_norm = make_norm(cfg.norm if cfg.final_norm else "none", cfg.d_model, cfg.layer_norm_eps)
        self.decoder = DecoderStack(cfg, cross=True)
        self._finish_init()

    def encode(self, source_ids, internals: dict | None = None) -> torch.Tensor:
        """(B, S) source ids -> the memory (B, S, d) every decoder layer's cross-attention reads."""
        check_ids("source_ids", source_ids, self.cfg.vocab_size)
        return self._encode(source_ids, internals)

    def _encode(self, source_ids, internals: dict | None = None) -> torch.Tensor:
        x = self.embeddings(source_ids, 0, internals, "encoder.embeddings")
        for i, layer in enumerate(self.encoder):
            x = layer(x, None, internals, f"encoder.layer{i}")
        return self.encoder_norm(x, None, internals, "encoder.final_norm")

    def decode(self, target_ids, memory: torch.Tensor | None = None, cache: KVCache | None = None,
               use_cache: bool = False, return_internals: bool = False, last_only: bool = False) -> DecoderOutput:
        """target_ids (B, T) after the cache's positions; memory: encode()'s output, without a cache; with a cache,
        none (the cache holds its keys and values)."""
        internals = {} if return_internals else None
        return self._decode(target_ids, memory, cache, use_cache, internals, last_only)

    def forward(self, source_ids, target_ids, return_internals: bool = False) -> DecoderOutput:
        """Teacher forcing: (B, S) source, (B, T) target -> logits (B, T, vocab); position i predicts target i + 1."""
        internals = {} if return_internals else None
        return self._decode(target_ids, self.encode(source_ids, internals), None, False, internals, False)

    def _decode(self, target_ids, memory, cache, use_cache, internals, last_only) -> DecoderOutput:
        check_ids("target_ids", target_ids, self.cfg.vocab_size)
        b = target_ids.shape[0]
        self._check_cache(cache, b, cross=True)
        if (memory is None) == (cache is None):
            raise ValueError("pass memory (encode()'s output) without a cache, or a cache without memory: the cache "
                             "already holds the memory's keys and values")
        if memory is not None and (memory.dim() != 3 or memory.shape[0] != b or memory.shape[2] != self.cfg.d_model):
            raise ValueError(f"memory must be (B={b}, S, d_model={self.cfg.d_model}), got {tuple(memory.shape)}")
        x = self.embeddings(target_ids, 0 if cache is None else cache.length, internals)
        hidden, new_cache = self.decoder(x, cache, memory, internals)
        return self._output(hidden, new_cache, use_cache, internals, last_only)

"""The KV cache: a decoder's keys and values of every position so far, as a value passed in and returned.

    out = model(prompt_ids, use_cache=True)                 # out.cache.length == T
    out = model(next_ids, cache=out.cache, use_cache=True)  # one new position: its q meets every cached k

Nothing is stored on the model between calls. A layer's keys and values do not change once computed, since a
causal layer's position i depends only on positions <= i; so step t computes only the new position's k and v and
reads the cached ones. The memory is 2 (k and v) x layers x kv_heads x d_head x T x batch x bytes per element
(`KVCache.nbytes` counts the tensors themselves; qalib.tools.bench_decoder checks the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch


class LayerKV(NamedTuple):
    k: torch.Tensor  # (B, H_kv, T, d_head)
    v: torch.Tensor  # (B, H_kv, T, d_head)


@dataclass(frozen=True)
class KVCache:
    """layers: one LayerKV per decoder layer, the self-attention's keys and values of positions 0 .. T-1.
    cross: an encoder-decoder's cross-attention keys and values, one LayerKV per layer, (B, H_kv, S, d_head): the
    encoder output projected once and reused at every step; empty for a decoder-only model."""

    layers: tuple[LayerKV, ...]
    cross: tuple[LayerKV, ...] = ()

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError("KVCache.layers is empty: a cache holds one (k, v) per layer")
        first = self.layers[0].k.shape
        for i, (k, v) in enumerate(self.layers):
            if k.dim() != 4 or k.shape != first or v.shape != first:
                raise ValueError(f"KVCache.layers[{i}] has k {tuple(k.shape)} and v {tuple(v.shape)}; every layer's "
                                 f"k and v must be (B, H_kv, T, d_head) = {tuple(first)}, as layer 0's k")
        if self.cross and len(self.cross) != len(self.layers):
            raise ValueError(f"KVCache.cross has {len(self.cross)} layers, KVCache.layers {len(self.layers)}")

    @property
    def batch_size(self) -> int:
        return self.layers[0].k.shape[0]

    @property
    def length(self) -> int:
        """T: the positions cached so far (the next token's position)."""
        return self.layers[0].k.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache's tensors, measured from the tensors (self-attention and cross-attention)."""
        return sum(t.numel() * t.element_size() for kv in self.layers + self.cross for t in kv)

    def check(self, batch_size: int, n_layers: int, kv_heads: int, d_head: int, cross: bool) -> None:
        """ValueError unless this cache fits a model of these sizes and a batch of batch_size sequences."""
        if self.batch_size != batch_size:
            raise ValueError(f"cache batch size {self.batch_size} != input batch size {batch_size}: a cache belongs to "
                             "the batch that filled it")
        if len(self.layers) != n_layers:
            raise ValueError(f"cache has {len(self.layers)} layers but the model has n_layers={n_layers}")
        cached = (self.layers[0].k.shape[1], self.layers[0].k.shape[3])  # (H_kv, d_head)
        if cached != (kv_heads, d_head):
            raise ValueError(f"cache holds (kv_heads, d_head) = {cached}, the model's layers make {(kv_heads, d_head)}")
        if cross != bool(self.cross):
            raise ValueError("an encoder-decoder's cache holds the cross-attention keys and values (KVCache.cross), a "
                             f"decoder-only model's holds none; this cache has {len(self.cross)} cross layers")

    def select(self, rows: torch.Tensor) -> "KVCache":
        """The cache of the sequences at `rows` (B_new,) of the batch, in that order: beam search's reordering."""
        pick = lambda kv: LayerKV(kv.k.index_select(0, rows), kv.v.index_select(0, rows))  # noqa: E731
        return KVCache(tuple(map(pick, self.layers)), tuple(map(pick, self.cross)))

"""Scaled dot-product attention as a free function that returns its internals.

    out, probs, scores = attention(q, k, v, mask=None, scale=None)

Vaswani et al. 2017, sec. 3.2.1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.
`scores` are the logits after scaling and any additive bias, before the softmax; `probs` are the
softmax output (before any dropout). Nothing is stored on a module for later reading.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


class AttentionResult(NamedTuple):
    out: torch.Tensor     # (..., T_q, d_v)
    probs: torch.Tensor   # (..., T_q, T_k), rows sum to 1 (0 for a query with nothing to attend to)
    scores: torch.Tensor  # (..., T_q, T_k), pre-softmax logits, masked entries are -inf


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> AttentionResult:
    """softmax(scale * q k^T + bias, masked) v.

    q: (..., T_q, d_k); k: (..., T_k, d_k); v: (..., T_k, d_v).
    mask: bool, broadcastable to (..., T_q, T_k); True marks the keys a query may attend to.
    scale: None means 1/sqrt(d_k) (the paper's choice); pass 1.0 for no scaling.
    bias: additive logits broadcastable to (..., T_q, T_k), added after scaling (relative positions, ALiBi).

    A query whose keys are all masked gets probabilities 0 and output 0 rather than NaN: it has
    nothing to attend to, and a NaN would spread through every later layer.
    """
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"q, k, v need at least 2 dims (..., T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k: q has {q.shape[-1]}, k has {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys: {k.shape[-2]} vs {v.shape[-2]}")
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    elif not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0 (or None for 1/sqrt(d_k)), got {scale!r}")
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = _safe_softmax(scores)
    return AttentionResult(torch.matmul(probs, v), probs, scores)


def _safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim; rows that are entirely -inf give zeros instead of NaN."""
    row_max = scores.amax(dim=-1, keepdim=True)
    empty = torch.isneginf(row_max)
    shifted = scores - torch.where(empty, torch.zeros_like(row_max), row_max)  # max-subtraction: exp never overflows
    weights = torch.exp(shifted)
    total = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(empty, torch.ones_like(total), total)


def softmax_jacobian(probs: torch.Tensor) -> torch.Tensor:
    """J = diag(y) - y y^T for each probability vector y in the last dim: (..., n) -> (..., n, n)."""
    return torch.diag_embed(probs) - probs.unsqueeze(-1) * probs.unsqueeze(-2)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats along the last dim, with 0 log 0 = 0: (..., n) -> (...)."""
    return -(torch.special.xlogy(probs, probs)).sum(dim=-1)

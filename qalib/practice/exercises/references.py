"""The reference each exercise is compared with: qalib's own core functions where they exist, composed where not.

Nothing here is new mathematics: attention is qalib.nn.attention.attention, the sinusoid is qalib.nn.positions.sinusoidal,
RoPE is qalib.nn.positions.Rotary, LayerNorm is torch's, masking is qalib.lab.data.mask_tokens. The checker runs these on
float64 copies of the inputs, so a reference is never the less accurate side of a comparison.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qalib.lab.data import mask_tokens
from qalib.nn.attention import attention as core_attention
from qalib.nn.positions import Rotary, sinusoidal as core_sinusoidal


def attention(q, k, v, mask=None):
    """(..., T_q, d_v). A query with no key allowed gets output 0, as qalib.nn.attention does."""
    return core_attention(q, k, v, mask).out


def causal_mask(T):
    """(T, T) bool, True on and below the diagonal: position i may attend to positions 0 .. i."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def layer_norm(x, weight, bias, eps=1e-5):
    """Over the last axis, biased variance (Ba et al. 2016, eq. 3)."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def sinusoidal(n_positions, d_model, base=10000.0):
    return core_sinusoidal(n_positions, d_model, base)


def split_heads(y, n_heads):
    """(B, T, d) -> (B, H, T, d / H): head h owns columns h*d_head .. (h+1)*d_head - 1."""
    b, t, d = y.shape
    return y.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Vaswani et al. 2017, sec. 3.2.2: Concat(head_1 .. head_h) W^O, head_i = Attention(X W_i^Q, X W_i^K, X W_i^V)."""
    b, t, d = x.shape
    q, k, v = (split_heads(x @ w, n_heads) for w in (w_q, w_k, w_v))  # (B, H, T, d_head) each
    heads = core_attention(q, k, v, mask).out                          # (B, H, T, d_head)
    return heads.transpose(1, 2).reshape(b, t, d) @ w_o                # (B, T, d)


def rope(x, base=10000.0):
    """Su et al. 2021: pair (2i, 2i+1) at position p rotated by p * base^(-2i/d); positions 0 .. T-1 along dim -2."""
    return Rotary(x.shape[-1], base).to(x.device).rotate(x)


def kv_cache_step(q, k, v, cache_k, cache_v):
    """Append the new keys and values; the new queries, at positions T_cache .. T_cache + T_new - 1, attend causally."""
    k_all = torch.cat([cache_k, k], dim=-2)  # (..., T_cache + T_new, d)
    v_all = torch.cat([cache_v, v], dim=-2)
    t_cache, t_new = cache_k.shape[-2], q.shape[-2]
    q_pos = torch.arange(t_cache, t_cache + t_new)[:, None]  # (T_new, 1)
    k_pos = torch.arange(t_cache + t_new)[None, :]           # (1, T_total)
    return core_attention(q, k_all, v_all, k_pos <= q_pos).out, k_all, v_all


def mlm_mask(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    return mask_tokens(ids, vocab_size, generator, mlm_prob, mask_frac, random_frac)

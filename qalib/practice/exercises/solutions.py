"""Readable solutions, shown only on request (exercises.show_solution(name)). Each passes the checker; the tests say so.

They are written as a candidate would at a whiteboard, from torch primitives, not by calling qalib.
"""

import math

import torch

IGNORE, MASK, N_SPECIAL = -100, 4, 5


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # torch subtracts each row's max: no overflow
    weights = torch.nan_to_num(weights)      # a row of all -inf gives NaN: nothing to attend to, so 0
    return weights @ v                       # (..., T_q, d_v)


def causal_mask(T):
    return torch.tril(torch.ones(T, T, dtype=torch.bool))  # row i (query) is True at columns 0 .. i


def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)                      # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)       # biased, from centred values: no cancellation
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def sinusoidal(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]     # (n, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)[None, :]  # (1, d/2)
    angles = pos / base ** (two_i / d_model)                           # (n, d/2)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe.float()


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, t, d = x.shape

    def split(y):  # (B, T, d) -> (B, H, T, d_head)
        return y.view(b, t, n_heads, d // n_heads).transpose(1, 2)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    heads = attention(q, k, v, mask)                        # (B, H, T, d_head)
    return heads.transpose(1, 2).reshape(b, t, d) @ w_o     # (B, T, d)


def rope(x, base=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)     # (d/2,)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * omega        # (T, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]                                     # (..., T, d/2) each
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)  # (..., T, d)


def kv_cache_step(q, k, v, cache_k, cache_v):
    cache_k, cache_v = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)  # (..., T_all, d)
    t_all, t_new = cache_k.shape[-2], q.shape[-2]
    # new token j is at position t_all - t_new + j and may see keys up to it
    mask = torch.ones(t_new, t_all, dtype=torch.bool).tril(diagonal=t_all - t_new)
    return attention(q, cache_k, cache_v, mask), cache_k, cache_v


def mlm_mask(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_prob) & (ids >= N_SPECIAL)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    action = torch.rand(ids.shape, generator=generator)  # one draw decides [MASK] / random / unchanged
    to_mask = chosen & (action < mask_frac)
    to_random = chosen & (action >= mask_frac) & (action < mask_frac + random_frac)
    random_ids = torch.randint(N_SPECIAL, vocab_size, ids.shape, generator=generator)
    corrupted = torch.where(to_mask, torch.full_like(ids, MASK), ids)
    return torch.where(to_random, random_ids, corrupted), labels

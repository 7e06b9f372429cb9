"""The exercises: each signature and its contract, to copy into a notebook cell and fill in.

Each body raises NotImplementedError, which the checker reports as "not implemented yet". Conventions shared with
qalib: a bool mask is True where attending is ALLOWED; token ids 0-4 are special ([PAD] [UNK] [CLS] [SEP] [MASK] =
0 1 2 3 4) and a label of -100 carries no loss. Return the dtype of the inputs (float16 in, float16 out).
"""

import torch


def attention(q, k, v, mask=None):
    """Scaled dot-product attention, softmax(q k^T / sqrt(d_k)) v (Vaswani et al. 2017, sec. 3.2.1).

    q: (..., T_q, d_k); k: (..., T_k, d_k); v: (..., T_k, d_v).
    mask: None, or bool broadcastable to (..., T_q, T_k), True where query i may attend to key j.
    Returns (..., T_q, d_v). A query whose keys are all masked has nothing to attend to: its output is 0 (not NaN).
    """
    raise NotImplementedError


def causal_mask(T):
    """Bool (T, T), True where query i may attend to key j: j <= i (itself and the past)."""
    raise NotImplementedError


def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last axis (Ba et al. 2016): (x - mean) / sqrt(var + eps) * weight + bias.

    x: (..., d); weight, bias: (d,). mean and var are over the d features of each token; var is the biased one.
    """
    raise NotImplementedError


def sinusoidal(n_positions, d_model, base=10000.0):
    """Vaswani et al. 2017, sec. 3.5, as a float32 (n_positions, d_model) table for positions 0 .. n_positions - 1:
    PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model)). d_model is even."""
    raise NotImplementedError


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Multi-head self-attention (Vaswani et al. 2017, sec. 3.2.2).

    x: (B, T, d); w_q, w_k, w_v, w_o: (d, d), applied as x @ w (the paper's Q = X W^Q). Head h uses columns
    h * d_head .. (h + 1) * d_head - 1 of w_q, w_k, w_v, with d_head = d / n_heads, and scaled dot-product attention.
    mask: None, or bool broadcastable to (B, n_heads, T, T), True where allowed.
    Returns Concat(head_1, ..., head_H) @ w_o: (B, T, d).
    """
    raise NotImplementedError


def rope(x, base=10000.0):
    """Rotary position embedding (Su et al. 2021) of x: (..., T, d), d even, positions 0 .. T-1 along dim -2.

    Each pair (x[..., p, 2i], x[..., p, 2i+1]) is rotated by the angle p * base^(-2i/d):
    (a, b) -> (a cos - b sin, a sin + b cos). Returns the shape and dtype of x.
    """
    raise NotImplementedError


def kv_cache_step(q, k, v, cache_k, cache_v):
    """One decoding step with a KV cache.

    q, k, v: (..., T_new, d), the new tokens' projections; cache_k, cache_v: (..., T_cache, d), T_cache may be 0.
    The new tokens sit at positions T_cache .. T_cache + T_new - 1; new token j attends (scaled dot-product) to the
    keys at positions 0 .. T_cache + j. Returns (out (..., T_new, d), new cache_k, new cache_v), the new caches
    holding T_cache + T_new positions in order.
    """
    raise NotImplementedError


def mlm_mask(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    """BERT's masking (Devlin et al. 2019, sec. 3.1). ids: (B, T) int64.

    Each non-special position (id >= 5) is chosen with probability mlm_prob. A chosen position becomes [MASK] (id 4)
    with probability mask_frac, a random content token (id in 5 .. vocab_size - 1) with probability random_frac, and
    stays unchanged otherwise. Take every random draw from `generator`.
    Returns (corrupted ids, labels): labels hold the original id at chosen positions and -100 elsewhere.
    """
    raise NotImplementedError

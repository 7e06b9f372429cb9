"""Typical wrong answers to the exercises, written as a student would write them (not taken from
qalib.practice.exercises.diagnose), each with words its second hint must contain. tests/test_exercises.py checks that every
one fails with that hint."""

import math

import torch
import torch.nn.functional as F


def attention_mask_after_softmax(q, k, v, mask=None):
    w = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v


def attention_softmax_dim_minus_2(q, k, v, mask=None):
    s = torch.einsum("...qd,...kd->...qk", q, k) / q.size(-1) ** 0.5
    if mask is not None:
        s = s.masked_fill(mask == 0, float("-inf"))
    return torch.nan_to_num(s.softmax(-2)) @ v


def attention_unscaled(q, k, v, mask=None):
    s = torch.matmul(q, k.transpose(-2, -1))
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return torch.nan_to_num(torch.softmax(s, -1)) @ v


def attention_naive_exp(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(s)  # no max subtraction: overflows on large logits
    if mask is not None:
        e = e * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30) @ v  # a fully masked row: 0 / 1e-30 = 0


def causal_mask_strict(T):
    return torch.tril(torch.ones(T, T), diagonal=-1).bool()


def causal_mask_upper(T):
    return torch.ones(T, T, dtype=torch.bool).triu()


def causal_mask_float(T):
    return torch.tril(torch.ones(T, T))  # right pattern, float dtype


def layer_norm_bessel(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    sd = torch.sqrt(x.var(-1, keepdim=True) + eps)  # torch.var defaults to unbiased
    return weight * (x - mu) / sd + bias


def layer_norm_over_batch(x, weight, bias, eps=1e-5):
    mu = x.mean(0, keepdim=True)
    var = x.var(0, keepdim=True, unbiased=False)
    return weight * (x - mu) / (var + eps).sqrt() + bias


def layer_norm_eps_on_std(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return weight * (x - mu) / (x.std(-1, keepdim=True, unbiased=False) + eps) + bias


def sinusoidal_swapped(n_positions, d_model, base=10000.0):
    pe = torch.zeros(n_positions, d_model)
    pos = torch.arange(n_positions).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(base) / d_model))
    pe[:, 0::2] = torch.cos(pos * div)
    pe[:, 1::2] = torch.sin(pos * div)
    return pe


def sinusoidal_concat(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(base) / d_model))
    return torch.cat([torch.sin(pos * div), torch.cos(pos * div)], dim=1)


def sinusoidal_hard_coded_base(n_positions, d_model, base=10000.0):
    pe = torch.zeros(n_positions, d_model)
    pos = torch.arange(n_positions).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


def _mha(x, w_q, w_k, w_v, w_o, n_heads, mask, split, scale_dim, use_wo=True):
    b, t, d = x.shape
    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    s = q @ k.transpose(-2, -1) / math.sqrt(scale_dim)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    o = torch.nan_to_num(s.softmax(-1)) @ v
    o = o.transpose(1, 2).contiguous().view(b, t, d)
    return o @ w_o if use_wo else o


def mha_scale_d_model(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, t, d = x.shape
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, mask, lambda y: y.view(b, t, n_heads, -1).transpose(1, 2), d)


def mha_bad_split(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, t, d = x.shape
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, mask, lambda y: y.view(b, n_heads, t, -1), d // n_heads)


def mha_no_wo(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, t, d = x.shape
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, mask, lambda y: y.view(b, t, n_heads, -1).transpose(1, 2),
                d // n_heads, use_wo=False)


def _angles(t, d, base, offset=0):
    inv = 1.0 / base ** (torch.arange(0, d, 2).float() / d)
    return torch.outer(torch.arange(offset, offset + t).float(), inv)  # (T, d/2)


def rope_rotate_half(x, base=10000.0):
    t, d = x.shape[-2:]
    a = _angles(t, d, base)
    cos, sin = torch.cat([a.cos(), a.cos()], -1).to(x.dtype), torch.cat([a.sin(), a.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def rope_wrong_sign(x, base=10000.0):
    t, d = x.shape[-2:]
    a = _angles(t, d, base)
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    even, odd = x[..., ::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2], out[..., 1::2] = even * c + odd * s, -even * s + odd * c
    return out


def rope_from_one(x, base=10000.0):
    t, d = x.shape[-2:]
    a = _angles(t, d, base, offset=1)
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    even, odd = x[..., ::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2], out[..., 1::2] = even * c - odd * s, even * s + odd * c
    return out


def _attend(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def kv_only_new(q, k, v, cache_k, cache_v):
    t = q.shape[-2]
    out = _attend(q, k, v, torch.ones(t, t, dtype=torch.bool).tril())  # the new tokens among themselves only
    return out, torch.cat([cache_k, k], -2), torch.cat([cache_v, v], -2)


def kv_no_causal(q, k, v, cache_k, cache_v):
    k2, v2 = torch.cat([cache_k, k], -2), torch.cat([cache_v, v], -2)
    return _attend(q, k2, v2), k2, v2


def kv_prepend(q, k, v, cache_k, cache_v):
    k2, v2 = torch.cat([k, cache_k], -2), torch.cat([v, cache_v], -2)
    t_new, t_all = q.shape[-2], k2.shape[-2]
    pos = torch.cat([torch.arange(t_all - t_new, t_all), torch.arange(t_all - t_new)])  # keys' positions
    mask = pos[None, :] <= torch.arange(t_all - t_new, t_all)[:, None]
    return _attend(q, k2, v2, mask), k2, v2


def mlm_all_mask(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_prob) & (ids >= 5)
    return ids.masked_fill(chosen, 4), torch.where(chosen, ids, -100)  # every chosen token -> [MASK]


def mlm_labels_everywhere(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_prob) & (ids >= 5)
    r = torch.rand(ids.shape, generator=generator)
    out = torch.where(chosen & (r < mask_frac), 4, ids)
    rand = torch.randint(5, vocab_size, ids.shape, generator=generator)
    out = torch.where(chosen & (r >= mask_frac) & (r < mask_frac + random_frac), rand, out)
    return out, ids.clone()  # the loss on every token


def mlm_specials_too(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = torch.rand(ids.shape, generator=generator) < mlm_prob  # [CLS], [SEP], [PAD] can be chosen
    r = torch.rand(ids.shape, generator=generator)
    out = torch.where(chosen & (r < mask_frac), 4, ids)
    rand = torch.randint(5, vocab_size, ids.shape, generator=generator)
    out = torch.where(chosen & (r >= mask_frac) & (r < mask_frac + random_frac), rand, out)
    return out, torch.where(chosen, ids, -100)


def mlm_random_from_whole_vocab(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_prob) & (ids >= 5)
    r = torch.rand(ids.shape, generator=generator)
    out = torch.where(chosen & (r < mask_frac), 4, ids)
    rand = torch.randint(0, vocab_size, ids.shape, generator=generator)
    out = torch.where(chosen & (r >= mask_frac) & (r < mask_frac + random_frac), rand, out)
    return out, torch.where(chosen, ids, -100)


def mlm_ignores_generator(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = (torch.rand(ids.shape) < mlm_prob) & (ids >= 5)
    r = torch.rand(ids.shape)
    out = torch.where(chosen & (r < mask_frac), 4, ids)
    rand = torch.randint(5, vocab_size, ids.shape)
    out = torch.where(chosen & (r >= mask_frac) & (r < mask_frac + random_frac), rand, out)
    return out, torch.where(chosen, ids, -100)


def mlm_corrupts_every_token(ids, vocab_size, generator=None, mlm_prob=0.15, mask_frac=0.8, random_frac=0.1):
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_prob) & (ids >= 5)
    r = torch.rand(ids.shape, generator=generator)
    out = torch.where((r < mask_frac * mlm_prob) & (ids >= 5), 4, ids)  # corruption drawn apart from the labels
    return out, torch.where(chosen, ids, -100)


# (exercise, wrong function, words the second hint contains)
MISTAKES = [
    ("attention", attention_mask_after_softmax, "after the softmax"),
    ("attention", attention_softmax_dim_minus_2, "wrong axis"),
    ("attention", attention_unscaled, "No 1/sqrt(d_k)"),
    ("attention", attention_naive_exp, "subtract each row's max"),
    ("causal_mask", causal_mask_strict, "diagonal is masked"),
    ("causal_mask", causal_mask_upper, "transposed"),
    ("causal_mask", causal_mask_float, "torch.bool"),
    ("layer_norm", layer_norm_bessel, "Bessel's correction"),
    ("layer_norm", layer_norm_over_batch, "first axis"),
    ("layer_norm", layer_norm_eps_on_std, "inside the square root"),
    ("sinusoidal", sinusoidal_swapped, "Sin and cos are swapped"),
    ("sinusoidal", sinusoidal_concat, "interleaved"),
    ("sinusoidal", sinusoidal_hard_coded_base, "base argument was ignored"),
    ("multi_head_attention", mha_scale_d_model, "sqrt(d_head)"),
    ("multi_head_attention", mha_bad_split, "mixes positions and features"),
    ("multi_head_attention", mha_no_wo, "output projection"),
    ("rope", rope_rotate_half, "rotate-half"),
    ("rope", rope_wrong_sign, "other way"),
    ("rope", rope_from_one, "Positions start at 1"),
    ("kv_cache_step", kv_only_new, "cached keys too"),
    ("kv_cache_step", kv_no_causal, "several new tokens"),
    ("kv_cache_step", kv_prepend, "in front of the cache"),
    ("mlm_mask", mlm_all_mask, "80/10/10"),
    ("mlm_mask", mlm_labels_everywhere, "so that the loss skips it"),
    ("mlm_mask", mlm_specials_too, "never chosen"),
    ("mlm_mask", mlm_random_from_whole_vocab, "content tokens only"),
    ("mlm_mask", mlm_ignores_generator, "generator=generator"),
    ("mlm_mask", mlm_corrupts_every_token, "Only chosen positions are corrupted"),
]


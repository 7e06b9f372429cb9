"""The graded hints: known mistakes, each written out as the wrong function a student would write.

When a student's output is wrong on a case, the checker runs each known mistake of that exercise on the same inputs;
the first mistake whose output the student's matches (and which itself differs from the reference there) names the
likely error. Its first hint says where to look, its second says what went wrong and what the fix is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from qalib.practice.exercises import references as ref


@dataclass(frozen=True)
class Mistake:
    name: str
    wrong: Callable  # the exercise's signature, implemented with this one mistake
    hint1: str       # where to look
    hint2: str       # what went wrong, and the fix


def _scores(q, k, scale):
    return q @ k.transpose(-2, -1) * scale  # (..., T_q, T_k)


def _masked(scores, mask):
    return scores if mask is None else scores.masked_fill(~mask, float("-inf"))


def _att_mask_after_softmax(q, k, v, mask=None):
    p = torch.softmax(_scores(q, k, q.shape[-1] ** -0.5), dim=-1)
    return (p if mask is None else p * mask) @ v


def _att_wrong_axis(q, k, v, mask=None):
    return torch.nan_to_num(torch.softmax(_masked(_scores(q, k, q.shape[-1] ** -0.5), mask), dim=-2)) @ v


def _att_scale(scale_of_d):
    def wrong(q, k, v, mask=None):
        return torch.nan_to_num(torch.softmax(_masked(_scores(q, k, scale_of_d(q.shape[-1])), mask), dim=-1)) @ v
    return wrong


def _att_inverted_mask(q, k, v, mask=None):
    return ref.attention(q, k, v, None if mask is None else ~mask)


def _att_large_negative(q, k, v, mask=None):
    s = _scores(q, k, q.shape[-1] ** -0.5)
    s = s if mask is None else s.masked_fill(~mask, -1e4 if s.dtype == torch.float16 else -1e9)
    return torch.softmax(s, dim=-1) @ v


def _att_no_mask(q, k, v, mask=None):
    return ref.attention(q, k, v)


ATTENTION = [
    Mistake("mask after softmax", _att_mask_after_softmax,
            "Look at where the mask enters: before or after the softmax?",
            "The mask was applied after the softmax: the kept probabilities no longer sum to 1. Set the masked scores "
            "to -inf before the softmax (scores.masked_fill(~mask, float('-inf'))), so the softmax renormalises."),
    Mistake("softmax over the wrong axis", _att_wrong_axis,
            "Check which axis the softmax normalises: each query's weights over the keys should sum to 1.",
            "Softmax over the wrong axis (dim=-2, the queries): use dim=-1, the keys, so that each row of the "
            "(T_q, T_k) weights sums to 1."),
    Mistake("no 1/sqrt(d_k)", _att_scale(lambda d: 1.0),
            "Compare the size of your scores with the reference's: something scales them.",
            "No 1/sqrt(d_k): divide q k^T by sqrt(d_k) before the softmax (Vaswani et al. 2017, sec. 3.2.1)."),
    Mistake("1/d_k", _att_scale(lambda d: 1.0 / d),
            "Your scores are too small: check the scaling factor.",
            "The scores were divided by d_k; the scale is 1/sqrt(d_k): for q and k with unit-variance components, "
            "sqrt(d_k) is the standard deviation of q.k, and d_k its variance."),
    Mistake("1/sqrt(d_v)", lambda q, k, v, mask=None: _att_scale(lambda d: v.shape[-1] ** -0.5)(q, k, v, mask),
            "Check which dimension the scale uses.",
            "The scale used d_v (v's width); it is 1/sqrt(d_k), the width of q and k."),
    Mistake("mask inverted", _att_inverted_mask,
            "Check what True means in the mask.",
            "The mask is inverted: True marks the keys a query MAY attend to, so fill the scores where the mask is False "
            "(masked_fill(~mask, -inf))."),
    Mistake("mask ignored", _att_no_mask,
            "Your output does not change when a mask is passed.",
            "The mask was ignored: fill the scores at mask == False with -inf before the softmax."),
    Mistake("large negative instead of -inf (this exercise's contract)", _att_large_negative,
            "Look at the queries whose mask row is all False: what does this exercise ask for there?",
            "A fully masked query came out as the plain average of v, because a large negative fill (-1e9) leaves a "
            "uniform softmax over the masked keys. That is not wrong in general: it equals -inf everywhere else, and "
            "Hugging Face's BERT (a torch.finfo(dtype).min fill) returns the same average on such rows. This "
            "exercise's contract asks for output 0 there, since such a query has nothing to attend to: fill with -inf "
            "and set rows whose every score is -inf to 0 instead of NaN."),
]


CAUSAL_MASK = [
    Mistake("diagonal masked", lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1),
            "Look at the diagonal: may a token attend to itself?",
            "The diagonal is masked: position i may attend to positions 0 .. i, itself included (torch.tril, diagonal=0)."),
    Mistake("future allowed", lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
            "Check which triangle is True: rows are queries, columns are keys.",
            "The mask is transposed: it allows the future and blocks the past. Row i (the query) must be True at columns "
            "0 .. i: the lower triangle, torch.tril."),
    Mistake("one step into the future", lambda T: torch.ones(T, T, dtype=torch.bool).tril(1),
            "Count how many keys the first position may see.",
            "Off by one: each position may also see the next one. Use the lower triangle with diagonal=0."),
    Mistake("True where masked", lambda T: ~torch.ones(T, T, dtype=torch.bool).tril(),
            "Check what True means: here it marks the keys a query MAY attend to.",
            "True and False are swapped: True marks where attending is allowed (the lower triangle), not where it is "
            "blocked."),
]


def _ln_stats(x, unbiased=False):
    return x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=unbiased)


LAYER_NORM = [
    Mistake("Bessel's correction", lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
            / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) * w + b,
            "Check how the variance is normalised.",
            "Variance with Bessel's correction (dividing by d - 1): LayerNorm uses the biased variance, dividing by d "
            "(Ba et al. 2016, eq. 3): x.var(-1, unbiased=False)."),
    Mistake("eps outside the square root", lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
            / (x.std(-1, keepdim=True, unbiased=False) + eps) * w + b,
            "Check where eps goes.",
            "eps was added to the standard deviation; it goes inside the square root: (x - mean) / sqrt(var + eps)."),
    Mistake("wrong axis", lambda x, w, b, eps=1e-5: (x - x.mean(0, keepdim=True))
            / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps) * w + b,
            "Check which axis the statistics are taken over.",
            "The statistics were taken over the first axis (the batch, as BatchNorm does); LayerNorm takes them over "
            "the last axis, the features of each token."),
    Mistake("no weight and bias", lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
            / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps),
            "Your output is normalised, but something is missing at the end.",
            "The weight (gamma) and bias (beta) were not applied: return normalised * weight + bias."),
    Mistake("weight and bias swapped", lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
            / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * b + w,
            "Check the last line: which parameter multiplies and which adds?",
            "Weight and bias are swapped: the weight multiplies, the bias adds."),
    Mistake("no centring", lambda x, w, b, eps=1e-5: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b,
            "Check that the mean is subtracted.",
            "The mean was not subtracted: that is RMSNorm (Zhang & Sennrich 2019). LayerNorm centres first: x - mean."),
    Mistake("one-pass variance", lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
            / torch.sqrt((x.pow(2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2).clamp_min(0) + eps) * w + b,
            "Your result is right for centred inputs but drifts when the mean is large: look at the variance formula.",
            "The variance as E[x^2] - E[x]^2 cancels catastrophically when the mean is large (near 1000^2 = 1e6, float32 "
            "resolves only steps of about 0.06): compute it from the centred values, ((x - mean)^2).mean(-1)."),
]


def _pe(n, d, base, *, swap=False, concat=False, exponent=lambda i, d: 2 * i / d, start=0):
    pos = torch.arange(start, start + n, dtype=torch.float64)[:, None]  # (n, 1)
    i = torch.arange(d // 2, dtype=torch.float64)[None, :]             # (1, d/2)
    a = pos * base ** (-exponent(i, d))                                 # (n, d/2)
    first, second = (torch.cos(a), torch.sin(a)) if swap else (torch.sin(a), torch.cos(a))
    if concat:
        return torch.cat([first, second], dim=-1).float()  # (n, d): [sin | cos]
    return torch.stack([first, second], dim=-1).reshape(n, d).float()  # (n, d): interleaved


SINUSOIDAL = [
    Mistake("sin and cos swapped", lambda n, d, base=10000.0: _pe(n, d, base, swap=True),
            "Check which function goes at the even indices.",
            "Sin and cos are swapped: Vaswani et al. 2017 (sec. 3.5) put sin at even indices 2i and cos at odd 2i + 1."),
    Mistake("[sin | cos] layout", lambda n, d, base=10000.0: _pe(n, d, base, concat=True),
            "Your values are right but in another order: check the layout of the columns.",
            "You wrote the [all sins | all coses] layout of tensor2tensor; the exercise asks for the paper's interleaved "
            "one, sin at 2i and cos at 2i + 1 (a fixed permutation of yours)."),
    Mistake("exponent i/d", lambda n, d, base=10000.0: _pe(n, d, base, exponent=lambda i, d: i / d),
            "Check the frequencies: how fast does the exponent grow with i?",
            "The exponent is i/d; the paper's is 2i/d: omega_i = base^(-2i/d), i = 0 .. d/2 - 1."),
    Mistake("base ignored", lambda n, d, base=10000.0: _pe(n, d, 10000.0),
            "Your table is right at the default but not for other bases.",
            "The base argument was ignored (10000 hard-coded): use base^(-2i/d)."),
    Mistake("positions from 1", lambda n, d, base=10000.0: _pe(n, d, base, start=1),
            "Look at the first row.",
            "Positions start at 1; they start at 0, so row 0 is [0, 1, 0, 1, ...]."),
]


def _mha(split, merge, scale_width, out_proj=True, transpose_w=False):
    def wrong(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
        b, t, d = x.shape
        ws = [w.T if transpose_w else w for w in (w_q, w_k, w_v, w_o)]
        q, k, v = (split(x @ w, n_heads) for w in ws[:3])  # (B, H, T, d_head)
        scale = 1 / math.sqrt(scale_width(d, n_heads))
        p = torch.nan_to_num(torch.softmax(_masked(q @ k.transpose(-2, -1) * scale, mask), dim=-1))
        out = merge(p @ v, b, t, d)  # (B, T, d)
        return out @ ws[3] if out_proj else out
    return wrong


def _split_no_transpose(y, h):
    b, t, d = y.shape
    return y.reshape(b, h, t, d // h)  # wrong: mixes positions and features


def _merge(o, b, t, d):
    return o.transpose(1, 2).reshape(b, t, d)


def _merge_no_transpose(o, b, t, d):
    return o.reshape(b, t, d)  # wrong: (B, H, T, dh) read as (B, T, d)


_d_head = lambda d, h: d // h  # noqa: E731
MULTI_HEAD_ATTENTION = [
    Mistake("heads split without a transpose", _mha(_split_no_transpose, _merge, _d_head),
            "Check how you split (B, T, d) into heads.",
            "The heads were split by reshaping (B, T, d) straight to (B, H, T, d_head), which mixes positions and "
            "features. View it as (B, T, H, d_head), then transpose to (B, H, T, d_head)."),
    Mistake("heads merged without a transpose", _mha(ref.split_heads, _merge_no_transpose, _d_head),
            "Check how you put the heads back together.",
            "The heads were merged by reshaping (B, H, T, d_head) straight to (B, T, d). Transpose to (B, T, H, d_head) "
            "first, then reshape."),
    Mistake("scaled by sqrt(d_model)", _mha(ref.split_heads, _merge, lambda d, h: d),
            "Check which width the scale uses.",
            "The scores were divided by sqrt(d_model); each head's scores are divided by sqrt(d_head) = sqrt(d_model / H), "
            "the width of that head's q and k."),
    Mistake("no output projection", _mha(ref.split_heads, _merge, _d_head, out_proj=False),
            "Something is missing after the heads are concatenated.",
            "The output projection w_o was not applied: MultiHead = Concat(head_1, ..., head_h) W^O "
            "(Vaswani et al. 2017, sec. 3.2.2)."),
    Mistake("weights transposed", _mha(ref.split_heads, _merge, _d_head, transpose_w=True),
            "Check how the weight matrices are applied.",
            "The weights were applied as x @ w.T (nn.Linear's convention); here they are (d_in, d_out), applied as "
            "x @ w_q, as in the paper's Q = X W^Q."),
]


def _rope(x, base, *, half=False, sign=1.0, start=0, exponent=lambda i, d: 2 * i / d):
    t, d = x.shape[-2], x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    a = torch.arange(start, start + t, dtype=torch.float64)[:, None] * base ** (-exponent(i, d))[None, :]  # (T, d/2)
    cos, sin = torch.cos(a).to(x.dtype), (sign * torch.sin(a)).to(x.dtype)
    if half:  # pairs (i, i + d/2): GPT-NeoX's rotate-half layout
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2)
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)  # (..., T, d)


ROPE = [
    Mistake("rotate-half pairing", lambda x, base=10000.0: _rope(x, base, half=True),
            "Check which dimensions are rotated together.",
            "You paired dimension i with i + d/2 (the rotate-half layout of GPT-NeoX and LLaMA's HF code); the exercise "
            "pairs 2i with 2i + 1, as Su et al. 2021 write it. Both are RoPE up to a permutation of the features."),
    Mistake("rotation the other way", lambda x, base=10000.0: _rope(x, base, sign=-1.0),
            "Check the sign of the sines.",
            "The rotation goes the other way: (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos), a counter-clockwise "
            "rotation by p * omega_i."),
    Mistake("positions from 1", lambda x, base=10000.0: _rope(x, base, start=1),
            "Look at the first position: is it rotated?",
            "Positions start at 1; they start at 0, so the first position is left unchanged."),
    Mistake("exponent i/d", lambda x, base=10000.0: _rope(x, base, exponent=lambda i, d: i / d),
            "Check the frequencies.",
            "The exponent is i/d; it is 2i/d: omega_i = base^(-2i/d), as in the sinusoid."),
    Mistake("added instead of rotated",
            lambda x, base=10000.0: x + ref.sinusoidal(x.shape[-2], x.shape[-1], base).to(x.dtype),
            "RoPE does not add anything to x.",
            "You added the sinusoidal table; RoPE rotates each pair of features by an angle proportional to the "
            "position, which keeps the norm of x and makes q_m . k_n depend on n - m only."),
]


def _kv(attend_cache=True, causal=True, prepend=False):
    def wrong(q, k, v, cache_k, cache_v):
        k_all = torch.cat([k, cache_k] if prepend else [cache_k, k], dim=-2)
        v_all = torch.cat([v, cache_v] if prepend else [cache_v, v], dim=-2)
        t_cache, t_new = cache_k.shape[-2], q.shape[-2]
        keys, values, first = (k_all, v_all, 0) if attend_cache else (k, v, t_cache)
        q_pos = torch.arange(t_cache, t_cache + t_new)[:, None]
        k_pos = torch.arange(first, t_cache + t_new)[None, :]
        if prepend:  # the new keys sit first, the cache after them
            k_pos = torch.cat([torch.arange(t_cache, t_cache + t_new), torch.arange(t_cache)])[None, :]
        mask = k_pos <= q_pos if causal else None
        return ref.attention(q, keys, values, mask), k_all, v_all
    return wrong


KV_CACHE_STEP = [
    Mistake("cache not attended", _kv(attend_cache=False),
            "Which keys do your new queries see?",
            "The new queries attended only to the new keys: they must attend to the cached keys too, "
            "torch.cat([cache_k, k], dim=-2), then attention over all of them."),
    Mistake("no causal mask among the new tokens", _kv(causal=False),
            "Your answer is right for one new token but not for several.",
            "With several new tokens, new token j (position T_cache + j) may see keys 0 .. T_cache + j only: mask the "
            "later new tokens (key position <= query position)."),
    Mistake("new keys prepended", _kv(prepend=True),
            "Check the order of the returned cache.",
            "The new keys and values went in front of the cache; append them: torch.cat([cache_k, k], dim=-2), so the "
            "cache stays in position order."),
]


MISTAKES = {
    "attention": ATTENTION,
    "causal_mask": CAUSAL_MASK,
    "layer_norm": LAYER_NORM,
    "sinusoidal": SINUSOIDAL,
    "multi_head_attention": MULTI_HEAD_ATTENTION,
    "rope": ROPE,
    "kv_cache_step": KV_CACHE_STEP,
}

"""The inputs each exercise is checked on: random ones first, then edge cases and adversarial ones.

Odd sizes (T_q != T_k, d_v != d_k, one head, one position) catch axis and reshape mistakes that square, equal
sizes hide; fully masked rows, large logits, constant rows and a large mean catch the numerical ones; fp16 inputs
catch a hard-coded dtype. Every case is drawn from a fixed seed, so a failure can be reproduced with
`exercises.case_inputs(name, case)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from qalib.lab.data import N_SPECIAL, CLS, PAD, SEP


class Seed(int):
    """A seed in a case's arguments: each call gets a fresh torch.Generator seeded with it."""


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    atol: float = 1e-5
    rtol: float = 1e-4
    nan_hint: str = ""  # what a NaN or inf on this case usually means

    def inputs(self, dtype: torch.dtype | None = None) -> tuple[tuple, dict]:
        """Fresh (args, kwargs) for one call: tensors cloned (a function that writes into its inputs spoils only its
        own copy), floating tensors cast to `dtype` if given, each Seed made a new generator."""
        def fresh(a):
            if isinstance(a, torch.Tensor):
                return (a.to(dtype) if dtype is not None and a.is_floating_point() else a).clone()
            return torch.Generator().manual_seed(int(a)) if isinstance(a, Seed) else a
        return tuple(map(fresh, self.args)), {key: fresh(a) for key, a in self.kwargs.items()}


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


def _rows_with_a_key(g, *shape):
    """A random bool mask (..., T_q, T_k) in which every query keeps at least one key."""
    mask = torch.rand(*shape, generator=g) < 0.6
    mask[..., 0] |= ~mask.any(-1)
    return mask


FP16 = dict(atol=2e-2, rtol=2e-2)  # fp16 carries ~3 significant digits


def attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(1)
    q, k, v = _randn(g, 2, 3, 5, 8), _randn(g, 2, 3, 7, 8), _randn(g, 2, 3, 7, 6)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    full = _rows_with_a_key(g, 2, 1, 5, 7)
    full[0, 0, 2], full[1, 0, 4] = False, False  # two queries with nothing to attend to
    big = 30.0  # scores ~ 30 * 30 = 900 (q.k / sqrt(d_k) has std 1 before): exp overflows float32 above ~88;
    # float32 rounds a score of 900 by ~5e-5, which moves the output by ~1e-4, hence that case's looser atol
    return [
        Case("random", "q (2, 3, 5, 8), k (2, 3, 7, 8), v (2, 3, 7, 6), no mask", (q, k, v)),
        Case("odd sizes", "one query, d_k = 5, d_v = 3, no batch dims", (_randn(g, 1, 5), _randn(g, 9, 5), _randn(g, 9, 3))),
        Case("causal mask", "T = 6, mask = lower triangle (6, 6), broadcast over the batch",
             (_randn(g, 2, 6, 4), _randn(g, 2, 6, 4), _randn(g, 2, 6, 4)), {"mask": mask}),
        Case("padding mask", "a random mask (2, 1, 5, 7) broadcast over 3 heads", (q, k, v),
             {"mask": _rows_with_a_key(g, 2, 1, 5, 7)}),
        Case("fully masked rows", "two queries whose mask row is all False: this exercise asks for output 0 there "
             "(Hugging Face's BERT returns the average of v)", (q, k, v),
             {"mask": full}, nan_hint="A query whose keys are all masked has softmax over all -inf, which is NaN; "
             "such a row has nothing to attend to, so give it probabilities 0 and output 0."),
        Case("large logits", "q and k scaled by 30: scores of order 900", (q * big, k * big, v), atol=1e-3, rtol=1e-3,
             nan_hint="In float32, exp(900) overflows to inf, and inf / inf is NaN: subtract each row's max before exp "
             "(torch.softmax does), which changes nothing mathematically."),
        Case("fp16", "float16 q, k, v with a causal mask: the output must be float16 too",
             tuple(_randn(g, 3, 6, 8).half() for _ in range(3)), {"mask": mask}, **FP16),
    ]


def causal_mask_cases() -> list[Case]:
    return [Case(f"T = {t}", f"causal_mask({t})", (t,), atol=0, rtol=0) for t in (5, 1, 2, 17)]


def layer_norm_cases() -> list[Case]:
    g = torch.Generator().manual_seed(2)

    def affine(d, dtype=torch.float32):
        return (1 + 0.5 * _randn(g, d)).to(dtype), (0.5 * _randn(g, d)).to(dtype)

    const = _randn(g, 3, 6)
    const[1] = 2.5  # one row with every feature equal: variance 0
    return [
        Case("random", "x (4, 7, 10), random weight and bias", (_randn(g, 4, 7, 10), *affine(10))),
        Case("odd sizes", "x (3, 5), d = 5, eps = 0.1: the eps argument must be used",
             (_randn(g, 3, 5, scale=3.0), *affine(5)), {"eps": 0.1}),
        Case("tiny variance", "x with std 0.003, so the variance (1e-5) is as small as eps",
             (_randn(g, 4, 8, scale=0.003), *affine(8)), atol=1e-4, rtol=1e-4),
        Case("one feature", "d = 1: every token is its own mean, so the output is the bias", (_randn(g, 4, 1), *affine(1)),
             nan_hint="With one feature the variance is 0; dividing by d - 1 = 0 (Bessel's correction) gives NaN."),
        Case("constant row", "a row with variance 0: eps keeps the division finite", (const, *affine(6)),
             nan_hint="A constant row has variance 0: eps goes inside the square root, sqrt(var + eps)."),
        Case("large mean", "x = 1000 + N(0, 1), float32", (1000 + _randn(g, 4, 16), *affine(16)), atol=2e-3, rtol=2e-3),
        Case("fp16", "float16 x, weight and bias: the output must be float16 too",
             (_randn(g, 3, 4, 12).half(), *affine(12, torch.float16)), **FP16),
    ]


def sinusoidal_cases() -> list[Case]:
    return [
        Case("d_model = 16", "sinusoidal(50, 16)", (50, 16), atol=1e-4),
        Case("one position", "sinusoidal(1, 2): position 0 is [sin 0, cos 0] = [0, 1]", (1, 2), atol=1e-4),
        Case("odd length", "sinusoidal(7, 6)", (7, 6), atol=1e-4),
        Case("base 100", "sinusoidal(13, 10, base=100.0): the base must be used", (13, 10), {"base": 100.0}, atol=1e-4),
    ]


def multi_head_attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(3)

    def weights(d, dtype=torch.float32):
        return tuple((_randn(g, d, d) / math.sqrt(d)).to(dtype) for _ in range(4))

    return [
        Case("random", "x (2, 5, 12), 3 heads of 4", (_randn(g, 2, 5, 12), *weights(12), 3)),
        Case("odd sizes", "x (1, 7, 10), 5 heads of 2, causal mask (7, 7)", (_randn(g, 1, 7, 10), *weights(10), 5),
             {"mask": torch.ones(7, 7, dtype=torch.bool).tril()}),
        Case("one head", "x (3, 4, 6), 1 head: plain attention with projections", (_randn(g, 3, 4, 6), *weights(6), 1)),
        Case("padding mask", "x (2, 6, 8), 2 heads, mask (2, 1, 1, 6): the last keys of row 1 are padding",
             (_randn(g, 2, 6, 8), *weights(8), 2),
             {"mask": torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]}),  # (2, 1, 1, 6)
        Case("fp16", "float16 x (2, 5, 8) and weights, 4 heads",
             (_randn(g, 2, 5, 8).half(), *weights(8, torch.float16), 4), **FP16),
    ]


def rope_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)
    return [
        Case("random", "x (2, 3, 6, 8): (B, H, T, d)", (_randn(g, 2, 3, 6, 8),)),
        Case("no batch dims", "x (5, 4): T = 5, d = 4", (_randn(g, 5, 4),)),
        Case("one pair", "x (9, 2), base 100: one frequency, 1", (_randn(g, 9, 2),), {"base": 100.0}),
        Case("long", "x (64, 16): positions up to 63", (_randn(g, 64, 16),), atol=1e-4),
        Case("fp16", "float16 x (4, 7, 8): the output must be float16 too", (_randn(g, 4, 7, 8).half(),), **FP16),
    ]


def kv_cache_step_cases() -> list[Case]:
    g = torch.Generator().manual_seed(5)

    def step(t_cache, t_new, lead=(2, 3), d=8, dtype=torch.float32):
        new = tuple(_randn(g, *lead, t_new, d).to(dtype) for _ in range(3))
        cache = tuple(_randn(g, *lead, t_cache, d).to(dtype) for _ in range(2))
        return new + cache

    return [
        Case("one new token", "cache of 4 positions, 1 new token, (2, 3, T, 8)", step(4, 1)),
        Case("empty cache", "the prompt: cache of 0 positions, 3 new tokens that attend causally", step(0, 3)),
        Case("two new tokens", "cache of 5, 2 new tokens: the first new token must not see the second", step(5, 2)),
        Case("no batch dims", "(T, d) tensors: cache of 3, 1 new token, d = 5", step(3, 1, lead=(), d=5)),
        Case("fp16", "float16, cache of 4, 2 new tokens", step(4, 2, dtype=torch.float16), **FP16),
    ]


def mlm_ids(seed: int, n: int = 400, t: int = 500, vocab_size: int = 64) -> torch.Tensor:
    """(n, t) ids: [CLS] content [SEP] with some [PAD] at the ends of rows, so special tokens are present."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(N_SPECIAL, vocab_size, (n, t), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[::3, -20:] = PAD
    return ids


def mlm_mask_cases() -> list[Case]:
    """Statistical cases: 200,000 tokens each, so a rate is measured to about +-0.001 (one binomial sigma)."""
    return [
        Case("BERT's rates", "15% chosen; of those 80% [MASK], 10% random, 10% unchanged", (mlm_ids(6), 64),
             {"generator": Seed(7)}),
        Case("other rates", "mlm_prob=0.4, mask_frac=0.5, random_frac=0.3: the arguments must be used",
             (mlm_ids(8), 64), {"generator": Seed(9), "mlm_prob": 0.4, "mask_frac": 0.5, "random_frac": 0.3}),
        Case("nothing chosen", "mlm_prob=0: every label is IGNORE and nothing changes", (mlm_ids(10, n=20), 64),
             {"generator": Seed(11), "mlm_prob": 0.0}),
    ]


CASES = {
    "attention": attention_cases,
    "causal_mask": causal_mask_cases,
    "layer_norm": layer_norm_cases,
    "sinusoidal": sinusoidal_cases,
    "multi_head_attention": multi_head_attention_cases,
    "rope": rope_cases,
    "kv_cache_step": kv_cache_step_cases,
    "mlm_mask": mlm_mask_cases,
}

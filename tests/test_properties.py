"""Property-based tests (hypothesis) over qalib's public compute functions and the model config.

In the documented domain the result is finite and has the documented shape; outside it the error is a
ValueError or TypeError that names the argument. The number of cases run is reported at the end of the
test session (see conftest.py).
"""

import math
from typing import get_args

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import count_case
from qalib.lab.data import N_SPECIAL, RATE_SUM_TOLERANCE, mask_tokens
from qalib.nn.attention import attention, entropy, softmax_jacobian
from qalib.nn.config import SCALINGS, EmbedCombine, MiniBertConfig, Norm, NormPlacement, Positions, QKProjection
from qalib.nn.model import MiniBert
from qalib.nn.positions import alibi_slopes, offset_matrix, sinusoidal

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(b=st.integers(1, 3), t=st.integers(1, 12), d=st.integers(1, 32), magnitude=st.floats(1e-3, 1e4),
       scale=st.one_of(st.none(), st.floats(1e-4, 1e2)), seed=st.integers(0, 2**16))
def test_attention_is_finite_and_rows_sum_to_one(b, t, d, magnitude, scale, seed):
    count_case("attention")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, t, d, generator=g) * magnitude for _ in range(3))
    out, probs, scores = attention(q, k, v, scale=scale)
    assert out.shape == (b, t, d) and probs.shape == scores.shape == (b, t, t)
    assert torch.isfinite(out).all() and torch.isfinite(probs).all()
    assert torch.allclose(probs.sum(-1), torch.ones(b, t), atol=1e-5)
    assert torch.isfinite(entropy(probs)).all() and torch.isfinite(softmax_jacobian(probs)).all()


@SETTINGS
@given(scale=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf"))))
def test_attention_rejects_bad_scale(scale):
    count_case("attention")
    with pytest.raises(ValueError, match="scale"):
        attention(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3), scale=scale)


@SETTINGS
@given(n=st.integers(1, 300), half=st.integers(1, 64), base=st.floats(1.5, 1e6))
def test_sinusoid_is_finite_with_norm_d_over_2(n, half, base):
    count_case("positions")
    d = 2 * half
    pe = sinusoidal(n, d, base)
    assert pe.shape == (n, d) and torch.isfinite(pe).all()
    assert torch.allclose(pe.pow(2).sum(-1), torch.full((n,), d / 2), rtol=1e-4)
    m = offset_matrix(3, d, base)
    assert torch.allclose(m @ m.T, torch.eye(d, dtype=m.dtype), atol=1e-9)  # a rotation


@SETTINGS
@given(d=st.one_of(st.integers(max_value=1), st.integers(1, 99).filter(lambda x: x % 2)), n=st.integers(1, 5))
def test_sinusoid_rejects_bad_d_model(d, n):
    count_case("positions")
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal(n, d)


@SETTINGS
@given(n=st.integers(1, 64))
def test_alibi_slopes_in_unit_interval_and_geometric_for_powers_of_two(n):
    count_case("positions")
    s = alibi_slopes(n)
    assert len(s) == n and (s > 0).all() and (s < 1).all() and len(set(s.tolist())) == n
    if math.log2(n).is_integer():  # Press et al.: start 2^(-8/n), ratio 2^(-8/n)
        assert torch.allclose(s, torch.tensor([2 ** (-8 * (i + 1) / n) for i in range(n)]))


@SETTINGS
@given(n_heads=st.sampled_from([1, 2, 4]), head=st.sampled_from([2, 4, 8]), n_layers=st.integers(1, 2),
       pos=st.sampled_from(get_args(Positions)), norm=st.sampled_from(get_args(Norm)),
       placement=st.sampled_from(get_args(NormPlacement)), qk=st.sampled_from(get_args(QKProjection)),
       combine=st.sampled_from(get_args(EmbedCombine)), scale=st.sampled_from([*SCALINGS, 0.5]),
       t=st.integers(2, 9), seed=st.integers(0, 1000))
def test_any_valid_config_gives_finite_outputs(n_heads, head, n_layers, pos, norm, placement, qk, combine, scale, t, seed):
    count_case("config")
    cfg = MiniBertConfig(vocab_size=20, d_model=n_heads * head, n_heads=n_heads, n_layers=n_layers, d_ff=16, max_len=12,
                         pos=pos, norm=norm, norm_placement=placement, qk=qk, embed_combine=combine, attn_scale=scale)
    torch.manual_seed(seed)
    model = MiniBert(cfg)
    ids = torch.randint(N_SPECIAL, 20, (2, t))
    out = model(ids, return_internals=True)
    assert out.last_hidden_state.shape == (2, t, cfg.d_model) and torch.isfinite(out.last_hidden_state).all()
    assert torch.isfinite(out.internals["layer0.probs"]).all()


@SETTINGS
@given(d_model=st.integers(1, 64), n_heads=st.integers(1, 16))
def test_config_rejects_indivisible_heads_by_name(d_model, n_heads):
    count_case("config")
    if d_model % n_heads:
        with pytest.raises(ValueError, match="n_heads"):
            MiniBertConfig(d_model=d_model, n_heads=n_heads)
    else:
        assert MiniBertConfig(d_model=d_model, n_heads=n_heads, pos="none").d_head == d_model // n_heads


@SETTINGS
@given(field=st.sampled_from(["vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "n_segments"]),
       value=st.one_of(st.integers(max_value=0), st.floats(allow_nan=True), st.text(max_size=3), st.none()))
def test_config_rejects_bad_sizes_by_name(field, value):
    count_case("config")
    with pytest.raises((ValueError, TypeError), match=field):
        MiniBertConfig(**{field: value})


@SETTINGS
@given(p=st.floats(0, 1), mask=st.floats(0, 1), rand=st.floats(0, 1), seed=st.integers(0, 1000))
@example(p=0.0, mask=1.0, rand=1e-10, seed=0)  # a sum just above 1, inside the slack: accepted
@example(p=0.5, mask=1.0, rand=1e-6, seed=0)  # just outside it: rejected
def test_mask_tokens_in_domain(p, mask, rand, seed):
    count_case("masking")
    ids = torch.randint(N_SPECIAL, 50, (4, 30))
    g = torch.Generator().manual_seed(seed)
    if mask + rand > 1 + RATE_SUM_TOLERANCE:  # the documented float slack; hypothesis found 1.0 + 1e-10
        with pytest.raises(ValueError, match="mask_frac"):
            mask_tokens(ids, 50, g, p, mask, rand)
        return
    corrupted, labels = mask_tokens(ids, 50, g, p, mask, rand)
    assert corrupted.shape == ids.shape and corrupted.min() >= 0 and corrupted.max() < 50
    assert ((labels == -100) | (labels == ids)).all()

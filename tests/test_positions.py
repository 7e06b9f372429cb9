import math
from typing import get_args

import pytest
import torch

from qalib.nn.config import Positions
from qalib.nn.positions import (ABSOLUTE_POSITIONS, POSITION_SCHEMES, RELATIVE_POSITIONS, AbsolutePosition,
                             RelativePosition, alibi_slopes, frequencies, interleaved_to_concat, offset_matrix,
                             sinusoidal, sinusoidal_concat, t5_buckets, Rotary)


def test_the_registry_has_one_scheme_per_config_value():
    # a Literal value without a class, or a class without a Literal value, fails here
    assert set(POSITION_SCHEMES) == set(get_args(Positions))


def test_each_scheme_is_of_one_kind_and_the_kinds_split_the_names():
    for name, scheme in POSITION_SCHEMES.items():
        assert issubclass(scheme, AbsolutePosition) != issubclass(scheme, RelativePosition), name
    assert ABSOLUTE_POSITIONS == ("learned", "sinusoidal", "none")
    assert RELATIVE_POSITIONS == ("shaw", "relative_key_query", "huang_unsigned_scalar", "huang_signed_scalar",
                                  "huang_vector", "transformer_xl", "transformer_xl_no_bias", "rotary", "alibi")


def test_sinusoidal_matches_the_paper_formula():
    pe = sinusoidal(50, 16)
    p, i = 7, 3
    assert math.isclose(pe[p, 2 * i].item(), math.sin(p / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(pe[p, 2 * i + 1].item(), math.cos(p / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert torch.allclose(pe.pow(2).sum(-1), torch.full((50,), 8.0), atol=1e-4)


def test_offset_matrix_is_position_independent():
    pe = sinusoidal(200, 64).double()
    m = offset_matrix(5, 64)
    assert torch.allclose(pe[:-5] @ m.T, pe[5:], atol=1e-5)


def test_layouts_are_a_permutation():
    assert torch.equal(sinusoidal_concat(10, 8), sinusoidal(10, 8)[:, interleaved_to_concat(8)])


def test_slowest_wavelength_with_paper_spacing():
    assert math.isclose(2 * math.pi / frequencies(512)[-1].item() / (2 * math.pi), 9646.6, rel_tol=1e-4)
    assert math.isclose(frequencies(512, spacing="t2t")[-1].item(), 1e-4, rel_tol=1e-9)


@pytest.mark.parametrize("bad", [0, 3, -2, 2.0])
def test_bad_d_model(bad):
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal(4, bad)


def test_bad_base():
    with pytest.raises(ValueError, match=r"base must be a finite number >= 1, got 0\.5"):
        sinusoidal(4, 8, base=0.5)


def test_alibi_slopes():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert len(alibi_slopes(12)) == 12


def test_rotary_depends_only_on_offset():
    rot = Rotary(8)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)
    seq_q = q.expand(1, 1, 20, 8)
    seq_k = k.expand(1, 1, 20, 8)
    s = rot.rotate(seq_q)[0, 0] @ rot.rotate(seq_k)[0, 0].T  # (20, 20)
    assert torch.allclose(s[2, 5], s[10, 13], atol=1e-5) and torch.allclose(s[0, 0], s[7, 7], atol=1e-5)


def test_t5_buckets_monotone_and_bounded():
    off = torch.arange(-200, 201)
    b = t5_buckets(off)
    assert b.min() >= 0 and b.max() < 32 and b[off == 0].item() == 0


def _scores(pos: str, clip: int = 3, seed: int = 0):
    """A 1-layer model with `pos`, its position scheme's parameters moved away from their start, and (q, k, the
    layer's scaled scores) for one batch."""
    from qalib.nn.config import MiniBertConfig
    from qalib.nn.model import MiniBert
    torch.manual_seed(seed)
    m = MiniBert(MiniBertConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=4, d_ff=64, pos=pos, rel_clip=clip)).eval()
    scheme = m.layers[0].attention.position
    with torch.no_grad():
        for p in scheme.parameters():
            p.add_(torch.randn_like(p))
    inner = m(torch.randint(5, 32, (2, 9)), return_internals=True).internals
    return scheme, inner["layer0.q"], inner["layer0.k"], inner["layer0.scores"]


def test_huang_methods_1_to_3_score_by_their_formulas():
    s = 8 ** -0.5                                                      # d_head = 8
    off = torch.arange(9)[None, :] - torch.arange(9)[:, None]          # j - i
    scheme, q, k, scores = _scores("huang_unsigned_scalar")
    a = scheme.scalars[:, off.abs().clamp(max=3)]                      # (H, T, T): one scalar per |j - i|, head
    assert torch.allclose(scores, (q @ k.transpose(-1, -2)) * a * s, atol=1e-5)
    scheme, q, k, scores = _scores("huang_signed_scalar")
    a = scheme.scalars[:, off.clamp(-3, 3) + 3]
    assert torch.allclose(scores, (q @ k.transpose(-1, -2)) * a * s, atol=1e-5)
    assert not torch.allclose(a, a.transpose(-1, -2))                  # signed: left and right differ
    scheme, q, k, scores = _scores("huang_vector")
    a = scheme.vectors[off.clamp(-3, 3) + 3]                           # (T, T, d_head)
    assert torch.allclose(scores, torch.einsum("bhid,bhjd,ijd->bhij", q, k, a) * s, atol=1e-5)


def test_huang_schemes_start_as_attention_without_positions():
    from qalib.nn.config import MiniBertConfig
    from qalib.nn.model import MiniBert
    for pos in ("huang_unsigned_scalar", "huang_signed_scalar", "huang_vector"):
        torch.manual_seed(0)
        m = MiniBert(MiniBertConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=4, d_ff=64, pos=pos)).eval()
        inner = m(torch.randint(5, 32, (1, 7)), return_internals=True).internals
        assert torch.allclose(inner["layer0.scores"], inner["layer0.q"] @ inner["layer0.k"].transpose(-1, -2) * 8 ** -0.5,
                              atol=1e-6), pos


def test_transformer_xl_scores_are_its_four_terms_and_no_bias_drops_two():
    s = 8 ** -0.5
    scheme, q, k, scores = _scores("transformer_xl")
    pk = scheme.position_keys(9)                                       # (H, T, T, d): W_R R_{i-j}
    terms = (torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,hijd->bhij", q, pk)
             + torch.einsum("hd,bhjd->bhj", scheme.u, k)[:, :, None, :] + torch.einsum("hd,hijd->hij", scheme.v, pk))
    assert torch.allclose(scores, terms * s, atol=1e-4)
    # Dai et al.'s grouping: (q + u) . k + (q + v) . W_R R
    grouped = torch.einsum("bhid,bhjd->bhij", q + scheme.u[None, :, None], k) + torch.einsum(
        "bhid,hijd->bhij", q + scheme.v[None, :, None], pk)
    assert torch.allclose(scores, grouped * s, atol=1e-4)
    # a function of i - j only: the position keys repeat along each diagonal
    assert torch.allclose(pk[:, 1:, 1:], pk[:, :-1, :-1], atol=1e-5)
    plain, q, k, scores = _scores("transformer_xl_no_bias")
    assert plain.u is None and plain.v is None
    pk = plain.position_keys(9)
    assert torch.allclose(scores, (q @ k.transpose(-1, -2) + torch.einsum("bhid,hijd->bhij", q, pk)) * s, atol=1e-4)


def test_schemes_that_read_keys_refuse_fewer_key_heads_and_xl_an_odd_head():
    from qalib.nn.config import MiniBertConfig
    for pos in ("huang_signed_scalar", "transformer_xl"):
        with pytest.raises(ValueError, match="n_kv_heads == n_heads"):
            MiniBertConfig(d_model=32, n_heads=4, n_kv_heads=2, pos=pos)
    with pytest.raises(ValueError, match="even head size"):
        MiniBertConfig(d_model=36, n_heads=4, pos="transformer_xl")

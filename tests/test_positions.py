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
    assert RELATIVE_POSITIONS == ("shaw", "relative_key_query", "rotary", "alibi")


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

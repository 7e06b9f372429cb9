"""Position information: the sinusoid, and the relative schemes the notebooks compare.

Absolute schemes produce a (T, d) table added to the token embeddings. Relative schemes change the
attention scores; every one of them is a small module with the same interface,

    scheme(q, k, scale) -> (q, k, bias)

returning possibly rotated q and k (rotary) and an additive score bias broadcastable to
(B, H, T, T), already on the scale of the scaled logits (or None).
"""

from __future__ import annotations

import math

import torch
from torch import nn


# ---------------------------------------------------------------------------------------------
# Sinusoidal encoding (Vaswani et al. 2017, sec. 3.5)
# ---------------------------------------------------------------------------------------------
def frequencies(d_model: int, base: float = 10000.0, spacing: str = "paper") -> torch.Tensor:
    """Angular frequencies omega_i, i = 0 .. d_model/2 - 1, in float64.

    spacing="paper": omega_i = base^(-2i/d)  (sec. 3.5). The slowest is base^(-(d-2)/d), so the longest
        wavelength is a little short of 2*pi*base (2*pi*9646.6 at d=512).
    spacing="t2t": omega_i = base^(-i/(d/2 - 1))  (tensor2tensor get_timing_signal_1d, fairseq), which
        reaches exactly 1/base.
    """
    _check_d_model(d_model)
    _check_base(base)
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float64)
    if spacing == "paper":
        exponent = 2 * i / d_model
    elif spacing == "t2t":
        exponent = i / max(half - 1, 1)
    else:
        raise ValueError(f"spacing must be 'paper' or 't2t', got {spacing!r}")
    return base ** (-exponent)


def sinusoidal(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's table, interleaved: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i). -> (n_positions, d_model), float32."""
    if not isinstance(n_positions, int) or isinstance(n_positions, bool) or n_positions < 1:
        raise ValueError(f"n_positions must be an int >= 1, got {n_positions!r}")
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * frequencies(d_model, base)[None, :]  # (n, d/2)
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1)  # (n, d/2, 2)
    return pe.reshape(n_positions, d_model).float()  # (n, d): sin, cos, sin, cos, ...


def sinusoidal_concat(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """tensor2tensor/fairseq layout [sin | cos] with the paper's frequencies: a fixed permutation of `sinusoidal`."""
    return sinusoidal(n_positions, d_model, base)[:, interleaved_to_concat(d_model)]


def interleaved_to_concat(d_model: int) -> torch.Tensor:
    """Index permutation taking the interleaved layout to [all sins | all coses]."""
    _check_d_model(d_model)
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def offset_matrix(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """M_k with PE(p + k) = M_k PE(p) for every p: block-diagonal 2x2 rotations by k*omega_i. -> (d, d), float64.

    For one frequency, [sin(w(p+k)), cos(w(p+k))] = [[cos wk, sin wk], [-sin wk, cos wk]] [sin wp, cos wp].
    """
    w = frequencies(d_model, base) * k
    c, s = torch.cos(w), torch.sin(w)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even], m[even, even + 1] = c, s
    m[even + 1, even], m[even + 1, even + 1] = -s, c
    return m


def _check_d_model(d_model: int) -> None:
    if not isinstance(d_model, int) or isinstance(d_model, bool) or d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be an even int >= 2 (one sin and one cos per frequency), got {d_model!r}")


def _check_base(base: float) -> None:
    if not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1 (the paper uses 10000), got {base!r}")


# ---------------------------------------------------------------------------------------------
# Relative schemes: scheme(q, k, scale) -> (q, k, bias)
# q, k: (B, H, T, d_head)
# ---------------------------------------------------------------------------------------------
def relative_offsets(t: int, device=None) -> torch.Tensor:
    """offsets[i, j] = j - i: how far key j is from query i. -> (T, T) long."""
    pos = torch.arange(t, device=device)
    return pos[None, :] - pos[:, None]


class ShawRelative(nn.Module):
    """Shaw et al. 2018: a learned vector a_ij = w[clip(j - i, k)] per clipped offset (2k+1 of them),
    shared across heads; the score gains q_i . a_ij. Shaw et al. also add a second table to the values;
    their ablation (Table 3) finds the key term carries the gain, and HF's relative_key omits it too.
    """

    def __init__(self, d_head: int, clip: int, key_query: bool = False) -> None:
        super().__init__()
        self.clip = clip
        self.key_query = key_query  # Huang et al. 2020 method 4: q.a_ij + k.a_ij
        self.distance_embedding = nn.Embedding(2 * clip + 1, d_head)

    def table(self, t: int) -> torch.Tensor:
        idx = relative_offsets(t, self.distance_embedding.weight.device).clamp(-self.clip, self.clip) + self.clip
        return self.distance_embedding(idx)  # (T, T, d_head)

    def forward(self, q, k, scale):
        a = self.table(q.shape[-2]).to(q.dtype)  # (T, T, d_head)
        bias = torch.einsum("bhid,ijd->bhij", q, a)  # q_i . a_ij
        if self.key_query:
            bias = bias + torch.einsum("bhjd,ijd->bhij", k, a)  # k_j . a_ij
        return q, k, bias * scale


class Rotary(nn.Module):
    """Su et al. 2021 (RoPE): rotate each pair of q and k dimensions by an angle proportional to the
    position, so q_m . k_n depends on positions only through n - m. No parameters, no bias."""

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("omega", frequencies(d_head, base).float(), persistent=False)  # (d_head/2,)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-2]
        angles = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * self.omega[None, :]  # (T, d/2)
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, T, d/2) each
        out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, H, T, d/2, 2)
        return out.flatten(-2)  # (B, H, T, d)

    def forward(self, q, k, scale):
        return self.rotate(q), self.rotate(k), None


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al. 2022: geometric slopes 2^(-8/n), 2^(-16/n), ..., 2^(-8) for n heads (n a power of 2;
    otherwise the paper's recipe: the closest power of two, then every other slope of the next one)."""
    if not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1, got {n_heads!r}")

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


class ALiBi(nn.Module):
    """Press et al. 2022: no position embedding; each head h adds -m_h |j - i| to its scaled scores
    (the symmetric form for a bidirectional encoder)."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)  # (H,)

    def forward(self, q, k, scale):
        distance = relative_offsets(q.shape[-2], q.device).abs().to(q.dtype)  # (T, T)
        bias = -self.slopes.to(q.dtype)[:, None, None] * distance  # (H, T, T)
        return q, k, bias


def t5_buckets(offsets: torch.Tensor, n_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """T5's bidirectional bucketing (Raffel et al. 2020): half the buckets per direction, exact for small
    distances, log-spaced up to max_distance, everything further shares the last bucket."""
    if n_buckets < 4 or n_buckets % 2:
        raise ValueError(f"n_buckets must be an even int >= 4, got {n_buckets}")
    half = n_buckets // 2
    bucket = (offsets > 0).long() * half
    dist = offsets.abs()
    exact = half // 2
    log_part = exact + (
        torch.log(dist.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)
    ).long()
    log_part = log_part.clamp(max=half - 1)
    return bucket + torch.where(dist < exact, dist, log_part)

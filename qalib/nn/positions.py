"""Position information: the sinusoid, and every scheme MiniBertConfig.pos names, through one registry.

A scheme is one class of one of two kinds, and the kind decides where the model puts it:

    AbsolutePosition   scheme.table(t, device) -> (T, d_model), added to the token embeddings;
                       one instance, Embeddings.position_embeddings
    RelativePosition   scheme(q, k, scale) -> (q, k, bias): possibly rotated q and k (rotary) and an
                       additive score bias broadcastable to (B, H, T, T), already on the scale of the
                       scaled logits (or None); one instance per layer, SelfAttention.position

Every scheme is built by `Scheme.from_config(cfg)`; `make_position(cfg)` looks cfg.pos up in
POSITION_SCHEMES, and qalib/nn/model.py places the result by its kind, with no per-name code. So a new
scheme costs one class, one registry line and one Literal value; T5's bucketed bias, for instance:

    class T5Relative(RelativePosition):                                   # 1. the class
        def __init__(self, n_heads):
            super().__init__()
            self.bucket_bias = nn.Embedding(32, n_heads)
        @classmethod
        def from_config(cls, cfg):
            return cls(cfg.n_heads)
        def forward(self, q, k, scale):
            buckets = t5_buckets(relative_offsets(q.shape[-2], q.device))  # (T, T)
            return q, k, self.bucket_bias(buckets).permute(2, 0, 1)        # (H, T, T)

    POSITION_SCHEMES = {..., "t5": T5Relative}                            # 2. the registry line
    Positions = Literal[..., "t5"]                                        # 3. the value, qalib/nn/config.py

(plus a check in MiniBertConfig.__post_init__ if the scheme constrains the sizes, as sinusoidal and
rotary need even dimensions). tests/test_positions.py fails if the registry and the Literal disagree.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from qalib.nn.validate import int_in, sinusoid_base, sinusoid_width

if TYPE_CHECKING:
    from qalib.nn.config import MiniBertConfig


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
    d_model = sinusoid_width("d_model", d_model)
    sinusoid_base("base", base)  # base 1 too: every frequency is then 1
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
    n_positions = int_in("n_positions", n_positions, 1)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * frequencies(d_model, base)[None, :]  # (n, d/2)
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1)  # (n, d/2, 2)
    return pe.reshape(n_positions, d_model).float()  # (n, d): sin, cos, sin, cos, ...


def sinusoidal_concat(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """tensor2tensor/fairseq layout [sin | cos] with the paper's frequencies: a fixed permutation of `sinusoidal`."""
    return sinusoidal(n_positions, d_model, base)[:, interleaved_to_concat(d_model)]


def interleaved_to_concat(d_model: int) -> torch.Tensor:
    """Index permutation taking the interleaved layout to [all sins | all coses]."""
    d_model = sinusoid_width("d_model", d_model)
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


# ---------------------------------------------------------------------------------------------
# The schemes MiniBertConfig.pos names: each is built from the config
# ---------------------------------------------------------------------------------------------
class PositionScheme(nn.Module):
    """The root of both kinds: every scheme is built from the config, taking the sizes it needs."""

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "PositionScheme":
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Absolute schemes: scheme.table(t, device) -> (T, d_model), added to the token embeddings
# ---------------------------------------------------------------------------------------------
class AbsolutePosition(PositionScheme):
    """A position vector per position, added to the token embeddings before the first layer."""

    def table(self, t: int, device=None) -> torch.Tensor:
        raise NotImplementedError


class LearnedPositions(AbsolutePosition, nn.Embedding):
    """BERT: a learned row per position, max_len of them. An nn.Embedding, so its parameter is `.weight`
    (a checkpoint's embeddings.position_embeddings.weight loads as it is) and MiniBert's init treats it
    as every other embedding."""

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "LearnedPositions":
        return cls(cfg.max_len, cfg.d_model)

    def table(self, t: int, device=None) -> torch.Tensor:
        if t > self.num_embeddings:
            raise ValueError(
                f"sequence length {t} exceeds max_len={self.num_embeddings}: a learned position table has no rows for "
                f"positions it never saw; use pos='sinusoidal' or a relative scheme to run on longer inputs"
            )
        return self.weight[:t]


class SinusoidalPositions(AbsolutePosition):
    """Vaswani et al. 2017, sec. 3.5: the fixed table `sinusoidal`, defined for any length. No parameters."""

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model, self.base = d_model, base

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "SinusoidalPositions":
        return cls(cfg.d_model, cfg.pos_base)

    def table(self, t: int, device=None) -> torch.Tensor:
        return sinusoidal(t, self.d_model, self.base).to(device)


class NoPositions(AbsolutePosition):
    """No position information (the ablation): a zero table."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "NoPositions":
        return cls(cfg.d_model)

    def table(self, t: int, device=None) -> torch.Tensor:
        return torch.zeros(t, self.d_model, device=device)


# ---------------------------------------------------------------------------------------------
# Relative schemes: scheme(q, k, scale) -> (q, k, bias)
# q, k: (B, H, T, d_head)
# ---------------------------------------------------------------------------------------------
class RelativePosition(PositionScheme):
    """Positions enter inside every attention layer, through the scores or through q and k."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, scale: float):
        raise NotImplementedError


def relative_offsets(t: int, device=None) -> torch.Tensor:
    """offsets[i, j] = j - i: how far key j is from query i. -> (T, T) long."""
    pos = torch.arange(t, device=device)
    return pos[None, :] - pos[:, None]


class ShawRelative(RelativePosition):
    """Shaw et al. 2018: a learned vector a_ij = w[clip(j - i, k)] per clipped offset (2k+1 of them),
    shared across heads; the score gains q_i . a_ij. Shaw et al. also add a second table to the values;
    their ablation (Table 3) finds the key term carries the gain, and HF's relative_key omits it too.
    """

    def __init__(self, d_head: int, clip: int) -> None:
        super().__init__()
        self.clip = clip
        self.distance_embedding = nn.Embedding(2 * clip + 1, d_head)

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "ShawRelative":
        return cls(cfg.d_head, cfg.rel_clip)

    def table(self, t: int) -> torch.Tensor:
        idx = relative_offsets(t, self.distance_embedding.weight.device).clamp(-self.clip, self.clip) + self.clip
        return self.distance_embedding(idx)  # (T, T, d_head)

    def forward(self, q, k, scale):
        a = self.table(q.shape[-2]).to(q.dtype)  # (T, T, d_head)
        return q, k, self.score_bias(q, k, a) * scale

    def score_bias(self, q, k, a):
        """The unscaled score term of the table a (T, T, d_head): (B, H, T, T)."""
        return torch.einsum("bhid,ijd->bhij", q, a)  # q_i . a_ij


class KeyQueryRelative(ShawRelative):
    """Huang et al. 2020 method 4 (HF's relative_key_query): Shaw's table, met by the key as well as the
    query: the score gains q_i . a_ij + k_j . a_ij. Same parameters as ShawRelative."""

    def score_bias(self, q, k, a):
        return super().score_bias(q, k, a) + torch.einsum("bhjd,ijd->bhij", k, a)  # + k_j . a_ij


class HuangScalar(RelativePosition):
    """Huang et al. 2020 methods 1 and 2: the content score itself is scaled by a learned scalar per clipped
    distance and head, e_ij = (q_i . k_j) a_ij. Method 1 reads the unsigned distance |j - i| (k + 1 scalars per
    head), method 2 the signed offset j - i (2k + 1). The scalars start at 1, so an untrained layer scores like one
    without positions (an initialisation the paper does not state; 0 would erase the content score)."""

    signed = True

    def __init__(self, n_heads: int, clip: int) -> None:
        super().__init__()
        self.clip = clip
        self.scalars = nn.Parameter(torch.ones(n_heads, 2 * clip + 1 if self.signed else clip + 1))

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "HuangScalar":
        return cls(cfg.n_heads, cfg.rel_clip)

    def index(self, t: int) -> torch.Tensor:
        """(T, T) the scalar each (query, key) pair reads."""
        off = relative_offsets(t, self.scalars.device).clamp(-self.clip, self.clip)
        return off + self.clip if self.signed else off.abs()

    def forward(self, q, k, scale):
        a = self.scalars[:, self.index(q.shape[-2])].to(q.dtype)          # (H, T, T)
        content = q @ k.transpose(-1, -2)                                  # (B, H, T, T)
        return q, k, content * (a - 1) * scale                             # content * a, as a bias on content


class HuangUnsigned(HuangScalar):
    """Huang et al. 2020 method 1: one scalar per unsigned distance |j - i| (clipped) and head."""

    signed = False


class HuangVector(RelativePosition):
    """Huang et al. 2020 method 3: a learned vector per clipped offset meets query and key in one three-way
    product, e_ij = sum_d q_id k_jd a_ij,d (shared across heads, like ShawRelative's table). The vectors start at
    1 (a parameter, not an nn.Embedding, so the model's weight initialisation leaves them there): an untrained
    layer scores like one without positions."""

    def __init__(self, d_head: int, clip: int) -> None:
        super().__init__()
        self.clip = clip
        self.vectors = nn.Parameter(torch.ones(2 * clip + 1, d_head))

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "HuangVector":
        return cls(cfg.d_head, cfg.rel_clip)

    def table(self, t: int) -> torch.Tensor:
        idx = relative_offsets(t, self.vectors.device).clamp(-self.clip, self.clip) + self.clip
        return self.vectors[idx]  # (T, T, d_head)

    def forward(self, q, k, scale):
        a = self.table(q.shape[-2]).to(q.dtype)
        # sum_d q_id k_jd (a_ijd - 1): the three-way product minus the content score the layer adds anyway
        return q, k, torch.einsum("bhid,bhjd,ijd->bhij", q, k, a - 1) * scale


class TransformerXLRelative(RelativePosition):
    """Dai et al. 2019 (Transformer-XL, sec. 3.3): a sinusoid R of the offset i - j, projected per head by a learned
    W_R, and two learned per-head biases u, v in place of the query's absolute-position term:
    e_ij = q_i . k_j + q_i . W_R R_{i-j} + u . k_j + v . W_R R_{i-j}. Unclipped: any length works.
    with_biases=False keeps only the first two terms (u = v = 0), the variant Huang et al. trained after finding the
    biases unstable. u and v start at 0, as zero-initialised biases."""

    with_biases = True

    def __init__(self, n_heads: int, d_head: int) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"transformer_xl needs an even d_head for its sinusoid, got {d_head}")
        self.d_head = d_head
        self.w_r = nn.Parameter(torch.randn(n_heads, d_head, d_head) * d_head ** -0.5)
        self.u = nn.Parameter(torch.zeros(n_heads, d_head)) if self.with_biases else None
        self.v = nn.Parameter(torch.zeros(n_heads, d_head)) if self.with_biases else None

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "TransformerXLRelative":
        return cls(cfg.n_heads, cfg.d_head)

    def position_keys(self, t: int, device=None, dtype=None) -> torch.Tensor:
        """W_R R_{i-j} for every (query i, key j): (H, T, T, d_head)."""
        off = -relative_offsets(t, device)                                  # (T, T): i - j
        inv = frequencies(self.d_head).to(device)                           # (d_head / 2,)
        ang = off[..., None].float() * inv                                  # (T, T, d_head / 2)
        r = torch.stack([ang.sin(), ang.cos()], -1).flatten(-2)             # (T, T, d_head), interleaved
        return torch.einsum("ijd,hed->hije", r.to(dtype or self.w_r.dtype), self.w_r.to(dtype or self.w_r.dtype))

    def forward(self, q, k, scale):
        pk = self.position_keys(q.shape[-2], q.device, q.dtype)             # (H, T, T, d_head)
        bias = torch.einsum("bhid,hijd->bhij", q, pk)                       # q_i . W_R R_{i-j}
        if self.with_biases:
            bias = bias + torch.einsum("hd,bhjd->bhj", self.u.to(q.dtype), k)[:, :, None, :]   # u . k_j
            bias = bias + torch.einsum("hd,hijd->hij", self.v.to(q.dtype), pk)[None]           # v . W_R R_{i-j}
        return q, k, bias * scale


class TransformerXLNoBias(TransformerXLRelative):
    """Transformer-XL's relative scores without u and v."""

    with_biases = False


class Rotary(RelativePosition):
    """Su et al. 2021 (RoPE): rotate each pair of q and k dimensions by an angle proportional to the
    position, so q_m . k_n depends on positions only through n - m. No parameters, no bias."""

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("omega", frequencies(d_head, base).float(), persistent=False)  # (d_head/2,)

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "Rotary":
        return cls(cfg.d_head, cfg.pos_base)

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


class ALiBi(RelativePosition):
    """Press et al. 2022: no position embedding; each head h adds -m_h |j - i| to its scaled scores
    (the symmetric form for a bidirectional encoder)."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)  # (H,)

    @classmethod
    def from_config(cls, cfg: MiniBertConfig) -> "ALiBi":
        return cls(cfg.n_heads)

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


# ---------------------------------------------------------------------------------------------
# The registry: MiniBertConfig.pos -> scheme (tests/test_positions.py checks it against the Literal)
# ---------------------------------------------------------------------------------------------
POSITION_SCHEMES: dict[str, type[PositionScheme]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "none": NoPositions,
    "shaw": ShawRelative,
    "relative_key_query": KeyQueryRelative,
    "huang_unsigned_scalar": HuangUnsigned,
    "huang_signed_scalar": HuangScalar,
    "huang_vector": HuangVector,
    "transformer_xl": TransformerXLRelative,
    "transformer_xl_no_bias": TransformerXLNoBias,
    "rotary": Rotary,
    "alibi": ALiBi,
}
ABSOLUTE_POSITIONS = tuple(name for name, scheme in POSITION_SCHEMES.items() if issubclass(scheme, AbsolutePosition))
RELATIVE_POSITIONS = tuple(name for name, scheme in POSITION_SCHEMES.items() if issubclass(scheme, RelativePosition))


def make_position(cfg: MiniBertConfig) -> PositionScheme:
    """The scheme cfg.pos names, sized from cfg (the config has already checked the name)."""
    return POSITION_SCHEMES[cfg.pos].from_config(cfg)

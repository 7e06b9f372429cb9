"""Normalisation layers with one interface: norm(x, keep=None, internals=None, name="") -> x.

x: (B, T, d). keep: (B, T) bool, True at real tokens (False at padding). If `internals` is a dict, the
layer writes its statistics into it under `name` (the quantities notebook 06 plots).

    layer        Ba et al. 2016: statistics over the d features of each token (eq. 3, biased variance)
    batch        BatchNorm over batch AND positions for each feature; padding counts (a common mistake)
    batch_masked the same, but padding positions are excluded from the statistics
    rms          Zhang & Sennrich 2019: divide by the root mean square, no centring
    none         identity
"""

from __future__ import annotations

from typing import get_args

import torch
from torch import nn

from qalib.nn.config import Norm

NORMS = get_args(Norm)


class LayerNorm(nn.LayerNorm):
    def forward(self, x, keep=None, internals=None, name=""):
        if internals is not None:
            var, mean = torch.var_mean(x.detach(), dim=-1, unbiased=False)
            internals[f"{name}.mean"], internals[f"{name}.std"] = mean, var.sqrt()  # (B, T) each: one per token
        return super().forward(x)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x, keep=None, internals=None, name=""):
        rms = x.pow(2).mean(dim=-1, keepdim=True).add(self.eps).sqrt()  # (B, T, 1)
        if internals is not None:
            internals[f"{name}.rms"] = rms.detach().squeeze(-1)
        return x / rms * self.weight


class TokenBatchNorm(nn.Module):
    """BatchNorm for (B, T, d): one mean and variance per feature, over every (batch, position) pair.

    masked=False reproduces nn.BatchNorm1d applied to the flattened (B*T, d) tokens, pads included.
    masked=True leaves padding out of the statistics (and out of the running averages).
    In eval mode both use the running statistics collected during training.
    """

    def __init__(self, d: int, eps: float = 1e-5, momentum: float = 0.1, masked: bool = False) -> None:
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        self.eps, self.momentum, self.masked = eps, momentum, masked
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))

    def forward(self, x, keep=None, internals=None, name=""):
        if self.training:
            tokens = x.reshape(-1, x.shape[-1])  # (B*T, d)
            if self.masked and keep is not None:
                tokens = tokens[keep.reshape(-1)]  # (N_real, d)
            n = tokens.shape[0]
            if n < 2:
                raise ValueError(
                    f"BatchNorm in training mode needs at least 2 (non-padding) tokens for a variance; got {n}"
                )
            mean = tokens.mean(dim=0)
            var = tokens.var(dim=0, unbiased=False)
            with torch.no_grad():  # PyTorch convention: running variance is the unbiased estimate
                self.running_mean.lerp_(mean.detach(), self.momentum)
                self.running_var.lerp_(var.detach() * n / (n - 1), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        if internals is not None:
            # (d,) each: one per feature
            internals[f"{name}.mean"], internals[f"{name}.std"] = mean.detach(), var.detach().sqrt()
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class Identity(nn.Module):
    def forward(self, x, keep=None, internals=None, name=""):
        return x


def make_norm(kind: str, d: int, eps: float = 1e-12) -> nn.Module:
    """The registry: one name per variant."""
    if kind == "layer":
        return LayerNorm(d, eps=eps)
    if kind == "rms":
        return RMSNorm(d, eps=max(eps, 1e-8))
    if kind in ("batch", "batch_masked"):
        return TokenBatchNorm(d, masked=kind == "batch_masked")
    if kind == "none":
        return Identity()
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")

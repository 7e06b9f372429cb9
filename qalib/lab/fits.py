"""Power laws fitted to measured curves: the exponent p of y ~ c x^p (how time or memory grows with length)."""

from __future__ import annotations

import numpy as np


def fit_exponent(x, y, robust: bool = False) -> float:
    """Slope p of log y against log x (y ~ c x^p): least squares, or with robust=True the median of the slopes
    between all pairs of points (Theil-Sen), which one timing disturbed by another process cannot drag far."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.size < 2 or (x <= 0).any() or (y <= 0).any():
        raise ValueError("x and y need the same shape, >= 2 points and positive values")
    lx, ly = np.log(x), np.log(y)
    if not robust:
        return float(np.polyfit(lx, ly, 1)[0])
    i, j = np.triu_indices(x.size, k=1)
    keep = lx[j] != lx[i]
    return float(np.median((ly[j] - ly[i])[keep] / (lx[j] - lx[i])[keep]))

"""Statistics over seeds that the notebooks' claims rest on: small, exact, no scipy.

    r = paired_interval(a, b)     # a, b: one value per seed, paired (the same seed, the same data stream)
    r["mean"], r["low"], r["high"]  # the mean paired difference and its two-sided 95% Student-t interval
    d = paired_difference(a, b, "LayerNorm", "RMSNorm")   # the same as a typed value that names its two sides
    d.mean, d.low, d.high, d.excludes_zero, str(d)

A "no difference" statement needs an interval, not a threshold equal to the noise: an interval that contains 0 but
is wider than the effect says only that the run cannot tell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qalib.nn.validate import int_in, probability

# Student's t, two-sided 95% (the 0.975 quantile), for 1 .. 30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def paired_interval(a, b) -> dict:
    """Mean of the paired differences a - b (one pair per seed) and its two-sided 95% Student-t interval (needs at
    least 2 pairs; beyond 31, the normal 1.96). -> {"diffs", "mean", "low", "high", "half_width"}."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError(f"paired_interval needs two equal-length 1-d arrays of >= 2 values, got {d.shape}")
    t = _T975[len(d) - 2] if len(d) - 1 <= len(_T975) else 1.96
    half = t * float(d.std(ddof=1)) / math.sqrt(len(d))
    return {"diffs": d, "mean": float(d.mean()), "low": float(d.mean()) - half, "high": float(d.mean()) + half,
            "half_width": half}


@dataclass(frozen=True)
class PairedDifference:
    """a minus b, seed by seed, and the two-sided 95% Student-t interval of the mean difference. half_width is the
    run's resolution: an interval that contains 0 rules out only effects larger than about half_width."""

    a: str
    b: str
    diffs: np.ndarray  # (n_seeds,)
    mean: float
    low: float
    high: float

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        return (f"{self.a} minus {self.b}: {self.mean:+.3f}, 95% interval [{self.low:+.3f}, {self.high:+.3f}] "
                f"over {self.n} paired seeds")


def paired_difference(a, b, a_name: str = "a", b_name: str = "b") -> PairedDifference:
    """paired_interval(a, b) as a PairedDifference that names its two sides."""
    r = paired_interval(a, b)
    return PairedDifference(a_name, b_name, r["diffs"], r["mean"], r["low"], r["high"])


def binomial_tolerance(p: float, n: int, z: float = 4.0) -> float:
    """z standard errors of a proportion p estimated from n independent draws: z sqrt(p (1 - p) / n)."""
    return z * math.sqrt(probability("p", p) * (1 - p) / int_in("n", n, 1))

"""Did a run learn its task? The gate every experiment passes before anything is read from a trained model.

    g = learned("held-out accuracy", acc, baseline=0.25, baseline_name="chance", margin=0.1)
    g.passed, str(g)      # True, "learned: held-out accuracy 0.93 > chance 0.25 + 0.1"
    g = learned("final loss (nats)", loss, baseline=3.11, baseline_name="the unigram level", margin=0.3,
                higher_is_better=False)

A model that did not beat a stated baseline (chance, the majority class, the unigram level, a model that ignores
its input) by a stated margin is reported as failed, and nothing is read from it: a run that never learned says
nothing about the architecture, only about the budget. `learned_share` counts the seeds that passed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Gate:
    """One run's verdict: `metric` measured `value`; it learned when the value is past `baseline` by more than
    `margin` in the metric's better direction."""

    metric: str
    value: float
    baseline: float
    baseline_name: str
    margin: float
    higher_is_better: bool = True

    @property
    def threshold(self) -> float:
        """The value a run must pass: baseline + margin (or baseline - margin when lower is better)."""
        return self.baseline + self.margin if self.higher_is_better else self.baseline - self.margin

    @property
    def passed(self) -> bool:
        if not math.isfinite(self.value):
            return False
        return self.value > self.threshold if self.higher_is_better else self.value < self.threshold

    def __str__(self) -> str:
        sign, op = ("+", ">") if self.higher_is_better else ("-", "<")
        verdict = "learned" if self.passed else "did NOT learn"
        return (f"{verdict}: {self.metric} {self.value:.4g} {op if self.passed else 'not ' + op} "
                f"{self.baseline_name} {self.baseline:.4g} {sign} {self.margin:g}")


def learned(metric: str, value: float, baseline: float, baseline_name: str, margin: float,
            higher_is_better: bool = True) -> Gate:
    """The gate for one run. margin >= 0, in the metric's units; NaN or inf never passes."""
    if not isinstance(metric, str) or not metric.strip() or not isinstance(baseline_name, str) or not baseline_name.strip():
        raise ValueError("learned() needs the metric's name and the baseline's name, e.g. 'held-out accuracy', 'chance'")
    for name, x in (("value", value), ("baseline", baseline), ("margin", margin)):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {x!r}")
    if not math.isfinite(float(baseline)) or not (math.isfinite(float(margin)) and margin >= 0):
        raise ValueError(f"baseline must be finite and margin finite and >= 0, got {baseline!r}, {margin!r}")
    return Gate(metric, float(value), float(baseline), baseline_name, float(margin), bool(higher_is_better))


def learned_share(gates: Iterable[Gate]) -> float:
    """The share of runs that passed their gate."""
    gates = list(gates)
    if not gates:
        raise ValueError("learned_share needs at least one gate")
    return sum(g.passed for g in gates) / len(gates)

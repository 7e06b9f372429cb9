"""Interview practice: the clock starts when an exercise is opened, and each check says how long it has been.

    attempt = start("attention", minutes=15)
    attempt.check(my_attention)   # ... "4 min 12 s since the start (within the 15 min budget)"

The clock is an argument so that a test can drive it; it defaults to time.monotonic (which no clock change moves).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from qalib.nn.validate import choice, positive
from qalib.practice.exercises.checker import NAMES, CheckResult, check


@dataclass
class Attempt:
    name: str
    minutes: float | None = None
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    solved_after_s: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        choice("name", self.name, NAMES)
        if self.minutes is not None:
            self.minutes = positive("minutes", self.minutes)
        self.started = self.clock()

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def check(self, fn: Callable, time_limit: float = 5.0) -> CheckResult:
        """check(name, fn), with the time since the start; the first pass is remembered as the solve time."""
        result = check(self.name, fn, time_limit)
        result.elapsed_s = self.elapsed_s()
        result.time_budget_s = None if self.minutes is None else 60 * self.minutes
        if result.passed and self.solved_after_s is None:
            self.solved_after_s = result.elapsed_s
        return result

    def __repr__(self) -> str:
        budget = "" if self.minutes is None else f", budget {self.minutes:g} min"
        return f"Timed attempt at {self.name!r}: started{budget}. Call .check(your_function) when ready."


def start(name: str, minutes: float | None = None, clock: Callable[[], float] = time.monotonic) -> Attempt:
    """Open exercise `name` for timed practice, with an optional budget in minutes."""
    return Attempt(name, minutes, clock)

"""The mock interview's chart of what FSRS knows, per notebook: due now, learning, and review by stability.

`topic_summary` counts (pure); `plot_progress` draws the counts on a matplotlib Axes (pure drawing), so both are
unit-tested without a widget.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from qalib.practice.schedule import CardState

# Review cards are split by stability (days until the chance of recall falls to 90%): at FSRS's default desired
# retention of 0.9 that is also about how long the card waits before it is asked again.
STABILITY_BANDS = (7.0, 30.0)
CATEGORIES = ("due now", "learning", "review, stability < 1 week", "review, 1 week to 1 month",
              "review, over a month", "not yet asked")
COLOURS = ("#d95f02", "#fdb863", "#c7e9b4", "#41b6c4", "#225ea8", "#dddddd")  # ColorBrewer; distinct in grey too


@dataclass(frozen=True)
class TopicKnowledge:
    """One notebook's cards: a count per CATEGORIES, and the stability (days) of each card in review."""
    counts: tuple[int, ...]
    review_stability: tuple[float, ...]


def category(state: CardState, now: float) -> str:
    """Which of CATEGORIES a card falls in at `now`."""
    if state.is_new:
        return "not yet asked"
    if state.due <= now:
        return "due now"
    if state.phase != "review":
        return "learning"  # learning, or relearning after a miss: steps of minutes
    short, long = STABILITY_BANDS
    return CATEGORIES[2] if state.stability < short else CATEGORIES[3] if state.stability < long else CATEGORIES[4]


def topic_summary(cards, states: dict[str, CardState], now: float) -> dict[str, TopicKnowledge]:
    """{notebook: TopicKnowledge} for the interview's cards (anything with .id and .notebook), in their order."""
    counts: dict[str, list[int]] = {}
    stability: dict[str, list[float]] = {}
    for c in cards:
        state = states.get(c.id, CardState())
        counts.setdefault(c.notebook, [0] * len(CATEGORIES))[CATEGORIES.index(category(state, now))] += 1
        stability.setdefault(c.notebook, [])
        if state.phase == "review":
            stability[c.notebook].append(state.stability)
    return {n: TopicKnowledge(tuple(counts[n]), tuple(stability[n])) for n in counts}


def days_text(days: float) -> str:
    """A stability as people say it: one decimal below 10 days, whole days above."""
    return f"{days:.1f} days" if days < 10 else f"{days:.0f} days"


def stability_label(days: tuple[float, ...]) -> str:
    """The note beside a notebook's bar: the median stability of its review cards."""
    if not days:
        return ""
    return f"median stability {days_text(statistics.median(days))} ({len(days)} in review)"


def plot_progress(ax, summary: dict[str, TopicKnowledge]) -> None:
    """Stacked horizontal bars: per notebook, the share of its cards in each of CATEGORIES, with the median
    stability of its review cards written beside the bar."""
    import numpy as np

    names = list(summary)
    counts = np.array([summary[n].counts for n in names], dtype=float)
    shares = counts / counts.sum(axis=1, keepdims=True)
    left = np.zeros(len(names))
    for k, label in enumerate(CATEGORIES):
        ax.barh(names, shares[:, k], left=left, color=COLOURS[k], label=label)
        left += shares[:, k]
    for y, n in enumerate(names):
        ax.text(1.01, y, stability_label(summary[n].review_stability), transform=ax.get_yaxis_transform(),
                va="center", fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the notebook's questions")
    ax.set_title("What FSRS knows, per notebook (stability: days until the chance of recall falls to 90%)")
    ax.legend(ncols=3, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)

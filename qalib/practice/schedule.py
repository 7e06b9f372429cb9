"""When each mock-interview question comes back: FSRS (the `fsrs` package, py-fsrs 6), one rating per answer.

A rating is FSRS's Again / Hard / Good / Easy. A follow-up is graded by the student, who presses one of the four;
a multiple-choice question is graded by its Check, and `quiz_rating` maps right to Good and wrong to Again (a
machine cannot tell Hard from Easy). Hard counts as right in the right/seen tally: the answer was recalled.

The scheduler is FSRS with its own defaults (`default_scheduler`): desired retention 0.9, the default parameters,
learning steps of 1 and 10 minutes, a relearning step of 10 minutes, and fuzzing on, as Anki does, so that cards
learnt together do not stay due together. Fuzz draws from Python's global `random`, so a test that needs exact due
dates passes `fsrs.Scheduler(enable_fuzzing=False)` instead.

A card's state is a `CardState`: the student's tally (seen, right) and what FSRS knows (phase, step, stability,
difficulty, due, last review), stored as plain numbers so that the progress file is readable JSON; times are
seconds since the epoch, as `time.time()` gives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Literal, get_args

import fsrs
from fsrs import Rating

Phase = Literal["new", "learning", "review", "relearning"]
PHASES: tuple[str, ...] = get_args(Phase)
RATINGS = {r.name.lower(): r for r in Rating}  # "again", "hard", "good", "easy"
# FSRS has no "new" state: a new card is a Learning card at step 0 with no stability yet.
_FSRS_STATE = {"learning": fsrs.State.Learning, "review": fsrs.State.Review, "relearning": fsrs.State.Relearning}


def default_scheduler() -> fsrs.Scheduler:
    """FSRS as its authors ship it: desired retention 0.9, default parameters and steps, fuzzing on."""
    return fsrs.Scheduler()


def as_rating(value: Rating | str) -> Rating:
    """A rating from a fsrs.Rating or its name, in any case ("again", "Hard", ...). Anything else is an error
    that names the four ratings; a bool is refused, because right/wrong is not a rating (see quiz_rating)."""
    if isinstance(value, Rating):
        return value
    if isinstance(value, str) and value.strip().lower() in RATINGS:
        return RATINGS[value.strip().lower()]
    hint = "; for an auto-graded answer use quiz_rating(correct)" if isinstance(value, bool) else ""
    raise ValueError(f"unknown rating {value!r}: expected one of {', '.join(RATINGS)} or a fsrs.Rating{hint}")


def quiz_rating(correct: bool) -> Rating:
    """An auto-graded answer's rating: right is Good, wrong is Again."""
    return Rating.Good if correct else Rating.Again


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class CardState:
    """One question: the student's tally and FSRS's memory state. Checked here, the one place, so that a progress
    file with a bad card is refused as a whole (and set aside) rather than half read."""
    seen: int = 0                    # answers given
    right: int = 0                   # answers rated Hard, Good or Easy
    phase: Phase = "new"             # new (never answered), learning, review or relearning (missed in review)
    step: int | None = None          # the (re)learning step; None in review and for a new card
    stability: float | None = None   # days until the chance of recall falls to 90%; None while new
    difficulty: float | None = None  # FSRS's 1 (easy) .. 10 (hard); None while new
    due: float = 0.0                 # seconds since the epoch from which it is due again
    last_review: float | None = None

    def __post_init__(self) -> None:
        if not (_is_int(self.seen) and _is_int(self.right) and 0 <= self.right <= self.seen):
            raise ValueError(f"seen and right must be integers with 0 <= right <= seen, got {self.seen!r}, "
                             f"{self.right!r}")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        if not _is_number(self.due):
            raise ValueError(f"due must be a finite number of seconds, got {self.due!r}")
        memory = (self.stability, self.difficulty, self.last_review)
        if self.phase == "new":
            if any(v is not None for v in memory) or self.step is not None:
                raise ValueError(f"a new card has no step, stability, difficulty or last review, got {self!r}")
            return
        if not (_is_number(self.stability) and self.stability > 0):
            raise ValueError(f"stability must be a positive number of days, got {self.stability!r}")
        if not (_is_number(self.difficulty) and 1.0 <= self.difficulty <= 10.0):
            raise ValueError(f"difficulty must lie in FSRS's 1..10, got {self.difficulty!r}")
        if not _is_number(self.last_review):
            raise ValueError(f"last_review must be a finite number of seconds, got {self.last_review!r}")
        if self.phase == "review" and self.step is not None:
            raise ValueError(f"a review card has no step, got {self.step!r}")
        if self.phase != "review" and not (_is_int(self.step) and self.step >= 0):
            raise ValueError(f"a {self.phase} card needs a step >= 0, got {self.step!r}")

    @property
    def is_new(self) -> bool:
        return self.phase == "new"

    def fsrs_card(self) -> fsrs.Card:
        """The same state as py-fsrs's Card (card_id 0: fsrs uses it only to label review logs)."""
        if self.is_new:
            return fsrs.Card(card_id=0, due=_utc(self.due))
        return fsrs.Card(card_id=0, state=_FSRS_STATE[self.phase], step=self.step, stability=self.stability,
                         difficulty=self.difficulty, due=_utc(self.due), last_review=_utc(self.last_review))


def from_fsrs(card: fsrs.Card, seen: int, right: int) -> CardState:
    """A CardState from py-fsrs's Card and the tally."""
    return CardState(seen=seen, right=right, phase=card.state.name.lower(), step=card.step,
                     stability=float(card.stability), difficulty=float(card.difficulty),
                     due=card.due.timestamp(), last_review=card.last_review.timestamp())


def after_answer(state: CardState, rating: Rating | str, now: float, scheduler: fsrs.Scheduler) -> CardState:
    """The card's state after one answer at time `now`, as the scheduler reviews it."""
    rating = as_rating(rating)
    card, _log = scheduler.review_card(state.fsrs_card(), rating, review_datetime=_utc(now))
    return from_fsrs(card, state.seen + 1, state.right + int(rating != Rating.Again))


def next_intervals(state: CardState, now: float, scheduler: fsrs.Scheduler) -> dict[Rating, float]:
    """Seconds until the card would come back after each rating given at `now`: what each rating button promises."""
    return {r: after_answer(state, r, now, scheduler).due - now for r in (Rating.Again, Rating.Hard, Rating.Good,
                                                                          Rating.Easy)}


def interval_text(seconds: float) -> str:
    """An interval as a rating button shows it: '< 1 min', '10 min', '5 h', '3 d', '2 mo'."""
    if not seconds >= 0:
        raise ValueError(f"an interval must be a number of seconds >= 0, got {seconds!r}")
    seconds = round(seconds)  # due dates round-trip through timestamps: a 1-minute step can come back as 59.9999 s
    for unit, size in (("mo", 30 * 86400), ("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return "< 1 min"


def retrievability(state: CardState, now: float, scheduler: fsrs.Scheduler) -> float:
    """FSRS's chance that the student recalls the card at `now` (0 for a new card)."""
    return 0.0 if state.is_new else scheduler.get_card_retrievability(state.fsrs_card(), _utc(now))


def next_card(ids: list[str], states: dict[str, CardState], now: float, order: Callable[[list[str]], list[str]],
              scheduler: fsrs.Scheduler) -> str:
    """The card to ask next.
    1. A due card in (re)learning, earliest due first: its steps are minutes long (a card just missed, or just
       met), and asking it late would skip the step.
    2. A due card in review, the one FSRS thinks most likely forgotten (lowest retrievability) first.
    3. A new card, in `order` (e.g. shuffled).
    4. Nothing due and nothing new: the card that falls due soonest."""
    if not ids:
        raise ValueError("ids must name at least one card, got an empty list")
    blank = CardState()
    seen = [i for i in ids if not states.get(i, blank).is_new]
    due = [i for i in seen if states[i].due <= now]
    stepping = sorted((i for i in due if states[i].phase != "review"), key=lambda i: states[i].due)
    if stepping:
        return stepping[0]
    if due:
        return min(due, key=lambda i: (retrievability(states[i], now, scheduler), states[i].due))
    new = [i for i in ids if states.get(i, blank).is_new]
    if new:
        return order(new)[0]
    return min(seen, key=lambda i: states[i].due)

"""Version 1 of the progress file (Leitner boxes) carried over to FSRS, card by card, so no history is lost.

Version 1 kept, per card, its box (1..5; 0 never written), `due`, `seen` and `right`. A right answer moved a card up
a box, a wrong one back to box 1, and `due` was the answer's time plus its box's fixed wait (LEITNER_WAIT). So the
last answer's time is exactly `due - LEITNER_WAIT[box]`, and the box says how the last answers went. The mapping:

| version 1                 | FSRS phase           | stability (days)             | due, last review           |
|---------------------------|----------------------|------------------------------|----------------------------|
| box 0 (never answered)    | new                  | none                         | none                       |
| box 1, never right        | learning, step 0     | FSRS's first-Again stability | kept; due - 60 s           |
| box 1, right before       | relearning, step 0   | FSRS's first-Again stability | kept; due - 60 s           |
| box b >= 2                | review               | the box's wait: 1, 3, 7, 14  | kept; due - the box's wait |

Why these:
- `seen` and `right` are kept as they are: they are the history the student sees.
- Box 1 means the last answer was wrong, so the card is in a short step, as FSRS puts a card rated Again: a card
  never known is still learning, one known before and then missed is relearning. Its stability is what FSRS gives
  a first Again (w[0], 0.212 days with the default parameters): version 1 kept nothing of what came before the
  miss either.
- A card in box b >= 2 had been answered right and was given LEITNER_WAIT[b] to its next question. FSRS schedules a
  review card at the time when recall falls to the desired retention (0.9), and stability is by definition the
  time at which recall falls to 90%: so stability = the wait means FSRS agrees with the date version 1 chose, and
  keeping `due` moves no card earlier or later. From the next answer on, FSRS's own update takes over.
- Difficulty, FSRS's 1..10, from the share of wrong answers: a card never missed starts where FSRS starts a card
  first rated Good (2.12 with the default parameters), a card always missed where it starts one first rated Again
  (6.41), and linearly between. Both ends come from the scheduler, so other parameters give their own ends.
"""

from __future__ import annotations

from datetime import datetime, timezone

import fsrs
from fsrs import Rating

from qalib.practice.schedule import CardState

VERSION = 1
N_BOXES = 5
# Version 1's BOX_WAIT: seconds a card waited in each box. Frozen here: the migration must read old files as written.
LEITNER_WAIT = {1: 60.0, 2: 86400.0, 3: 3 * 86400.0, 4: 7 * 86400.0, 5: 14 * 86400.0}


def _checked(raw: dict) -> tuple[int, float, int, int]:
    """A version-1 card's (box, due, seen, right), with the checks version 1 made when it read its own file."""
    if not isinstance(raw, dict) or set(raw) != {"box", "due", "seen", "right"}:
        raise ValueError(f"a version-1 card has the fields box, due, seen, right, got {raw!r}")
    box, due, seen, right = raw["box"], raw["due"], raw["seen"], raw["right"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (box, seen, right)) or \
            isinstance(due, bool) or not isinstance(due, (int, float)):
        raise ValueError(f"a version-1 card has fields of the wrong type: {raw!r}")
    if not (0 <= box <= N_BOXES and 0 <= right <= seen):
        raise ValueError(f"a version-1 card has values out of range: {raw!r}")
    return box, float(due), seen, right


def _first_answer(rating: Rating, at: float, scheduler: fsrs.Scheduler) -> fsrs.Card:
    """What the scheduler makes of a new card's first answer: its starting stability and difficulty."""
    card, _log = scheduler.review_card(fsrs.Card(card_id=0), rating,
                                       review_datetime=datetime.fromtimestamp(at, tz=timezone.utc))
    return card


def from_leitner(raw: dict, scheduler: fsrs.Scheduler) -> CardState:
    """One version-1 card as a CardState (the table in this module's docstring)."""
    box, due, seen, right = _checked(raw)
    if box == 0:
        return CardState(seen=seen, right=right)
    last = due - LEITNER_WAIT[box]
    again, good = _first_answer(Rating.Again, last, scheduler), _first_answer(Rating.Good, last, scheduler)
    wrong_share = (seen - right) / seen if seen else 0.0
    difficulty = good.difficulty + (again.difficulty - good.difficulty) * wrong_share
    if box == 1:
        return CardState(seen=seen, right=right, phase="relearning" if right else "learning", step=0,
                         stability=again.stability, difficulty=difficulty, due=due, last_review=last)
    return CardState(seen=seen, right=right, phase="review", stability=LEITNER_WAIT[box] / 86400.0,
                     difficulty=difficulty, due=due, last_review=last)

"""FSRS scheduling of the mock interview: ratings, one answer's effect, the order of questions."""

import fsrs
import pytest
from fsrs import Rating

from qalib.practice.schedule import (CardState, after_answer, as_rating, default_scheduler, from_fsrs, next_card,
                                     quiz_rating, retrievability)

NO_FUZZ = fsrs.Scheduler(enable_fuzzing=False)
MIN, DAY = 60.0, 86400.0
keep = lambda ids: ids  # noqa: E731 - deterministic order for the tests


def test_ratings_are_read_by_name_in_any_case_and_anything_else_is_named():
    assert [as_rating(s) for s in ("again", "Hard", " GOOD ", "easy")] == list(Rating)
    assert as_rating(Rating.Hard) is Rating.Hard
    for bad in ("excellent", "", 3, None):
        with pytest.raises(ValueError, match=f"unknown rating {bad!r}: expected one of again, hard, good, easy"):
            as_rating(bad)
    with pytest.raises(ValueError, match=r"use quiz_rating\(correct\)"):
        as_rating(False)


def test_an_auto_graded_answer_is_good_when_right_and_again_when_wrong():
    assert (quiz_rating(True), quiz_rating(False)) == (Rating.Good, Rating.Again)


def test_the_default_scheduler_is_fsrs_as_shipped():
    s = default_scheduler()
    assert (s.desired_retention, s.enable_fuzzing, s.parameters) == (0.9, True, fsrs.Scheduler().parameters)


def test_a_new_cards_first_answer_sets_its_step_or_its_first_interval():
    new = CardState()
    again, hard, good, easy = (after_answer(new, r, 1000.0, NO_FUZZ) for r in Rating)
    assert (again.phase, again.step, again.due) == ("learning", 0, 1000.0 + 1 * MIN)       # the first step
    assert (hard.phase, hard.step, hard.due) == ("learning", 0, 1000.0 + 5.5 * MIN)       # between the two steps
    assert (good.phase, good.step, good.due) == ("learning", 1, 1000.0 + 10 * MIN)        # the second step
    assert (easy.phase, easy.step, easy.due) == ("review", None, 1000.0 + 8 * DAY)        # w[3] = 8.3 days, rounded
    assert [s.right for s in (again, hard, good, easy)] == [0, 1, 1, 1]  # Hard was recalled: it counts as right
    assert all(s.seen == 1 and s.last_review == 1000.0 for s in (again, hard, good, easy))
    assert again.difficulty > hard.difficulty > good.difficulty > easy.difficulty


def test_a_missed_review_card_relearns_and_loses_stability():
    known = CardState(seen=3, right=3, phase="review", stability=10.0, difficulty=5.0, due=10 * DAY, last_review=0.0)
    missed = after_answer(known, "again", 10 * DAY, NO_FUZZ)
    assert (missed.phase, missed.step, missed.due) == ("relearning", 0, 10 * DAY + 10 * MIN)
    assert missed.stability < known.stability and missed.difficulty > known.difficulty
    recalled = after_answer(known, "good", 10 * DAY, NO_FUZZ)
    assert recalled.phase == "review" and recalled.stability > known.stability
    assert recalled.due - recalled.last_review == pytest.approx(round(recalled.stability) * DAY)  # I = S at R = 0.9


def test_the_state_round_trips_through_fsrs():
    s = after_answer(after_answer(CardState(), "good", 0.0, NO_FUZZ), "good", 700.0, NO_FUZZ)
    assert from_fsrs(s.fsrs_card(), s.seen, s.right) == s


@pytest.mark.parametrize("fields, message", [
    ({"seen": 1, "right": 2}, "0 <= right <= seen"),
    ({"phase": "mastered"}, "phase must be one of"),
    ({"stability": 1.0}, "a new card has no step, stability"),
    ({"seen": 1, "phase": "review", "stability": -1.0, "difficulty": 5.0, "last_review": 0.0}, "stability must be"),
    ({"seen": 1, "phase": "review", "stability": 1.0, "difficulty": 0.5, "last_review": 0.0}, "difficulty must lie"),
    ({"seen": 1, "phase": "review", "stability": 1.0, "difficulty": 5.0, "last_review": 0.0, "step": 0},
     "a review card has no step"),
    ({"seen": 1, "phase": "learning", "stability": 1.0, "difficulty": 5.0, "last_review": 0.0}, "needs a step"),
    ({"due": float("nan")}, "due must be a finite number"),
])
def test_a_card_state_with_a_bad_field_names_it(fields, message):
    with pytest.raises(ValueError, match=message):
        CardState(**fields)


def _review(stability: float, last_review: float, due: float) -> CardState:
    return CardState(seen=1, right=1, phase="review", stability=stability, difficulty=5.0, due=due,
                     last_review=last_review)


def test_next_card_asks_due_steps_first_then_the_review_most_likely_forgotten_then_new_then_the_soonest():
    now = 100 * DAY
    states = {
        "weak": _review(stability=2.0, last_review=now - 10 * DAY, due=now - 8 * DAY),     # 10 days on S = 2
        "strong": _review(stability=30.0, last_review=now - 40 * DAY, due=now - 10 * DAY),  # due longer, but S = 30
        "missed": CardState(seen=1, right=0, phase="learning", step=0, stability=0.2, difficulty=6.4, due=now - MIN,
                            last_review=now - 2 * MIN),
    }
    assert retrievability(states["weak"], now, NO_FUZZ) < retrievability(states["strong"], now, NO_FUZZ)
    ids = ["strong", "weak", "missed", "new"]
    assert next_card(ids, states, now, keep, NO_FUZZ) == "missed"                      # a due step first
    del states["missed"]
    assert next_card(ids, states, now, keep, NO_FUZZ) == "weak"                        # lowest retrievability
    later = {k: _review(1.0, now, now + d) for k, d in (("a", 3 * DAY), ("b", DAY))}
    assert next_card(["a", "b", "new"], later, now, keep, NO_FUZZ) == "new"           # nothing due: a new card
    assert next_card(["a", "b"], later, now, keep, NO_FUZZ) == "b"                    # none new: the soonest
    with pytest.raises(ValueError, match="ids must name at least one card"):
        next_card([], states, now, keep, NO_FUZZ)

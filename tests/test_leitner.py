"""A progress file written by the Leitner-box version (version 1) is carried over to FSRS, not lost.

tests/fixtures/progress_v1_leitner.json was written by that version's own ProgressStore, before FSRS came in
(commit 5e27425): cards from 01_scaled_attention and 12_decoding answered right and wrong so that every box 1-5
occurs, one hour apart, from a fixed clock. WRITTEN is each card's box, seen and right as that version wrote them."""

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import fsrs
import pytest

from qalib.practice import leitner
from qalib.practice.leitner import LEITNER_WAIT, from_leitner
from qalib.practice.progress import ProgressStore

FIXTURE = Path(__file__).parent / "fixtures" / "progress_v1_leitner.json"
NO_FUZZ = fsrs.Scheduler(enable_fuzzing=False)
DAY = 86400.0
# id: (box, seen, right), as the old code wrote them
WRITTEN = {"2defe7812abe": (1, 2, 1), "a057f46ba7f3": (1, 1, 0), "f5b9ac103dac": (2, 1, 1),
           "975c79480a3f": (2, 3, 2), "e0999745bff9": (3, 2, 2), "a12ac4617854": (4, 3, 3),
           "100623a95d72": (5, 6, 6)}


@pytest.fixture
def old_file(tmp_path):
    path = tmp_path / "progress.json"
    shutil.copy(FIXTURE, path)
    return path


def test_the_fixture_is_what_the_old_code_wrote():
    data = json.loads(FIXTURE.read_text())
    assert (data["format"], data["version"]) == ("qalib-progress", leitner.VERSION)
    assert {k: (v["box"], v["seen"], v["right"]) for k, v in data["cards"].items()} == WRITTEN


def test_every_card_keeps_its_history_and_due_date(old_file):
    raw = json.loads(old_file.read_text())["cards"]
    store = ProgressStore(old_file, scheduler=NO_FUZZ)
    states = store.states()
    assert set(states) == set(WRITTEN)
    for card_id, (box, seen, right) in WRITTEN.items():
        s = states[card_id]
        assert (s.seen, s.right, s.due) == (seen, right, raw[card_id]["due"])
        assert s.last_review == raw[card_id]["due"] - LEITNER_WAIT[box]  # the old code's due = answer + wait
    assert "Leitner" in store.notice and "7 questions were carried over" in store.notice
    assert not [p for p in old_file.parent.iterdir() if ".unreadable-" in p.name]  # migrated, not set aside


def test_the_box_maps_to_fsrs_phase_stability_and_difficulty(old_file):
    states = ProgressStore(old_file, scheduler=NO_FUZZ).states()
    first_again = NO_FUZZ.parameters[0]  # FSRS's stability after a first Again
    assert (states["a057f46ba7f3"].phase, states["a057f46ba7f3"].step) == ("learning", 0)      # box 1, never right
    assert (states["2defe7812abe"].phase, states["2defe7812abe"].step) == ("relearning", 0)    # box 1, right before
    assert states["a057f46ba7f3"].stability == states["2defe7812abe"].stability == first_again
    for card_id, days in {"f5b9ac103dac": 1, "975c79480a3f": 1, "e0999745bff9": 3, "a12ac4617854": 7,
                          "100623a95d72": 14}.items():
        assert (states[card_id].phase, states[card_id].step, states[card_id].stability) == ("review", None, days)
    # Difficulty rises with the share of wrong answers, from FSRS's first-Good start to its first-Again start.
    d = {k: states[k].difficulty for k in WRITTEN}
    assert d["100623a95d72"] == d["f5b9ac103dac"] < d["975c79480a3f"] < d["2defe7812abe"] < d["a057f46ba7f3"]
    assert d["100623a95d72"] == pytest.approx(2.1181, abs=1e-4) and d["a057f46ba7f3"] == pytest.approx(6.4133, abs=1e-4)


def test_at_the_old_due_date_fsrs_expects_the_desired_retention(old_file):
    """Why stability = the box's wait: FSRS would have scheduled a review card on the date the old code chose."""
    states = ProgressStore(old_file, scheduler=NO_FUZZ).states()
    for card_id, (box, _, _) in WRITTEN.items():
        if box >= 2:
            s = states[card_id]
            at_due = NO_FUZZ.get_card_retrievability(s.fsrs_card(), datetime.fromtimestamp(s.due, timezone.utc))
            assert at_due == pytest.approx(NO_FUZZ.desired_retention, abs=1e-9)


def test_the_next_answer_writes_version_2_and_keeps_every_card(old_file):
    raw = json.loads(old_file.read_text())["cards"]
    box5 = raw["100623a95d72"]
    store = ProgressStore(old_file, clock=lambda: box5["due"], scheduler=NO_FUZZ)  # the box-5 card, on its due date
    after = store.record("100623a95d72", "good")
    assert (after.seen, after.right, after.phase) == (7, 7, "review") and after.stability > 14  # known: S grows
    data = json.loads(old_file.read_text())
    assert data["version"] == 2 and set(data["cards"]) == set(WRITTEN)
    again = ProgressStore(old_file).states()
    assert again["a12ac4617854"].stability == 7 and again["a12ac4617854"].seen == 3


@pytest.mark.parametrize("raw, message", [
    ({"box": 6, "due": 0.0, "seen": 1, "right": 1}, "out of range"),
    ({"box": 2, "due": 0.0, "seen": 1, "right": 2}, "out of range"),
    ({"box": 2, "due": "soon", "seen": 1, "right": 1}, "wrong type"),
    ({"box": 2, "seen": 1, "right": 1}, "the fields box, due, seen, right"),
])
def test_a_bad_version_1_card_is_refused_with_its_problem(raw, message):
    with pytest.raises(ValueError, match=message):
        from_leitner(raw, NO_FUZZ)


def test_a_box_0_card_is_new():
    assert from_leitner({"box": 0, "due": 0.0, "seen": 0, "right": 0}, NO_FUZZ).is_new

"""The mock interview's progress file: Leitner boxes, atomic writes under filelock's lock, bad files set aside."""

import ast
import json
import multiprocessing as mp
import threading
from pathlib import Path

import pytest

from qalib.practice import progress
from qalib.practice.progress import BOX_WAIT, N_BOXES, PROGRESS_ENV, CardState, ProgressStore, after_answer, next_card, progress_path


def test_a_right_answer_moves_up_a_box_and_a_wrong_one_back_to_box_1():
    s = after_answer(CardState(), True, now=0.0)
    assert (s.box, s.seen, s.right, s.due) == (2, 1, 1, BOX_WAIT[2])
    s = after_answer(s, False, now=10.0)
    assert (s.box, s.seen, s.right, s.due) == (1, 2, 1, 10.0 + BOX_WAIT[1])
    for _ in range(10):
        s = after_answer(s, True, now=0.0)
    assert s.box == N_BOXES
    assert BOX_WAIT[1] < BOX_WAIT[2] < BOX_WAIT[N_BOXES]  # missed cards come back soonest


def test_next_card_asks_due_missed_cards_first_then_new_then_the_soonest():
    keep = lambda ids: ids  # noqa: E731 - deterministic order for the test
    states = {"a": CardState(box=3, due=50.0, seen=2, right=2), "b": CardState(box=1, due=20.0, seen=1)}
    assert next_card(["a", "b", "c"], states, now=10.0, order=keep) == "c"   # nothing due yet: the new card
    assert next_card(["a", "b", "c"], states, now=30.0, order=keep) == "b"   # the missed card is due
    assert next_card(["a", "b", "c"], states, now=60.0, order=keep) == "b"   # both due: lowest box first
    assert next_card(["a", "b"], states, now=0.0, order=keep) == "b"         # none due, none new: soonest
    with pytest.raises(ValueError, match="ids must name at least one card"):
        next_card([], states, 0.0, keep)


def test_progress_survives_a_new_store_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "progress.json"
    store = ProgressStore(path, clock=lambda: 100.0)
    assert store.states() == {} and not path.exists()  # reading creates nothing
    store.record("q1", True)
    store.record("q2", False)
    again = ProgressStore(path).states()
    assert again["q1"].box == 2 and again["q2"].box == 1 and again["q2"].due == 100.0 + BOX_WAIT[1]
    assert sorted(p.name for p in path.parent.iterdir()) == ["progress.json", "progress.json.lock"]
    with pytest.raises(ValueError, match="card_id must be a non-empty string"):
        store.record("", True)


def test_the_path_comes_from_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(PROGRESS_ENV, str(tmp_path / "mine.json"))
    assert progress_path() == tmp_path / "mine.json" and ProgressStore().path == tmp_path / "mine.json"
    monkeypatch.delenv(PROGRESS_ENV)
    assert progress_path().parts[-2:] == (".qalib", "progress.json")


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": "something-else", "cards": {}}),
                                     json.dumps([1, 2]),
                                     json.dumps({"format": "qalib-progress", "version": 1, "cards": {"x": {"box": 9}}}),
                                     json.dumps({"format": "qalib-progress", "version": 1, "cards": {"x": {"colour": 1}}})])
def test_a_file_that_is_not_ours_is_set_aside_never_overwritten(tmp_path, content):
    path = tmp_path / "progress.json"
    path.write_text(content)
    store = ProgressStore(path, clock=lambda: 0.0)
    assert store.states() == {}
    aside = [p for p in tmp_path.iterdir() if ".unreadable-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == content
    assert "could not be read" in store.notice and str(aside[0]) in store.notice
    store.record("q1", True)
    assert ProgressStore(path).states()["q1"].box == 2 and aside[0].read_text() == content


def _answer_many(path: str, card: str, n: int) -> None:
    store = ProgressStore(path)
    for _ in range(n):
        store.record(card, True)


def test_two_processes_answering_at_once_lose_no_answer(tmp_path):
    path = str(tmp_path / "progress.json")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_answer_many, args=(path, card, 40)) for card in ("shared", "shared", "own")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    states = ProgressStore(path).states()
    assert states["shared"].seen == 80 and states["own"].seen == 40


def test_two_threads_sharing_one_store_lose_no_answer(tmp_path):
    """One kernel, two callbacks at once: filelock's lock is per thread, so one store serialises them too."""
    store = ProgressStore(tmp_path / "progress.json")
    threads = [threading.Thread(target=lambda: [store.record("shared", True) for _ in range(30)]) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert store.states()["shared"].seen == 60 and store.states()["shared"].right == 60


def test_progress_has_no_locking_code_of_its_own():
    """The lock is filelock's (Linux, macOS and Windows); progress.py imports no fcntl or msvcrt."""
    tree = ast.parse(Path(progress.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "filelock" in imported and not imported & {"fcntl", "msvcrt"}

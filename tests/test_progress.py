"""The mock interview's progress file: FSRS states, atomic writes under filelock's lock, bad files set aside."""

import ast
import json
import multiprocessing as mp
import threading
from pathlib import Path

import fsrs
import pytest

from qalib.practice import progress
from qalib.practice.progress import PROGRESS_ENV, ProgressStore, progress_path

NO_FUZZ = fsrs.Scheduler(enable_fuzzing=False)


def test_progress_survives_a_new_store_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "progress.json"
    store = ProgressStore(path, clock=lambda: 100.0, scheduler=NO_FUZZ)
    assert store.states() == {} and not path.exists()  # reading creates nothing
    store.record("q1", "good")
    store.record("q2", fsrs.Rating.Again)
    again = ProgressStore(path).states()
    assert (again["q1"].phase, again["q1"].step, again["q1"].due) == ("learning", 1, 100.0 + 600)  # 2nd step: 10 min
    assert (again["q2"].phase, again["q2"].step, again["q2"].due) == ("learning", 0, 100.0 + 60)   # 1st step: 1 min
    assert (again["q1"].seen, again["q1"].right, again["q2"].seen, again["q2"].right) == (1, 1, 1, 0)
    assert json.loads(path.read_text())["version"] == progress.VERSION
    assert sorted(p.name for p in path.parent.iterdir()) == ["progress.json", "progress.json.lock"]
    with pytest.raises(ValueError, match="card_id must be a non-empty string"):
        store.record("", "good")


def test_a_bad_rating_is_refused_by_name_and_changes_nothing(tmp_path):
    path = tmp_path / "progress.json"
    store = ProgressStore(path, scheduler=NO_FUZZ)
    store.record("q1", "Easy")
    before = path.read_text()
    with pytest.raises(ValueError, match=r"unknown rating 'excellent': expected one of again, hard, good, easy"):
        store.record("q1", "excellent")
    with pytest.raises(ValueError, match=r"quiz_rating\(correct\)"):
        store.record("q1", True)  # right/wrong is not a rating: the interview maps it with quiz_rating
    assert path.read_text() == before


def test_the_path_comes_from_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(PROGRESS_ENV, str(tmp_path / "mine.json"))
    assert progress_path() == tmp_path / "mine.json" and ProgressStore().path == tmp_path / "mine.json"
    monkeypatch.delenv(PROGRESS_ENV)
    assert progress_path().parts[-2:] == (".qalib", "progress.json")


def test_the_store_uses_fsrs_defaults_unless_given_a_scheduler(tmp_path):
    store = ProgressStore(tmp_path / "p.json")
    assert store.scheduler.desired_retention == 0.9 and store.scheduler.enable_fuzzing
    assert store.scheduler.parameters == fsrs.Scheduler().parameters
    assert ProgressStore(tmp_path / "p.json", scheduler=NO_FUZZ).scheduler is NO_FUZZ


V2 = {"format": "qalib-progress", "version": 2}
GOOD_CARD = {"seen": 1, "right": 1, "phase": "review", "step": None, "stability": 8.3, "difficulty": 1.0,
             "due": 0.0, "last_review": 0.0}


@pytest.mark.parametrize("content", [
    "{not json",
    json.dumps({"format": "something-else", "cards": {}}),
    json.dumps([1, 2]),
    json.dumps({"format": "qalib-progress", "version": 3, "cards": {}}),
    json.dumps({"format": "qalib-progress", "version": 1, "cards": {"x": {"box": 9}}}),
    json.dumps({"format": "qalib-progress", "version": 1, "cards": {"x": {"colour": 1}}}),
    json.dumps({**V2, "cards": {"x": {**GOOD_CARD, "phase": "mastered"}}}),
    json.dumps({**V2, "cards": {"x": {**GOOD_CARD, "right": 2}}}),
    json.dumps({**V2, "cards": {"x": {**GOOD_CARD, "difficulty": 11.0}}}),
    json.dumps({**V2, "cards": {"x": {**GOOD_CARD, "colour": 1}}}),
    json.dumps({**V2, "cards": {"x": 7}}),
])
def test_a_file_that_is_not_ours_is_set_aside_never_overwritten(tmp_path, content):
    path = tmp_path / "progress.json"
    path.write_text(content)
    store = ProgressStore(path, clock=lambda: 0.0, scheduler=NO_FUZZ)
    assert store.states() == {}
    aside = [p for p in tmp_path.iterdir() if ".unreadable-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == content
    assert "could not be read" in store.notice and str(aside[0]) in store.notice
    store.record("q1", "good")
    assert ProgressStore(path).states()["q1"].seen == 1 and aside[0].read_text() == content


def test_a_version_2_file_reads_back_as_written(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({**V2, "cards": {"x": GOOD_CARD}}))
    store = ProgressStore(path)
    assert store.states()["x"].stability == 8.3 and store.notice is None


def _answer_many(path: str, card: str, n: int) -> None:
    store = ProgressStore(path)
    for _ in range(n):
        store.record(card, "good")


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
    threads = [threading.Thread(target=lambda: [store.record("shared", "hard") for _ in range(30)]) for _ in range(2)]
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

"""What a student knows of each mock-interview question, kept in one local file across kernels and restarts.

Each answer is an FSRS rating; qalib.practice.schedule turns the card's history into its next due date. The file
holds one CardState per question (the student's tally and FSRS's memory state).

The file is ~/.qalib/progress.json, or the path in $QALIB_PROGRESS. Every write is atomic (a temporary file in the
same folder, then os.replace) and happens under an exclusive lock (`filelock`, on a side file: flock on Linux and
macOS, LockFileEx on Windows), re-reading the file first, so two kernels answering at once lose no answer. A file
that is not ours (bad JSON, another format, a card that fails its checks) is never overwritten: it is renamed aside
and the store says so in `notice`.

Version 1 files (Leitner boxes, written before FSRS) are read through qalib.practice.leitner, and become version 2
at the next answer; `notice` says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import fsrs
from filelock import FileLock

from qalib.practice import leitner
from qalib.practice.schedule import CardState, after_answer, as_rating, default_scheduler

PROGRESS_ENV = "QALIB_PROGRESS"
FORMAT = "qalib-progress"
VERSION = 2


def progress_path() -> Path:
    """Where progress lives: $QALIB_PROGRESS if set, else ~/.qalib/progress.json."""
    override = os.environ.get(PROGRESS_ENV)
    return Path(override).expanduser() if override else Path.home() / ".qalib" / "progress.json"


class ProgressStore:
    """The progress file: read with `states()`, written one answer at a time with `record()`.

    `scheduler` is FSRS with its defaults unless given (qalib.practice.schedule.default_scheduler); tests pass one
    with fuzzing off so that due dates are exact."""

    def __init__(self, path: Path | str | None = None, clock: Callable[[], float] = time.time,
                 scheduler: fsrs.Scheduler | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else progress_path()
        self.clock = clock
        self.scheduler = scheduler if scheduler is not None else default_scheduler()
        self.notice: str | None = None  # set when a bad file was set aside, or an old one carried over
        # The data file itself is replaced on every write, so it cannot carry the lock: a side file does.
        self._lock = FileLock(self.path.with_name(self.path.name + ".lock"))

    # -- reading ---------------------------------------------------------------------------------------------
    def states(self) -> dict[str, CardState]:
        """Every card's state; {} when there is no file yet (nothing is created by reading). A file that is not
        ours is set aside (see notice)."""
        if not self.path.exists():
            return {}
        with self._locked():
            return self._read()

    def _read(self) -> dict[str, CardState]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            cards = data["cards"]
            if data.get("version") == leitner.VERSION:
                states = {str(k): leitner.from_leitner(v, self.scheduler) for k, v in cards.items()}
                self.notice = (f"Your progress file {self.path} was written by the Leitner-box version; its "
                               f"{len(states)} questions were carried over to FSRS scheduling with their answer "
                               f"counts (the file is saved in the new format from your next answer on).")
                return states
            if data.get("version") != VERSION:
                raise ValueError(f"not a {FORMAT} version {leitner.VERSION} or {VERSION} file")
            return {str(k): CardState(**v) for k, v in cards.items()}
        except (ValueError, TypeError, KeyError, AttributeError) as err:  # JSONDecodeError is a ValueError
            self._set_aside(err)
            return {}

    def _set_aside(self, err: Exception) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
        aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}-{n}")
        os.replace(self.path, aside)
        self.notice = (f"Your progress file {self.path} could not be read ({err}); it was kept as {aside} "
                       f"and a new one is started.")

    # -- writing ---------------------------------------------------------------------------------------------
    def record(self, card_id: str, rating: fsrs.Rating | str) -> CardState:
        """Add one answer, rated Again / Hard / Good / Easy: re-read the file under the lock, let the scheduler
        update the card, write the file atomically."""
        if not isinstance(card_id, str) or not card_id:
            raise ValueError(f"card_id must be a non-empty string, got {card_id!r}")
        rating = as_rating(rating)  # before the lock: a bad rating changes nothing
        with self._locked():
            states = self._read()
            states[card_id] = after_answer(states.get(card_id, CardState()), rating, self.clock(), self.scheduler)
            self._write(states)
            return states[card_id]

    def _write(self, states: dict[str, CardState]) -> None:
        data = {"format": FORMAT, "version": VERSION, "cards": {k: asdict(v) for k, v in sorted(states.items())}}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            yield

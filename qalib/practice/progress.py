"""What a student got right and wrong in the mock interview, kept in one local file across kernels and restarts.

Spaced repetition with Leitner boxes: a right answer moves a card up one box, a wrong one sends it back to box 1,
and each box waits longer before the card is due again (BOX_WAIT). Missed questions therefore come back soonest.

The file is ~/.qalib/progress.json, or the path in $QALIB_PROGRESS. Every write is atomic (a temporary file in the
same folder, then os.replace) and happens under an exclusive lock (`filelock`, on a side file: flock on Linux and
macOS, LockFileEx on Windows), re-reading the file first, so two kernels answering at once lose no answer. A file
that is not ours (bad JSON, another format) is never overwritten: it is renamed aside and the store says so in
`notice`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from filelock import FileLock

PROGRESS_ENV = "QALIB_PROGRESS"
FORMAT = "qalib-progress"
VERSION = 1
N_BOXES = 5
# Seconds a card waits in each box before it is due again. Box 1 (just missed) comes back within the session.
BOX_WAIT = {1: 60.0, 2: 86400.0, 3: 3 * 86400.0, 4: 7 * 86400.0, 5: 14 * 86400.0}


def progress_path() -> Path:
    """Where progress lives: $QALIB_PROGRESS if set, else ~/.qalib/progress.json."""
    override = os.environ.get(PROGRESS_ENV)
    return Path(override).expanduser() if override else Path.home() / ".qalib" / "progress.json"


@dataclass(frozen=True)
class CardState:
    box: int = 0          # 0: never answered; 1..N_BOXES: Leitner box
    due: float = 0.0      # time (seconds since the epoch) from which the card is due again
    seen: int = 0
    right: int = 0


def after_answer(state: CardState, correct: bool, now: float) -> CardState:
    """The card's state after one answer: up a box if right (a new card known at once starts in box 2, at most
    N_BOXES), back to box 1 if wrong. Box 1 therefore holds exactly the cards missed last time."""
    box = min(max(state.box, 1) + 1, N_BOXES) if correct else 1
    return CardState(box=box, due=now + BOX_WAIT[box], seen=state.seen + 1, right=state.right + int(correct))


def next_card(ids: list[str], states: dict[str, CardState], now: float, order: Callable[[list[str]], list[str]]) -> str:
    """The card to ask next: a due card from the lowest box first (missed ones), then a new card (in `order`,
    e.g. shuffled), then the card that falls due soonest."""
    if not ids:
        raise ValueError("ids must name at least one card, got an empty list")
    seen = [i for i in ids if states.get(i, CardState()).box > 0]
    due = sorted((i for i in seen if states[i].due <= now), key=lambda i: (states[i].box, states[i].due))
    if due:
        return due[0]
    new = [i for i in ids if states.get(i, CardState()).box == 0]
    if new:
        return order(new)[0]
    return min(seen, key=lambda i: states[i].due)


def _state(raw: dict) -> CardState:
    """A card's state read from the file, checked: a file that fails here is treated as unreadable."""
    state = CardState(**raw)
    ints = (state.box, state.seen, state.right)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints) or not isinstance(state.due, (int, float)):
        raise ValueError(f"a card has fields of the wrong type: {raw!r}")
    if not (0 <= state.box <= N_BOXES and 0 <= state.right <= state.seen):
        raise ValueError(f"a card has values out of range: {raw!r}")
    return state


class ProgressStore:
    """The progress file: read with `states()`, written one answer at a time with `record()`."""

    def __init__(self, path: Path | str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path).expanduser() if path is not None else progress_path()
        self.clock = clock
        self.notice: str | None = None  # set when a bad file was set aside
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
            if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
                raise ValueError(f"not a {FORMAT} version {VERSION} file")
            return {str(k): _state(v) for k, v in data["cards"].items()}
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
    def record(self, card_id: str, correct: bool) -> CardState:
        """Add one answer: re-read the file under the lock, update the card, write the file atomically."""
        if not isinstance(card_id, str) or not card_id:
            raise ValueError(f"card_id must be a non-empty string, got {card_id!r}")
        with self._locked():
            states = self._read()
            states[card_id] = after_answer(states.get(card_id, CardState()), bool(correct), self.clock())
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

"""Reference runs: each lesson from training, stated from a run big enough to carry it, stored with its provenance.

A notebook trains its models live, sized for seconds on 2 CPU cores; that budget cannot carry every lesson. A
reference run uses the same library functions at the budget the lesson needs (trained until the task is learned, or
the recipe the question is about), with enough seeds for the statistic the text states, and at a ladder of budgets
(the live one, 4x, the reference) and initialisations, so the notebook can show how a conclusion changes with
budget. `make reference NB=01` (qalib.tools.reference) runs them and writes references/<notebook>/<name>.json; the
notebook reads the file and computes its checks on the stored numbers.

    spec = ReferenceSpec("01_scaled_attention", "ablation", run_one_seed, seeds=30, rungs=(Rung("live", steps=200),
                         Rung("4x", steps=800), Rung("reference", steps=3200)))
    ref = load("01_scaled_attention", "ablation")       # a Reference: its rungs, seeds and provenance
    ref.rung("reference").values("final_loss", "inv_dk")   # (n_seeds,): one value per seed

A spec's `run(seed, **rung.kwargs)` trains whatever one seed of one rung needs and returns plain numbers (dicts,
lists, floats): the file holds metrics, not weights. QALIB_REFERENCES=<folder> reads (and the runner writes) another
folder: a regeneration with other seeds (QALIB_SEED_OFFSET) goes there, never over the stored files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REFERENCES_ENV = "QALIB_REFERENCES"
STORED = Path(__file__).resolve().parents[2] / "references"  # the checkout's references/, committed


def folder() -> Path:
    """Where references are read from: $QALIB_REFERENCES if set, else the checkout's references/."""
    value = os.environ.get(REFERENCES_ENV, "").strip()
    return Path(value) if value else STORED


@dataclass(frozen=True, init=False)
class Rung:
    """One budget (or initialisation) of a reference: Rung("4x", steps=800) passes steps=800 to its run function."""

    name: str
    kwargs: dict

    def __init__(self, name: str, **kwargs) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a rung needs a name, e.g. 'live', '4x', 'reference'")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "kwargs", dict(kwargs))


@dataclass(frozen=True)
class ReferenceSpec:
    """What a reference runs: run(seed, **rung.kwargs) for `seeds` seeds (shifted by QALIB_SEED_OFFSET) at every rung.
    lesson: the sentence the reference carries, for the runner's report. claims(reference): the checks the notebook
    makes on the stored numbers (qalib.check calls); the runner makes them on every regeneration too."""

    notebook: str
    name: str
    run: Callable[..., dict]
    seeds: int
    rungs: tuple[Rung, ...]
    lesson: str = ""
    claims: Callable[["Reference"], None] | None = None

    def __post_init__(self) -> None:
        if not self.rungs or len({r.name for r in self.rungs}) != len(self.rungs):
            raise ValueError(f"{self.notebook}/{self.name}: rungs must be non-empty with distinct names")
        if not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(f"{self.notebook}/{self.name}: seeds must be an int >= 2 (a statistic needs a spread)")

    @property
    def path(self) -> Path:
        return folder() / self.notebook / f"{self.name}.json"

    def config(self) -> dict:
        """The spec as stored with the results: what a change to the spec makes stale."""
        return {"notebook": self.notebook, "name": self.name, "run": f"{self.run.__module__}.{self.run.__qualname__}",
                "seeds": self.seeds, "rungs": {r.name: dict(r.kwargs) for r in self.rungs}}


@dataclass
class RungResult:
    """One rung's runs, one per seed: runs[i] is run(seeds[i], **kwargs)."""

    name: str
    kwargs: dict
    seeds: list[int]
    runs: list[dict]

    def values(self, *keys: str) -> np.ndarray:
        """(n_seeds, ...) array of runs[i][keys[0]][keys[1]]...: one entry per seed."""
        out = []
        for run in self.runs:
            x = run
            for k in keys:
                if not isinstance(x, dict) or k not in x:
                    raise KeyError(f"rung {self.name!r}: no {'/'.join(keys)} in its runs (keys here: "
                                   f"{sorted(x) if isinstance(x, dict) else type(x).__name__})")
                x = x[k]
            out.append(x)
        return np.asarray(out, dtype=float)


@dataclass
class Reference:
    notebook: str
    name: str
    config: dict
    rungs: dict[str, RungResult]
    provenance: dict

    def rung(self, name: str) -> RungResult:
        if name not in self.rungs:
            raise KeyError(f"{self.notebook}/{self.name} has no rung {name!r}; it has {list(self.rungs)}")
        return self.rungs[name]

    def to_json(self) -> dict:
        return {"notebook": self.notebook, "name": self.name, "config": self.config, "provenance": self.provenance,
                "rungs": {r.name: {"kwargs": r.kwargs, "seeds": r.seeds, "runs": r.runs} for r in self.rungs.values()}}

    @classmethod
    def from_json(cls, d: dict) -> "Reference":
        rungs = {name: RungResult(name, r["kwargs"], r["seeds"], r["runs"]) for name, r in d["rungs"].items()}
        return cls(d["notebook"], d["name"], d["config"], rungs, d["provenance"])


def load(notebook: str, name: str) -> Reference:
    """The stored reference `name` of `notebook`, from folder(). FileNotFoundError says how to make it."""
    path = folder() / notebook / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `make reference NB={notebook[:2]}` to generate it")
    return Reference.from_json(json.loads(path.read_text()))


def save(ref: Reference, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ref.to_json(), indent=1, sort_keys=False) + "\n")
    tmp.replace(path)  # atomic: a killed run leaves the old file or the new one, never half of one

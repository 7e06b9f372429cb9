"""Reference runs (qalib.lab.reference, qalib.tools.reference): the stored files are what the code produces, they go
stale when the code they ran changes, and the runner resumes, records provenance and fingerprints what ran."""

import json
import textwrap

import numpy as np
import pytest

from qalib.lab import reference as R
from qalib.lab.stats import paired_interval
from qalib.tools import fingerprint as FP
from qalib.tools.reference import all_specs, restamp, run_spec, stored_config

CALLS = []


def fake_run(seed: int, steps: int, fail_on: int | None = None) -> dict:
    """A reference's run function: calls library code (so its fingerprint has an entry), returns plain numbers."""
    if fail_on == seed:
        raise RuntimeError(f"seed {seed} fails")
    r = paired_interval(np.arange(3) * seed, np.ones(3) * steps)
    return {"mean": r["mean"], "steps": steps, "curve": np.linspace(0, seed, 3)}


def test_a_spec_runs_every_rung_and_seed_and_records_provenance(tmp_path):
    spec = R.ReferenceSpec("99_test", "fake", fake_run, seeds=3, rungs=(R.Rung("short", steps=2), R.Rung("long", steps=8)))
    path = run_spec(spec, tmp_path, workers=1)
    ref = R.Reference.from_json(json.loads(path.read_text()))
    assert list(ref.rungs) == ["short", "long"] and ref.rung("long").seeds == [0, 1, 2]
    assert ref.rung("long").values("steps").tolist() == [8, 8, 8]
    assert ref.rung("short").values("curve").shape == (3, 3)
    assert ref.config == json.loads(json.dumps(spec.config()))
    prov = ref.provenance
    assert prov["seed_offset"] == 0 and prov["versions"]["torch"] and prov["device"] == "cpu"
    assert "qalib/lab/stats.py" in prov["code"] and "paired_interval" in prov["code"]["qalib/lab/stats.py"]["functions"]
    assert FP.changed(prov["code"]) == []
    assert not list((tmp_path / ".partial" / "99_test" / "fake").glob("*.json"))  # the finished units are cleared
    with pytest.raises(KeyError, match="no rung 'medium'"):
        ref.rung("medium")
    with pytest.raises(KeyError, match="no nothing"):
        ref.rung("long").values("nothing")


def test_a_rung_name_need_not_be_a_file_name(tmp_path):
    spec = R.ReferenceSpec("99_test", "odd", fake_run, seeds=2, rungs=(R.Rung("init d^-1/2, 4x", steps=2),))
    ref = R.Reference.from_json(json.loads(run_spec(spec, tmp_path, workers=1).read_text()))
    assert ref.rung("init d^-1/2, 4x").values("steps").tolist() == [2, 2]


def test_an_interrupted_run_resumes_with_the_units_it_finished(tmp_path):
    failing = R.ReferenceSpec("99_test", "fake", fake_run, seeds=3, rungs=(R.Rung("r", steps=2, fail_on=2),))
    with pytest.raises(RuntimeError, match="seed 2 fails"):
        run_spec(failing, tmp_path, workers=1)
    kept = sorted(p.name for p in (tmp_path / ".partial" / "99_test" / "fake").glob("*.json"))
    assert kept == ["r__0.json", "r__1.json"]
    (tmp_path / ".partial" / "99_test" / "fake" / "r__0.json").write_text(json.dumps(
        {"result": {"mean": -1.0}, "functions": [], "seconds": 0.0}))  # a kept unit is read, not run again
    fixed = R.ReferenceSpec("99_test", "fake", fake_run, seeds=3, rungs=(R.Rung("r", steps=2, fail_on=99),))
    ref = R.Reference.from_json(json.loads(run_spec(fixed, tmp_path, workers=1).read_text()))
    assert ref.rung("r").values("mean")[0] == -1.0 and [run["steps"] for run in ref.rung("r").runs[1:]] == [2, 2]


SHIFT = [0.0]  # what fake_shifted_run adds: a code change that moves the numbers, or not


def fake_shifted_run(seed: int, steps: int) -> dict:
    return {"value": seed * steps + SHIFT[0]}


def test_restamp_takes_a_new_fingerprint_only_when_the_first_seed_of_every_rung_regenerates_equal(tmp_path):
    spec = R.ReferenceSpec("99_test", "shift", fake_shifted_run, seeds=3, rungs=(R.Rung("a", steps=2), R.Rung("b", steps=5)))
    path = run_spec(spec, tmp_path / "stored", workers=1)
    stored = json.loads(path.read_text())
    stored["provenance"]["code"] = {"qalib/gone.py": {"functions": ["f"], "sha256": "0"}}  # as if the code changed
    path.write_text(json.dumps(stored))
    SHIFT[0] = 0.5  # ... and it moves the numbers: nothing is written
    diffs = restamp(spec, tmp_path / "stored", 1, tmp_path / "scratch1")
    assert diffs == ["a: seed 0 gives other numbers", "b: seed 0 gives other numbers"]
    assert json.loads(path.read_text()) == stored
    SHIFT[0] = 0.0  # a change that moves nothing: the new fingerprint, and a note saying why
    assert restamp(spec, tmp_path / "stored", 1, tmp_path / "scratch2") == []
    after = json.loads(path.read_text())
    assert after["rungs"] == stored["rungs"] and "qalib/gone.py" not in after["provenance"]["code"]
    assert FP.changed(after["provenance"]["code"]) == []
    assert "regenerated" in after["provenance"]["restamped"][0]["evidence"]


@pytest.fixture(autouse=True)
def _no_shift():
    yield
    SHIFT[0] = 0.0


def test_specs_are_checked_and_a_missing_reference_says_how_to_make_it(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="seeds must be an int >= 2"):
        R.ReferenceSpec("99_test", "x", fake_run, seeds=1, rungs=(R.Rung("a"),))
    with pytest.raises(ValueError, match="distinct names"):
        R.ReferenceSpec("99_test", "x", fake_run, seeds=2, rungs=(R.Rung("a"), R.Rung("a")))
    with pytest.raises(ValueError, match="needs a name"):
        R.Rung("")
    monkeypatch.setenv(R.REFERENCES_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make reference NB=01"):
        R.load("01_scaled_attention", "ablation")


# -- the fingerprint: what ran counts, what did not run does not -------------------------------------------------
SOURCE = textwrap.dedent('''\
    """A module."""
    import math

    LIMIT = 3  # a constant


    class Config:
        """Doc."""
        steps: int = 10

        def check(self):
            return self.steps > 0


    def used(x):
        """Doc."""
        return x + LIMIT  # why


    def unused(x):
        return x * 2
    ''')


def _print(tmp_path, source, executed=frozenset({"used", "Config.check"})):
    path = tmp_path / "mod.py"
    path.write_text(source)
    return FP.file_fingerprint(path, set(executed))


@pytest.mark.parametrize("edit, stale", [
    (("return x * 2", "return x * 3"), False),               # a function that did not run
    (("def unused(x):", "def unused(x, y=1):"), False),       # its signature
    (("\n\n\ndef used", "\n\n\ndef plot(fig):\n    return fig\n\n\ndef used"), False),  # a new function
    (("import math", "import cmath"), False),                 # an import (what it brings counts where it runs)
    (("# why", "# because"), False),                          # a comment
    (('"""Doc."""\n    return x', '"""Other doc."""\n    return x'), False),  # a docstring
    (("return x + LIMIT", "return x - LIMIT"), True),         # a function that ran
    (("LIMIT = 3", "LIMIT = 4"), True),                       # a module constant the code reads
    (("LIMIT = 3", "LIMIT = 3\nLABELS = {1: 'one'}"), False),  # a new constant nothing that ran reads
    (("steps: int = 10", "steps: int = 11"), True),           # a class field's default
    (("return self.steps > 0", "return self.steps >= 0"), True),  # a method that ran
])
def test_the_fingerprint_changes_exactly_when_code_that_ran_changes(tmp_path, edit, stale):
    before = _print(tmp_path, SOURCE)
    old, new = edit
    assert old in SOURCE
    assert (_print(tmp_path, SOURCE.replace(old, new, 1)) != before) == stale


def test_the_call_recorder_sees_qalib_functions_only():
    with FP.CallRecorder() as calls:
        paired_interval([1.0, 2.0], [0.0, 0.5])
        sorted([3, 1])
    assert ("qalib/lab/stats.py", "paired_interval") in calls.functions
    assert all(f.startswith("qalib/") for f, _ in calls.functions)


# -- the stored references: fresh, and what their specs say ------------------------------------------------------
STORED = sorted(R.STORED.glob("*/*.json"))


def test_every_spec_has_its_stored_reference_and_every_file_a_spec():
    specs = {(s.notebook, s.name) for s in all_specs()}
    files = {(p.parent.name, p.stem) for p in STORED}
    assert specs == files, f"run `make reference NB=..` for {sorted(specs - files)}; no spec for {sorted(files - specs)}"


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_stored_reference_is_fresh(path):
    """Its spec is the one in the code, and the code it ran has not changed since it was generated."""
    ref = R.Reference.from_json(json.loads(path.read_text()))
    spec = next(s for s in all_specs() if (s.notebook, s.name) == (ref.notebook, ref.name))
    assert ref.config == stored_config(spec), (
        f"{path}: the spec changed since it was generated; run `make reference NB={ref.notebook[:2]}`")
    stale = FP.changed(ref.provenance["code"])
    assert not stale, f"{path} is stale: {'; '.join(stale)}; run `make reference NB={ref.notebook[:2]}`"
    assert ref.provenance["seed_offset"] == 0, "the stored references are the offset-0 seeds"
    assert all(len(r.runs) == len(r.seeds) == spec.seeds for r in ref.rungs.values())


@pytest.mark.parametrize("path", STORED[:1], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_regenerating_a_reference_gives_its_stored_numbers(path, tmp_path):
    """End to end, through the runner: the first seed of every rung, run again, gives the stored runs (to float
    precision on the machine and torch that made them; elsewhere other CPU kernels change a run's path, so each
    value must lie within the stored seeds' spread)."""
    stored = R.Reference.from_json(json.loads(path.read_text()))
    spec = next(s for s in all_specs() if (s.notebook, s.name) == (stored.notebook, stored.name))
    again = R.Reference.from_json(json.loads(run_spec(spec, tmp_path, workers=1, first_seeds=1).read_text()))
    here = stored.provenance["versions"] == again.provenance["versions"]
    for name, rung in again.rungs.items():
        assert rung.seeds == stored.rung(name).seeds[:1]
        new, old = _numbers(rung.runs[0]), _numbers(stored.rung(name).runs[0])
        assert new.keys() == old.keys()
        for key in new:
            if here:
                assert new[key] == pytest.approx(old[key], rel=1e-4, abs=1e-6), f"{name}: {key}"
            else:
                spread = np.array([_numbers(r)[key] for r in stored.rung(name).runs], dtype=float)
                if not (np.isfinite(spread).all() and np.isfinite(new[key])):
                    continue  # "never solved" and the like: no spread to compare with
                lo, hi = spread.min(), spread.max()
                assert lo - (hi - lo) - 1e-6 <= new[key] <= hi + (hi - lo) + 1e-6, f"{name}: {key}"


def _numbers(run, prefix="") -> dict:
    """The scalar numbers of a run's result, by path (lists of numbers are curves: their last value)."""
    out = {}
    for k, v in run.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_numbers(v, key + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
        elif v is None:
            out[key] = float("inf")
        elif isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
            out[key + "[-1]"] = float(v[-1])
    return out

"""make reference: run the notebooks' reference experiments and store their results with provenance.

    python -m qalib.tools.reference 01                 # every reference of notebook 01 (NB=01 in make)
    python -m qalib.tools.reference 01 --only ablation  # one of them
    QALIB_SEED_OFFSET=7919 python -m qalib.tools.reference 01   # other seeds, written to build/references-offset-7919/
    python -m qalib.tools.reference 01 --restamp       # after a change that should not move any number: prove it

Each reference (qalib.lab.reference.ReferenceSpec, listed in the notebook package's experiment.REFERENCES) is a grid
of units, one per (rung, seed). Finished units are kept under <out>/.partial/, so an interrupted run resumes where it
stopped. The units run side by side on the CPU cores, one core each (fork), also on a machine with a GPU: the models
are tiny, and a regenerated file should give the same numbers wherever it is made. The first seed of
every rung runs under qalib.tools.fingerprint.CallRecorder: the code that ran is fingerprinted into the file's
provenance, and tests/test_references.py fails when that code changed since. When every unit is done the file is
written, and the spec's `claims` (if any) are checked on it: the ✓ the notebook prints must hold on these seeds too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import numpy as np
import torch
from tqdm.auto import tqdm

from qalib.lab.reference import REFERENCES_ENV, STORED, Reference, ReferenceSpec, RungResult, save
from qalib.lab.seeding import seed_offset, seeds
from qalib.notebook.catalog import CATALOG
from qalib.tools.fingerprint import CallRecorder, fingerprint


def specs_of(notebook_prefix: str) -> list[ReferenceSpec]:
    """The REFERENCES of the notebook whose file name starts with the prefix ("01" or "01_scaled_attention")."""
    entries = [e for e in CATALOG if e.file.startswith(notebook_prefix)]
    if len(entries) != 1:
        raise SystemExit(f"NB={notebook_prefix!r} names {len(entries)} notebooks; give its number, e.g. NB=01")
    module = importlib.import_module(entries[0].experiment)
    return list(getattr(module, "REFERENCES", []))


def all_specs() -> list[ReferenceSpec]:
    return [s for e in CATALOG for s in getattr(importlib.import_module(e.experiment), "REFERENCES", [])]


def default_out() -> Path:
    """The stored folder at offset 0; another offset never overwrites it."""
    if os.environ.get(REFERENCES_ENV, "").strip():
        return Path(os.environ[REFERENCES_ENV])
    k = seed_offset()
    return STORED if k == 0 else STORED.parent / "build" / f"references-offset-{k}"


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, torch.Tensor):
        return _jsonable(x.detach().cpu().tolist())
    if isinstance(x, (np.floating, float)):
        return round(float(x), 7)  # 7 decimals: files stay small, far below any spread we read
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


def stored_config(spec: ReferenceSpec) -> dict:
    """The spec's config as the file stores it (numbers rounded as every stored number is): what staleness compares."""
    return json.loads(json.dumps(_jsonable(spec.config())))


def _run_unit(args: tuple) -> tuple[dict, list, float]:
    """One (rung, seed): run(seed, **kwargs) -> (result as JSON values, functions that ran if traced, seconds)."""
    spec, rung_name, seed, traced = args
    rung = next(r for r in spec.rungs if r.name == rung_name)
    torch.set_num_threads(1)
    start = time.perf_counter()
    if traced:
        with CallRecorder() as calls:
            result = spec.run(seed, **rung.kwargs)
        return _jsonable(result), sorted(calls.functions), time.perf_counter() - start
    result = spec.run(seed, **rung.kwargs)
    return _jsonable(result), [], time.perf_counter() - start


def _versions() -> dict:
    import qalib

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "qalib": qalib.__version__, "machine": platform.machine(), "processor": platform.processor() or "?"}


def run_spec(spec: ReferenceSpec, out: Path, workers: int, first_seeds: int | None = None) -> Path:
    """Run every missing unit of `spec`, then assemble and write <out>/<notebook>/<name>.json. first_seeds=k runs
    only the first k seeds of every rung: a spot check that the stored file is what the code produces."""
    seed_list = list(seeds(spec.seeds))[:first_seeds]
    partial_dir = out / ".partial" / spec.notebook / spec.name
    partial_dir.mkdir(parents=True, exist_ok=True)
    units = [(r.name, s) for r in spec.rungs for s in seed_list]
    todo = [u for u in units if not _unit_file(partial_dir, *u).is_file()]
    # the units pin their device to the CPU: the references' models are tiny (one core keeps one busy), and a file
    # regenerated on any machine should give the same numbers; so units go side by side on the cores, GPU or not
    device = torch.device("cpu")
    start = time.perf_counter()
    args = [(spec, r, s, s == seed_list[0]) for r, s in todo]
    env_workers = os.environ.get("QALIB_WORKERS")
    os.environ["QALIB_WORKERS"] = "1"  # inside a unit, map_runs runs in that unit's process (its core)
    try:
        bar = tqdm(total=len(units), initial=len(units) - len(todo), desc=f"{spec.notebook}/{spec.name}", unit="run")
        if workers > 1 and len(todo) > 1:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
                for a, outcome in zip(args, pool.map(_run_unit, args)):
                    _keep(partial_dir, a[1], a[2], *outcome)
                    bar.update()
        else:
            for a in args:
                _keep(partial_dir, a[1], a[2], *_run_unit(a))
                bar.update()
        bar.close()
    finally:
        if env_workers is None:
            os.environ.pop("QALIB_WORKERS", None)
        else:
            os.environ["QALIB_WORKERS"] = env_workers
    rungs, functions, seconds = {}, set(), 0.0
    for r in spec.rungs:
        parts = [json.loads(_unit_file(partial_dir, r.name, s).read_text()) for s in seed_list]
        rungs[r.name] = RungResult(r.name, _jsonable(dict(r.kwargs)), seed_list, [p["result"] for p in parts])
        functions.update(tuple(f) for p in parts for f in p["functions"])
        seconds += sum(p["seconds"] for p in parts)
    provenance = {"generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": str(device),
                  "device_name": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
                  "seed_offset": seed_offset(), "run_seconds": round(seconds, 1),
                  "wall_seconds_this_call": round(time.perf_counter() - start, 1),
                  "versions": _versions(), "code": fingerprint(functions)}
    ref = Reference(spec.notebook, spec.name, stored_config(spec), rungs, provenance)
    path = out / spec.notebook / f"{spec.name}.json"
    save(ref, path)
    for p in partial_dir.glob("*.json"):
        p.unlink()
    return path


def restamp(spec: ReferenceSpec, out: Path, workers: int, scratch: Path) -> list[str]:
    """After a code change meant to leave every number alone (a refactor of code the reference ran): regenerate the
    first seed of every rung into `scratch` and compare it with the stored file. Equal to the last stored digit:
    the stored file takes the new code fingerprint (and a note that it was restamped, when, and on what evidence);
    returns []. Otherwise nothing is written and the differing numbers are returned: regenerate the reference."""
    path = out / spec.notebook / f"{spec.name}.json"
    stored = Reference.from_json(json.loads(path.read_text()))
    fresh = Reference.from_json(json.loads(run_spec(spec, scratch, workers, first_seeds=1).read_text()))
    diffs = []
    for name, rung in fresh.rungs.items():
        old, new = stored.rung(name), rung
        if old.seeds[:1] != new.seeds or old.kwargs != new.kwargs:
            diffs.append(f"{name}: seeds or settings differ ({old.seeds[:1]}, {old.kwargs} vs {new.seeds}, {new.kwargs})")
        elif old.runs[0] != new.runs[0]:
            diffs.append(f"{name}: seed {new.seeds[0]} gives other numbers")
    if diffs:
        return diffs
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    stored.provenance["code"] = fresh.provenance["code"]
    stored.provenance.setdefault("restamped", []).append(
        {"when": stamp, "evidence": "the first seed of every rung regenerated with the new code gave the stored numbers"})
    save(stored, path)
    return []


def _unit_file(partial_dir: Path, rung: str, seed: int) -> Path:
    """Where a finished unit waits: the rung's name made safe for a file name ("init d^-1/2" has a slash)."""
    return partial_dir / f"{quote(rung, safe='')}__{seed}.json"


def _keep(partial_dir: Path, rung: str, seed: int, result: dict, functions: list, seconds: float) -> None:
    """A finished unit, kept until the whole reference is written (an interrupted run resumes from these)."""
    _unit_file(partial_dir, rung, seed).write_text(json.dumps(
        {"result": result, "functions": functions, "seconds": round(seconds, 2)}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", nargs="?", default="", help="the notebook's number or name prefix (empty: all)")
    parser.add_argument("--only", default="", help="one reference of the notebook, by name")
    parser.add_argument("--restamp", action="store_true", help="take a code change that moves no number: regenerate "
                        "the first seed of every rung, and if it equals the stored one, record the new fingerprint")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: references/ at offset 0)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else (os.cpu_count() or 1))
    args = parser.parse_args(argv)
    specs = specs_of(args.notebook) if args.notebook else all_specs()
    if args.only:
        specs = [s for s in specs if s.name == args.only]
    if not specs:
        print(f"no reference runs for {args.notebook or 'any notebook'}{' named ' + args.only if args.only else ''}")
        return 1
    out = args.out or default_out()
    if args.restamp:
        import tempfile

        failed = 0
        for spec in specs:
            with tempfile.TemporaryDirectory() as scratch:
                diffs = restamp(spec, out, max(1, args.workers), Path(scratch))
            print(f"{spec.notebook}/{spec.name}: " + ("restamped: the first seed of every rung gives the stored numbers"
                  if not diffs else "NOT restamped, the code moves numbers: " + "; ".join(diffs)
                  + f"; run `make reference NB={spec.notebook[:2]}`"))
            failed += bool(diffs)
        return 1 if failed else 0
    for spec in specs:
        t = time.perf_counter()
        path = run_spec(spec, out, max(1, args.workers))
        size = path.stat().st_size / 1024
        print(f"{path.relative_to(out.parent) if out.parent in path.parents else path}: {size:.0f} KiB, "
              f"{time.perf_counter() - t:.0f} s")
        if spec.lesson:
            print(f"  lesson: {spec.lesson}")
        if spec.claims is not None:  # the notebook's checks on the stored numbers, on these seeds
            spec.claims(Reference.from_json(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

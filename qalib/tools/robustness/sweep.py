"""Running a sweep's pending runs side by side, one per core, with a progress bar (runs done / total, ETA).

Each run is a child process (`python -m qalib.tools.robustness.execute`) that writes its own result file; a thread
here waits for each. Ctrl-C reaches the children too: each stops its kernel and writes nothing, and the runs
already finished stay, so the next sweep starts where this one stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from tqdm import tqdm

from qalib.tools.paths import ROOT
from qalib.tools.robustness.plan import Run


class RunCrashed(RuntimeError):
    """The run's own process failed (not the notebook: a notebook's error is recorded as the run's result)."""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_one(run: Run, out: Path, timeout: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "qalib.tools.robustness.execute", str(out), str(timeout),
                           run.to_json()], env=_child_env(), capture_output=True, text=True, cwd=ROOT)
    if proc.returncode in (130, -2):  # it was interrupted
        raise KeyboardInterrupt
    if proc.returncode != 0:
        raise RunCrashed(f"{run.stem} {run.label}: its process exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(run.result_path(out).read_text())


def describe(result: dict) -> str:
    held = sum(c["holds"] for c in result["claims"])
    line = f"{result['notebook']} {result['label']}: {result['status']}, {held}/{len(result['claims'])} claims held, " \
           f"{result['seconds']:.0f} s"
    if result["error"]:
        line += f" — {result['error']['type']}: {' '.join(str(result['error']['message']).split())[:100]}"
    return line


def run_pending(todo: list[Run], done: int, out: Path, jobs: int, timeout: int) -> tuple[list[dict], list[str]]:
    """Run `todo` on `jobs` cores; return (their results, the messages of runs whose process crashed).
    `done`: how many of the sweep's runs had finished before, so that the bar counts the whole sweep."""
    results, crashed = [], []
    pool = ThreadPoolExecutor(max_workers=jobs)
    bar = tqdm(total=done + len(todo), initial=done, unit="run", desc="robustness", dynamic_ncols=True)
    try:
        futures = [pool.submit(run_one, run, out, timeout) for run in todo]
        for future in as_completed(futures):
            try:
                result = future.result()
            except RunCrashed as err:
                crashed.append(str(err))
                bar.write(f"crashed: {err}")
            else:
                results.append(result)
                bar.write(describe(result))
            bar.update()
    except KeyboardInterrupt:
        bar.write("interrupted: the finished runs are kept; run the same command again to resume")
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return results, crashed

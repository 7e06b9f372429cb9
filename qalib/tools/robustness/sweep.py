"""Running a sweep's pending runs side by side, one per core, with a progress bar (runs done / total, ETA).

Each run is a child process (`python -m qalib.tools.robustness.execute`) that writes its own result file; a thread
here waits for each. On Ctrl-C every child stops its kernel and writes nothing, and the runs already finished stay,
so the next sweep starts where this one stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from tqdm import tqdm

from qalib.notebook.paths import ROOT
from qalib.tools.robustness.execute import INTERRUPTED
from qalib.tools.robustness.plan import Run


class RunCrashed(RuntimeError):
    """The run's own process failed (not the notebook: a notebook's error is recorded as the run's result)."""


class RunInterrupted(RuntimeError):
    """The run's process was stopped (Ctrl-C, SIGTERM) and wrote nothing: it is still to do."""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


class Children:
    """The runs' processes now alive, so that an interrupted sweep can stop every one of them and forget what they
    were doing: each writes a result even when stopped (nbclient turns the signal into "Kernel died"), so the
    result files of the runs stopped are removed, and the next sweep does them again."""

    def __init__(self, out: Path):
        self.out = out.resolve()  # the children run in the project's root
        self._lock = threading.Lock()
        self._alive: dict[subprocess.Popen, Run] = {}
        self._stopped: list[Run] = []
        self.stopping = False

    def run(self, run: Run, timeout: int) -> dict:
        with self._lock:
            if self.stopping:
                raise RunInterrupted(run.label)
            proc = subprocess.Popen([sys.executable, "-m", "qalib.tools.robustness.execute", str(self.out),
                                     str(timeout), run.to_json()], env=_child_env(), cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self._alive[proc] = run
        try:
            _, stderr = proc.communicate()
        finally:
            with self._lock:
                self._alive.pop(proc, None)
        if self.stopping or proc.returncode in (INTERRUPTED, -signal.SIGINT, -signal.SIGTERM):
            raise RunInterrupted(run.label)
        if proc.returncode != 0:
            raise RunCrashed(f"{run.stem} {run.label}: its process exited with {proc.returncode}:\n{stderr[-3000:]}")
        return json.loads(run.result_path(self.out).read_text())

    def stop(self) -> None:
        """Signal every run in progress (Ctrl-C in a terminal has reached them already; `kill -INT` of this process
        alone has not) and start no more."""
        with self._lock:
            self.stopping = True
            for proc, run in self._alive.items():
                self._stopped.append(run)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)

    def forget_stopped(self) -> None:
        """Once the stopped runs have exited: remove what they wrote."""
        for run in self._stopped:
            run.result_path(self.out).unlink(missing_ok=True)


def describe(result: dict) -> str:
    held = sum(c["holds"] for c in result["claims"])
    line = f"{result['notebook']} {result['label']}: {result['status']}, {held}/{len(result['claims'])} claims held, " \
           f"{result['seconds']:.0f} s"
    if result["error"]:
        line += f" — {result['error']['type']}: {' '.join(str(result['error']['message']).split())[:100]}"
    return line


def run_pending(todo: list[Run], done: int, out: Path, jobs: int, timeout: int) -> tuple[list[dict], list[str]]:
    """Run `todo` on `jobs` cores; return (their results, the messages of runs whose process crashed).
    `done`: how many of the sweep's runs had finished before, so that the bar counts the whole sweep.
    Ctrl-C stops every run in progress (none writes a result) and is raised again here."""
    results, crashed = [], []
    children = Children(out)
    pool = ThreadPoolExecutor(max_workers=jobs)
    bar = tqdm(total=done + len(todo), initial=done, unit="run", desc="robustness", dynamic_ncols=True)
    try:
        futures = [pool.submit(children.run, run, timeout) for run in todo]
        for future in as_completed(futures):
            try:
                result = future.result()
            except RunCrashed as err:
                crashed.append(str(err))
                bar.write(f"crashed: {err}")
            except RunInterrupted as err:
                bar.write(f"interrupted: {err}; it is still to do")
            else:
                results.append(result)
                bar.write(describe(result))
                bar.update()
    except KeyboardInterrupt:
        children.stop()
        pool.shutdown(wait=True, cancel_futures=True)  # the stopped runs exit within seconds
        children.forget_stopped()
        bar.write("interrupted: the finished runs are kept; run the same command again to resume")
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return results, crashed

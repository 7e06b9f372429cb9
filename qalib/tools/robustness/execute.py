"""One run of a sweep: a notebook in a fresh kernel with the run's environment (seed offset, scale, CPU variant,
claims logged and kept going), its claims and any error written to the run's result file.

    python -m qalib.tools.robustness.execute OUT TIMEOUT RUN_JSON    # what the sweep starts, one process per run

Each run is its own process, so that a sweep can stop all of them at once. A signal during the notebook reaches
nbclient, which shuts the kernel down, so the run ends as "Kernel died": the sweep that sent it removes the result
files of the runs it stopped (sweep.py), and a rerun does them again.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

from qalib.notebook.paths import ROOT
from qalib.tools.robustness.plan import Run, notebook_digest

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TRACEBACK_CHARS = 8000  # the end of a long traceback is the part that names the error
INTERRUPTED = 130       # the exit status of a run stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it)


def kernel_env(run: Run, log: Path) -> dict[str, str]:
    """This process's environment with the run's variables, and this checkout first on the kernel's path (so the
    kernel imports the qalib whose notebooks it runs, not another editable install)."""
    env = dict(os.environ)
    for name, value in run.env(log).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def describe_error(err: BaseException) -> dict:
    """The error a run stopped on: its type, message and traceback (a cell's, as nbclient reports it)."""
    kind, message = getattr(err, "ename", None), getattr(err, "evalue", None)  # nbclient's CellExecutionError
    text = str(err) if kind else "".join(traceback.format_exception(err))
    return {"type": kind or type(err).__name__, "message": message if kind else str(err),
            "traceback": ANSI.sub("", text)[-TRACEBACK_CHARS:]}


def read_log(path: Path) -> list[dict]:
    """The claims the kernel logged, in order (a line cut short by a killed kernel is dropped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return records


def status(claims: list[dict], error: dict | None) -> str:
    """ok: every claim held; failed: some claim did not; error: the notebook stopped on another error."""
    if error is not None:
        return "error"
    return "failed" if any(not c["holds"] for c in claims) else "ok"


def execute_run(run: Run, out: Path, timeout: int) -> dict:
    from qalib.tools.nbtools import execute  # nbformat and nbclient: only a run needs them

    path = run.result_path(Path(out).resolve())  # absolute: the kernel runs in the notebook's folder
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.with_suffix(".claims.jsonl")
    log.unlink(missing_ok=True)  # left by an interrupted run
    digest = notebook_digest(run.notebook)  # of the source this run executes, even if it is edited meanwhile
    error = None
    start = time.perf_counter()
    try:
        execute(run.notebook, timeout=timeout, env=kernel_env(run, log))
    except Exception as err:  # a cell's error, a cell timeout or a dead kernel: this run failed, the sweep goes on
        error = describe_error(err)
    if error and error["type"] == "KeyboardInterrupt":  # the kernel was interrupted: no result, a rerun does it
        log.unlink(missing_ok=True)
        raise KeyboardInterrupt
    claims = read_log(log)
    result = {"notebook": run.stem, "offset": run.offset, "variant": run.variant.name, "scale": run.scale,
              "label": run.label, "notebook_digest": digest,
              "seconds": round(time.perf_counter() - start, 1), "status": status(claims, error), "error": error,
              "env": {k: v for k, v in run.env(log).items() if k != "QALIB_CLAIMS_LOG"}, "claims": claims}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    tmp.replace(path)  # whole or absent: a result file is never half written
    log.unlink(missing_ok=True)
    return result


def main(argv: list[str]) -> int:
    out, timeout, spec = argv
    try:
        execute_run(Run.from_json(spec), Path(out), int(timeout))
    except KeyboardInterrupt:  # before or after the kernel ran (during it, nbclient handles the signal itself)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Run a student's function so that nothing it does can crash or hang the kernel.

It runs in a daemon thread. If it has not returned after `time_limit` seconds, a TimeoutError is raised inside that
thread (CPython's PyThreadState_SetAsyncExc), which stops a Python loop at its next bytecode. A call stuck inside one
long C function (a huge matmul, time.sleep) cannot be interrupted that way: it is abandoned, and the outcome says it
may still be running. A subprocess would be stoppable, but forking a process that holds torch's OpenMP threads can
hang, and spawning one costs seconds of imports per check.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable

GRACE_S = 0.5  # how long to wait for the thread to die after the TimeoutError is sent


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    still_running: bool = False  # timed out and could not be stopped


def run_limited(fn: Callable, args: tuple, kwargs: dict, time_limit: float) -> Outcome:
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - SystemExit or anything else the student raises is reported
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="qalib-exercise")
    thread.start()
    thread.join(time_limit)
    if thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(TimeoutError))
        thread.join(GRACE_S)
        return Outcome(timed_out=True, still_running=thread.is_alive())
    if "error" in box:
        return Outcome(error=box["error"])
    return Outcome(value=box.get("value"))

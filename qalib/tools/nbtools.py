"""Notebook plumbing shared by the tests, the benchmark and the static site (nbformat + nbclient).

    python -m qalib.tools.nbtools strip notebooks/*.ipynb    # remove outputs before committing
    python -m qalib.tools.nbtools run notebooks/01_*.ipynb   # execute headless, print time and ticks
"""

from __future__ import annotations

import sys
import re
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from qalib.notebook.claims import MARKS, TICK
from qalib.notebook.paths import NOTEBOOKS


def notebook_paths() -> list[Path]:
    """Every notebook: the numbered collection (00 and the topics), then the practice notebooks (unnumbered)."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def collection_paths() -> list[Path]:
    """The numbered notebooks: 00_start_here and one per topic question."""
    return [p for p in notebook_paths() if re.match(r"\d\d_", p.name)]


def is_topic(path: Path) -> bool:
    """A topic notebook answers one question (01_ onwards); 00_start_here and the practice notebooks do not."""
    return bool(re.match(r"\d\d_", path.name)) and not path.name.startswith("00_")


def has_outputs(nb) -> bool:
    return any(c.cell_type == "code" and (c.get("outputs") or c.get("execution_count")) for c in nb.cells)


def strip(path: Path) -> bool:
    """Remove outputs, execution counts and widget state; return True if the file changed."""
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    after = nbformat.writes(nb)
    if after != before:
        path.write_text(after)
    return after != before


def execute(path: Path, timeout: int = 180, store_widget_state: bool = False, env_cwd: Path | None = None,
            env: dict[str, str] | None = None):
    """Run a notebook top to bottom in a fresh kernel; return (executed notebook, seconds).

    The kernel is stopped at once afterwards: there is nothing in it to save, and a polite shutdown request
    took ~3 s per notebook here, seconds no user waits for.

    Raises nbclient's CellExecutionError (with the failing cell and traceback) on any error.
    `timeout` is per cell. `env`: the kernel's whole environment (default: this process's), so that runs side by
    side can each have their own without touching os.environ.
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=False, shutdown_kernel="immediate",
        store_widget_state=store_widget_state, resources={"metadata": {"path": str(env_cwd or Path(path).parent)}},
    )
    start = time.perf_counter()
    client.execute(**({} if env is None else {"env": env}))
    return nb, time.perf_counter() - start


def statement_lines(nb) -> list[str]:
    """The lines printed by measurements (✓), identities (≡) and quotes (❝), in order."""
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = out.get("text", "")
            elif out.get("metadata", {}).get("qalib") == "claims":  # a quiet claim: its plain text is the full line
                text = out.get("data", {}).get("text/plain", "")
            else:
                continue
            lines += [line for line in text.splitlines() if line.startswith(MARKS)]
    return lines


def tick_lines(nb) -> list[str]:
    """The measurements (✓ lines) of an executed notebook, in order."""
    return [line for line in statement_lines(nb) if line.startswith(TICK)]


def ticks(nb) -> int:
    """How many measurements an executed notebook printed (identities and quotes are not counted)."""
    return len(tick_lines(nb))


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m qalib.tools.nbtools")
    parser.add_argument("command", choices=["strip", "run"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=180, help="seconds per cell for `run` (default 180)")
    args = parser.parse_args(argv)
    for p in args.notebooks:
        if args.command == "strip":
            print(("stripped " if strip(p) else "clean    ") + str(p))
        else:
            nb, secs = execute(p, timeout=args.timeout)
            print(f"{p.name}: {secs:.1f} s, {ticks(nb)} measurements")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

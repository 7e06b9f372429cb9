"""What a sweep runs: the notebooks, the seed offsets, the CPU variants and the scale, checked in one place, and
which of its runs are still to do (a finished run's result file is kept, so a rerun resumes)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from qalib.lab.seeding import SEED_MAX
from qalib.nn import validate

# Offsets this far apart give seed sets that do not overlap: seeds(n) is offset .. offset + n - 1, and no
# experiment runs 100 seeds (the largest take 3 * SCALE).
OFFSET_STEP = 100
DEFAULT_RUNS = 10
THREADS = (1, 2)
# Lower instruction sets torch can be told to use instead of this machine's best (ATEN_CPU_CAPABILITY).
LOWER_CAPABILITIES = ("avx2",)


@dataclass(frozen=True)
class Variant:
    """One CPU float path: torch's kernel instruction set and its thread count."""
    capability: str  # as torch names it, lower case: "avx512", "avx2"
    threads: int
    forced: bool     # True: ATEN_CPU_CAPABILITY asks for it; False: the machine's default

    @property
    def name(self) -> str:
        return f"{self.capability}-t{self.threads}"

    def env(self) -> dict[str, str | None]:
        """The variables that select this variant (None: removed, so the default applies)."""
        threads = str(self.threads)
        return {"ATEN_CPU_CAPABILITY": self.capability if self.forced else None,
                "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


@dataclass(frozen=True)
class Run:
    """One notebook executed once: at one seed offset, on one CPU variant, at one scale."""
    notebook: Path
    offset: int
    variant: Variant
    scale: int

    @property
    def stem(self) -> str:
        return self.notebook.stem

    @property
    def label(self) -> str:
        """Short, for the summary's lists of runs: o100·avx2-t1."""
        return f"o{self.offset}·{self.variant.name}"

    def result_path(self, out: Path) -> Path:
        return out / "runs" / self.stem / f"x{self.scale}-o{self.offset}-{self.variant.name}.json"

    def to_json(self) -> str:
        return json.dumps({"notebook": str(self.notebook), "offset": self.offset, "scale": self.scale,
                           "variant": dataclasses.asdict(self.variant)})

    @classmethod
    def from_json(cls, text: str) -> "Run":
        d = json.loads(text)
        return cls(Path(d["notebook"]), d["offset"], Variant(**d["variant"]), d["scale"])

    def env(self, log: Path) -> dict[str, str | None]:
        """The kernel's variables for this run, on top of the caller's environment."""
        return {**self.variant.env(), "QALIB_SEED_OFFSET": str(self.offset), "QALIB_SCALE": str(self.scale),
                "QALIB_WORKERS": "1",  # one core per notebook: the sweep runs one notebook per core
                "QALIB_DEVICE": "cpu", "QALIB_CLAIMS_LOG": str(log), "QALIB_CLAIMS_KEEP_GOING": "1"}


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: every run is one notebook x one offset x one variant, all at one scale."""
    notebooks: tuple[Path, ...]
    offsets: tuple[int, ...]
    variants: tuple[Variant, ...]
    scale: int = 1
    jobs: int = 1
    timeout: int = 900  # seconds per cell
    out: Path = Path("robustness")

    def __post_init__(self):
        if not self.notebooks:
            raise ValueError("notebooks must be a non-empty list of notebook files, got []")
        for path in self.notebooks:
            if not Path(path).is_file():
                raise ValueError(f"notebooks must be existing notebook files, got {str(path)!r}")
        check_offsets(self.offsets)
        if not self.variants or len({v.name for v in self.variants}) != len(self.variants):
            raise ValueError(f"variants must be a non-empty list of distinct variants, got {[v.name for v in self.variants]!r}")
        validate.int_in("scale", self.scale, 1, 64)  # QALIB_SCALE's range (qalib.lab.seeding)
        validate.int_in("jobs", self.jobs, 1)
        validate.int_in("timeout", self.timeout, 1)

    def runs(self) -> list[Run]:
        """Every run, offset by offset: an interrupted sweep has the first offsets of every notebook."""
        return [Run(Path(nb), offset, variant, self.scale)
                for offset, variant, nb in itertools.product(self.offsets, self.variants, self.notebooks)]


def check_offsets(offsets) -> tuple[int, ...]:
    offsets = tuple(validate.int_in(f"offsets[{i}]", o, 0, SEED_MAX // 2) for i, o in enumerate(offsets))
    if not offsets:
        raise ValueError("offsets must be a non-empty list of seed offsets, got []")
    ordered = sorted(offsets)
    for a, b in zip(ordered, ordered[1:]):
        if b - a < OFFSET_STEP:
            raise ValueError(f"offsets must be at least {OFFSET_STEP} apart, so that their seed sets (offset .. "
                             f"offset + n - 1) do not overlap, got {a} and {b}")
    return offsets


def parse_offsets(text: str) -> tuple[int, ...]:
    """'10': ten offsets 0, 100, ..., 900; '0,300,700' (or '300,' for one): exactly these."""
    text = text.strip()
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        numbers = []
    if not numbers or ("," not in text and len(numbers) != 1):
        raise ValueError(f"offsets must be a count (e.g. 10) or a comma-separated list (e.g. 0,100,300), got {text!r}")
    if "," in text:
        return check_offsets(numbers)
    count = validate.int_in("the number of offsets", numbers[0], 1, 1000)
    return tuple(range(0, count * OFFSET_STEP, OFFSET_STEP))


def select_notebooks(topics: list[str], available: list[Path]) -> tuple[Path, ...]:
    """The topic notebooks whose file name contains one of the topics ('07', 'multi_head'); all without topics."""
    if not topics:
        return tuple(available)
    chosen = []
    for topic in topics:
        matches = [p for p in available if topic in p.stem]
        if not matches:
            raise ValueError(f"topic must name a topic notebook (e.g. 07 or multi_head), got {topic!r}; "
                             f"the topics are {[p.stem for p in available]}")
        chosen += [p for p in matches if p not in chosen]
    return tuple(chosen)


def capability(forced: str | None) -> str:
    """torch's CPU capability in a fresh interpreter with ATEN_CPU_CAPABILITY=forced (None: unset). Asked of a
    new process because torch reads the variable once, at import."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if forced is not None:
        env["ATEN_CPU_CAPABILITY"] = forced
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env=env, capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().lower().replace(" ", "")


def machine_variants(cores: int | None = None) -> tuple[Variant, ...]:
    """The CPU variants this machine can show: its default instruction set and each lower one that torch really
    switches to here (a request it cannot honour would repeat the default), each at 1 and 2 threads (1 only on
    one core)."""
    cores = cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    native = capability(None)
    kernels = [(native, False)]
    for lower in LOWER_CAPABILITIES:
        got = capability(lower)
        if got == lower and got != native:
            kernels.append((lower, True))
    threads = [t for t in THREADS if t <= cores] or [1]
    return tuple(Variant(cap, t, forced) for (cap, forced), t in itertools.product(kernels, threads))


def select_variants(names: list[str], available: tuple[Variant, ...]) -> tuple[Variant, ...]:
    if not names:
        return available
    by_name = {v.name: v for v in available}
    return tuple(by_name[validate.choice("variant", name, by_name)] for name in names)


def notebook_digest(path: Path) -> str:
    """The notebook's source (its cells, not their outputs): a result of another version is not resumed."""
    cells = json.loads(Path(path).read_text())["cells"]
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()[:16]


def finished(run: Run, out: Path) -> dict | None:
    """The run's result, if it finished for the notebook as it is now; None if it is still to do."""
    path = run.result_path(out)
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):  # not there, or cut short: run it (again)
        return None
    return result if result.get("notebook_digest") == notebook_digest(run.notebook) else None


def pending(runs: list[Run], out: Path) -> tuple[list[Run], list[dict]]:
    """(the runs still to do, the results of those already finished)."""
    todo, done = [], []
    for run in runs:
        result = finished(run, out)
        if result is None:
            todo.append(run)
        else:
            done.append(result)
    return todo, done

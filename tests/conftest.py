import ipaddress
import json
import os
import socket
import tempfile
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the HF reference must never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The mock interview's progress file: never the student's own ~/.qalib/progress.json. Set before any kernel or
# Jupyter server starts, so they inherit it.
os.environ["QALIB_PROGRESS"] = str(Path(tempfile.mkdtemp(prefix="qalib-progress-")) / "progress.json")

# What the session reports at the end, kept in files so that it adds up across pytest-xdist's workers (`make test`
# runs two): the controller creates the folder at import, before it starts the workers, which inherit the variable.
if not os.environ.get("QALIB_TEST_RECORDS"):
    os.environ["QALIB_TEST_RECORDS"] = tempfile.mkdtemp(prefix="qalib-test-records-")
RECORDS = Path(os.environ["QALIB_TEST_RECORDS"])
PROPERTY_CASES: dict[str, int] = {}  # this process's count; written out when its session ends


def records(kind: str) -> Path:
    folder = RECORDS / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def count_case(group: str) -> None:
    """Called by each property-based example, so the session can report how many cases ran."""
    PROPERTY_CASES[group] = PROPERTY_CASES.get(group, 0) + 1


def record_notebook_time(notebook: str, seconds: float, measurements: int) -> None:
    (records("times") / f"{notebook}.json").write_text(json.dumps([seconds, measurements]))


def record_claims(notebook: str, run: str, lines: list[str]) -> None:
    """Keep the claim lines ("✓ claim — measured: value") one fresh-kernel run of a notebook printed. Every
    notebook runs in two fresh kernels in the suite (headless and in JupyterLab); whichever run is recorded second
    asserts that both printed the same claims with the same measured values, to the printed digit: a result that
    moves between runs is not seeded, and a reader re-running the notebook would see other numbers than the text.
    (Each run writes its file before it looks for the other's, so at least one of two parallel workers compares.)"""
    folder = records("claims")
    (folder / f"{notebook}.{run}.json").write_text(json.dumps(lines))
    others = [p for p in sorted(folder.glob(f"{notebook}.*.json")) if p.name != f"{notebook}.{run}.json"]
    if not others:
        return
    first, a = others[0].name.removeprefix(notebook + ".").removesuffix(".json"), json.loads(others[0].read_text())
    second, b = run, lines
    assert len(a) == len(b), f"{notebook}: the {first} run checked {len(a)} claims, the {second} run {len(b)}"
    changed = [(x, y) for x, y in zip(a, b) if x != y]
    assert not changed, (f"{notebook}: a claim or its measured value differs between two fresh kernels "
                         f"({first} vs {second}), so it is not reproducible:\n" +
                         "\n".join(f"  {x}\n  {y}" for x, y in changed[:3]))


def pytest_sessionfinish(session):
    if PROPERTY_CASES:
        (records("properties") / f"{os.getpid()}.json").write_text(json.dumps(PROPERTY_CASES))


def pytest_terminal_summary(terminalreporter):
    cases: dict[str, int] = {}
    for f in records("properties").glob("*.json"):
        for group, n in json.loads(f.read_text()).items():
            cases[group] = cases.get(group, 0) + n
    if cases:
        terminalreporter.write_sep("-", "property-based cases run (hypothesis)")
        for group, n in sorted(cases.items()):
            terminalreporter.write_line(f"{group:20s} {n:6d}")
        terminalreporter.write_line(f"{'total':20s} {sum(cases.values()):6d}")
    times = {f.stem: json.loads(f.read_text()) for f in records("times").glob("*.json")}
    if times:
        terminalreporter.write_sep("-", "notebook execution (headless)")
        for name, (secs, n) in sorted(times.items()):
            terminalreporter.write_line(f"{name:45s} {secs:6.1f} s   {n:3d} measurements")
    runs: dict[str, int] = {}
    for f in records("claims").glob("*.json"):
        notebook = f.name.rsplit(".", 2)[0]
        runs[notebook] = runs.get(notebook, 0) + 1
    if runs:
        compared = sorted(n for n, k in runs.items() if k >= 2)
        terminalreporter.write_sep("-", "claims reproduced in two fresh kernels (headless and JupyterLab)")
        terminalreporter.write_line(f"{len(compared)} of {len(runs)} notebooks compared"
                                    + ("" if len(compared) == len(runs) else
                                       f"; only one run of: {', '.join(sorted(set(runs) - set(compared)))}"))


_real_connect = socket.socket.connect


def _loopback_only_connect(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6):
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise OSError(f"the test suite has no network: blocked a connection to {host}")
    return _real_connect(self, address)


@pytest.fixture(scope="session")
def minilm():
    """(model, tokenizer) of the pretrained checkpoint: qalib.nn.pretrained.minilm(), shared and not to be changed."""
    from qalib.nn.pretrained import minilm

    return minilm()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Nothing in qalib may reach the internet; in-process tests prove it (loopback stays open for Jupyter)."""
    monkeypatch.setattr(socket.socket, "connect", _loopback_only_connect)

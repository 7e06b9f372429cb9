import ipaddress
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

NOTEBOOK_TIMES: dict[str, tuple[float, int]] = {}
CLAIM_RUNS: dict[str, dict[str, list[str]]] = {}  # notebook -> {run: its claim lines}
PROPERTY_CASES: dict[str, int] = {}


def count_case(group: str) -> None:
    """Called by each property-based example, so the session can report how many cases ran."""
    PROPERTY_CASES[group] = PROPERTY_CASES.get(group, 0) + 1


def record_claims(notebook: str, run: str, lines: list[str]) -> None:
    """Keep the claim lines ("✓ claim — measured: value") one fresh-kernel run of a notebook printed. Every
    notebook runs in two fresh kernels in the suite (headless and in JupyterLab); the run recorded second asserts
    that both printed the same claims with the same measured values, to the printed digit: a result that moves
    between runs is not seeded, and a reader re-running the notebook would see other numbers than the text."""
    runs = CLAIM_RUNS.setdefault(notebook, {})
    runs[run] = lines
    if len(runs) < 2:
        return
    (first, a), (second, b) = runs.items()
    assert len(a) == len(b), f"{notebook}: the {first} run checked {len(a)} claims, the {second} run {len(b)}"
    changed = [(x, y) for x, y in zip(a, b) if x != y]
    assert not changed, (f"{notebook}: a claim or its measured value differs between two fresh kernels "
                         f"({first} vs {second}), so it is not reproducible:\n" +
                         "\n".join(f"  {x}\n  {y}" for x, y in changed[:3]))


def pytest_terminal_summary(terminalreporter):
    if PROPERTY_CASES:
        terminalreporter.write_sep("-", "property-based cases run (hypothesis)")
        for group, n in sorted(PROPERTY_CASES.items()):
            terminalreporter.write_line(f"{group:20s} {n:6d}")
        terminalreporter.write_line(f"{'total':20s} {sum(PROPERTY_CASES.values()):6d}")
    if NOTEBOOK_TIMES:
        terminalreporter.write_sep("-", "notebook execution (headless)")
        for name, (secs, n) in sorted(NOTEBOOK_TIMES.items()):
            terminalreporter.write_line(f"{name:45s} {secs:6.1f} s   {n:3d} measurements")
    compared = sorted(name for name, runs in CLAIM_RUNS.items() if len(runs) == 2)
    if CLAIM_RUNS:
        terminalreporter.write_sep("-", "claims reproduced in two fresh kernels (headless and JupyterLab)")
        terminalreporter.write_line(f"{len(compared)} of {len(CLAIM_RUNS)} notebooks compared"
                                    + ("" if len(compared) == len(CLAIM_RUNS) else
                                       f"; only one run of: {', '.join(sorted(set(CLAIM_RUNS) - set(compared)))}"))


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
    """(model, tokenizer) of the pretrained checkpoint: qalib.pretrained.minilm(), shared and not to be changed."""
    from qalib.pretrained import minilm

    return minilm()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Nothing in qalib may reach the internet; in-process tests prove it (loopback stays open for Jupyter)."""
    monkeypatch.setattr(socket.socket, "connect", _loopback_only_connect)

import ipaddress
import os
import socket

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the HF reference must never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

NOTEBOOK_TIMES: dict[str, tuple[float, int]] = {}
PROPERTY_CASES: dict[str, int] = {}


def count_case(group: str) -> None:
    """Called by each property-based example, so the session can report how many cases ran."""
    PROPERTY_CASES[group] = PROPERTY_CASES.get(group, 0) + 1


def pytest_terminal_summary(terminalreporter):
    if PROPERTY_CASES:
        terminalreporter.write_sep("-", "property-based cases run (hypothesis)")
        for group, n in sorted(PROPERTY_CASES.items()):
            terminalreporter.write_line(f"{group:20s} {n:6d}")
        terminalreporter.write_line(f"{'total':20s} {sum(PROPERTY_CASES.values()):6d}")
    if NOTEBOOK_TIMES:
        terminalreporter.write_sep("-", "notebook execution (headless)")
        for name, (secs, n) in sorted(NOTEBOOK_TIMES.items()):
            terminalreporter.write_line(f"{name:45s} {secs:6.1f} s   {n:3d} claims checked")


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

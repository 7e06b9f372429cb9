"""Weights load only from safetensors (or torch.load with weights_only=True); no code path downloads."""

import re
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "qalib").rglob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
FORBIDDEN = {
    r"torch\.load\((?![^)]*weights_only\s*=\s*True)": "torch.load without weights_only=True (pickle)",
    r"import pickle|pickle\.loads?\(": "pickle",
    r"from_pretrained\(": "a Hugging Face hub loader (transformers is a test-only reference)",
    r"hf_hub_download|snapshot_download": "a hub download",
    r"urllib\.request|\brequests\.|httpx\.": "an HTTP client",
}


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_no_unsafe_loading_or_network(path):
    text = path.read_text()
    for pattern, what in FORBIDDEN.items():
        assert not re.search(pattern, text), f"{path.relative_to(ROOT)} uses {what}"


def test_the_network_guard_is_installed_and_refuses_before_dialing(monkeypatch):
    """conftest.py replaces socket.connect for every in-process test. This proves it without sending a packet: the
    real connect is swapped for a stub that records what reaches it, so a guard that let an address through would
    show up in `reached` (and never touch the network)."""
    import conftest

    assert socket.socket.connect is conftest._loopback_only_connect, "the loopback-only guard is not installed"
    reached = []
    monkeypatch.setattr(conftest, "_real_connect", lambda sock, address: reached.append(address))
    for family, address in ((socket.AF_INET, ("192.0.2.1", 80)), (socket.AF_INET, ("10.0.0.1", 443)),
                            (socket.AF_INET, ("example.org", 80)), (socket.AF_INET6, ("2001:db8::1", 80, 0, 0))):
        with socket.socket(family, socket.SOCK_STREAM) as sock, pytest.raises(OSError, match="no network"):
            sock.connect(address)
    assert reached == [], f"the guard let these through to the real connect: {reached}"
    for family, address in ((socket.AF_INET, ("127.0.0.1", 9)), (socket.AF_INET, ("localhost", 9)),
                            (socket.AF_INET6, ("::1", 9, 0, 0))):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.connect(address)
    assert [a[0] for a in reached] == ["127.0.0.1", "localhost", "::1"], "loopback must stay open for Jupyter"

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


def test_in_process_tests_have_no_route_out():
    """conftest.py blocks every non-loopback connection during the tests."""
    with pytest.raises(OSError, match="network"):
        socket.create_connection(("192.0.2.1", 80), timeout=1)

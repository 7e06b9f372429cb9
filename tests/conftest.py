import os

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the HF reference must never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

NOTEBOOK_TIMES: dict[str, tuple[float, int]] = {}


def pytest_terminal_summary(terminalreporter):
    if NOTEBOOK_TIMES:
        terminalreporter.write_sep("-", "notebook execution (headless)")
        for name, (secs, n) in sorted(NOTEBOOK_TIMES.items()):
            terminalreporter.write_line(f"{name:45s} {secs:6.1f} s   {n:3d} claims checked")

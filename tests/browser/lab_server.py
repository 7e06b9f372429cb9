"""Start a Jupyter server (JupyterLab or Voila) on loopback for the browser tests, and stop it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(kind: str, notebook: str | None = None, timeout: float = 60.0):
    """Yield (base_url, token, served folder) of a running `jupyter lab` or `voila NOTEBOOK` bound to 127.0.0.1.
    The folder holds a copy of notebooks/: what the browser saves lands there."""
    # Serve a copy: JupyterLab autosaves, and the browser test must never write outputs into the repository.
    workdir = Path(tempfile.mkdtemp(prefix="qalib-browser-"))
    shutil.copytree(ROOT / "notebooks", workdir / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    port, token = free_port(), secrets.token_hex(16)
    bin_dir = Path(sys.executable).parent
    common = [f"--port={port}", "--no-browser", f"--ServerApp.token={token}" if kind == "lab" else f"--token={token}"]
    if kind == "lab":
        cmd = [str(bin_dir / "jupyter"), "lab", "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={workdir}",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *common]
        status = f"http://127.0.0.1:{port}/api/status?token={token}"
    else:
        cmd = [str(bin_dir / "voila"), str(workdir / "notebooks" / notebook), "--Voila.ip=127.0.0.1", f"--Voila.port={port}",
               "--no-browser", "--ServerApp.allow_root=True", f"--ServerApp.token={token}"]
        status = None  # Voila renders (executes) the notebook per request: only wait for the port
    env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
    if kind == "voila":
        env["QALIB_STYLE"] = "talk"  # what `make present` sets: large type for the back of the room
    log = open(ROOT / "artifacts" / f"{kind}-server.log", "w") if (ROOT / "artifacts").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} server exited with code {proc.returncode}; see artifacts/{kind}-server.log")
            if _answers(status if kind == "lab" else None, port):
                break
            if time.time() > deadline:
                raise TimeoutError(f"{kind} server did not answer on port {port} within {timeout:.0f} s")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}", token, workdir
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(status_url: str | None, port: int) -> bool:
    if status_url is None:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    try:
        with urllib.request.urlopen(status_url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False

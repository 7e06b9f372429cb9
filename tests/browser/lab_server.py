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
import http.client
import urllib.error
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
    """Yield (base_url, token, served folder) of a running `jupyter lab`, `voila NOTEBOOK` or, for kind "present",
    what `make present NB=<notebook stem>` serves (the lecture notebook, rendered as it runs), bound to 127.0.0.1.
    The folder holds a copy of notebooks/: what the browser saves lands there."""
    # Serve a copy: JupyterLab autosaves, and the browser test must never write outputs into the repository.
    workdir = Path(tempfile.mkdtemp(prefix="qalib-browser-"))
    shutil.copytree(ROOT / "notebooks", workdir / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    token = secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
    if kind in ("voila", "present"):
        env["QALIB_STYLE"] = "talk"  # what `make present` sets: large type for the back of the room
    if kind == "present":
        from qalib.tools.present import write

        notebook = write(notebook, workdir / "notebooks" / "lecture").relative_to(workdir / "notebooks")
    log = open(ROOT / "artifacts" / f"{kind}-server.log", "w") if (ROOT / "artifacts").is_dir() else subprocess.DEVNULL
    # free_port() only says the port was free a moment ago: a kernel of a test running beside this one can bind it
    # (kernels listen on random TCP ports) before the server does. With port_retries=0 the server then exits instead
    # of moving to another port, and we start it again on a new port; the readiness check asks for an HTTP answer,
    # so a kernel's socket on the port is never taken for the server (Chromium read one as ERR_INVALID_HTTP_RESPONSE).
    for attempt in range(3):
        port = free_port()
        cmd = _server_command(kind, notebook, workdir, port, token)
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        if _wait_until_ready(proc, kind, port, token, timeout):
            break
        if attempt == 2:
            raise RuntimeError(f"{kind} server exited with code {proc.returncode} three times (its port was taken?); "
                               f"see artifacts/{kind}-server.log")
    try:
        yield f"http://127.0.0.1:{port}", token, workdir
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def _server_command(kind: str, notebook: str | None, workdir: Path, port: int, token: str) -> list[str]:
    bin_dir = Path(sys.executable).parent
    if kind == "lab":
        return [str(bin_dir / "jupyter"), "lab", "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={workdir}",
                "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                f"--port={port}", "--ServerApp.port_retries=0", "--no-browser", f"--ServerApp.token={token}"]
    rendering = ["--progressive_rendering=True"] if kind == "present" else []  # as `make present` serves it
    return [str(bin_dir / "voila"), str(workdir / "notebooks" / notebook), *rendering, "--Voila.ip=127.0.0.1",
            f"--Voila.port={port}", "--Voila.port_retries=0", "--no-browser", "--ServerApp.allow_root=True",
            f"--ServerApp.token={token}"]


def _wait_until_ready(proc: subprocess.Popen, kind: str, port: int, token: str, timeout: float) -> bool:
    """True once the server answers HTTP on its port; False if it exited first (e.g. the port was taken)."""
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            return False
        if _answers(kind, port, token):
            return True
        if time.time() > deadline:
            proc.kill()
            raise TimeoutError(f"{kind} server did not answer on port {port} within {timeout:.0f} s")
        time.sleep(0.3)


def _answers(kind: str, port: int, token: str) -> bool:
    """JupyterLab: its status API says 200. Voila renders (executes) the notebook per request, so it is asked for a
    page that does not exist: any HTTP answer, a 404 included, means Voila is serving; a socket that is not HTTP (a
    kernel's) or none at all means not yet."""
    url = (f"http://127.0.0.1:{port}/api/status?token={token}" if kind == "lab"
           else f"http://127.0.0.1:{port}/qalib-readiness-probe")
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200 or kind != "lab"
    except urllib.error.HTTPError:
        return kind != "lab"
    except (OSError, http.client.HTTPException):
        return False


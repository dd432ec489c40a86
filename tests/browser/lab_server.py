"""A throwaway JupyterLab for the browser test: a copy of the workbook, a loopback port, a token.

The notebooks are executed in a copy (the committed ones are never rewritten); the rest of the
repo is symlinked beside the copy so the notebooks' `../mnist_mlp/...` paths still resolve.
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from helpers.classroom.reset import RUN_OUTPUTS
from helpers.launch.processes import free_port
from mnist_mlp.common.child_process import stop_process_tree
from tests.browser.find_browser import HOW_TO_GET_ONE, find_chromium, looked_at

# Flags that work headless as root in a container (no sandbox, no GPU, nothing phoning home).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]

# JupyterLab settings for the test's own settings dir: render every cell (so the whole notebook
# is in the page to inspect), record cell timings, and fetch no news or updates (no network here).
LAB_SETTINGS = {
    # recordTiming: each executed cell keeps its start and end in its metadata (the slowest
    # cells are listed at the end of make test; nbval never compares metadata).
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                   "recordTiming": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}


def browser_problem(environ=None) -> str | None:
    """Why the browser test cannot run here, or None when Chromium and Playwright are present."""
    if find_chromium(environ) is None:
        return f"no Chromium found (looked at {looked_at(environ)}): {HOW_TO_GET_ONE}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as err:
        return f"the Playwright library is missing ({err}): `make venv` installs it"
    return None


def make_workspace(repo_root: Path, dest: Path) -> Path:
    """dest/notebooks: a copy of the notebooks; everything else in the repo linked beside it,
    but for what runs write (checkpoints/, results/): the kernels neither read a developer's
    earlier results nor overwrite them."""
    dest.mkdir(parents=True)
    for entry in repo_root.iterdir():
        if entry.name in ("notebooks", ".git", ".venv", *RUN_OUTPUTS):
            continue
        (dest / entry.name).symlink_to(entry)
    shutil.copytree(repo_root / "notebooks", dest / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "_tmp_*"))
    return dest / "notebooks"


class LabServer:
    """`jupyter lab` on 127.0.0.1:<free port> serving root_dir; stop() ends it and its kernels."""

    def __init__(self, root_dir: Path, state_dir: Path, env: dict[str, str] | None = None):
        self.root_dir = root_dir
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = state_dir / "jupyterlab.log"
        settings = state_dir / "lab-settings"
        for name, values in LAB_SETTINGS.items():
            path = settings / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        self.env = dict(env if env is not None else os.environ)
        self.env.update({
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(state_dir / "lab-workspaces"),
            "JUPYTER_CONFIG_DIR": str(state_dir / "jupyter-config"),
            "JUPYTER_RUNTIME_DIR": str(state_dir / "jupyter-runtime"),
            "IPYTHONDIR": str(state_dir / "ipython"),
        })
        self.argv = [sys.executable, "-m", "jupyterlab", "--no-browser",
                     "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
                     "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                     f"--ServerApp.root_dir={root_dir}",
                     # A kernel shut down exits by itself, handing the trn1 double its last graphs
                     # as it goes; jupyter_client's default 5 s before a kill can cut that short.
                     "--KernelManager.shutdown_wait_time=600"]
        if os.geteuid() == 0:
            self.argv.append("--allow-root")
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self, timeout: float = 120.0) -> "LabServer":
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        atexit.register(self.stop)  # also when the session is interrupted before its teardown
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process_tree(self.proc)
        self.proc = None

"""TensorBoard from a notebook: one process on 127.0.0.1 on a free port, shown inside JupyterLab
through jupyter-server-proxy (`/proxy/<port>/`), stopped when the notebook's kernel ends.

    board = TensorBoard("runs/06").start()
    board.show("#scalars")                    # an IFrame and a link, both through the proxy
    board.show_trace(run, host)               # the profile's Trace Viewer, inline
    board.stop()                              # or let the kernel's exit do it

The browser reaches TensorBoard only through the Jupyter server (one SSH tunnel to the lab is
enough); the kernel itself reads TensorBoard's HTTP API directly on 127.0.0.1.
"""
from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from pathlib import Path

from helpers.launch.processes import free_port
from mnist_mlp.common import child_process
from mnist_mlp.common.child_process import stop_process_tree
from mnist_mlp.common.observe import LOSS_TAG, STEP_TRACE_NAME  # noqa: F401  (what the scripts write)

# What %tensorboard embeds when this is set (%PORT% is replaced by its port): through the
# Jupyter server's proxy instead of <host>:<port>, which a remote browser cannot reach.
PROXY_URL_TEMPLATE = "/proxy/%PORT%/"
START_TIMEOUT_S = 90.0
# How long one "are you up?" request may wait while it starts: a port held by something that
# accepts connections but never answers (not TensorBoard) must not stall start() for a full
# request timeout each time; a slow first answer is simply asked again.
PROBE_TIMEOUT_S = 2.0
TRACE_TOOL = "trace_viewer@"  # the profile plugin's Trace Viewer, as its runs list it


def jupyter_base_url() -> str:
    """The Jupyter server's base URL as the browser sees it: '/' for `make lab`, the user's
    prefix under JupyterHub (which sets JUPYTERHUB_SERVICE_PREFIX in the kernel)."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return prefix if prefix.endswith("/") else prefix + "/"


def enable_magic_through_proxy() -> None:
    """Make `%tensorboard` embed its frame through jupyter-server-proxy (in this kernel)."""
    os.environ["TENSORBOARD_PROXY_URL"] = jupyter_base_url().rstrip("/") + PROXY_URL_TEMPLATE


def scratch_directory(prefix: str, parent=None) -> Path:
    """A new temporary directory for a notebook's logs and traces, removed when the kernel
    exits (after the TensorBoard started later on it has stopped: atexit runs last-in first)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        stop_process_tree(proc, grace_s=3.0)


class TensorBoardError(RuntimeError):
    """TensorBoard did not start, or did not answer as expected."""


class TensorBoard:
    """A TensorBoard process serving `logdir` on 127.0.0.1:<port> (a free port by default).

    It stops with stop(), when this object is garbage-collected, when the kernel exits
    (atexit) and, on Linux, when the kernel is killed (the child gets SIGTERM then).
    """

    def __init__(self, logdir, port: int | None = None, reload_interval_s: float = 2.0):
        self.logdir = Path(logdir).resolve()
        self.port = port or free_port()
        self.reload_interval_s = reload_interval_s
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._finalizer = None

    # -- the process ---------------------------------------------------------------------------
    def command(self) -> list[str]:
        return [sys.executable, "-m", "tensorboard.main", "--logdir", str(self.logdir),
                "--host", "127.0.0.1", "--port", str(self.port),
                "--reload_interval", str(self.reload_interval_s)]

    def start(self, timeout: float = START_TIMEOUT_S,
              probe_timeout: float = PROBE_TIMEOUT_S) -> "TensorBoard":
        """Start it and wait until it answers (each request waits at most probe_timeout); raise
        TensorBoardError with its output if it exits first or does not answer within timeout."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._log = tempfile.TemporaryFile(mode="w+", prefix="tensorboard-")
        self.proc = child_process.start(self.command(), stdout=self._log)  # dies with the kernel
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        atexit.register(self._finalizer)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self._gave_up(f"TensorBoard exited with code {self.proc.returncode} "
                                    "before it answered")
            try:
                self.get("data/logdir", timeout=probe_timeout)
                enable_magic_through_proxy()
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        raise self._gave_up(f"TensorBoard did not answer on port {self.port} within {timeout:g} s")

    def _gave_up(self, why: str) -> TensorBoardError:
        """The error for a start that failed, with its output; stopped, its log file closed now
        (not by the garbage collector, whose warning would land in some later cell or test)."""
        said = self.output()
        self.stop()
        return TensorBoardError(f"{why}:\n{said}")

    def output(self, last: int = 20) -> str:
        """Its last lines of output (stdout and stderr)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return "\n".join(self._log.read().splitlines()[-last:])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs _stop once; later calls do nothing
            atexit.unregister(self._finalizer)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- addresses -----------------------------------------------------------------------------
    def proxy_url(self, path: str = "") -> str:
        """The address the browser uses: through the Jupyter server's /proxy/<port>/."""
        return f"{jupyter_base_url()}proxy/{self.port}/{path}"

    def local_url(self, path: str = "") -> str:
        """The address the kernel uses (127.0.0.1: TensorBoard listens nowhere else)."""
        return f"http://127.0.0.1:{self.port}/{path}"

    # -- its HTTP API (what the notebook asserts on) -------------------------------------------
    def get(self, path: str, timeout: float = 30.0) -> bytes:
        request = urllib.request.Request(self.local_url(path), headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
        return body

    def get_json(self, path: str, timeout: float = 30.0):
        return json.loads(self.get(path, timeout))

    def scalar_tags(self) -> dict[str, list[str]]:
        """{run: [tag, ...]} of every scalar TensorBoard has read."""
        return {run: sorted(tags) for run, tags in self.get_json("data/plugin/scalars/tags").items()}

    def scalars(self, run: str, tag: str) -> list[tuple[int, float]]:
        """(step, value) of one scalar series."""
        query = urllib.parse.urlencode({"run": run, "tag": tag})
        return [(int(step), float(value))
                for _, step, value in self.get_json(f"data/plugin/scalars/scalars?{query}")]

    def profile_runs(self) -> list[str]:
        return self.get_json("data/plugin/profile/runs")

    def profile_hosts(self, run: str) -> list[str]:
        query = urllib.parse.urlencode({"run": run, "tag": "trace_viewer"})
        return [h["hostname"] for h in self.get_json(f"data/plugin/profile/hosts?{query}")]

    def trace_events(self, run: str, host: str, timeout: float = 60.0) -> list[dict]:
        """The Trace Viewer's events of one profile (converted by the plugin from .xplane.pb)."""
        return self.get_json(trace_data_path(run, host), timeout).get("traceEvents", [])

    def wait_for(self, what: str, probe, timeout: float = 30.0):
        """probe() until it returns something truthy (TensorBoard reloads its logdir every
        reload_interval_s); raise TensorBoardError naming `what` if it never does."""
        deadline = time.monotonic() + timeout
        while True:
            found = probe()
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not found:
            raise TensorBoardError(f"TensorBoard shows no {what} in {self.logdir} after "
                                   f"{timeout:g} s: did the run write there?")
        return found

    # -- in the notebook -----------------------------------------------------------------------
    def show(self, path: str = "", height: int = 480, label: str = "TensorBoard",
             inline: bool = True):
        """A link (new tab) and, if inline, an IFrame, both through the proxy.

        TensorBoard's own pages load their font from the absolute path /font-roboto/, which
        through the proxy is the Jupyter server's and fails (a console error, the text in a
        fallback font): they read best in their own tab. The Trace Viewer has no such path."""
        from IPython.display import HTML, IFrame, display

        url = self.proxy_url(path)
        where = f"<code>{url}</code>, " if len(url) <= 60 else ""  # a trace's address is long
        display(HTML(f'<a href="{url}" target="_blank">Open {label} in a new tab</a> '
                     f'({where}through the Jupyter server)'))
        if inline:
            display(IFrame(url, width="100%", height=height))

    def plot_scalars(self, run: str, tags: list[str]):
        """The scalar series TensorBoard serves for `run`, one panel per tag, as its Scalars
        tab draws them (read from its HTTP API: what the browser would get)."""
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(tags), figsize=(4 * len(tags), 2.8), squeeze=False)
        for ax, tag in zip(axes[0], tags):
            steps, values = zip(*self.scalars(run, tag))
            ax.plot(steps, values, marker="." if len(steps) < 30 else None, color="#e8710a")
            ax.set_title(tag, fontsize=9)
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=7)
        fig.suptitle(f"TensorBoard scalars of run {run!r}, from {self.proxy_url()}", fontsize=9)
        fig.tight_layout()
        return fig

    def show_trace(self, run: str, host: str, height: int = 520):
        """The Trace Viewer of one profile, alone: the page the profile plugin itself frames,
        without the plugin's overview (which loads Google Charts from the internet)."""
        self.show(trace_viewer_path(run, host), height, label="this trace")


def trace_data_path(run: str, host: str) -> str:
    query = urllib.parse.urlencode({"run": run, "tag": TRACE_TOOL, "host": host})
    return f"data/plugin/profile/data?{query}"


def trace_viewer_path(run: str, host: str) -> str:
    """The profile plugin's stand-alone Trace Viewer page for one profile. Its data address is
    relative, so it resolves under /proxy/<port>/ as well as at TensorBoard's own root."""
    data = trace_data_path(run, host).removeprefix("data/plugin/profile/")
    query = urllib.parse.urlencode({"is_streaming": "false", "is_oss": "true",
                                    "trace_data_url": data, "source_code_service": "false"})
    return f"data/plugin/profile/trace_viewer_index.html?{query}"


def step_names(events: list[dict], prefix: str = STEP_TRACE_NAME) -> list[str]:
    """The distinct names of the step blocks (xp.StepTrace) among trace events, in step order."""
    names = {e["name"] for e in events if str(e.get("name", "")).startswith(prefix)}
    return sorted(names, key=lambda n: (len(n), n))

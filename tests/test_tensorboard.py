"""helpers/inside/tensorboard.py against a real TensorBoard serving a real run's scalars and profiler
trace (train.py --tensorboard --profile on the CPU stand-in): what it serves, where it listens,
and that it never outlives its kernel."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.parse

import psutil
import pytest

from helpers.inside.tensorboard import LOSS_TAG, TensorBoard, TensorBoardError, step_names, trace_viewer_path
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def logdir(script_runs, tmp_path_factory):
    """The session's "xla long" train.py run (tests/script_runs.py): its scalars and its 5-step
    profiler trace as one run, train/, as notebook 06 writes them (--tensorboard and --profile
    into one directory). Each worker's TensorBoard reads a copy of its own: the profile plugin
    writes its converted trace beside the run's."""
    run = script_runs["xla long"]
    root = tmp_path_factory.mktemp("tb") / "logs"
    shutil.copytree(run.directory / "tb", root / "train")
    shutil.copytree(run.directory / "profile", root / "train", dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def board(logdir):
    tb = TensorBoard(logdir).start()
    yield tb
    pid = tb.proc.pid
    tb.stop()
    tb.stop()  # a second stop does nothing
    assert _gone(pid)  # a guard of 60 s: it returns once the pid is gone


def test_listens_on_loopback_only(board):
    listening = [c.laddr for c in psutil.Process(board.proc.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and {a.ip for a in listening} == {"127.0.0.1"}, listening
    assert {a.port for a in listening} == {board.port}


def test_serves_the_runs_scalars_and_trace(board):
    tags = board.wait_for("scalars", lambda: board.scalar_tags().get("train"))
    assert LOSS_TAG in tags
    assert [step for step, _ in board.scalars("train", LOSS_TAG)] == [1, 50, 100]  # loss reads
    runs = board.wait_for("profile", board.profile_runs)
    assert len(runs) == 1 and runs[0].startswith("train/")
    host = board.profile_hosts(runs[0])[0]
    assert step_names(board.trace_events(runs[0], host)) == [f"train_step {n}" for n in range(3, 8)]


def test_trace_viewer_page_finds_its_data_by_a_relative_address(board):
    run = board.wait_for("profile", board.profile_runs)[0]
    host = board.profile_hosts(run)[0]
    page = trace_viewer_path(run, host)
    assert b"<html" in board.get(page).lower()
    data_url = urllib.parse.parse_qs(urllib.parse.urlparse(page).query)["trace_data_url"][0]
    assert not data_url.startswith("/"), "relative, so it resolves under /proxy/<port>/ too"
    resolved = urllib.parse.urljoin("/" + page, data_url).lstrip("/")
    assert "traceEvents" in json.loads(board.get(resolved))


def test_addresses_and_the_magic_go_through_the_proxy(board, monkeypatch):
    assert board.proxy_url("#scalars") == f"/proxy/{board.port}/#scalars"
    assert board.local_url() == f"http://127.0.0.1:{board.port}/"
    assert os.environ["TENSORBOARD_PROXY_URL"] == "/proxy/%PORT%/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/ada/")
    assert board.proxy_url() == f"/user/ada/proxy/{board.port}/"


def test_a_port_in_use_fails_with_tensorboards_own_words(tmp_path):
    # The port's holder accepts connections and never answers: each of start()'s requests gives
    # up after probe_timeout, so TensorBoard's own exit is seen soon after it happens.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        board = TensorBoard(tmp_path, port=taken.getsockname()[1])
        started = time.monotonic()
        with pytest.raises(TensorBoardError) as err:
            board.start(timeout=60, probe_timeout=0.5)
        elapsed = time.monotonic() - started
    assert "exited" in str(err.value)
    # TensorBoard's own line, the port a whole number (port 6006 is not port 60061)
    assert re.search(rf"could not bind to port {board.port}\b", str(err.value)), str(err.value)
    assert not board.running
    assert board._log is None, "its log file is closed, not left to the garbage collector"
    # A hang guard: a stall on the silent holder lasts until start()'s 60 s timeout; TensorBoard
    # loading and exiting takes under 10 s even on the loaded 2-core machine (5x headroom).
    assert elapsed < 50, f"{elapsed:.0f} s: stalled on a request to the port's silent holder"


def _gone(pid: int, timeout: float = 60.0) -> bool:  # a guard: it returns when the pid goes
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("ending", ["exit", "SIGKILL"])
def test_tensorboard_does_not_outlive_its_kernel(tmp_path, ending):
    # A "kernel": a Python process that starts TensorBoard, says its pid, then ends normally
    # (atexit) or is killed outright (the child's parent-death signal).
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from helpers.inside.tensorboard import TensorBoard, scratch_directory
        logs = scratch_directory("nb06-test-", {str(tmp_path)!r})
        board = TensorBoard(logs).start()
        print(board.proc.pid, logs, flush=True)
        if {ending!r} == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        """)
    kernel = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=180)
    pid, logs = kernel.stdout.split()[:2]
    assert _gone(int(pid)), f"TensorBoard (pid {pid}) still runs after its kernel ended ({ending})"
    if ending == "SIGKILL":
        assert kernel.returncode == -signal.SIGKILL  # no atexit: the scratch directory stays
    else:
        assert not os.path.exists(logs), "the scratch directory goes with the kernel"

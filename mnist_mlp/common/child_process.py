"""Starting a command so that nothing it starts outlives us: the one place the workbook starts
a process that runs beside it (the MNIST download here; the notebooks' runs, torchrun,
TensorBoard and neuron-monitor through helpers.launch and helpers.inside). docs/architecture.md
names the one other kind, short commands a command-line tool waits for (subprocess.run).

Each child gets a session (a process group) of its own, so stopping it stops everything it
started, and, on Linux, the kernel's parent-death signal: if the process that started it dies,
even by SIGKILL (a notebook kernel killed for memory, a forced restart), the child gets SIGTERM.
torchrun passes that on to its workers, so on Trainium no worker keeps holding a NeuronCore.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Mapping, Sequence

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent_pid: int):
    def preexec() -> None:  # in the child, between fork and exec
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the line above: go now
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def start(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd=None,
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text: bool = False) -> subprocess.Popen:
    """Popen(cmd) in a session of its own, output to `stdout` (stderr merged into it unless
    `stderr` says otherwise), stdin closed, and on Linux SIGTERM to it when the thread that
    started it dies."""
    return subprocess.Popen(
        [os.fspath(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=stdout,
        stderr=stderr, env=None if env is None else dict(env), cwd=cwd, text=text,
        start_new_session=True,
        preexec_fn=_die_with(os.getpid()) if sys.platform.startswith("linux") else None)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group and reap the child."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def ctrl_c_held():
    """Hold a Ctrl-C that arrives while a child starts, then raise it: a KeyboardInterrupt in
    the middle of Popen() would lose the child's pid and leave it running."""
    if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield  # only the main thread gets signals; a custom handler (Jupyter's) is left alone
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


class DeadlinePassed(Exception):
    """The command outlived its deadline; it and everything it started were killed."""


def run_with_deadline(cmd: list[str], deadline_s: float) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `cmd`; DeadlinePassed if it outlives the deadline. Its
    process group is killed whole on the deadline or on any interruption (Ctrl-C included)."""
    proc = None
    try:
        with ctrl_c_held():
            proc = start(cmd, text=True)
        output, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise DeadlinePassed(f"no result within {deadline_s:g} s") from None
    finally:
        if proc is not None and proc.poll() is None:
            kill_group(proc)
    return proc.returncode, output

"""Starting and stopping a command so that nothing it starts outlives us.

Each child gets a session (a process group) of its own, so stopping it (stop_process_tree) stops
everything it started, torchrun's workers in sessions of their own included; on Linux it also
gets the kernel's parent-death signal: if the process that started it dies, even by SIGKILL (a
notebook kernel killed for memory, a forced restart), the child gets SIGTERM. torchrun passes
that on to its workers, so on Trainium no worker keeps holding a NeuronCore.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Mapping, Sequence

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_GRACE_S = 5.0  # how long stopped processes get to exit on SIGTERM before SIGKILL


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


def _is_alive(member) -> bool:
    import psutil

    try:
        return member.is_running() and member.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_process_tree(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM the process, its group and every descendant; SIGKILL what is left after grace_s;
    reap the child. Returns the pids it stopped. The descendants are collected first: once
    torchrun dies its workers (in sessions of their own) are re-parented and could no longer
    be found through it."""
    import psutil  # here: the scripts that never stop a child do not load it

    try:
        family = [psutil.Process(proc.pid)]
        family += family[0].children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # the group start() gave it
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.send_signal(sig)
        deadline = time.monotonic() + grace_s
        while any(_is_alive(m) for m in family) and time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)  # reap our own child so it does not linger as a zombie
        if not any(_is_alive(m) for m in family):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace_s, 1.0))
    return [m.pid for m in family]


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
    process tree is killed whole on the deadline or on any interruption (Ctrl-C included)."""
    proc = None
    try:
        with ctrl_c_held():
            proc = start(cmd, text=True)
        output, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        stop_process_tree(proc, grace_s=0.0)
        raise DeadlinePassed(f"no result within {deadline_s:g} s") from None
    finally:
        if proc is not None and proc.poll() is None:
            stop_process_tree(proc, grace_s=0.0)
    return proc.returncode, output

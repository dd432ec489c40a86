"""Run a training command from a notebook or a test, its output streamed live, line by line.

    run_streaming(["python", "../mnist_mlp/train.py", "--epochs", "1"], timeout=600)
    run_torchrun("../mnist_mlp/train_torchrun.py", nproc_per_node=2, timeout=600)

run_torchrun builds on run_streaming. Every rank's line arrives prefixed with its global rank,
`[rank1]: ...`: torchrun prefixes them itself (`--tee 3` plus the
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE it reads). On a hang the timeout stops the whole
process tree (torchrun starts each worker in a session of its own, so its process group alone
is not enough). On failure the exception carries the failing rank's error: torchrun's
"Root Cause (first observed failure)" summary, with the traceback when the script wraps its
entry point in `torch.distributed.elastic.multiprocessing.errors.record`.
Printing is all the display there is: in a terminal it goes to stdout, in Jupyter to the cell.
"""
from __future__ import annotations

import io
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import psutil

from helpers.backend import check_worker_count, instance_type

# torchrun's own per-rank line prefix, global rank (so two nodes' ranks differ too).
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "
RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(.*)$")
DEFAULT_MASTER_PORT = 29500
# How long stopped processes get to exit on SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0
# How many of a failing command's last lines go into the exception when there is no summary.
ERROR_TAIL_LINES = 25


@dataclass
class RunResult:
    cmd: list[str]
    returncode: int
    lines: list[str] = field(repr=False)  # every output line (stdout and stderr), no newline

    def lines_by_rank(self) -> dict[int, list[str]]:
        return lines_by_rank(self.lines)


class CommandError(RuntimeError):
    """A streamed command failed or timed out. `lines` holds all it printed."""

    def __init__(self, message: str, *, cmd: Sequence[str], returncode: int | None,
                 lines: list[str], summary: str):
        super().__init__(message)
        self.cmd = list(cmd)
        self.returncode = returncode
        self.lines = lines
        self.summary = summary  # the failing rank's error, or the command's last lines


class CommandFailed(CommandError):
    """The command exited with a non-zero code."""


class CommandTimedOut(CommandError):
    """The command ran past its timeout; its whole process tree was stopped."""


def lines_by_rank(lines: Sequence[str]) -> dict[int, list[str]]:
    """Split torchrun output into each rank's lines, prefixes removed (torchrun's own lines dropped)."""
    by_rank: dict[int, list[str]] = {}
    for line in lines:
        m = RANK_LINE.match(line)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append(m.group(2))
    return by_rank


def _pump_lines(stream: io.TextIOBase, sink: queue.Queue) -> None:
    """Reader thread: hand each complete output line to the main thread as it arrives."""
    for chunk in iter(stream.readline, ""):
        # With newline="" a line keeps its ending. One ending in a bare "\r" is a progress
        # bar redrawing itself: skipped, its final state arrives as a normal line.
        if chunk.endswith("\r"):
            continue
        sink.put(chunk.rstrip("\r\n"))
    sink.put(None)


def _is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_process_tree(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM the process, its group and every descendant; SIGKILL what is left after grace_s.

    Returns the pids it stopped. The descendants are collected first: once torchrun dies its
    workers are re-parented and could no longer be found through it.
    """
    try:
        family = [psutil.Process(proc.pid)]
        family += family[0].children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)  # the group start_new_session gave it
        except ProcessLookupError:
            pass
        for member in family:
            try:
                member.send_signal(sig)  # members in sessions of their own (torchrun workers)
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + grace_s
        while any(_is_alive(m) for m in family) and time.monotonic() < deadline:
            try:
                proc.wait(timeout=0.1)  # reap our own child so it does not linger as a zombie
            except subprocess.TimeoutExpired:
                pass
        if not any(_is_alive(m) for m in family):
            break
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    return [m.pid for m in family]


def run_streaming(cmd: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | os.PathLike | None = None,
                  on_line: Callable[[str], object] = print, check: bool = True,
                  failure_summary: Callable[[list[str]], str] | None = None) -> RunResult:
    """Run `cmd`, passing each output line (stdout and stderr merged) to `on_line` as it arrives.

    env: variables set on top of the current environment (PYTHONUNBUFFERED=1 is added so a
    Python child's lines are not held back in its buffer). timeout: seconds for the whole run;
    past it the whole process tree is stopped and CommandTimedOut raised. A non-zero exit
    raises CommandFailed (unless check=False) whose summary is failure_summary(lines), by
    default the last lines printed. Interrupting (Ctrl-C, Jupyter's stop button) stops the
    process tree too.
    """
    cmd = [os.fspath(c) for c in cmd]
    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=full_env, cwd=cwd,
                            start_new_session=True)
    stream = io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace", newline="")
    sink: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_pump_lines, args=(stream, sink), daemon=True)
    reader.start()
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        # Lines are printed from this (the calling) thread: in Jupyter that keeps them in the cell.
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            try:
                line = sink.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                break
            lines.append(line)
            on_line(line)
        if not timed_out:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                timed_out = True  # closed its output but kept running
    except BaseException:
        stop_process_tree(proc)
        raise
    if timed_out:
        pids = stop_process_tree(proc)
        message = (f"Timed out after {timeout:g} s: stopped the whole process tree "
                   f"({len(pids)} process(es)) of: {shlex.join(cmd)}")
        on_line(message)
        raise CommandTimedOut(message, cmd=cmd, returncode=proc.returncode, lines=lines,
                              summary="\n".join(lines[-ERROR_TAIL_LINES:]))
    reader.join(timeout=1)
    if proc.returncode != 0 and check:
        summary = (failure_summary or _last_lines)(lines)
        raise CommandFailed(f"Command failed with exit code {proc.returncode}: {shlex.join(cmd)}\n"
                            f"{summary}", cmd=cmd, returncode=proc.returncode, lines=lines,
                            summary=summary)
    return RunResult(cmd=cmd, returncode=proc.returncode, lines=lines)


def _last_lines(lines: list[str]) -> str:
    return "\n".join(lines[-ERROR_TAIL_LINES:])


def torchrun_failure_summary(lines: list[str]) -> str:
    """The failing rank's error: torchrun's "Root Cause" block, plus that rank's last lines
    when the block has no traceback (the script does not use @record)."""
    start = next((i for i, line in enumerate(lines)
                  if "Root Cause (first observed failure)" in line), None)
    if start is None:
        return _last_lines(lines)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("====")),
               len(lines))
    block = lines[start:end]
    fields = dict(re.findall(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)", "\n".join(block), re.M))
    if "rank" not in fields:
        return "\n".join(block)
    rank = int(fields["rank"])
    summary = f"Rank {rank} failed (exit code {fields.get('exitcode', '?')}). torchrun's summary:\n"
    summary += "\n".join(block)
    if not any("Traceback (most recent call last)" in line for line in block):
        own = lines_by_rank(lines).get(rank, [])[-ERROR_TAIL_LINES:]
        if own:
            summary += f"\nLast lines of rank {rank}:\n" + "\n".join(own)
    return summary


def _torchrun_options(nproc_per_node: int, nnodes: int, node_rank: int,
                      master_addr: str | None, master_port: int | None) -> list[str]:
    for name, value in (("nproc_per_node", nproc_per_node), ("nnodes", nnodes),
                        ("node_rank", node_rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
    check_worker_count(nproc_per_node, None)  # < 1: clear error; per-instance limits elsewhere
    if nnodes < 1:
        raise ValueError(f"--nnodes must be at least 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"--node_rank must be 0..{nnodes - 1} for --nnodes={nnodes}, got {node_rank}")
    if nnodes > 1 and not master_addr:
        raise ValueError("a multi-node run needs master_addr: the address of the node with "
                         "node_rank 0 (its private IP), the same on every node")
    options = [f"--nproc_per_node={nproc_per_node}"]
    if nnodes > 1:
        options += [f"--nnodes={nnodes}", f"--node_rank={node_rank}"]
    if master_addr:
        options.append(f"--master_addr={master_addr}")
    if master_port is not None or nnodes > 1:
        options.append(f"--master_port={master_port or DEFAULT_MASTER_PORT}")
    return options


def torchrun_argv(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                  nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                  master_addr: str | None = None, master_port: int | None = None,
                  tee: bool = True, python: str = sys.executable) -> list[str]:
    """The argv of `torchrun ... script args`, run as `python -m torch.distributed.run` so the
    torchrun of this Python's environment is the one used. tee=True adds `--tee 3`: each rank's
    stdout and stderr reach the console prefixed with its rank."""
    options = _torchrun_options(nproc_per_node, nnodes, node_rank, master_addr, master_port)
    if tee:
        options.append("--tee=3")
    return [python, "-m", "torch.distributed.run", *options, os.fspath(script),
            *map(str, script_args)]


def torchrun_command_line(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                          nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                          master_addr: str | None = None, master_port: int | None = None) -> str:
    """The same command as a user types it in a shell: `torchrun --nproc_per_node=2 ...`."""
    options = _torchrun_options(nproc_per_node, nnodes, node_rank, master_addr, master_port)
    return shlex.join(["torchrun", *options, os.fspath(script), *map(str, script_args)])


def free_port() -> int:
    """A TCP port nobody listens on right now (so parallel runs do not fight over 29500)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_torchrun(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                 nproc_per_node: int, timeout: float, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike | None = None, master_port: int | None = None,
                 on_line: Callable[[str], object] = print, check: bool = True) -> RunResult:
    """`torchrun --nproc_per_node=N script args` on this machine, every rank's lines streamed live.

    Raises ValueError before launching when N is not a worker count this instance supports,
    CommandFailed carrying the failing rank's error, CommandTimedOut after stopping every
    process of the run. master_port=None picks a free port.
    """
    argv = torchrun_argv(script, script_args, nproc_per_node=nproc_per_node,
                         master_port=master_port or free_port())
    check_worker_count(nproc_per_node, instance_type())
    run_env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE, **(env or {})}
    return run_streaming(argv, timeout=timeout, env=run_env, cwd=cwd, on_line=on_line,
                         check=check, failure_summary=torchrun_failure_summary)

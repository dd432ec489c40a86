"""Run a command from a notebook or a test with its output streamed live, line by line;
on a timeout stop its whole process tree; on failure raise with its last lines.

    run_streaming(["python", "../mnist_mlp/train.py", "--epochs", "1"], timeout=600)
"""
from __future__ import annotations

import io
import os
import queue
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from mnist_mlp.common import child_process
from mnist_mlp.common.child_process import stop_process_tree

# torchrun's own per-rank line prefix, global rank (so two nodes' ranks differ too).
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "
RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(.*)$")
# How many of a failing command's last lines go into the exception when there is no summary.
ERROR_TAIL_LINES = 25
# Variables this process set for itself alone, and what a command it starts gets instead (None:
# left unset). helpers.setup.notebook_kernel.setup pins the kernel to NEURON_RT_VISIBLE_CORES=0; a script the
# kernel starts gets the cores the kernel left (1 on a trn1.2xlarge), since the runtime would
# refuse it core 0 while the kernel lives.
KERNEL_ONLY: dict[str, str | None] = {}


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a started command gets: this one with KERNEL_ONLY's replacements, plus `env`."""
    base = {k: v for k, v in os.environ.items() if k not in KERNEL_ONLY}
    base.update({k: v for k, v in KERNEL_ONLY.items() if v is not None})
    return {**base, "PYTHONUNBUFFERED": "1", **(env or {})}


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


def venv_bin_first(path: str | None, python: str = sys.executable) -> str:
    """PATH with this Python's bin/ first, so `torchrun`, `neuronx-cc` and `neuron_parallel_compile`
    looked up by name are this venv's even when it was never activated (JupyterLab started
    without `source .venv/bin/activate`: aws-neuron/aws-neuron-sdk#737)."""
    bin_dir = os.path.dirname(os.path.abspath(python))  # not resolved: a venv's python is a symlink
    entries = [p for p in (path or "").split(os.pathsep) if p and os.path.abspath(p) != bin_dir]
    return os.pathsep.join([bin_dir, *entries])


def _pump_lines(stream: io.TextIOBase, sink: queue.Queue, tag=None) -> None:
    """Reader thread: hand each complete output line to the main thread as it arrives; the
    pipe is closed at its end (left to the garbage collector, it warns of an unclosed file)."""
    with stream:
        for chunk in iter(stream.readline, ""):
            # With newline="" a line keeps its ending. One ending in a bare "\r" is a progress
            # bar redrawing itself: skipped, its final state arrives as a normal line.
            if chunk.endswith("\r"):
                continue
            line = chunk.rstrip("\r\n")
            sink.put(line if tag is None else (tag, line))
    sink.put(None if tag is None else (tag, None))


def start_streamed(cmd: Sequence[str], sink: queue.Queue, tag, *,
                   env: Mapping[str, str] | None = None,
                   cwd: str | os.PathLike | None = None) -> subprocess.Popen:
    """Start `cmd` (child_process.start) with the child environment; a reader thread puts each of
    its output lines into sink as (tag, line), then (tag, None) when its output closes (tag None:
    line, then None)."""
    full_env = child_environment(env)
    full_env["PATH"] = venv_bin_first(full_env.get("PATH"))
    proc = child_process.start(cmd, env=full_env, cwd=cwd)
    stream = io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace", newline="")
    threading.Thread(target=_pump_lines, args=(stream, sink, tag), daemon=True).start()
    return proc


# A run's summary: what a later run in the same notebook shows instead of its whole log (the
# first run shows it all). The compiler wrapper's lines stay: on a trn1 they are the lesson
# ("Using a cached neff", "Compilation Successfully Completed for model.MODULE_…"). They are found
# by their messages, and by the wrapper's tag in either of its spellings: `||NCC_WRAPPER||` up to
# neuronxcc 2.8 (the docs' 2023 examples), then `||NEURON_CC_WRAPPER||` (users' logs from 2.12 on);
# from Neuron 2.29 the wrapper prints `[INFO]:` and no tag (tests/platform_output/corpus.yaml).
# Errors stay, whatever prints them (the wrapper's and the runtime's `ERROR` level, Python's errors).
# torch-xla's CPU client's reload complaints ("Deserializing serialized executable not
# supported", the stand-in's cache) are counted by notebook 03, not shown. The compile notice's
# lines stay too (mnist_mlp/common/compile_notice.py): a wait is never silent.
WRAPPER_MESSAGES = (r"Using a cached neff|Got a cached failed neff|Failed compilation with|"
                    r"[Cc]ompilation failed|Another process must be compiling|"
                    r"Compilation Successfully Completed")
SUMMARY_LINE = re.compile(r"^Backend:|New graphs|Graphs compiled|Train throughput|Test accuracy|"
                          r"\|\|(?:NEURON_CC|NCC)_WRAPPER\|\||" + WRAPPER_MESSAGES + "|"
                          r"Total (?:graphs|successful|failed)|\bERROR\b|Error|error:|"
                          r"^Compil(?:ing|ed) a graph|^Compile failed|whose compile failed before")
STAND_IN_RELOAD = re.compile(r"[Dd]eserializ")


def summary_only(line: str) -> None:
    """An on_line for run_streaming that prints only a run's summary lines."""
    if SUMMARY_LINE.search(line) and not STAND_IN_RELOAD.search(line):
        print(line)


def without_reload_errors(line: str) -> None:
    """An on_line that prints the whole log but the stand-in's cache-reload complaints."""
    if not STAND_IN_RELOAD.search(line):
        print(line)


def run_streaming(cmd: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
                  cwd: str | os.PathLike | None = None,
                  on_line: Callable[[str], object] = print, check: bool = True,
                  failure_summary: Callable[[list[str]], str] | None = None) -> RunResult:
    """Run `cmd`, passing each output line (stdout and stderr merged) to `on_line` as it arrives.

    env: variables set on top of the current environment (PYTHONUNBUFFERED=1 is added so a
    Python child's lines are not held back in its buffer; this Python's bin/ goes first on
    PATH). timeout: seconds for the whole run; past it the whole process tree is stopped and
    CommandTimedOut raised. A non-zero exit
    raises CommandFailed (unless check=False) whose summary is failure_summary(lines), by
    default the last lines printed. Interrupting (Ctrl-C, Jupyter's stop button) stops the
    process tree too.
    """
    cmd = [os.fspath(c) for c in cmd]
    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    sink: queue.Queue = queue.Queue()  # untagged lines, then None when the output closes
    proc = start_streamed(cmd, sink, None, env=env, cwd=cwd)
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
    if proc.returncode != 0 and check:
        summary = (failure_summary or last_lines)(lines)
        raise CommandFailed(f"Command failed with exit code {proc.returncode}: {shlex.join(cmd)}\n"
                            f"{summary}", cmd=cmd, returncode=proc.returncode, lines=lines,
                            summary=summary)
    return RunResult(cmd=cmd, returncode=proc.returncode, lines=lines)


def last_lines(lines: list[str]) -> str:
    return "\n".join(lines[-ERROR_TAIL_LINES:])


def free_port() -> int:
    """A TCP port nobody listens on right now (so parallel runs do not fight over 29500)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

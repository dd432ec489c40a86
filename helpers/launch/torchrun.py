"""torchrun from a notebook: the command line a user types, and a run with every rank's lines
streamed live (`[rank1]: ...`, torchrun's own prefix) and the failing rank's error on failure.

    run_torchrun("../mnist_mlp/train_torchrun.py", nproc_per_node=2, timeout=600)
"""
from __future__ import annotations

import os
import platform
import re
import shlex
import sys
from typing import Callable, Mapping, Sequence

from helpers.launch.processes import (ERROR_TAIL_LINES, RANK_PREFIX_TEMPLATE, RunResult, last_lines,
                               free_port, lines_by_rank, run_streaming)
from mnist_mlp.backend import check_worker_count, instance_type

DEFAULT_MASTER_PORT = 29500
# Set-up chatter that says nothing about training: torchrun's OMP_NUM_THREADS banner (and its
# rule of stars), gloo's "Rank N is connected to M peer ranks", blank lines.
SETUP_NOISE = re.compile(r"^\*+\s*$|OMP_NUM_THREADS environment variable|"
                         r"\[Gloo\] Rank \d+ is connected|^(\[rank\d+\]: ?)?\s*$")
# Multi-node runs over EFA (trn1.32xlarge / trn1n.32xlarge: the smaller sizes have no EFA and cannot
# run multi-node jobs) set these on every node: Neuron guide "How to prepare trn1.32xlarge for
# multi-node execution". FI_EFA_FORK_SAFE=1 only on Linux kernels older than 5.15 (Amazon Linux 2's
# 5.10): without it the runtime disables multi-node collectives (Neuron Runtime troubleshooting).
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
FORK_SAFE_ENV = {"FI_EFA_FORK_SAFE": "1"}
FORK_SAFE_BEFORE_KERNEL = (5, 15)


def efa_env(kernel_release: str | None = None) -> dict[str, str]:
    """The EFA variables for a multi-node run; kernel_release (`uname -r` on the nodes, by default
    this machine's) decides whether FI_EFA_FORK_SAFE=1 is among them."""
    release = platform.release() if kernel_release is None else kernel_release
    m = re.match(r"(\d+)\.(\d+)", release)
    if not m:
        raise ValueError(f"kernel release {release!r}: expected `uname -r` output, "
                         "e.g. 6.8.0-1015-aws")
    old_kernel = (int(m.group(1)), int(m.group(2))) < FORK_SAFE_BEFORE_KERNEL
    return {**EFA_ENV, **(FORK_SAFE_ENV if old_kernel else {})}


def torchrun_failure_summary(lines: list[str]) -> str:
    """The failing rank's error: torchrun's "Root Cause" block, plus that rank's last lines
    when the block has no traceback (the script does not use @record)."""
    start = next((i for i, line in enumerate(lines)
                  if "Root Cause (first observed failure)" in line), None)
    if start is None:
        return last_lines(lines)
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
                      master_addr: str | None, master_port: int | None,
                      rdzv_timeout: int | None = None) -> list[str]:
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
    if rdzv_timeout is not None:
        if isinstance(rdzv_timeout, bool) or not isinstance(rdzv_timeout, int) or rdzv_timeout < 1:
            raise ValueError(f"rdzv_timeout must be a whole number of seconds >= 1, got {rdzv_timeout!r}")
        # The static rendezvous' wait for the other nodes (torchrun's default: 900 s).
        options.append(f"--rdzv_conf=timeout={rdzv_timeout}")
    return options


def torchrun_argv(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                  nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                  master_addr: str | None = None, master_port: int | None = None,
                  rdzv_timeout: int | None = None, tee: bool = True,
                  python: str = sys.executable) -> list[str]:
    """The argv of `torchrun ... script args`, run as `python -m torch.distributed.run` so the
    torchrun of this Python's environment is the one used. tee=True adds `--tee 3`: each rank's
    stdout and stderr reach the console prefixed with its rank. rdzv_timeout: seconds a node
    waits for the others at the rendezvous (`--rdzv_conf=timeout=S`)."""
    options = _torchrun_options(nproc_per_node, nnodes, node_rank, master_addr, master_port,
                                rdzv_timeout)
    if tee:
        options.append("--tee=3")
    return [python, "-m", "torch.distributed.run", *options, os.fspath(script),
            *map(str, script_args)]


def torchrun_command_line(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                          nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                          master_addr: str | None = None, master_port: int | None = None,
                          kernel_release: str | None = None) -> str:
    """The same command as a user types it in a shell: `torchrun --nproc_per_node=2 ...`.
    With nnodes > 1 it starts with the EFA variables, `FI_PROVIDER=efa ... torchrun ...`
    (see efa_env for kernel_release)."""
    options = _torchrun_options(nproc_per_node, nnodes, node_rank, master_addr, master_port)
    env = [f"{k}={v}" for k, v in efa_env(kernel_release).items()] if nnodes > 1 else []
    return shlex.join([*env, "torchrun", *options, os.fspath(script), *map(str, script_args)])


def run_torchrun(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                 nproc_per_node: int, timeout: float, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike | None = None, master_port: int | None = None,
                 on_line: Callable[[str], object] = print, check: bool = True,
                 log_path: str | os.PathLike | None = None, show_setup_lines: bool = False
                 ) -> RunResult:
    """`torchrun --nproc_per_node=N script args` on this machine, every rank's lines streamed live.

    Raises ValueError before launching when N is not a worker count this instance supports,
    CommandFailed carrying the failing rank's error, CommandTimedOut after stopping every
    process of the run. master_port=None picks a free port. torchrun's OMP_NUM_THREADS banner
    and gloo's connection lines are not shown unless show_setup_lines; log_path gets every line.
    """
    argv = torchrun_argv(script, script_args, nproc_per_node=nproc_per_node,
                         master_port=master_port or free_port())
    check_worker_count(nproc_per_node, instance_type())
    run_env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE, **(env or {})}
    log = open(log_path, "w") if log_path is not None else None

    def show(line: str) -> None:
        if log is not None:
            log.write(line + "\n")
        if show_setup_lines or not SETUP_NOISE.search(line):
            on_line(line)

    try:
        return run_streaming(argv, timeout=timeout, env=run_env, cwd=cwd, on_line=show,
                             check=check, failure_summary=torchrun_failure_summary)
    finally:
        if log is not None:
            log.close()


# --------------------------------------------------------------------------- nodes
# torchrun's static rendezvous: node 0 hosts a TCP store at master_addr:master_port and waits
# for the others; every other node connects to it. What each says when the other never comes:
NODE0_GAVE_UP = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")
CLIENT_GAVE_UP = re.compile(r"timed out after (\d+)ms while trying to connect to \(([^,]+), (\d+)\)")
LOOPBACK = "127.0.0.1"
# How long run_nodes waits for node 0's rendezvous port before it starts the next node.
NODE0_LISTEN_TIMEOUT_S = 60.0


def missing_node_message(lines: Sequence[str], node_rank: int, nnodes: int) -> str | None:
    """What a node that stopped at the rendezvous says, in words that name the missing node;
    None when its lines show no rendezvous time-out."""
    text = "\n".join(lines)
    m = NODE0_GAVE_UP.search(text)
    if m:
        waited, joined, total = map(int, m.groups())
        missing = ("node 1" if total == 2 else
                   f"{total - joined} of nodes 1-{total - 1} (their node_rank)")
        return (f"Node {node_rank} stopped after {waited} s at the rendezvous: {missing} never "
                f"joined ({joined} of {total} nodes came). Start every other node within the "
                f"rendezvous timeout, with the same --nnodes, --master_addr and --master_port, "
                f"and check that the nodes can reach each other on that port.")
    m = CLIENT_GAVE_UP.search(text)
    if m:
        waited_ms, addr, port = int(m.group(1)), m.group(2), m.group(3)
        return (f"Node {node_rank} stopped: node 0, which hosts the rendezvous at {addr}:{port}, "
                f"never answered ({waited_ms / 1000:g} s per attempt). Start node 0 "
                f"(--node_rank=0) within the rendezvous timeout (either node may start first); "
                f"check that --master_addr is node 0's private IP and that the security group "
                f"lets the nodes reach each other on port {port}.")
    return None


def side_by_side(column: int, line: str, width: int = 64, columns: int = 2) -> str:
    """One node's output line placed in its column (node 0 left, node 1 right), wrapped between
    words (a word longer than the column overflows it rather than being cut)."""
    import textwrap

    chunks = textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False,
                           drop_whitespace=True) or [""]
    rows = []
    for chunk in chunks:
        cells = [" " * width] * columns
        cells[column] = chunk.ljust(width)
        rows.append(" │ ".join(cells).rstrip())
    return "\n".join(rows)


def _wait_listening(host: str, port: int, proc, timeout: float) -> bool:
    """True once something accepts connections at host:port; False if proc exits or time runs out."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((host, port)) == 0:
                return True
        time.sleep(0.2)
    return False


def run_nodes(script: str | os.PathLike, script_args: Sequence[str] = (), *,
              node_ranks: Sequence[int] = (0, 1), nnodes: int = 2, nproc_per_node: int = 1,
              timeout: float, rdzv_timeout: int = 120, master_port: int | None = None,
              env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
              on_line: Callable[[str], object] = print, width: int = 64,
              first: int | None = None, head_start: float = 5.0) -> dict[int, RunResult]:
    """Run `nnodes` torchrun "nodes" on this machine (loopback), those of node_ranks here: node 0
    first, the next once node 0's rendezvous port listens. Their lines are shown side by side,
    one column per node. Returns each node's RunResult.

    first=1 starts node 1 first (default: the lowest of node_ranks) and node 0 `head_start`
    seconds later: torchrun's static
    rendezvous makes node 1 retry its connection to node 0's store until the rendezvous timeout,
    so the order does not matter as long as node 0 comes within it.

    A node that fails stops the others at once and raises CommandFailed naming the node (a
    node that never came is named as missing); past `timeout` every node is stopped and
    CommandTimedOut raised. node_ranks=(0,) runs node 0 alone: it waits rdzv_timeout seconds
    for the missing node, then stops.
    """
    import queue
    import shlex
    import time

    from helpers.launch.processes import CommandFailed, CommandTimedOut, start_streamed, stop_process_tree

    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    if sorted(set(node_ranks)) != sorted(node_ranks) or not node_ranks:
        raise ValueError(f"node_ranks must be distinct ranks of 0..{nnodes - 1}, got {node_ranks!r}")
    first = min(node_ranks) if first is None else first
    if first not in node_ranks:
        raise ValueError(f"first must be one of node_ranks {tuple(node_ranks)}, got {first!r}")
    port = master_port or free_port()
    argvs = {rank: torchrun_argv(script, script_args, nproc_per_node=nproc_per_node,
                                 nnodes=nnodes, node_rank=rank, master_addr=LOOPBACK,
                                 master_port=port, rdzv_timeout=rdzv_timeout)
             for rank in sorted(node_ranks)}
    run_env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE, **(env or {})}
    columns = {rank: i for i, rank in enumerate(sorted(node_ranks))}
    header = [f"node {rank}".ljust(width) for rank in sorted(node_ranks)]
    on_line(" │ ".join(header).rstrip())
    sink: queue.Queue = queue.Queue()
    procs: dict[int, object] = {}
    lines: dict[int, list[str]] = {rank: [] for rank in argvs}
    deadline = time.monotonic() + timeout

    def show(rank: int, line: str) -> None:
        lines[rank].append(line)
        if not SETUP_NOISE.search(line):
            on_line(side_by_side(columns[rank], line, width, len(columns)))

    def drain() -> None:
        while True:
            try:
                rank, line = sink.get_nowait()
            except queue.Empty:
                return
            if line is not None:
                show(rank, line)

    def stop_all() -> None:
        for proc in procs.values():
            if proc.poll() is None:
                stop_process_tree(proc)

    order = [first, *(rank for rank in sorted(argvs) if rank != first)]
    try:
        for rank in order:
            procs[rank] = start_streamed(argvs[rank], sink, rank, env=run_env, cwd=cwd)
            if rank == order[-1]:
                break
            if rank == 0:  # the next node finds node 0's store listening at once
                _wait_listening(LOOPBACK, port, procs[0],
                                min(NODE0_LISTEN_TIMEOUT_S, deadline - time.monotonic()))
            else:  # a real head start: this node retries its connection to node 0 meanwhile
                on_line(f"node {rank} started first; the next node starts in {head_start:g} s")
                time.sleep(head_start)
            drain()
        open_streams = set(argvs)
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stop_all()
                drain()
                message = (f"Timed out after {timeout:g} s: stopped nodes {sorted(argvs)} "
                           f"(every process of each)")
                on_line(message)
                raise CommandTimedOut(message, cmd=argvs[min(argvs)], returncode=None,
                                      lines=[l for r in argvs for l in lines[r]],
                                      summary=message)
            try:
                rank, line = sink.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is not None:
                show(rank, line)
                continue
            open_streams.discard(rank)
            code = procs[rank].wait(timeout=max(deadline - time.monotonic(), 1))
            if code != 0:
                stop_all()  # the other nodes would wait for this one until their timeouts
                drain()
                summary = (missing_node_message(lines[rank], rank, nnodes)
                           or torchrun_failure_summary(lines[rank]))
                raise CommandFailed(f"Node {rank} failed with exit code {code}: "
                                    f"{shlex.join(argvs[rank])}\n{summary}", cmd=argvs[rank],
                                    returncode=code, lines=lines[rank], summary=summary)
    except BaseException:
        stop_all()
        raise
    return {rank: RunResult(cmd=argvs[rank], returncode=procs[rank].returncode, lines=lines[rank])
            for rank in argvs}

"""Several nodes on one machine or several (notebook 04, tests/test_two_nodes.py): torchrun's static
rendezvous, both nodes' output side by side, and what each says when another node never comes."""
from __future__ import annotations

import os
import re
from typing import Callable, Mapping, Sequence

from helpers.launch.processes import RANK_PREFIX_TEMPLATE, RunResult, free_port
from helpers.launch.torchrun import SETUP_NOISE, torchrun_argv, torchrun_failure_summary

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


def node_cores(node_rank: int, nproc_per_node: int) -> dict[str, str]:
    """The NeuronCores of one loopback "node": its own, as on separate machines. Without this
    both nodes' workers would ask for the same cores (the start-up at `import torch_xla` gives a
    torchrun worker its LOCAL_RANK's core) and the runtime could refuse the second node
    (core_holders.CORE_RULE). With one worker per node (notebook 04) the range is one core. With
    more, the start-up hands each worker its LOCAL_RANK-th core of the range (docs/sources.md,
    "How torch-neuronx 2.9 sets up a process's cores"). Ignored where there is no NeuronCore."""
    first = node_rank * nproc_per_node
    last = first + nproc_per_node - 1
    return {"NEURON_RT_VISIBLE_CORES": str(first) if first == last else f"{first}-{last}"}


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

    from helpers.launch.processes import CommandFailed, CommandTimedOut, start_streamed
    from mnist_mlp.common.child_process import stop_process_tree

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
    node_env = {rank: {**node_cores(rank, nproc_per_node), **run_env} for rank in argvs}
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
            procs[rank] = start_streamed(argvs[rank], sink, rank, env=node_env[rank], cwd=cwd)
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
                                      lines=[line for r in argvs for line in lines[r]],
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

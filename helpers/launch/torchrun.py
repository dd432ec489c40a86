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

from helpers.launch.processes import (
    ERROR_TAIL_LINES,
    RANK_PREFIX_TEMPLATE,
    RunResult,
    free_port,
    last_lines,
    lines_by_rank,
    run_streaming,
)
from mnist_mlp.common.backend import check_worker_count, instance_type

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
                 log_path: str | os.PathLike | None = None) -> RunResult:
    """`torchrun --nproc_per_node=N script args` on this machine, every rank's lines streamed live.

    Raises ValueError before launching when N is not a worker count this instance supports,
    CommandFailed carrying the failing rank's error, CommandTimedOut after stopping every
    process of the run. master_port=None picks a free port. torchrun's OMP_NUM_THREADS banner
    and gloo's connection lines are not shown; log_path gets every line.
    """
    argv = torchrun_argv(script, script_args, nproc_per_node=nproc_per_node,
                         master_port=master_port or free_port())
    check_worker_count(nproc_per_node, instance_type())
    run_env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE, **(env or {})}
    log = open(log_path, "w") if log_path is not None else None

    def show(line: str) -> None:
        if log is not None:
            log.write(line + "\n")
        if not SETUP_NOISE.search(line):
            on_line(line)

    try:
        return run_streaming(argv, timeout=timeout, env=run_env, cwd=cwd, on_line=show,
                             check=check, failure_summary=torchrun_failure_summary)
    finally:
        if log is not None:
            log.close()

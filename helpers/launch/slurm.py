"""train_torchrun.py as a Slurm job (deploy/slurm/train_torchrun.sbatch): what each node runs,
its worker count and, on Neuron nodes only, the EFA variables; and, when the job fails, one
sentence naming the node that stopped it. The batch script calls both from a shell:

    eval "$(python -m helpers.launch.slurm node-env)"      # on each node, under srun
    python -m helpers.launch.slurm report LOG NODE0 NODE1  # after srun failed
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from helpers.launch.nodes import CLIENT_GAVE_UP, NODE0_GAVE_UP
from helpers.launch.torchrun import efa_env
from mnist_mlp.common.backend import visible_neuron_cores

# Where a node has no NeuronCore (PyTorch/XLA's CPU stand-in): one worker per node, so that two
# nodes train what two workers on one node do.
STAND_IN_WORKERS = 1
# `srun --label` puts the task number before each line of that task; with one task per node
# the task number is the node's rank (SLURM_NODEID).
LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")
# srun's own report of a task that ended badly ("srun: error: n1: task 1: Killed"), and of a
# node Slurm lost while the step ran.
TASK_ENDED = re.compile(r"srun: error: (\S+): tasks? (\d+)(?:[-,]\S*)?: (.+)$")
NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")


@dataclass(frozen=True)
class NodePlan:
    """One node's part of the job: its torchrun worker count and the variables it sets."""
    workers: int
    neuron_cores: int  # the NeuronCores this node shows (0: the CPU stand-in)
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """Lines a shell `eval`s: `workers=N`, `neuron_cores=N`, `export NAME=value`."""
        lines = [f"workers={self.workers}", f"neuron_cores={self.neuron_cores}"]
        lines += [f"export {name}={shlex.quote(value)}" for name, value in self.env.items()]
        return "\n".join(lines)


def node_plan(env: Mapping[str, str] | None = None, kernel_release: str | None = None,
              sysfs=None, dev_dir=None) -> NodePlan:
    """This node's worker count: WORKERS_PER_NODE when set, else one per NeuronCore (counted as
    the scripts count them, mnist_mlp.common.backend.visible_neuron_cores: 32 on a trn1.32xlarge),
    else STAND_IN_WORKERS. On a Neuron node also the EFA variables of a multi-node run
    (helpers.launch.torchrun.efa_env); none on the stand-in, which has no EFA."""
    env = os.environ if env is None else env
    cores = visible_neuron_cores(env, sysfs, dev_dir)
    neuron = cores > 0 and env.get("PJRT_DEVICE", "").upper() != "CPU"
    raw = env.get("WORKERS_PER_NODE", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"WORKERS_PER_NODE={raw!r}: a whole number of workers >= 1 "
                             f"(unset: one per NeuronCore, {cores} here)")
        workers = int(raw)
    else:
        workers = cores if neuron else STAND_IN_WORKERS
    return NodePlan(workers, cores, efa_env(kernel_release) if neuron else {})


def _node(rank: int, nodes: Sequence[str]) -> str:
    return f"node {rank} ({nodes[rank]})" if rank < len(nodes) else f"node {rank}"


def _rendezvous_report(by_node: dict[int, list[str]], nodes: Sequence[str]) -> str | None:
    """A node that gave up at torchrun's rendezvous, in words naming the node that never came."""
    for rank, lines in sorted(by_node.items()):
        text = "\n".join(lines)
        m = NODE0_GAVE_UP.search(text)
        if m:
            waited, joined, total = map(int, m.groups())
            missing = (_node(1, nodes) if total == 2 else
                       f"{total - joined} of nodes 1-{total - 1} ({', '.join(nodes[1:])})")
            state = (f"`scontrol show node {nodes[1]}`" if total == 2 and len(nodes) > 1
                     else "`sinfo`")
            return (f"The job stopped at the rendezvous: {_node(rank, nodes)} waited {waited} s "
                    f"and {missing} never joined ({joined} of {total} nodes came). Its own "
                    f"lines above say how far it got; {state} shows whether Slurm still has "
                    f"it. If it was only slow to start, raise RDZV_TIMEOUT.")
        m = CLIENT_GAVE_UP.search(text)
        if m:
            addr, port = m.group(2), m.group(3)
            return (f"The job stopped at the rendezvous: {_node(rank, nodes)} never reached "
                    f"{_node(0, nodes)}, which hosts it at {addr}:{port}. Check that the "
                    f"nodes' security group lets them reach each other on that port "
                    f"(docs/parallelcluster.md).")
    return None


def failure_report(lines: Sequence[str], nodes: Sequence[str]) -> str:
    """What stopped a failed srun of train_torchrun.sbatch, naming the node, from the job's
    lines (`srun --label` output and srun's own errors) and the job's nodes in rank order."""
    by_node: dict[int, list[str]] = {}
    ended: list[tuple[str, int, str]] = []
    lost = None
    for line in lines:
        if m := TASK_ENDED.search(line):
            ended.append((m.group(1), int(m.group(2)), m.group(3).strip()))
        elif m := NODE_FAILURE.search(line):
            lost = lost or m.group(1)
        elif m := LABELLED.match(line):
            by_node.setdefault(int(m.group(1)), []).append(m.group(2))
    found = _rendezvous_report(by_node, nodes)
    if found:
        return found
    if lost:
        rank = nodes.index(lost) if lost in nodes else None
        name = _node(rank, nodes) if rank is not None else lost
        return (f"Slurm lost {name} while the job ran, and stopped the job. `scontrol show node "
                f"{lost}` says why; submit the job again (Slurm gives it nodes that are up).")
    if ended:
        host, rank, how = ended[0]
        what = (f"was stopped ({how})" if not how.startswith("Exited")
                else f"failed ({how.lower()})")
        return (f"N{_node(rank, nodes)[1:]} stopped first: its torchrun {what}, and srun stopped the "
                f"other nodes with it (--kill-on-bad-exit). Its lines above (prefixed `{rank}:`) "
                f"end with the cause; a node that died or ran out of memory shows none, "
                f"`scontrol show node {host}` then says whether Slurm still has it.")
    return "The job failed before any node's torchrun started: see srun's lines above."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.launch.slurm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("node-env", help="this node's worker count and variables, for eval")
    report = commands.add_parser("report", help="one sentence on what stopped a failed job")
    report.add_argument("log", help="the job's srun --label output")
    report.add_argument("nodes", nargs="+", help="the job's nodes, node 0 first")
    args = parser.parse_args(argv)
    if args.command == "node-env":
        try:
            plan = node_plan()
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(plan.shell())
        return 0
    with open(args.log, encoding="utf-8", errors="replace") as log:
        print(f"error: {failure_report(log.read().splitlines(), args.nodes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

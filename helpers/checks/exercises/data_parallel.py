"""Notebook 04: torchrun's standalone rendezvous, DistributedSampler's shards."""
from __future__ import annotations

from helpers.checks.exercises.feedback import NOT_YET, RIGHT, WRONG, Feedback


def check_torchrun_standalone(torchrun_args) -> Feedback:
    """04, exercise 1: torchrun arguments for 2 workers on one machine that let torchrun pick the
    rendezvous endpoint itself; parsed by torchrun's own argument parser."""
    from torch.distributed.run import get_args_parser

    name = "Exercise 04.1 (a launch without a port)"
    hint = ("look in `torchrun --help` for the flag meant for a single-node job: it chooses the "
            "rendezvous backend and endpoint (a free port on this machine) by itself.")
    if not isinstance(torchrun_args, (list, tuple)) or not all(isinstance(a, str) for a in torchrun_args):
        return Feedback(name, WRONG, "give a list of strings, e.g. [\"--nproc_per_node=2\", ...].",
                        hint)
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage text: not for the cell
            args = get_args_parser().parse_args(list(torchrun_args))
    except SystemExit:  # argparse's way of saying "unknown or malformed argument"
        return Feedback(name, WRONG, "torchrun's parser refuses these arguments.", hint)
    script = str(args.training_script).replace("\\", "/")
    if not script.endswith("mnist_mlp/train_torchrun.py") or str(args.nproc_per_node) != "2":
        return Feedback(name, WRONG, f"torchrun would run {script} with --nproc_per_node="
                        f"{args.nproc_per_node}; the exercise asks for 2 workers of "
                        "mnist_mlp/train_torchrun.py.", hint)
    if any("master" in a for a in torchrun_args):
        return Feedback(name, WRONG, "no --master_addr or --master_port: torchrun should choose.",
                        hint)
    picks_port = args.standalone or (args.rdzv_backend == "c10d"
                                     and str(args.rdzv_endpoint).endswith(":0"))
    if not picks_port:
        verdict = NOT_YET if list(torchrun_args) == ["--nproc_per_node=2",
                                                     "mnist_mlp/train_torchrun.py"] else WRONG
        return Feedback(name, verdict, "torchrun would use the static rendezvous on the default "
                        f"port {args.master_port}: a second job on this machine would collide.",
                        hint)
    return Feedback(name, RIGHT, "torchrun sets up a c10d rendezvous on localhost with a free "
                    "port itself (--standalone: single-node jobs only), so two jobs on one "
                    "machine never fight over a port.")


def check_distributed_sampler(sampler, rank2_items) -> Feedback:
    """04, exercise 2: torch's DistributedSampler over 10 items for rank 2 of 3, no shuffle, and
    what it yields: it pads the indices to a multiple of the worker count by repeating the first
    ones, so some item is seen twice per epoch."""
    from torch.utils.data.distributed import DistributedSampler

    name = "Exercise 04.2 (torch's own sampler)"
    hint = ("DistributedSampler(dataset, num_replicas=..., rank=..., shuffle=...) needs no process "
            "group when num_replicas and rank are given; any 10-item sequence is a dataset here. "
            "Then list(sampler).")
    if sampler is None and rank2_items is None:
        return Feedback(name, NOT_YET, "no sampler yet.", hint)
    if not isinstance(sampler, DistributedSampler):
        return Feedback(name, WRONG, f"sampler is a {type(sampler).__name__}, not a "
                        "torch.utils.data.distributed.DistributedSampler.", hint)
    settings = (len(sampler.dataset), sampler.num_replicas, sampler.rank, sampler.shuffle)
    if settings != (10, 3, 2, False) or sampler.drop_last:
        return Feedback(name, WRONG, f"this sampler has {settings[0]} items, num_replicas="
                        f"{settings[1]}, rank={settings[2]}, shuffle={settings[3]}, drop_last="
                        f"{sampler.drop_last}; the exercise asks for 10, 3, 2, False, False.", hint)
    truth = list(sampler)
    try:
        given = [int(i) for i in rank2_items]
    except (TypeError, ValueError):
        return Feedback(name, WRONG, "rank2_items should be the list of indices the sampler "
                        "gives: list(sampler).", hint)
    if given != truth:
        return Feedback(name, WRONG, f"{given} is not what this sampler gives rank 2.", hint)
    return Feedback(name, RIGHT, f"rank 2 gets {truth}: 10 items do not divide by 3, so the "
                    "sampler pads the list to 12 by repeating items 0 and 1, and rank 2 takes item "
                    "1, which rank 1 also trains on. Every rank gets 4 items, the same number of "
                    "steps; this workbook's sampler drops instead of repeating.")

"""Data-parallel pieces train_torchrun.py uses: the worker-count check, the gradient all-reduce
(xm.optimizer_step, or the CPU stand-in's gloo all-reduce), each rank's data shard, the replica
check and gathering per-rank figures."""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

REPLICA_TOLERANCE = 1e-6


def average_gradients(parameters, group) -> None:
    """All-reduce the gradients of `parameters` over a CPU (gloo) group and divide by the
    world size.

    One flattened tensor, one collective: what xm.optimizer_step does over the NeuronLink,
    done here where the XLA runtime cannot (the CPU stand-in sees world size 1 per process).
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.detach().reshape(-1) for g in grads]).cpu()
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g).to(g.device))
        offset += n


def parameter_checksum(model: torch.nn.Module) -> torch.Tensor:
    """Sum and sum of squares of every parameter, in float64 on the CPU."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu().double()
    return torch.stack([flat.sum(), (flat * flat).sum()])


def check_replicas_equal(model: torch.nn.Module, group, tolerance: float = REPLICA_TOLERANCE) -> float:
    """Compare every rank's parameter checksum; raise on every rank if they differ.

    Returns the largest difference seen. A data-parallel run whose replicas drifted apart
    did not train one model: it must fail loudly, not report a result.
    """
    mine = parameter_checksum(model)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
    stacked = torch.stack(everyone)
    spread = float((stacked.max(dim=0).values - stacked.min(dim=0).values).max())
    if spread > tolerance:
        sums = ", ".join(f"rank {r}: {float(c[0]):.9f}" for r, c in enumerate(everyone))
        raise RuntimeError(
            f"Replicas differ after training (max checksum difference {spread:.3g} > {tolerance:g}; "
            f"parameter sums {sums}). The gradients were not all-reduced across workers.")
    return spread


def gather_objects(obj, group) -> list:
    """Every rank's `obj`, in rank order (over the gloo group)."""
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


@dataclass
class DataParallel:
    """One torchrun worker's view of the job, plus the CPU-side (gloo) group the script uses
    for control work and, on the CPU stand-in, for the gradient all-reduce."""
    rank: int
    world_size: int
    group: object  # a gloo process group over every worker
    # False: xm.optimizer_step reduces (Neuron). True: the CPU stand-in, whose XLA runtime sees
    # world size 1 per process; train_torchrun.py then averages over gloo (average_gradients).
    reduce_over_gloo: bool
    samples_per_epoch: int | None = field(default=None)  # this rank's shard, once loaded

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def mnist_loaders(self, args):
        """This rank's shard of the training set (whole batches, the same step count on every
        rank) and the test loader. Rank 0 alone downloads and verifies the data; the others
        wait for it."""
        from mnist_mlp.common.data import mnist_loaders
        from mnist_mlp.common.download import ensure_mnist

        if self.rank == 0:
            ensure_mnist(args.data_dir, progress=False)
        self.barrier()
        train, test = mnist_loaders(args, rank=self.rank, world_size=self.world_size,
                                    drop_last=True, verify=False)
        self.samples_per_epoch = len(train) * args.batch_size
        return train, test

    def finish(self, model, tracker) -> dict:
        """Check the replicas ended equal (raise if not) and gather every rank's figures for
        the results record (rank 0 writes it)."""
        spread = check_replicas_equal(model, self.group)
        if self.rank == 0:
            print(f"Replicas equal: max parameter-checksum difference {spread:.3g} across "
                  f"{self.world_size} worker(s) (tolerance {REPLICA_TOLERANCE:g}). Each rank's "
                  f"final loss above is its own last batch's, so they differ.")
        losses = gather_objects(tracker.loss_history, self.group)
        return dict(gradient_reduce="gloo" if self.reduce_over_gloo else "xla",
                    throughput_by_rank=gather_objects(tracker.throughput, self.group),
                    samples_per_epoch_by_rank=gather_objects(self.samples_per_epoch, self.group),
                    loss_history_by_rank={str(r): h for r, h in enumerate(losses)})


def data_parallel_setup(backend, timeout_minutes: float = 5) -> DataParallel:
    """After init_process_group: the worker count checked (Neuron), a gloo group over the
    workers, and the gradient all-reduce decided and said (rank 0).

    Known trap: on the CPU stand-in each process's XLA runtime is a world of its own
    (torch_xla.runtime.world_size() == 1), so init_process_group('xla') succeeds but
    xm.optimizer_step reduces over one replica: the workers would silently train different
    models. There the gradients are averaged over gloo instead.
    """
    import torch_xla.runtime as xr

    from mnist_mlp.common.backend import check_worker_count, instance_type

    if backend.name == "neuron":  # before the device opens: the runtime would fail less clearly
        check_worker_count(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), instance_type())
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # The timeout bounds a wait on a worker that died (torchrun also stops the others).
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(minutes=timeout_minutes))
    xla_world_size = xr.world_size()
    reduce_over_gloo = xla_world_size != world_size
    if rank == 0:
        if reduce_over_gloo:
            print(f"Gradient all-reduce: over gloo. The XLA runtime sees world size "
                  f"{xla_world_size} in each process but torchrun started {world_size} workers, "
                  f"so XLA would not reduce across them (on Neuron xm.optimizer_step does).")
        else:
            print(f"Gradient all-reduce: xm.optimizer_step over {world_size} XLA worker(s).")
    return DataParallel(rank, world_size, group, reduce_over_gloo)

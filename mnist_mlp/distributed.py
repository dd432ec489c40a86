"""Data-parallel pieces train_torchrun.py uses, kept apart so they are unit-tested."""
from __future__ import annotations

import torch
import torch.distributed as dist

REPLICA_TOLERANCE = 1e-6


def average_gradients(model: torch.nn.Module, group) -> None:
    """All-reduce the gradients over a CPU (gloo) group and divide by the world size.

    One flattened tensor, one collective: what xm.optimizer_step does over the NeuronLink,
    done here where the XLA runtime cannot (the CPU stand-in sees world size 1 per process).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
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

"""Stage 3: data-parallel training, one worker per NeuronCore, launched by torchrun (the AWS
sample's train_torchrun.py):

    torchrun --nproc_per_node=2 mnist_mlp/train_torchrun.py
"""
import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: repo importable

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from helpers.backend import check_worker_count, instance_type, select_backend
from helpers.mnist_data import ensure_mnist
from mnist_mlp.common import StepTracker, compile_stats, finish_run, mnist_loaders, parse_args
from mnist_mlp.distributed import average_gradients, check_replicas_equal, gather_objects
from mnist_mlp.model import MLP

# Decide the device before torch_xla loads: it reads PJRT_DEVICE when it starts its runtime.
backend = select_backend()
if backend.uses_xla:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.xla_backend  # noqa: F401  registers the 'xla' process group
    import torch_xla.runtime as xr


def train(model, optimizer, loader, device, epochs, tracker, gloo_group=None):
    loss_fn = torch.nn.NLLLoss()
    model.train()
    for epoch in range(epochs):
        for train_x, train_label in tracker.limit(loader):
            optimizer.zero_grad()
            train_x = train_x.view(train_x.size(0), -1)
            train_x = train_x.to(device)
            train_label = train_label.to(device)
            output = model(train_x)
            loss = loss_fn(output, train_label)
            loss.backward()
            if gloo_group is None:
                # All-reduce (average) the gradients across workers, then step.
                xm.optimizer_step(optimizer)
            else:
                average_gradients(model, gloo_group)  # the CPU stand-in's all-reduce (see main)
                optimizer.step()
            tracker.step(loss)
    tracker.stop(wait_for_device=xm.wait_device_ops if backend.uses_xla else None)


@record  # a failing worker's traceback goes into torchrun's failure summary
def main(argv=None):
    started = time.perf_counter()
    args = parse_args(__doc__, argv)
    if backend.name == "neuron":  # before any work: the runtime would fail later, less clearly
        check_worker_count(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), instance_type())
    dist.init_process_group("xla" if backend.uses_xla else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # CPU-side collectives (data barrier, replica check, gathering results) go over gloo. The
    # timeout bounds a wait on a worker that died (torchrun also stops the others when one fails).
    gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(minutes=5))
    print(f"[rank {rank}] {backend.summary()}")

    # Known trap: on the CPU stand-in every process's XLA runtime is a world of its own
    # (xr.world_size() == 1), so init_process_group('xla') succeeds but xm.optimizer_step
    # reduces over one replica: the workers would silently train different models.
    xla_world_size = xr.world_size() if backend.uses_xla else 1
    gradients_over_gloo = world_size > 1 and xla_world_size != world_size
    if gradients_over_gloo and rank == 0:
        print(f"Gradient all-reduce: over gloo. The XLA runtime sees world size {xla_world_size} "
              f"in each process but torchrun started {world_size} workers, so XLA would not "
              f"reduce across them (on Neuron xm.optimizer_step does).")
    elif rank == 0:
        print(f"Gradient all-reduce: xm.optimizer_step over {world_size} XLA worker(s).")

    if rank == 0:
        ensure_mnist(args.data_dir, progress=False)  # one download, not one per worker
    dist.barrier(group=gloo)
    device = backend.device
    # Each rank trains on its own 1/world_size of every epoch (sharded by rank).
    train_loader, test_loader = mnist_loaders(args, rank=rank, world_size=world_size,
                                              drop_last=True, verify=False)  # rank 0 verified
    samples_per_epoch = len(train_loader) * args.batch_size  # this rank's share
    if backend.uses_xla:
        train_loader = pl.MpDeviceLoader(train_loader, device)

    torch.manual_seed(args.seed)  # every rank must start from the same weights
    model = MLP().to(device)
    # The batches of all workers make one step: scale the LR with the world size, as the sample.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world_size)

    print("----------Training ---------------")
    tracker = StepTracker(args.steps_this_run)
    train(model, optimizer, train_loader, device, args.epochs, tracker,
          gloo_group=gloo if gradients_over_gloo or not backend.uses_xla else None)

    spread = check_replicas_equal(model, gloo)
    if rank == 0:
        print(f"Replicas equal: max parameter-checksum difference {spread:.3g} "
              f"across {world_size} worker(s) (tolerance 1e-06)")
    graphs = seconds = None
    if backend.uses_xla:
        graphs, seconds = compile_stats()
        print(f"Graphs compiled: {graphs} (compile time {seconds:.2f} s)")
    losses_by_rank = gather_objects(tracker.loss_history(), gloo)
    throughputs = gather_objects(tracker.throughput, gloo)
    samples_by_rank = gather_objects(samples_per_epoch, gloo)
    finish_run(f"torchrun_w{world_size}", args, backend, model, tracker, test_loader, device,
               started=started, write=rank == 0, world_size=world_size,
               graphs_compiled=graphs, compile_time_s=seconds,
               gradient_reduce="gloo" if gradients_over_gloo else "xla",
               throughput_by_rank=throughputs, samples_per_epoch_by_rank=samples_by_rank,
               loss_history_by_rank={str(r): h for r, h in enumerate(losses_by_rank)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Stage 3: data-parallel training, one worker per NeuronCore, launched by torchrun (the AWS
sample's train_torchrun.py):

    torchrun --nproc_per_node=2 mnist_mlp/train_torchrun.py
"""
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from mnist_mlp import cli
from mnist_mlp.backend import check_worker_count, instance_type, select_backend
from mnist_mlp.distributed import data_parallel_setup
from mnist_mlp.download import ensure_mnist
from mnist_mlp.model import MLP
from mnist_mlp.results import finish_run
from mnist_mlp.tracking import StepTracker
from mnist_mlp.xla_metrics import compile_stats

# Decide the device before torch_xla loads: it reads PJRT_DEVICE when it starts its runtime.
backend = select_backend()
if backend.uses_xla:
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.xla_backend  # noqa: F401  registers the 'xla' process group


def train(model, optimizer, loader, device, epochs, tracker, dp):
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
            if dp.reduce_over_gloo:
                dp.average_gradients(model)  # the CPU stand-in's all-reduce (distributed.py)
                optimizer.step()
            else:
                # All-reduce (average) the gradients across workers, then step.
                xm.optimizer_step(optimizer)
            tracker.step(loss)
    tracker.stop()


@record  # a failing worker's traceback goes into torchrun's failure summary
@cli.one_line_errors  # bad flags or data, a diverged run: one line saying what to do
def main(argv=None):
    started = time.perf_counter()
    args = cli.parse_args(__doc__, argv, profile=True)
    if backend.name == "neuron":  # before any work: the runtime would fail later, less clearly
        check_worker_count(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), instance_type())
    dist.init_process_group("xla" if backend.uses_xla else "gloo")
    dp = data_parallel_setup(backend)  # rank, world size, and how gradients get all-reduced
    print(f"[rank {dp.rank}] {backend.summary()}")

    if dp.rank == 0:
        ensure_mnist(args.data_dir, progress=False)  # one download, not one per worker
    dp.barrier()
    device = backend.device
    # Each rank trains on its own 1/world_size of every epoch (sharded by rank).
    train_loader, test_loader = cli.mnist_loaders(args, rank=dp.rank, world_size=dp.world_size,
                                                  drop_last=True, verify=False)  # rank 0 verified
    samples_per_epoch = len(train_loader) * args.batch_size  # this rank's share
    if backend.uses_xla:
        train_loader = pl.MpDeviceLoader(train_loader, device)

    torch.manual_seed(args.seed)  # every rank must start from the same weights
    model = MLP().to(device)
    # The batches of all workers make one step: scale the LR with the world size, as the sample.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * dp.world_size)

    print("----------Training ---------------")
    tracker = StepTracker.for_run(args, len(train_loader), xla=backend.uses_xla, rank=dp.rank)
    train(model, optimizer, train_loader, device, args.epochs, tracker, dp)
    per_rank = dp.finish(model, tracker, samples_per_epoch)  # replicas equal? per-rank figures
    graphs = seconds = None
    if backend.uses_xla:
        graphs, seconds = compile_stats()
        print(f"Graphs compiled: {graphs} (compile time {seconds:.2f} s)")
    finish_run(f"torchrun_w{dp.world_size}", args, backend, model, tracker, test_loader, device,
               started=started, write=dp.rank == 0, world_size=dp.world_size,
               graphs_compiled=graphs, compile_time_s=seconds, **per_rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

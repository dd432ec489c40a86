"""Stage 3: data-parallel training, one worker per NeuronCore, launched by torchrun (the AWS
sample's train_torchrun.py):

    torchrun --nproc_per_node=2 mnist_mlp/train_torchrun.py
"""
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from mnist_mlp.common import cli
from mnist_mlp.common.backend import select_xla_backend
from mnist_mlp.common.distributed import average_gradients, data_parallel_setup
from mnist_mlp.common.results import finish_run
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP

# Decide the device before torch_xla loads: it reads PJRT_DEVICE when it starts its runtime.
backend = select_xla_backend()
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402
import torch_xla.distributed.xla_backend  # noqa: E402,F401  registers the 'xla' process group


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
            if dp.reduce_over_gloo:  # the CPU stand-in only: its XLA runtime cannot reduce
                average_gradients(model.parameters(), dp.group)  # across processes
                optimizer.step()
            else:
                xm.optimizer_step(optimizer)  # all-reduce (average) the gradients, then step
            tracker.step(loss)
    tracker.stop()


@record  # a failing worker's traceback goes into torchrun's failure summary
@cli.one_line_errors  # bad flags or data, a diverged run: one line saying what to do
def main(argv=None):
    started = time.perf_counter()
    args = cli.parse_args(__doc__, argv, profile=True)
    dist.init_process_group("xla")
    dp = data_parallel_setup(backend)  # rank, world size, worker count checked, gradient reduce
    print(f"[rank {dp.rank}] {backend.summary()}")
    device = backend.device  # torch_xla.device(); the AWS docs use xm.xla_device (deprecated)
    # Each rank trains on its own 1/world_size of every epoch (sharded by rank); rank 0 alone
    # downloads and verifies the data, the others wait for it.
    train_loader, test_loader = dp.mnist_loaders(args)
    # Uploads batches in the background and syncs after each one: no sync in the loop.
    train_loader = pl.MpDeviceLoader(train_loader, device)

    torch.manual_seed(args.seed)  # every rank must start from the same weights
    model = MLP().to(device)
    # The batches of all workers make one step: scale the LR with the world size, as the sample.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * dp.world_size)

    print("----------Training ---------------")
    tracker = StepTracker.for_run(args, len(train_loader), xla=True, rank=dp.rank)
    train(model, optimizer, train_loader, device, args.epochs, tracker, dp)
    per_rank = dp.finish(model, tracker)  # replicas equal? per-rank figures
    finish_run(f"torchrun_w{dp.world_size}", args, backend, model, tracker, test_loader,
               started=started, write=dp.rank == 0, world_size=dp.world_size, **per_rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Stage 2: the same training on one XLA device: one NeuronCore on Trainium (the AWS sample's
train.py). Here the XLA-on-CPU stand-in runs it when there is no NeuronCore."""
import time

import torch

from mnist_mlp.common import cli
from mnist_mlp.common.backend import select_xla_backend
from mnist_mlp.common.data import mnist_loaders
from mnist_mlp.common.results import finish_run
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP

# Decide the device before torch_xla loads: it reads PJRT_DEVICE when it starts its runtime.
backend = select_xla_backend()
import torch_xla  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402


def train(model, optimizer, loader, device, epochs, tracker, sync_each_step=True):
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
            optimizer.step()
            tracker.step(loss)
            if sync_each_step:
                # Lazy mode: the lines above only recorded a graph. This compiles it (the first
                # time) and runs it on the device. The AWS docs call it xm.mark_step (deprecated).
                torch_xla.sync()
    tracker.stop()


@cli.one_line_errors  # bad flags or data, a diverged run: one line saying what to do
def main(argv=None):
    started = time.perf_counter()
    args = cli.parse_args(__doc__, argv, device_loader=True, profile=True)
    print(backend.summary())
    device = backend.device  # torch_xla.device(); the AWS docs use xm.xla_device (deprecated)
    # drop_last: a ragged last batch has another shape, so XLA would compile one more graph.
    train_loader, test_loader = mnist_loaders(args, drop_last=True)
    if args.device_loader:
        # Uploads batches in the background and syncs after each one: no sync in the loop.
        train_loader = pl.MpDeviceLoader(train_loader, device)

    torch.manual_seed(args.seed)  # the same initial weights every run
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    print("----------Training ---------------")
    tracker = StepTracker.for_run(args, len(train_loader), xla=True)
    train(model, optimizer, train_loader, device, args.epochs, tracker,
          sync_each_step=not args.device_loader)
    return finish_run("xla", args, backend, model, tracker, test_loader, started=started)


if __name__ == "__main__":
    main()

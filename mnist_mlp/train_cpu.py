"""Stage 1: train the MLP with plain PyTorch on the CPU (the AWS sample's train_cpu.py)."""
import time

import torch

from mnist_mlp.common import cli
from mnist_mlp.common.backend import select_backend
from mnist_mlp.common.data import mnist_loaders
from mnist_mlp.common.results import finish_run
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP


def train(model, optimizer, loader, device, epochs, tracker):
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
    tracker.stop()


@cli.one_line_errors  # bad flags or data, a diverged run: one line saying what to do
def main(argv=None):
    started = time.perf_counter()
    args = cli.parse_args(__doc__, argv)
    backend = select_backend(xla=False)
    print(backend.summary())
    device = backend.device
    train_loader, test_loader = mnist_loaders(args)

    # A batch-32 MLP is too small to split across threads: more threads only contend (on a
    # busy 2-core machine, ten times slower). Notebook 01 and the benchmark do the same.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial weights every run
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    print("----------Training ---------------")
    tracker = StepTracker.for_run(args, len(train_loader))
    train(model, optimizer, train_loader, device, args.epochs, tracker)
    return finish_run("cpu", args, backend, model, tracker, test_loader, started=started)


if __name__ == "__main__":
    main()

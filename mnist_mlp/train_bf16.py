"""Stage 4: train.py in BF16, the ways the Neuron docs give in place of XLA_USE_BF16 /
XLA_DOWNCAST_BF16 (--precision). On the CPU stand-in stochastic rounding is emulated in
software; a NeuronCore does it in hardware."""
import os
import time

import torch

from mnist_mlp.common import cli
from mnist_mlp.common.backend import select_xla_backend
from mnist_mlp.common.data import mnist_loaders
from mnist_mlp.common.precision import (
    BF16_MODEL,
    FP32MasterSGD,
    StochasticRoundingSGD,
    cast_inputs_to,
    deprecated_bf16_env_error,
    describe,
    set_auto_cast_none,
)
from mnist_mlp.common.results import finish_run
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP

# Decide the device before torch_xla loads: it reads PJRT_DEVICE when it starts its runtime.
backend = select_xla_backend()
import torch_xla  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402


def train(model, optimizer, loader, device, epochs, tracker, sync_each_step=True, autocast=False):
    loss_fn = torch.nn.NLLLoss()
    model.train()
    for epoch in range(epochs):
        for train_x, train_label in tracker.limit(loader):
            optimizer.zero_grad()
            train_x = train_x.view(train_x.size(0), -1)
            train_x = train_x.to(device)
            train_label = train_label.to(device)
            # autocast: only the forward pass runs under it; backward follows the same casts.
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                output = model(train_x)
            loss = loss_fn(output.float(), train_label)  # the loss in FP32, in every mode
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
    args = cli.parse_args(__doc__, argv, device_loader=True, precision=True, profile=True)
    if error := deprecated_bf16_env_error():
        raise cli.UsageError(error)
    print(backend.summary())
    # Read by the Neuron runtime (the env-vars page tags it [Neuron Runtime]), not the compiler,
    # when it starts: set before the device is opened.
    os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1" if args.precision == "bf16-sr" else "0"
    if args.precision == "autocast":  # torch.autocast alone decides: NEURON_CC_FLAGS gets --auto-cast=none
        set_auto_cast_none()
    print(describe(args.precision, on_neuron=backend.name == "neuron"))
    device = backend.device  # torch_xla.device(); the AWS docs use xm.xla_device (deprecated)
    # drop_last: a ragged last batch has another shape, so XLA would compile one more graph.
    train_loader, test_loader = mnist_loaders(args, drop_last=True)
    if args.device_loader:
        # Uploads batches in the background and syncs after each one: no sync in the loop.
        train_loader = pl.MpDeviceLoader(train_loader, device)

    torch.manual_seed(args.seed)  # the same initial weights every run
    model = MLP()
    if args.precision in BF16_MODEL:
        # On the host, before .to(device): cast on the device, the first step's graph would
        # hold the casts and differ from every later step's (one more graph to compile).
        model.to(torch.bfloat16)  # weights, gradients, activations: all BF16 from here on
        cast_inputs_to(model, torch.bfloat16)  # the loader's FP32 images too
    model.to(device)
    if args.precision == "bf16-master":
        optimizer = FP32MasterSGD(model.parameters(), lr=args.lr)
    elif args.precision == "bf16-sr" and backend.name != "neuron":
        optimizer = StochasticRoundingSGD(model.parameters(), lr=args.lr)  # emulates the hardware
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    print("----------Training ---------------")
    tracker = StepTracker.for_run(args, len(train_loader), xla=True)
    train(model, optimizer, train_loader, device, args.epochs, tracker,
          sync_each_step=not args.device_loader, autocast=args.precision == "autocast")
    return finish_run(f"bf16_{args.precision}", args, backend, model, tracker, test_loader,
                      started=started)


if __name__ == "__main__":
    main()

"""What the three training scripts share, so each script shows only what its stage changes."""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

from helpers.checkpoint import atomic_save, atomic_write_json
from helpers.mnist_data import default_data_dir, ensure_mnist, make_loader, resolve_data_dir
from helpers.paths import default_checkpoint_dir

WARMUP_STEPS = 2  # steps left out of the throughput (the first ones compile on XLA), as in the sample
LOSS_EVERY = 50  # keep the loss every this many steps for the loss curves
TEST_BATCH_SIZE = 1000  # divides 10,000: every test image counts, and one graph serves all batches


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def parse_args(description: str, argv=None, *, device_loader: bool = False) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=_positive_int, default=4)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loader", choices=["fast", "torchvision"], default="fast",
                   help="fast: the whole set in memory as one tensor; "
                        "torchvision: MNIST + ToTensor + DataLoader, as the AWS sample")
    p.add_argument("--data-dir", type=Path, default=None,
                   help=f"MNIST root (default: $MNIST_DATA_DIR or {default_data_dir()})")
    p.add_argument("--checkpoint-dir", type=Path, default=None,
                   help=f"checkpoints and results JSON (default: $CHECKPOINT_DIR or "
                        f"{default_checkpoint_dir()})")
    p.add_argument("--steps-this-run", type=_positive_int, default=None, metavar="N",
                   help="stop after N training steps (neuron_parallel_compile trials, CI)")
    if device_loader:
        p.add_argument("--device-loader", action="store_true",
                       help="feed the device through MpDeviceLoader (background upload, "
                            "sync per batch) instead of calling torch_xla.sync() each step")
    args = p.parse_args(argv)
    args.checkpoint_dir = args.checkpoint_dir or default_checkpoint_dir()
    return args


def mnist_loaders(args, *, rank: int = 0, world_size: int = 1, drop_last: bool = False,
                  verify: bool = True):
    """(train loader sharded for this rank, test loader over all 10,000 test images).

    verify=False skips ensure_mnist's md5 check, for when it was just done (torchrun's rank 0).
    """
    root = ensure_mnist(args.data_dir, progress=False) if verify else resolve_data_dir(args.data_dir)
    train = make_loader(args.loader, root, train=True, batch_size=args.batch_size, rank=rank,
                        world_size=world_size, seed=args.seed, shuffle=True, drop_last=drop_last)
    test = make_loader("fast", root, train=False, batch_size=TEST_BATCH_SIZE, shuffle=False)
    return train, test


class StepTracker:
    """Counts steps, stops at --steps-this-run, times the steps after warm-up, keeps the loss.

    Losses are kept as tensors and read once at the end: reading one every step
    (loss.item()) would force an extra device round trip per step on XLA.
    """

    def __init__(self, max_steps: int | None = None, warmup: int = WARMUP_STEPS,
                 loss_every: int = LOSS_EVERY):
        self.max_steps, self.warmup, self.loss_every = max_steps, warmup, loss_every
        self.steps = 0
        self._losses: list[tuple[int, torch.Tensor]] = []
        self._start = self._end = None
        self._last_loss = None

    @property
    def done(self) -> bool:
        return self.max_steps is not None and self.steps >= self.max_steps

    def limit(self, loader):
        """Iterate `loader`, stopping once --steps-this-run steps are done."""
        if self.done:
            return
        for batch in loader:
            yield batch
            if self.done:
                return

    def step(self, loss: torch.Tensor) -> None:
        self.steps += 1
        self._last_loss = loss.detach()
        if self.steps == self.warmup:
            self._start = time.perf_counter()
        if self.steps == 1 or self.steps % self.loss_every == 0:
            self._losses.append((self.steps, self._last_loss))

    def stop(self, wait_for_device=None) -> None:
        """End the timed span; pass xm.wait_device_ops on XLA so queued steps count."""
        if wait_for_device is not None:
            wait_for_device()
        self._end = time.perf_counter()

    @property
    def throughput(self) -> float:
        if self._start is None or self.steps <= self.warmup:
            return math.nan
        return (self.steps - self.warmup) / (self._end - self._start)

    @property
    def final_loss(self) -> float:
        return float(self._last_loss.cpu()) if self._last_loss is not None else math.nan

    def loss_history(self) -> list[list[float]]:
        if not self._losses:
            return []
        values = torch.stack([loss for _, loss in self._losses]).cpu().tolist()  # one transfer
        return [[step, value] for (step, _), value in zip(self._losses, values)]


def print_training_result(tracker: StepTracker) -> None:
    """The AWS sample's two result lines."""
    print("Train throughput (iter/sec): {}".format(tracker.throughput))
    print("Final loss is {:0.4f}".format(tracker.final_loss))


@torch.no_grad()
def evaluate(model, loader, device) -> tuple[int, int]:
    """(correct, total) over every image the loader yields; counts stay on the device."""
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    total = 0
    for images, labels in loader:
        images = images.view(images.size(0), -1).to(device)
        labels = labels.to(device)
        correct += (model(images).argmax(dim=1) == labels).sum()
        total += labels.size(0)
    model.train()
    return int(correct.cpu()), total


def compile_stats() -> tuple[int, float]:
    """(graphs compiled, seconds spent compiling) so far in this process, from torch_xla's metrics."""
    from helpers.xla_metrics import read_compile_metrics

    totals = read_compile_metrics()
    return int(totals["UncachedCompile"]), totals["compile_time_s"]


def finish_run(stage: str, args, backend, model, tracker: StepTracker, test_loader, device, *,
               started: float, write: bool = True, world_size: int = 1, **extra) -> dict:
    """After the loop, as in the sample: result lines, checkpoint, end line; then test accuracy
    over all 10,000 test images and the results JSON. `write=False` on ranks other than 0:
    they stop after the end line (the replicas are equal, so rank 0's accuracy is everyone's)."""
    print_training_result(tracker)
    directory = Path(args.checkpoint_dir)
    if write:
        atomic_save({"state_dict": model.state_dict()}, directory / f"checkpoint_{stage}.pt",
                    xla=backend.uses_xla)
    print("----------End Training ---------------")
    if not write:
        return None
    correct, total = evaluate(model, test_loader, device)
    accuracy = report_accuracy(correct, total)
    results = dict(stage=stage, backend=backend.name, world_size=world_size, epochs=args.epochs,
                   steps=tracker.steps, batch_size=args.batch_size, lr=args.lr,
                   loader=args.loader, throughput_it_s=tracker.throughput,
                   final_loss=tracker.final_loss, test_accuracy=accuracy,
                   wall_time_s=time.perf_counter() - started,
                   loss_history=tracker.loss_history(), **extra)
    results.setdefault("graphs_compiled", None)
    results.setdefault("compile_time_s", None)
    atomic_write_json(results, directory / f"results_{stage}.json")
    return results


def report_accuracy(correct: int, total: int) -> float:
    accuracy = correct / total
    print(f"Test accuracy: {accuracy:.4f} ({correct}/{total} correct)")
    return accuracy

"""The stage scripts' command line: flags checked before any work, the loaders they train on,
and a decorator for main() that ends a known failure in a one-line message instead of a traceback."""
from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

from mnist_mlp import checkpoint
from mnist_mlp.data import make_loader
from mnist_mlp.observe import PROFILE_START_STEP
from mnist_mlp.download import MnistDataError, default_data_dir, ensure_mnist, resolve_data_dir
from mnist_mlp.paths import default_checkpoint_dir
from mnist_mlp.tracking import TrainingDiverged

TEST_BATCH_SIZE = 1000  # divides 10,000: every test image counts, and one graph serves all batches


class UsageError(ValueError):
    """Flags that cannot give a useful run; the message says what to change."""


# Failures that end a script with their message (exit 1), not a traceback.
KNOWN_FAILURES = (UsageError, MnistDataError, TrainingDiverged, checkpoint.UnwritableDirError)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def parse_args(description: str, argv=None, *, device_loader: bool = False,
               precision: bool = False, profile: bool = False) -> argparse.Namespace:
    """The flags every stage takes; the checkpoint directory is checked writable here, before
    any training, so a bad one cannot cost a trained model."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=_positive_int, default=4)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--lr", type=_positive_float, default=0.01)
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
    p.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                   help="write per-step loss, throughput (and graphs compiled on XLA) for "
                        "TensorBoard into DIR (rank 0 under torchrun)")
    if profile:
        p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                       help="trace --profile-steps steady-state steps with torch_xla's profiler "
                            "into DIR/plugins/profile/ (TensorBoard's Profile tab)")
        p.add_argument("--profile-steps", type=_positive_int, default=20, metavar="N",
                       help=f"how many steps --profile traces, from step {PROFILE_START_STEP}")
    if device_loader:
        p.add_argument("--device-loader", action="store_true",
                       help="feed the device through MpDeviceLoader (background upload, "
                            "sync per batch) instead of calling torch_xla.sync() each step")
    if precision:
        from mnist_mlp.precision import PRECISIONS

        p.add_argument("--precision", choices=PRECISIONS, default="bf16-sr",
                       help="fp32: as train.py; bf16: BF16 model, round-to-nearest updates; "
                            "bf16-sr: with stochastic rounding; bf16-master: FP32 master "
                            "weights; autocast: FP32 weights, forward under torch.autocast")
    args = p.parse_args(argv)
    if getattr(args, "profile", None) and args.steps_this_run is not None:
        last = PROFILE_START_STEP + args.profile_steps - 1
        if args.steps_this_run < last:
            raise UsageError(f"--profile traces steps {PROFILE_START_STEP}-{last}, but "
                             f"--steps-this-run {args.steps_this_run} stops before: use "
                             f"--steps-this-run {last} or more, or fewer --profile-steps.")
    args.checkpoint_dir = args.checkpoint_dir or default_checkpoint_dir()
    checkpoint.check_writable_dir(args.checkpoint_dir)
    return args


def mnist_loaders(args, *, rank: int = 0, world_size: int = 1, drop_last: bool = False,
                  verify: bool = True):
    """(train loader sharded for this rank, test loader over all 10,000 test images).

    verify=False skips ensure_mnist's md5 check, for when it was just done (torchrun's rank 0).
    Refuses flags that would train 0 steps, before any work.
    """
    root = ensure_mnist(args.data_dir, progress=False) if verify else resolve_data_dir(args.data_dir)
    train = make_loader(args.loader, root, train=True, batch_size=args.batch_size, rank=rank,
                        world_size=world_size, seed=args.seed, shuffle=True, drop_last=drop_last)
    if len(train) == 0:
        share = "the training set" if world_size == 1 else f"each of {world_size} workers' share"
        raise UsageError(
            f"--batch-size {args.batch_size} leaves no whole batch in {share} (60,000 images"
            f"{f' / {world_size}' if world_size > 1 else ''}): this run would train 0 steps. "
            f"Use a smaller --batch-size.")
    if world_size > 1:
        check_equal_steps(len(train.dataset) if hasattr(train, "dataset") else train.dataset_size,
                          world_size, args.batch_size, drop_last)
    test = make_loader("fast", root, train=False, batch_size=TEST_BATCH_SIZE, shuffle=False)
    return train, test


def steps_per_rank(n: int, world_size: int, batch_size: int, drop_last: bool) -> list[int]:
    """Batches each rank gets per epoch when n samples are dealt out rank::world_size."""
    shards = [len(range(rank, n, world_size)) for rank in range(world_size)]
    return [s // batch_size if drop_last else -(-s // batch_size) for s in shards]


def check_equal_steps(n: int, world_size: int, batch_size: int, drop_last: bool) -> None:
    """Every step all-reduces across workers: a rank with one step more would wait forever.
    Refuse such flags before any work, naming batch sizes that work."""
    counts = steps_per_rank(n, world_size, batch_size, drop_last)
    if len(set(counts)) == 1:
        return
    near = [b for b in range(batch_size - 1, 0, -1)
            if len(set(steps_per_rank(n, world_size, b, drop_last))) == 1][:1]
    near += [b for b in range(batch_size + 1, 2 * batch_size + 2)
             if len(set(steps_per_rank(n, world_size, b, drop_last))) == 1][:1]
    raise UsageError(
        f"{n} images over {world_size} workers in batches of {batch_size} give {min(counts)} or "
        f"{max(counts)} steps per epoch: the workers with fewer steps would leave the others "
        f"waiting in the gradient all-reduce forever. Use --batch-size "
        f"{' or '.join(map(str, near))} (every worker then gets the same number of steps).")


def one_line_errors(main):
    """Decorate a script's main(): a known failure prints `error: <what to do>` and exits 1
    instead of a traceback."""
    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KNOWN_FAILURES as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
    return wrapper

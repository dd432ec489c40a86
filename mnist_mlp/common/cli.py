"""The stage scripts' command line: flags checked before any work, and a decorator for main()
that ends a known failure in a one-line message instead of a traceback."""
from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

from mnist_mlp.common import atomic_files
from mnist_mlp.common.compile_notice import watch_compiles
from mnist_mlp.common.errors import UsageError
from mnist_mlp.common.mnist_files import MnistDataError, default_data_dir
from mnist_mlp.common.observe import PROFILE_START_STEP
from mnist_mlp.common.paths import default_checkpoint_dir
from mnist_mlp.common.startup import freeze_startup_objects
from mnist_mlp.common.tracking import TrainingDiverged

# Failures that end a script with their message (exit 1), not a traceback.
KNOWN_FAILURES = (UsageError, MnistDataError, TrainingDiverged, atomic_files.UnwritableDirError)


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
                   help="write per-step loss, throughput (and new graphs on XLA) for "
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
        from mnist_mlp.common.precision import PRECISIONS

        p.add_argument("--precision", choices=PRECISIONS, default="bf16-sr",
                       help="fp32: as train.py; bf16: BF16 model, round-to-nearest updates; "
                            "bf16-sr: with stochastic rounding; bf16-master: FP32 master "
                            "weights; autocast: FP32 weights, forward under torch.autocast")
    # Flags a stage does not take read as None, so every stage's args has the same attributes.
    p.set_defaults(**{name: None for name, taken in (
        ("profile", profile), ("profile_steps", profile), ("device_loader", device_loader),
        ("precision", precision)) if not taken})
    args = p.parse_args(argv)
    if args.profile and args.steps_this_run is not None:
        last = PROFILE_START_STEP + args.profile_steps - 1
        if args.steps_this_run < last:
            raise UsageError(f"--profile traces steps {PROFILE_START_STEP}-{last}, but "
                             f"--steps-this-run {args.steps_this_run} stops before: use "
                             f"--steps-this-run {last} or more, or fewer --profile-steps.")
    args.checkpoint_dir = args.checkpoint_dir or default_checkpoint_dir()
    atomic_files.check_writable_dir(args.checkpoint_dir)
    return args


def one_line_errors(main):
    """Decorate a script's main(): it starts with the process's start-up call
    (freeze_startup_objects), runs with the compile notice (a compile longer than a few seconds
    is said in the log while it runs), and a known failure prints `error: <what to do>` and
    exits 1 instead of a traceback."""
    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        freeze_startup_objects()
        try:
            with watch_compiles():
                return main(*args, **kwargs)
        except KNOWN_FAILURES as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
    return wrapper


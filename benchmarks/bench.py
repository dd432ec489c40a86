"""make bench: how fast each way of feeding the training loop runs, side by side, in one process.
A developer's benchmark: it lives outside the runtime package mnist_mlp, which it measures.

CPU stage (train_cpu.train, one epoch each, batch 32):
  torchvision  MNIST + ToTensor + DataLoader (the AWS sample's path, the baseline)
  fast         the whole set in memory as one tensor, batches sliced from a permutation
  bare loop    the same loop over batches built beforehand: the limit for this loop
XLA stage (train.train, on the CPU stand-in here, a NeuronCore on Trainium):
  torch_xla.sync() every step  against  MpDeviceLoader, with the graphs each compiled.
BF16 stage (train_bf16.py, one process per --precision mode, as the runtime settings require):
  each mode's throughput as a ratio to its fp32 mode, on this machine.

Rounds are interleaved and the best of each kept, so a busy moment on the machine hurts
every variant alike. Ratios are what to read; absolute numbers depend on the machine.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from mnist_mlp import train_cpu
from mnist_mlp.common.backend import select_xla_backend
from mnist_mlp.common.cli import one_line_errors
from mnist_mlp.common.data import make_loader
from mnist_mlp.common.download import ensure_mnist
from mnist_mlp.common.paths import REPO_ROOT
from mnist_mlp.common.precision import PRECISIONS
from mnist_mlp.common.results import RunResults, results_path
from mnist_mlp.common.tracking import StepTracker
from mnist_mlp.model import MLP

TARGET_FAST_VS_TORCHVISION = 3.5
TARGET_FAST_VS_BARE = 0.90


def cpu_throughput(loader, epochs: int, seed: int = 0) -> float:
    torch.manual_seed(seed)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    tracker = StepTracker(progress=False)
    train_cpu.train(model, optimizer, loader, torch.device("cpu"), epochs, tracker)
    return tracker.throughput


def xla_throughput(xla_stage, root, device, steps: int, device_loader: bool):
    """(it/s, graphs compiled during the run) of `xla_stage.train` (mnist_mlp.train) on the XLA device."""
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.parallel_loader as pl

    loader = make_loader("fast", root, train=True, batch_size=32, drop_last=True)
    if device_loader:
        loader = pl.MpDeviceLoader(loader, device)
    torch.manual_seed(0)
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    before = met.counter_value("UncachedCompile") or 0
    tracker = StepTracker(steps, xla=True, progress=False)
    xla_stage.train(model, optimizer, loader, device, epochs=10**6, tracker=tracker,
                    sync_each_step=not device_loader)
    return tracker.throughput, (met.counter_value("UncachedCompile") or 0) - before


def bf16_throughputs(root, steps: int, rounds: int) -> dict[str, list[float]]:
    """it/s of train_bf16.py in each --precision mode, `rounds` interleaved runs of `steps` steps.
    Each mode runs as its own process, as the script is meant to: the Neuron runtime and
    compiler read the mode's settings when a process starts."""
    script = REPO_ROOT / "mnist_mlp" / "train_bf16.py"
    runs: dict[str, list[float]] = {precision: [] for precision in PRECISIONS}
    with tempfile.TemporaryDirectory(prefix="bench-bf16-") as scratch:
        for r in range(rounds):
            for precision in PRECISIONS:
                cmd = [sys.executable, str(script), "--precision", precision, "--steps-this-run",
                       str(steps), "--data-dir", str(root), "--checkpoint-dir", scratch]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
                    raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
                stage = f"bf16_{precision}"
                runs[precision].append(RunResults.read(results_path(scratch, stage)).throughput_it_s)
            print(f"bf16 round {r + 1}/{rounds}: "
                  + ", ".join(f"{p} {v[-1]:.0f} it/s" for p, v in runs.items()), flush=True)
    return runs


@one_line_errors  # missing data: one line saying what to do
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=1, help="CPU epochs per measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--xla-steps", type=int, default=1000)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--bf16-steps", type=int, default=600, help="steps per train_bf16.py run")
    p.add_argument("--bf16-rounds", type=int, default=2, help="0 skips the BF16 stage")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # a batch-32 MLP gains nothing from threads; steadier numbers
    # The XLA backend first: chosen before torch_xla loads (it reads PJRT_DEVICE when its runtime
    # starts), and its device started before any CPU backward pass: autograd sizes its
    # per-device queues at the first backward, and a device that appears later fails its own.
    backend = select_xla_backend()
    xla_device = backend.device
    from mnist_mlp import train as xla_stage  # its train(); the script re-selects the same backend

    root = ensure_mnist(args.data_dir, progress=False)

    fast = make_loader("fast", root, train=True, batch_size=32, seed=0)
    torchvision = make_loader("torchvision", root, train=True, batch_size=32, seed=0)
    prebuilt = list(fast)  # the bare loop's batches: nothing left to do but train
    runs = {"torchvision": [], "fast": [], "bare loop": []}
    for r in range(args.rounds):
        runs["torchvision"].append(cpu_throughput(torchvision, args.epochs))
        runs["fast"].append(cpu_throughput(fast, args.epochs))
        runs["bare loop"].append(cpu_throughput(prebuilt, args.epochs))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.0f} it/s" for k, v in runs.items()),
              flush=True)
    best = {k: max(v) for k, v in runs.items()}

    sync_its, sync_graphs = xla_throughput(xla_stage, root, xla_device, args.xla_steps, device_loader=False)
    mpdl_its, mpdl_graphs = xla_throughput(xla_stage, root, xla_device, args.xla_steps, device_loader=True)

    bf16_runs = bf16_throughputs(root, args.bf16_steps, args.bf16_rounds) if args.bf16_rounds else {}

    fast_vs_tv = best["fast"] / best["torchvision"]
    fast_vs_bare = best["fast"] / best["bare loop"]
    print()
    print(f"CPU stage, batch 32, {args.epochs} epoch(s), best of {args.rounds} "
          f"(spread: median/best shown)")
    print(f"{'variant':<34}{'it/s':>9}{'median':>9}{'vs torchvision':>16}")
    for name in ("torchvision", "fast", "bare loop"):
        print(f"{name:<34}{best[name]:>9.0f}{statistics.median(runs[name]):>9.0f}"
              f"{best[name] / best['torchvision']:>15.2f}x")
    print()
    print(f"XLA stage on {backend.name}, {args.xla_steps} steps")
    print(f"{'variant':<34}{'it/s':>9}{'graphs':>9}")
    print(f"{'torch_xla.sync() every step':<34}{sync_its:>9.0f}{sync_graphs:>9}")
    print(f"{'MpDeviceLoader':<34}{mpdl_its:>9.0f}{mpdl_graphs:>9}"
          f"   ({mpdl_its / sync_its:.2f}x sync-per-step)")
    if bf16_runs:
        bf16_best = {p: max(v) for p, v in bf16_runs.items()}
        print()
        print(f"BF16 stage on {backend.name} (train_bf16.py --precision ...), {args.bf16_steps} "
              f"steps, best of {args.bf16_rounds}: ratios to fp32 on this machine only")
        print(f"{'precision':<34}{'it/s':>9}{'vs fp32':>9}")
        for precision, its in bf16_best.items():
            print(f"{precision:<34}{its:>9.0f}{its / bf16_best['fp32']:>8.2f}x")
        if backend.name != "neuron":
            print("(the stand-in has no BF16 matrix engine, and it emulates stochastic rounding in "
                  "software: these ratios say nothing about Trainium's)")
    print()
    ok = lambda good: "meets target" if good else "BELOW TARGET"  # noqa: E731
    print(f"fast / torchvision = {fast_vs_tv:.2f}x  (target >= {TARGET_FAST_VS_TORCHVISION}x: "
          f"{ok(fast_vs_tv >= TARGET_FAST_VS_TORCHVISION)})")
    print(f"fast / bare loop   = {fast_vs_bare:.0%}  (target >= {TARGET_FAST_VS_BARE:.0%}: "
          f"{ok(fast_vs_bare >= TARGET_FAST_VS_BARE)})")
    return dict(best=best, runs=runs, xla=dict(sync=sync_its, mpdl=mpdl_its,
                                                sync_graphs=sync_graphs, mpdl_graphs=mpdl_graphs),
                bf16=bf16_runs)


if __name__ == "__main__":
    main()

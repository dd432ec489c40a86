"""The cited figures notebook 07's model of a NeuronCore step is built from; the model itself
(a fixed cost plus the step's FLOPs at peak) is written in the notebook's cells.

The fixed cost comes from the AWS MLP tutorial's best loop (one torchrun worker, MpDeviceLoader:
192 it/s at batch 32): the host's loop and data loader, tracing the graph, launching it, moving
the batch. How much of it is the loader the log does not say: at most the tutorial's whole
host-CPU step (287 it/s, the same loader at batch 32). With two workers a step also all-reduces
the gradients (nccom-test's example). The two-worker log is held out: it tests the fixed cost
only, and no published figure tests the slope (FLOPs at peak); on a trn1 notebook 07's own
device points do. Adding the arithmetic to the fixed cost ignores that a pipelined loop overlaps
the two; at this MLP's crossovers the arithmetic is under a percent of the step.
"""
from __future__ import annotations

from helpers.show.cost import TUTORIAL_BATCH, load_cost_data, published

TUTORIAL_WIDTHS = (120, 84)
INPUT, CLASSES = 784, 10
FP32_BYTES = 4
# One Trainium chip: "Two NeuronCore-v2", "190 FP16/BF16/cFP8/TF32 TFLOPS, and 47.5 FP32 TFLOP".
CHIP_TFLOPS = {"fp32": 47.5, "bf16": 190.0}
CORES_PER_CHIP = 2
RUN_NAMES = {"cpu": "train_cpu.py, host CPU", "xla": "train.py, one NeuronCore, no MpDeviceLoader",
             "torchrun_w1": "torchrun, 1 worker, MpDeviceLoader",
             "torchrun_w2": "torchrun, 2 workers (per worker)"}


def layer_sizes(widths=TUTORIAL_WIDTHS) -> list[tuple[int, int]]:
    sizes = [INPUT, *widths, CLASSES]
    return list(zip(sizes[:-1], sizes[1:]))


def matmul_flops(batch: int, widths=TUTORIAL_WIDTHS) -> int:
    """FLOPs of one training step's matrix products (2 per multiply-add): the forward pass, the
    weight gradients, and the input gradients of every layer but the first (the images need none)."""
    products = [n_in * n_out for n_in, n_out in layer_sizes(widths)]
    return 2 * batch * (2 * sum(products) + sum(products[1:]))


def parameter_count(widths=TUTORIAL_WIDTHS) -> int:
    return sum(n_in * n_out + n_out for n_in, n_out in layer_sizes(widths))


def peak_flops(precision: str = "fp32") -> float:
    """One NeuronCore's peak FLOP/s: half a Trainium chip's."""
    return CHIP_TFLOPS[precision] * 1e12 / CORES_PER_CHIP


def published_throughputs(data: dict | None = None) -> dict[str, float]:
    """The tutorial's it/s per worker, by stage (cpu, xla, torchrun_w1, torchrun_w2)."""
    return {stage: run["throughput_it_s"] for stage, run in published(data).items()}


def allreduce_s(data: dict | None = None, widths=TUTORIAL_WIDTHS) -> float:
    """An estimate for one fused two-rank all-reduce of this MLP's FP32 gradients: nccom-test's
    example time for the smallest size it lists that holds them. Not a bound: the example's
    times are about 58 us for any size up to 64 KiB (one all-reduce per gradient tensor would
    pay that each time), and the page says its figures may not be up to date."""
    figures = (data or load_cost_data())["published_allreduce"]
    need = parameter_count(widths) * FP32_BYTES
    return next(s for size, s in zip(figures["bytes"], figures["seconds"]) if size >= need)


def tutorial_fixed_s(precision: str = "fp32", data: dict | None = None) -> float:
    """The model's fixed cost: the tutorial's best one-worker step less its batch-32 products at
    peak (notebook 07 computes it in a cell; the exercise checks use this one)."""
    return 1 / published_throughputs(data)["torchrun_w1"] - matmul_flops(TUTORIAL_BATCH) / peak_flops(precision)


def figure_rows(data: dict | None = None) -> list[list[str]]:
    """Rows (run, it/s, ms per step, instance) for the tutorial's four training logs, the
    instance as the tutorial labels that log ("not stated" where it names none)."""
    return [[RUN_NAMES[stage], f"{run['throughput_it_s']:.0f}", f"{1e3 / run['throughput_it_s']:.2f}",
             run["instance"]] for stage, run in published(data).items()]

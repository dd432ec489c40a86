"""Notebook 07's model of one NeuronCore's training step, built from cited figures only.

A step costs a fixed time plus its matrix products at the NeuronCore's peak. The fixed time comes
from the AWS MLP tutorial's best loop (one torchrun worker, MpDeviceLoader: 192 it/s at batch 32)
and holds the host's loop and data loader, tracing the graph, launching it and moving the batch.
How much of it is the loader the log does not say: at most the tutorial's whole host-CPU step
(287 it/s, the same loader at batch 32), which bounds the rest, the per-step overhead other than
the loader, from below. With two workers a step also all-reduces the gradients (nccom-test's
example). The model is fitted to the one-worker figure; the two-worker figure is held out, but it
tests the fixed cost only (the all-reduce moves the prediction about 1 %), and no published figure
tests the slope (FLOPs at peak) that sets every crossover: on a trn1 notebook 07's own device
points do. Adding the arithmetic to the fixed cost ignores that a pipelined loop overlaps the two;
at this MLP's crossovers the arithmetic is under a percent of the step, so that error is small.
A data loader costs a time per image (notebook 01 times torchvision's), so its share grows with
the batch: the band leaves the loader out, as notebook 07's measured lines do, and
loader_per_image_s puts it back into a step.
"""
from __future__ import annotations

from dataclasses import dataclass

from helpers.show.cost import TUTORIAL_BATCH, load_cost_data

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


@dataclass(frozen=True)
class NeuronCoreModel:
    """Seconds per step on one NeuronCore: fixed_s + matrix FLOPs at peak_flops, and a data
    loader's loader_per_image_s for each image when the loader runs in the step (0: no loader)."""
    fixed_s: float
    peak_flops: float
    precision: str = "fp32"
    loader_per_image_s: float = 0.0

    def step_s(self, batch: int, widths=TUTORIAL_WIDTHS) -> float:
        return (self.fixed_s + matmul_flops(batch, widths) / self.peak_flops
                + self.loader_per_image_s * batch)


def published(data: dict | None = None) -> dict[str, dict]:
    """The tutorial's runs by stage (cpu, xla, torchrun_w1, torchrun_w2): it/s per worker, the
    label the tutorial prints over each log, its source."""
    data = data or load_cost_data()
    runs = {run["stage"]: run for run in data["published_runs"]}
    return {"cpu": data["published_cpu_it_s"], **runs}


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


def model_terms(precision: str = "fp32", data: dict | None = None, efficiency: float = 1.0) -> dict:
    """The model's terms, each from a cited figure: peak, the fixed cost and the loader's bound
    on it, the all-reduce; and the two models at the ends of the fixed cost's range. With
    efficiency < 1 the products run at that fraction of peak (peak_flops is then that rate)."""
    rates = published_throughputs(data)
    peak = CHIP_TFLOPS[precision] * 1e12 / CORES_PER_CHIP * efficiency
    fixed = 1 / rates["torchrun_w1"] - matmul_flops(TUTORIAL_BATCH) / peak
    loader_max = 1 / rates["cpu"]
    return {"peak_flops": peak, "fixed_s": fixed, "loader_max_s": loader_max,
            "allreduce_s": allreduce_s(data),
            "low": NeuronCoreModel(fixed - loader_max, peak, precision),
            "high": NeuronCoreModel(fixed, peak, precision)}


def model_from_tutorial(precision: str = "fp32", data: dict | None = None) -> NeuronCoreModel:
    """The whole fixed cost as overhead other than the loader (the loader fully overlapped): the
    range's high end."""
    return model_terms(precision, data)["high"]


def describe_terms(terms: dict, widths=TUTORIAL_WIDTHS) -> list[list[str]]:
    """Rows (term, value, from) for the notebook's table of the model's terms."""
    ms, products = 1e3, matmul_flops(TUTORIAL_BATCH, widths)
    return [["peak, one NeuronCore", f"{terms['peak_flops'] / 1e12:.2f} TFLOP/s",
             "half a Trainium chip's 47.5 FP32 TFLOPS"],
            [f"products at batch {TUTORIAL_BATCH}", f"{products / 1e6:.1f} MFLOP",
             f"{products / terms['peak_flops'] * 1e6:.2f} µs at that peak"],
            ["fixed cost per step", f"{terms['fixed_s'] * ms:.2f} ms",
             "a step at 192 it/s, less its batch-32 products at peak"],
            ["  of it the data loader", f"0 to {terms['loader_max_s'] * ms:.2f} ms",
             "at most a whole CPU step at 287 it/s (same loader; host not stated)"],
            ["  other overhead", f"{terms['low'].fixed_s * ms:.2f} to {terms['fixed_s'] * ms:.2f} ms",
             "per-step overhead other than the loader (the band)"],
            ["all-reduce, 2 workers", f"{terms['allreduce_s'] * ms:.3f} ms",
             "AWS collective benchmark (nccom-test): 2 ranks, 1 MiB"],
            ["  this MLP's gradients", f"{parameter_count(widths) * FP32_BYTES / 1e6:.1f} MB",
             f"{parameter_count(widths):,} FP32 parameters"]]


def two_worker_prediction(terms: dict, data: dict | None = None) -> dict:
    """Held out: the two-worker figure, predicted from the one-worker fit plus the all-reduce,
    and without it (the two are about as close: this figure cannot test the all-reduce)."""
    one_worker = terms["high"].step_s(TUTORIAL_BATCH)
    predicted = 1 / (one_worker + terms["allreduce_s"])
    logged = published_throughputs(data)["torchrun_w2"]
    return {"predicted_it_s": predicted, "published_it_s": logged, "off": predicted / logged - 1,
            "without_allreduce_it_s": 1 / one_worker, "off_without": 1 / one_worker / logged - 1,
            "lost_s": 1 / logged - one_worker, "unexplained_s": 1 / logged - 1 / predicted}


def describe_held_out(held: dict, terms: dict) -> str:
    """Two lines: what the model misses the held-out figure by, with and without the all-reduce,
    and how much of what two workers lose the all-reduce explains."""
    side = "too fast" if held["off"] > 0 else "too slow"
    return (f"two workers (held out): the model misses the tutorial's {held['published_it_s']:.0f} "
            f"it/s per worker by {abs(held['off']):.1%} (it predicts {held['predicted_it_s']:.0f} it/s, "
            f"{side}); "
            f"without the all-reduce by {abs(held['off_without']):.1%} "
            f"({held['without_allreduce_it_s']:.0f} it/s)\n"
            f"two workers lose {held['lost_s'] * 1e3:.2f} ms a step; the all-reduce term explains "
            f"{terms['allreduce_s'] * 1e3:.3f} ms of it")


def chip_rows(data: dict | None = None) -> list[list]:
    """Images per second on the tutorial's figures: the host CPU, one NeuronCore, the chip's two;
    from the it/s as printed (rounded), so each row's arithmetic can be followed."""
    rates = {stage: round(it_s) for stage, it_s in published_throughputs(data).items()}
    rows = [("host CPU, one process", 1, rates["cpu"]), ("one NeuronCore", 1, rates["torchrun_w1"]),
            ("two NeuronCores, two workers", 2, rates["torchrun_w2"])]
    return [[what, f"{it_s}" if n == 1 else f"{n} x {it_s}", f"{n * it_s * TUTORIAL_BATCH:,}",
             f"{n * it_s / rates['cpu']:.2f}x"] for what, n, it_s in rows]


def figure_rows(data: dict | None = None) -> list[list[str]]:
    """Rows (run, it/s, ms per step, instance) for the tutorial's four training logs, the
    instance as the tutorial labels that log ("not stated" where it names none)."""
    return [[RUN_NAMES[stage], f"{run['throughput_it_s']:.0f}", f"{1e3 / run['throughput_it_s']:.2f}",
             run["instance"]] for stage, run in published(data).items()]

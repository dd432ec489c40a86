"""Notebook 07, when a NeuronCore wins: the MLP's step time on the host CPU (measured), on the XLA
device (measured, a few points), and on one NeuronCore (modelled from cited figures).

The model is deliberately simple: a step costs a fixed time (tracing, launching, moving the
batch: what the AWS MLP tutorial's batch-32 throughput is made of) plus its matrix products at
the NeuronCore's peak rate. Peak is an upper bound on speed, so the modelled NeuronCore is
optimistic and the crossover it gives is the earliest a NeuronCore could win.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from helpers.show.cost import TUTORIAL_BATCH, load_cost_data
from mnist_mlp.model import MLP

TUTORIAL_WIDTHS = (120, 84)
INPUT, CLASSES = 784, 10
TRAINIUM = ("https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/about-neuron/arch/"
            "neuron-hardware/trainium.html")
# One Trainium chip: "Two NeuronCore-v2", "190 FP16/BF16/cFP8/TF32 TFLOPS, and 47.5 FP32 TFLOP".
CHIP_TFLOPS = {"fp32": 47.5, "bf16": 190.0}
CORES_PER_CHIP = 2


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
    """Seconds per step on one NeuronCore: fixed_s + matrix FLOPs at peak_flops."""
    fixed_s: float
    peak_flops: float
    precision: str = "fp32"

    def step_s(self, batch: int, widths=TUTORIAL_WIDTHS) -> float:
        return self.fixed_s + matmul_flops(batch, widths) / self.peak_flops


def published_throughputs(data: dict | None = None) -> dict[str, float]:
    """The tutorial's it/s per worker, by stage (xla, torchrun_w1, torchrun_w2), and its host
    CPU's (cpu, which the cost table does not price)."""
    data = data or load_cost_data()
    runs = {run["stage"]: run["throughput_it_s"] for run in data["published_runs"]}
    return {"cpu": data["published_cpu_it_s"]["throughput_it_s"], **runs}


def model_from_tutorial(precision: str = "fp32", data: dict | None = None) -> NeuronCoreModel:
    """The fixed cost from the tutorial's overlapped loop (MpDeviceLoader, one worker: 192 it/s),
    less the little its batch-32 products take at peak."""
    peak = CHIP_TFLOPS[precision] * 1e12 / CORES_PER_CHIP
    step = 1 / published_throughputs(data)["torchrun_w1"]
    return NeuronCoreModel(step - matmul_flops(TUTORIAL_BATCH) / peak, peak, precision)


def against_the_tutorial(model: NeuronCoreModel, data: dict | None = None) -> list[dict]:
    """The model beside each of the tutorial's NeuronCore figures, with why where it is off."""
    published = published_throughputs(data)
    modelled = 1 / model.step_s(TUTORIAL_BATCH)
    why = {"torchrun_w1": "the figure the fixed cost is taken from",
           "torchrun_w2": "the gradient all-reduce between the two workers is not in the model",
           "xla": "this loop waits for every step (no MpDeviceLoader): its fixed cost is larger"}
    rows = []
    for stage in ("torchrun_w1", "torchrun_w2", "xla"):
        off = modelled / published[stage] - 1
        rows.append({"stage": stage, "published_it_s": published[stage], "model_it_s": modelled,
                     "off": off, "within_25": abs(off) <= 0.25, "why": why[stage]})
    return rows


def _timed_steps(step, steps: int, warmup: int, wait=lambda: None) -> float:
    """The fastest of `steps` timed steps after `warmup` untimed ones (as timeit reports): steps
    the machine's other work delayed do not move it."""
    for _ in range(warmup):
        step()
    wait()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        wait()
        times.append(time.perf_counter() - start)
    return min(times)


def _training_step(model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def cpu_step_s(batch: int, widths=TUTORIAL_WIDTHS, steps: int = 5, warmup: int = 2) -> float:
    """Seconds per training step in plain PyTorch on the host CPU (random data already in memory:
    the step alone, no data loader)."""
    torch.manual_seed(0)
    x, y = torch.randn(batch, INPUT), torch.randint(0, CLASSES, (batch,))
    return _timed_steps(_training_step(MLP(layers=widths), x, y), steps, warmup)


def device_step_s(device, batch: int, widths=TUTORIAL_WIDTHS, steps: int = 5,
                  warmup: int = 2) -> float:
    """Seconds per training step on the XLA device: one graph per (batch, widths), compiled in
    the warm-up; each step a sync, the time taken once the device has finished."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    torch.manual_seed(0)
    x = torch.randn(batch, INPUT).to(device)
    y = torch.randint(0, CLASSES, (batch,)).to(device)
    train = _training_step(MLP(layers=widths).to(device), x, y)

    def step():
        loss = train()  # alive at the sync, as in the stage scripts: the same graph as theirs
        torch_xla.sync()
        return loss
    return _timed_steps(step, steps, warmup, wait=xm.wait_device_ops)


def sweep(measure, points) -> dict:
    """{(batch, widths): seconds per step} for each (batch, widths) in points."""
    return {(batch, tuple(widths)): measure(batch, widths) for batch, widths in points}


def crossover(cpu: dict, model: NeuronCoreModel, widths=None, batch=None) -> dict:
    """Along the measured points of one sweep (fixed widths, or fixed batch) in sweep order: the
    last point where the CPU still wins, the first where the modelled NeuronCore does (None when
    it never does), and the NeuronCore's speed-up at the largest point (below 1: it loses)."""
    line = [(key, cpu_s / model.step_s(*key)) for key, cpu_s in cpu.items()
            if (widths is None or key[1] == tuple(widths)) and (batch is None or key[0] == batch)]
    if not line:
        raise ValueError("no measured point in that sweep: give widths= or batch= of the sweep")
    first_win = next((i for i, (_, speedup) in enumerate(line) if speedup > 1), None)
    return {"cpu_wins_at": line[first_win - 1][0] if first_win else None,
            "core_wins_from": line[first_win][0] if first_win is not None else None,
            "speedup_at_largest": line[-1][1], "largest": line[-1][0]}


def describe_crossover(found: dict, along: str) -> str:
    """One sentence for a crossover() result; along: "batch" or "width"."""
    def name(key):
        return f"batch {key[0]}" if along == "batch" else f"width {key[1][0]}"
    largest = f"{found['speedup_at_largest']:.2g}x the CPU at {name(found['largest'])}"
    if found["core_wins_from"] is None:
        return f"by {along}: the CPU wins at every point measured (the modelled core: {largest})"
    still = f"the CPU still wins at {name(found['cpu_wins_at'])}, " if found["cpu_wins_at"] else ""
    return (f"by {along}: {still}one NeuronCore (modelled) wins from "
            f"{name(found['core_wins_from'])}, and is {largest}")


def plot_payoff(cpu: dict, device: dict, model: NeuronCoreModel, device_label: str,
                batch_for_widths: int):
    """Two panels, one legend (4 entries): ms per step against batch size (the tutorial's
    widths), and against hidden width (at batch_for_widths)."""
    import matplotlib.pyplot as plt

    published = published_throughputs()
    fig, (by_batch, by_width) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = [(by_batch, lambda b, w: w == TUTORIAL_WIDTHS, lambda b, w: b,
               f"batch size (hidden widths {TUTORIAL_WIDTHS[0]}/{TUTORIAL_WIDTHS[1]})"),
              (by_width, lambda b, w: b == batch_for_widths, lambda b, w: w[0],
               f"hidden width (both layers; batch {batch_for_widths})")]
    for ax, keep, x_of, xlabel in panels:
        points = sorted((x_of(b, w), s, b, w) for (b, w), s in cpu.items() if keep(b, w))
        xs = [p[0] for p in points]
        ax.plot(xs, [1e3 * p[1] for p in points], "o-", color="tab:blue",
                label="host CPU, plain PyTorch (measured here)")
        ax.plot(xs, [1e3 * model.step_s(p[2], p[3]) for p in points], "--", color="tab:orange",
                label="one NeuronCore, modelled (estimate, FP32 peak)")
        dev = sorted((x_of(b, w), s) for (b, w), s in device.items() if keep(b, w))
        ax.plot([d[0] for d in dev], [1e3 * d[1] for d in dev], "s", color="tab:green",
                label=device_label)
        ax.set(xscale="log", yscale="log", xlabel=xlabel)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
    by_batch.plot([TUTORIAL_BATCH] * 2, [1e3 / published["cpu"], 1e3 / published["torchrun_w1"]],
                  "k*", markersize=10, label="AWS tutorial on trn1: host CPU, one NeuronCore")
    by_batch.set_ylabel("ms per training step")
    fig.legend(*by_batch.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=9,
               frameon=False)
    fig.suptitle("Lower is faster: the NeuronCore's fixed cost against the CPU's growing work")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig

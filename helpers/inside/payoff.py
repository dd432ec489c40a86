"""Notebook 07, when a NeuronCore wins: the MLP's step time on the host CPU (measured), on the XLA
device (measured, a few points), against one NeuronCore's modelled range (core_model.py), and
where they cross.

Both measured lines time a step on data already in memory (no data loader), as the model's low
end leaves the loader out, and wait for each step before the next (no overlap, unlike the
tutorial's MpDeviceLoader loop the model is fitted to). The crossover is given for both ends of
the model's range, and from the device's own points (on a trn1, a NeuronCore's).
"""
from __future__ import annotations

import math
import time

import torch

from helpers.inside.core_model import (  # noqa: F401  (notebook 07 and the tests import them here)
    CHIP_TFLOPS,
    CLASSES,
    CORES_PER_CHIP,
    INPUT,
    TUTORIAL_WIDTHS,
    NeuronCoreModel,
    chip_rows,
    describe_held_out,
    describe_terms,
    figure_rows,
    layer_sizes,
    matmul_flops,
    model_from_tutorial,
    model_terms,
    parameter_count,
    published_throughputs,
    two_worker_prediction,
)
from helpers.show.cost import TUTORIAL_BATCH
from mnist_mlp.model import MLP


def _timed_steps(step, steps: int, warmup: int, wait=lambda: None, min_seconds: float = 0.05,
                 max_steps: int = 200) -> float:
    """The fastest timed step after `warmup` untimed ones (as timeit reports): at least `steps`
    of them, more while they add up to under min_seconds (short steps get many chances), so
    steps the machine's other work delayed do not move it."""
    for _ in range(warmup):
        step()
    wait()
    times = []
    while len(times) < steps or (sum(times) < min_seconds and len(times) < max_steps):
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
        # loss alive at the sync, as in notebook 02's train_step: the same graph as its batch-32
        # one (the stage scripts also keep `output` alive, another graph output, another graph)
        loss = train()
        torch_xla.sync()
        return loss
    return _timed_steps(step, steps, warmup, wait=xm.wait_device_ops)


def sweep(measure, points) -> dict:
    """{(batch, widths): seconds per step} for each (batch, widths) in points."""
    return {(batch, tuple(widths)): measure(batch, widths) for batch, widths in points}


def _line(cpu: dict, widths=None, batch=None) -> list:
    """[(x, key, cpu seconds)] along one sweep (fixed widths: x is the batch; fixed batch: x is the
    first hidden width), in order of x."""
    line = sorted((key[0] if batch is None else key[1][0], key, seconds)
                  for key, seconds in cpu.items()
                  if (widths is None or key[1] == tuple(widths)) and (batch is None or key[0] == batch))
    if not line:
        raise ValueError("no measured point in that sweep: give widths= or batch= of the sweep")
    return line


def crossing(cpu: dict, model: NeuronCoreModel, widths=None, batch=None):
    """Where along one sweep the modelled NeuronCore starts to beat the measured CPU: the batch
    (or width) at which the two lines meet, interpolated on log scales between the last measured
    point where the CPU wins and the first where the core does. None when the core wins nowhere;
    0 when it already wins at the first point."""
    line = _line(cpu, widths, batch)
    gap = [(x, math.log(seconds / model.step_s(*key))) for x, key, seconds in line]
    if gap[0][1] > 0:
        return 0
    for (x0, g0), (x1, g1) in zip(gap, gap[1:]):
        if g1 > 0:
            return math.exp(math.log(x0) + (math.log(x1) - math.log(x0)) * -g0 / (g1 - g0))
    return None


def crossover_range(cpu: dict, terms: dict, widths=None, batch=None) -> dict:
    """The crossing for both ends of the model's fixed-cost range, and the core's speed-up over
    the CPU at the sweep's largest point for each."""
    _, key, seconds = _line(cpu, widths, batch)[-1]
    return {"from": crossing(cpu, terms["low"], widths, batch),
            "to": crossing(cpu, terms["high"], widths, batch), "largest": key,
            "speedup": (seconds / terms["high"].step_s(*key), seconds / terms["low"].step_s(*key))}


def _about(ratio: float) -> str:
    """A speed-up rounded to what a peak-FLOPS model can say: one significant figure."""
    return f"~{float(f'{ratio:.1g}'):g}x"


def describe_crossover(found: dict, along: str) -> str:
    """One sentence for a crossover_range() result; along: "batch" or "width"."""
    def at(x):
        if x is None:
            return "nowhere measured"
        return f"the smallest {along} measured" if x == 0 else f"about {along} {x:,.0f}"
    key = found["largest"]
    largest = f"batch {key[0]}" if along == "batch" else f"width {key[1][0]}"
    return (f"by {along}: one NeuronCore (modelled) overtakes this CPU from {at(found['from'])} "
            f"(the band's low end) to {at(found['to'])} (its high end); at {largest} it would be "
            f"up to {_about(max(found['speedup']))} the CPU if the core ran at FP32 peak")


def device_line(device: dict, widths=TUTORIAL_WIDTHS) -> NeuronCoreModel:
    """The measured device as a line: fixed seconds plus FLOPs at one rate, through its smallest-
    and largest-batch points at `widths` (a rate of inf when the larger step was no slower)."""
    points = sorted((b, s) for (b, w), s in device.items() if w == tuple(widths))
    if len(points) < 2:
        raise ValueError(f"a line needs device points at two batch sizes with widths {widths}")
    (b0, t0), (b1, t1) = points[0], points[-1]
    extra = matmul_flops(b1, widths) - matmul_flops(b0, widths)
    rate = extra / (t1 - t0) if t1 > t0 else math.inf
    return NeuronCoreModel(t0 - matmul_flops(b0, widths) / rate, rate)


def describe_measured(cpu: dict, device: dict, terms: dict, device_name: str,
                      widths=TUTORIAL_WIDTHS) -> str:
    """Lines on the device's own points, which the model was not fitted to: each against the band;
    the line through two of them, what it predicts for the others, and where it crosses the CPU
    along the batch sweep (on a trn1, the measured crossover for a loop without overlap)."""
    line = device_line(device, widths)
    lines = [f"{device_name}, measured, each step waited for:"]
    for (b, w), seconds in device.items():
        lines.append(f"  batch {b}, widths {w[0]}/{w[1]}: {seconds * 1e3:.2f} ms (the band: "
                     f"{terms['low'].step_s(b, w) * 1e3:.2f} to {terms['high'].step_s(b, w) * 1e3:.2f})"
                     + ("" if w == tuple(widths) else
                        f"; the line below predicts {line.step_s(b, w) * 1e3:.2f}"))
    rate = "no slower" if math.isinf(line.peak_flops) else f"{line.peak_flops / 1e12:.3g} TFLOP/s"
    lines.append(f"as a line through its {widths[0]}/{widths[1]} points: {line.fixed_s * 1e3:.2f} ms a "
                 f"step plus FLOPs at {rate} (the model: {terms['peak_flops'] / 1e12:.2f} TFLOP/s)")
    found = crossing(cpu, line, widths=widths)
    where = ("nowhere measured" if found is None else "from the smallest batch measured"
             if found == 0 else f"from about batch {found:,.0f}")
    return "\n".join(lines + [f"by batch, measured: {device_name} overtakes this CPU {where}"])


def plot_payoff(cpu: dict, device: dict, terms: dict, device_label: str, batch_for_widths: int):
    """Two panels, one legend (5 entries): ms per step against batch size (the tutorial's
    widths), and against hidden width (at batch_for_widths; a tick names both widths where they
    differ); the model as a band (its range), the tutorial's two batch-32 logs as markers."""
    import matplotlib.pyplot as plt

    published = published_throughputs()
    fig, (by_batch, by_width) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = [(by_batch, {"widths": TUTORIAL_WIDTHS}, lambda b, w: w == TUTORIAL_WIDTHS,
               f"batch size (hidden widths {TUTORIAL_WIDTHS[0]}/{TUTORIAL_WIDTHS[1]})"),
              (by_width, {"batch": batch_for_widths}, lambda b, w: b == batch_for_widths,
               f"hidden width (both layers; batch {batch_for_widths})")]
    for ax, sweep_of, keep, xlabel in panels:
        line = _line(cpu, **sweep_of)
        xs = [x for x, _, _ in line]
        ax.plot(xs, [1e3 * s for _, _, s in line], "o-", color="tab:blue",
                label="host CPU, plain PyTorch (measured here)")
        ax.fill_between(xs, [1e3 * terms["low"].step_s(*k) for _, k, _ in line],
                        [1e3 * terms["high"].step_s(*k) for _, k, _ in line], color="tab:orange",
                        alpha=0.35, label="one NeuronCore, modelled (range: loader's share unknown)")
        dev = sorted((b if ax is by_batch else w[0], s) for (b, w), s in device.items() if keep(b, w))
        ax.plot([d[0] for d in dev], [1e3 * d[1] for d in dev], "s", color="tab:green",
                label=f"{device_label}, measured here, each step waited for")
        ax.set(xscale="log", yscale="log", xlabel=xlabel)
        ax.set_xticks(xs, [str(x) if ax is by_batch or k[1][0] == k[1][1] else f"{k[1][0]}/{k[1][1]}"
                           for x, k, _ in line])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
    by_batch.plot(TUTORIAL_BATCH, 1e3 / published["cpu"], "kD", markersize=7,
                  label="AWS tutorial: host CPU, with its loader")
    by_batch.plot(TUTORIAL_BATCH, 1e3 / published["torchrun_w1"], "k*", markersize=11,
                  label="AWS tutorial: one NeuronCore, the model's fit point")
    by_batch.set_ylabel("ms per training step")
    fig.legend(*by_batch.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=9,
               frameon=False)
    fig.suptitle("Lower is faster: the NeuronCore's fixed cost against the CPU's growing work")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig


def core_wins_from_batch(fixed_s: float, widths, cpu_flops: float, peak_flops: float):
    """The batch at which a NeuronCore's step (fixed_s + FLOPs at peak_flops) equals a CPU's that
    does the same FLOPs at cpu_flops; None when the CPU is the faster at arithmetic."""
    per_image = matmul_flops(1, widths)
    saved = per_image / cpu_flops - per_image / peak_flops
    return fixed_s / saved if saved > 0 else None

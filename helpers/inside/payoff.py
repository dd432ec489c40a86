"""Notebook 07, when a NeuronCore wins: the MLP's step time on the host CPU (measured), on the XLA
device (measured, a few points), the cited figures for one NeuronCore's model (core_model.py; the
model itself is the notebook's cells) and where a model crosses the CPU (crossover.py).

Both measured lines time a step on data already in memory (no data loader), as the model's band
leaves the loader out, and wait for each step before the next (no overlap, unlike the
tutorial's MpDeviceLoader loop the model is fitted to). Each point is a median over many steps,
outliers rejected, with its spread (robust_timing.py): the CPU's points in rounds that visit
every point in turn, so that other work on the machine shows as spread, not as a wrong line.
The loader is timed on its own, per image.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import replace

import torch

from helpers.inside.core_model import (  # noqa: F401  (notebook 07 and the tests import them here)
    CLASSES,
    INPUT,
    TUTORIAL_WIDTHS,
    allreduce_s,
    figure_rows,
    matmul_flops,
    parameter_count,
    peak_flops,
    published_throughputs,
    tutorial_fixed_s,
)
from helpers.inside.crossover import Crossing, find_crossover, sweep_line  # noqa: F401
from helpers.inside.robust_timing import Timing, flag_slower_than_more_work, time_interleaved
from helpers.show.cost import TUTORIAL_BATCH
from mnist_mlp.model import MLP


def _training_step(model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


THREAD_PROBE = (2048, TUTORIAL_WIDTHS)  # a step long enough that more threads make it faster
MAX_THREAD_SLOWDOWN = 1.5


def cpu_training_step(batch: int, widths=TUTORIAL_WIDTHS):
    """One training step in plain PyTorch on the host CPU, on random data already in memory."""
    torch.manual_seed(0)
    x, y = torch.randn(batch, INPUT), torch.randint(0, CLASSES, (batch,))
    return _training_step(MLP(layers=widths), x, y)


def _on_one_thread(step):
    """The step on one of PyTorch's threads (the count restored after it)."""
    def one_thread_step():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return step()
        finally:
            torch.set_num_threads(threads)
    return one_thread_step


def cpu_sweep(points, rounds: int = 5, warmup: int = 1, step=cpu_training_step,
              cpu_clock=time.process_time, probe=THREAD_PROBE, **timing) -> dict[tuple, Timing]:
    """{(batch, widths): Timing} of a CPU training step for each (batch, widths) in points, timed
    in rounds that visit every point in turn, with the share of the time they had a CPU
    (robust_timing.time_interleaved). With more than one thread, the probe point also runs on
    one: when its threads make it MAX_THREAD_SLOWDOWN times slower than one thread does, they
    waited for cores other work held, and every point says so (Timing.busy_note). A point slower
    than one with a batch and widths none smaller is busy too (flag_slower_than_more_work)."""
    steps = {(batch, tuple(widths)): step(batch, tuple(widths)) for batch, widths in points}
    threads = torch.get_num_threads()
    probe_key = (probe[0], tuple(probe[1])) if probe else None
    if probe and threads > 1:
        if probe_key not in steps:  # a point the sweep times already is not timed twice
            steps["threads"] = step(*probe)
        steps["one thread"] = _on_one_thread(step(*probe))
    timed = time_interleaved(steps, rounds=rounds, warmup=warmup, cpu_clock=cpu_clock, **timing)
    many = timed.pop("threads", None) or timed.get(probe_key)
    one = timed.pop("one thread", None)
    if many and one and many.q1_s > one.q3_s * MAX_THREAD_SLOWDOWN:
        note = (f"at batch {probe[0]} a step on {threads} threads took {many.median_s / one.median_s:.3g} "
                f"times as long as on one (its threads waited for cores other work held)")
        timed = {key: replace(t, busy_note=note) for key, t in timed.items()}
    return flag_slower_than_more_work(timed, _more_work, _point_name)


def _more_work(a: tuple, b: tuple) -> bool:
    """Whether point b's step does a's work and more: a batch and widths none smaller."""
    (batch_a, widths_a), (batch_b, widths_b) = a, b
    return a != b and batch_b >= batch_a and all(wb >= wa for wa, wb in zip(widths_a, widths_b))


def _point_name(key: tuple) -> str:
    batch, widths = key
    return f"batch {batch:,} at widths {'/'.join(map(str, widths))}"


def cpu_step_s(batch: int, widths=TUTORIAL_WIDTHS, rounds: int = 5) -> float:
    """Seconds per CPU training step (the median, outliers rejected) at one point."""
    return cpu_sweep([(batch, widths)], rounds=rounds, probe=None)[(batch, tuple(widths))].median_s


def device_step_s(device, batch: int, widths=TUTORIAL_WIDTHS, rounds: int = 5,
                  warmup: int = 2) -> float:
    """Seconds per training step on the XLA device (the median, outliers rejected): one graph
    per (batch, widths), compiled in the warm-up; each step a sync, timed once the device has
    finished."""
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
    return time_interleaved({"step": step}, rounds=rounds, warmup=warmup,
                            wait=xm.wait_device_ops)["step"].median_s


def device_sweep(device, points) -> dict:
    """{(batch, widths): seconds per step on the XLA device} for each (batch, widths) in points."""
    return {(batch, tuple(widths)): device_step_s(device, batch, widths) for batch, widths in points}


def loader_per_image_s(kind: str = "torchvision", batches=(32, 256), rounds: int = 5,
                       data_dir=None, **timing) -> dict[int, Timing]:
    """{batch: Timing per image} of the training loader `kind` alone (notebook 01 times it at
    batch 32), at each batch size: a per-image cost holds its value as the batch grows."""
    from mnist_mlp.common import make_loader

    def next_batch(batch):
        loader = make_loader(kind, data_dir, train=True, batch_size=batch, seed=0)
        batches_forever = itertools.chain.from_iterable(loader for _ in itertools.count())
        return lambda: next(batches_forever)
    timing.setdefault("cpu_clock", time.process_time)
    timed = time_interleaved({b: next_batch(b) for b in batches}, rounds=rounds, warmup=1, **timing)
    return {b: Timing(t.median_s / b, t.q1_s / b, t.q3_s / b, t.kept, t.rejected, t.cpu_share)
            for b, t in timed.items()}


def cpu_rows(cpu: dict) -> list[list]:
    """Rows (batch, widths, median ms, spread, share of the time on a CPU, steps kept/rejected)
    for notebook 07's table of the CPU's points, in the order of cpu; a point not to be used is
    marked."""
    return [[b, f"{w[0]}/{w[1]}", f"{t.median_s * 1e3:.2f}", f"{t.spread:.0%}",
             "" if t.cpu_share is None else f"{t.cpu_share:.0%}",
             f"{t.kept}/{t.rejected}" + ("" if t.reliable else " (busy)")]
            for (b, w), t in cpu.items()]


def plot_payoff(cpu: dict, device: dict, device_label: str, core_step_s, band, batch_for_widths: int):
    """Two panels, one legend (5 entries): ms per step against batch size (the tutorial's
    widths), and against hidden width (at batch_for_widths; a tick names both widths where they
    differ); the CPU's medians with their IQR (a point not to be used hollow, in red); the model
    core_step_s(flops, fixed_cost) as a band from band[0] to band[1], the tutorial's two batch-32
    logs as markers."""
    import matplotlib.pyplot as plt

    published = published_throughputs()
    fig, (by_batch, by_width) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = [(by_batch, {"widths": TUTORIAL_WIDTHS}, lambda b, w: w == TUTORIAL_WIDTHS,
               f"batch size (hidden widths {TUTORIAL_WIDTHS[0]}/{TUTORIAL_WIDTHS[1]})"),
              (by_width, {"batch": batch_for_widths}, lambda b, w: b == batch_for_widths,
               f"hidden width (both layers; batch {batch_for_widths})")]
    for ax, sweep_of, keep, xlabel in panels:
        line = sweep_line(cpu, **sweep_of)
        xs, ms = [x for x, _, _ in line], [1e3 * t.median_s for _, _, t in line]
        ax.errorbar(xs, ms, yerr=[[m - 1e3 * t.q1_s for m, (_, _, t) in zip(ms, line)],
                                  [1e3 * t.q3_s - m for m, (_, _, t) in zip(ms, line)]],
                    fmt="o-", color="tab:blue", capsize=3,
                    label="host CPU, plain PyTorch (measured here: median, IQR; hollow: busy)")
        unreliable = [(x, m) for x, m, (_, _, t) in zip(xs, ms, line) if not t.reliable]
        ax.plot([u[0] for u in unreliable], [u[1] for u in unreliable], "o", color="white",
                markeredgecolor="tab:red", zorder=3)  # not to be used (robust_timing): hollow, red
        ax.fill_between(xs, *([1e3 * core_step_s(matmul_flops(*k), fixed) for _, k, _ in line]
                              for fixed in band), color="tab:orange",
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


def core_wins_from_batch(fixed_s: float, widths, cpu_flops: float, core_flops: float):
    """The batch at which a NeuronCore's step (fixed_s + FLOPs at core_flops) equals a CPU's that
    does the same FLOPs at cpu_flops; None when the CPU is the faster at arithmetic."""
    per_image = matmul_flops(1, widths)
    saved = per_image / cpu_flops - per_image / core_flops
    return fixed_s / saved if saved > 0 else None

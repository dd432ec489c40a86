"""Where each step's time goes, from per-step deltas of torch_xla.debug.metrics.

    recorder = StepTimeRecorder()
    for ...:
        loss = train_step(model, optimizer, x, y); torch_xla.sync()
        recorder.record()          # waits for the device, then stores what this step added
    plot_step_breakdown(recorder.rows)

torch_xla times compiles, executions and transfers as metrics (samples, accumulated ns).
ExecuteTime is recorded by the thread that runs the graph, after sync() has returned: read
without waiting, a step's execution can land in the next step's delta. record() therefore
waits for the device first (a diagnostic: the lost overlap is the price).
"""
from __future__ import annotations

import time

import torch

# metric name -> column: what the step spent on it (seconds) and how many times it happened.
TIME_METRICS = {
    "CompileTime": "compile",
    "ExecuteTime": "execute",
    "TransferToDeviceTime": "to_device",
    "TransferFromDeviceTime": "from_device",
    "EagerOpCompileTime": "eager_op_compile",
    "EagerOpExecuteTime": "eager_op_execute",
}
COUNTERS = ("UncachedCompile", "CachedCompile", "ExecuteComputation")
PARTS = ("compile", "execute", "to_device", "from_device", "eager_op_compile", "eager_op_execute")
COLORS = {"compile": "#c44e52", "execute": "#4c72b0", "to_device": "#55a868",
          "from_device": "#8172b2", "eager_op_compile": "#dd8452", "eager_op_execute": "#64b5cd",
          "other": "#b0b0b0"}


def read_metrics() -> dict[str, float]:
    """Totals so far in this process: <part>_s and <part>_n per metric, and the COUNTERS."""
    import torch_xla.debug.metrics as met

    totals: dict[str, float] = {}
    for metric, part in TIME_METRICS.items():
        data = met.metric_data(metric)
        totals[f"{part}_n"] = int(data[0]) if data else 0
        totals[f"{part}_s"] = data[1] / 1e9 if data else 0.0
    for name in COUNTERS:
        totals[name] = int(met.counter_value(name) or 0)
    return totals


class StepTimeRecorder:
    """Call record() once at the end of each step. Each row: the step's wall time (since the
    previous record(), or since the recorder was made), the seconds and counts each metric
    added, and `other_s`: the rest (Python, tracing the graph, the optimizer on the host)."""

    def __init__(self, wait: bool = True):
        self.wait = wait
        self.rows: list[dict] = []
        self._last = read_metrics()
        self._clock = time.perf_counter()

    def restart_clock(self) -> None:
        """Start the next step's wall time now (e.g. after loading a batch you do not count)."""
        self._clock = time.perf_counter()

    def record(self) -> dict:
        if self.wait:
            import torch_xla.core.xla_model as xm

            xm.wait_device_ops()
        now, clock = read_metrics(), time.perf_counter()
        row = {"step": len(self.rows), "wall_s": clock - self._clock}
        row.update({k: now[k] - self._last[k] for k in now})
        row["other_s"] = max(0.0, row["wall_s"] - sum(row[f"{p}_s"] for p in PARTS))
        self._last, self._clock = now, clock
        self.rows.append(row)
        return row


def train_step(model, optimizer, x, y, loss_fn=torch.nn.functional.nll_loss):
    """One step of the stage scripts' loop (zero_grad, forward, loss, backward, update), as a
    function: what torch_xla.compile wraps in the eager comparison."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def summarize(rows: list[dict], skip_first: int = 1) -> dict[str, float]:
    """Per step after the first `skip_first`: median wall ms, mean graph compiles and executions;
    and over all rows: total graph compiles (UncachedCompile) and per-op compiles."""
    if len(rows) <= skip_first:
        raise ValueError(f"{len(rows)} steps recorded: need more than skip_first={skip_first}")
    later = rows[skip_first:]
    walls = sorted(r["wall_s"] for r in later)
    return {
        "steps": len(rows),
        "graphs_compiled": sum(r["compile_n"] for r in rows),
        "eager_op_compiles": sum(r["eager_op_compile_n"] for r in rows),
        "compiles_total": sum(r["UncachedCompile"] for r in rows),
        "executions_per_step": sum(r["ExecuteComputation"] for r in later) / len(later),
        "compiles_after_first": sum(r["UncachedCompile"] for r in later),
        "median_step_ms": 1000 * walls[len(walls) // 2],
        "first_step_s": rows[0]["wall_s"],
    }


def plot_step_breakdown(rows: list[dict], title: str = "Where each step's time goes"):
    """Step 0 on its own (it carries the compile: seconds), the later steps stacked in ms."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("no steps recorded: call recorder.record() after each step")
    parts = [p for p in PARTS if any(r[f"{p}_s"] for r in rows)] + ["other"]
    fig, (first_ax, later_ax) = plt.subplots(1, 2, figsize=(11, 3.6),
                                             gridspec_kw={"width_ratios": [1, 5]})
    bottom = 0.0
    for part in parts:
        value = rows[0][f"{part}_s"]
        first_ax.bar([0], [value], bottom=bottom, color=COLORS[part], label=part)
        bottom += value
    first_ax.set_xticks([0], ["step 0"])
    first_ax.set_ylabel("seconds")
    first_ax.set_title("step 0", fontsize=10)
    later = rows[1:]
    steps = [r["step"] for r in later]
    bottoms = [0.0] * len(later)
    for part in parts:
        values = [1000 * r[f"{part}_s"] for r in later]
        later_ax.bar(steps, values, bottom=bottoms, color=COLORS[part], label=part, width=0.8)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    later_ax.set_ylabel("milliseconds")
    later_ax.set_xlabel("step")
    later_ax.set_title(f"steps 1-{len(rows) - 1}", fontsize=10)
    later_ax.legend(fontsize=8, ncols=len(parts), loc="upper right")
    if later:
        later_ax.set_ylim(0, 1.35 * max(bottoms))
    fig.suptitle(title)
    fig.tight_layout()
    return fig

"""Live utilization while a run trains: a widget that redraws every second.

On Neuron the numbers come from `neuron-monitor` (its JSON report stream, one report per line):
per-NeuronCore utilization and device memory per Neuron runtime. On the CPU stand-in there is
no NeuronCore to measure, so the same widget plots each torchrun worker's CPU % and resident
memory from psutil, and says so in its title.

    with UtilizationMonitor(backend) as monitor:      # shows the widget, starts sampling
        run_torchrun("../mnist_mlp/train_torchrun.py", ...)
    monitor.updates                                     # how many times it redrew
"""
from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

import psutil

from mnist_mlp.common import child_process
from mnist_mlp.common.child_process import stop_process_tree

# neuron-monitor's configuration (Neuron Monitor User Guide, v2.31.0): every Neuron runtime on
# the host, a report each second, the metric groups this widget reads.
NEURON_MONITOR_DOCS = ("https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/tools/"
                       "neuron-sys-tools/neuron-monitor-user-guide.html")
PERIOD_S = 1.0
STAND_IN_SOURCE = "psutil: CPU % and RSS of each torchrun worker (CPU stand-in: no NeuronCore)"
NEURON_SOURCE = "neuron-monitor: NeuronCore utilization and device memory"


def neuron_monitor_config(period_s: float = PERIOD_S) -> dict:
    return {
        "period": f"{period_s:g}s",
        "neuron_runtimes": [{"tag_filter": ".*",
                             "metrics": [{"type": "neuroncore_counters"},
                                         {"type": "memory_used"}]}],
        "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}],
    }


@dataclass
class Sample:
    """One reading: percent busy and memory bytes, each keyed by what was measured."""
    time_s: float  # monotonic clock of this process
    busy_percent: dict[str, float] = field(default_factory=dict)  # "NeuronCore 0" / "rank 0"
    memory_bytes: dict[str, int] = field(default_factory=dict)  # "device (pid N)" / "rank 0"
    errors: list[str] = field(default_factory=list)


class ReportError(ValueError):
    """A neuron-monitor line that is not a report of the documented shape."""


def parse_neuron_monitor_report(line, time_s: float | None = None) -> Sample:
    """One neuron-monitor report (a JSON line, or the decoded dict) as a Sample.

    Reads neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use[<core>]
    .neuroncore_utilization and .memory_used.neuron_runtime_used_bytes.neuron_device; errors
    neuron-monitor reports (per runtime or per metric group) are kept in Sample.errors.
    """
    if isinstance(line, (str, bytes)):
        try:
            report = json.loads(line)
        except json.JSONDecodeError as err:
            raise ReportError(f"neuron-monitor printed a line that is not JSON ({err}): "
                              f"{str(line)[:120]!r}. Is `neuron-monitor` the Neuron tool "
                              f"(aws-neuronx-tools)? Its guide: {NEURON_MONITOR_DOCS}") from None
    else:
        report = line
    if not isinstance(report, dict) or "neuron_runtime_data" not in report:
        raise ReportError("a neuron-monitor report has a top-level 'neuron_runtime_data' list; "
                          f"this has {sorted(report) if isinstance(report, dict) else type(report).__name__}. "
                          f"See {NEURON_MONITOR_DOCS}")
    sample = Sample(time.monotonic() if time_s is None else time_s)
    for runtime in report["neuron_runtime_data"] or []:
        pid = runtime.get("pid")
        if runtime.get("error"):
            sample.errors.append(f"runtime pid {pid}: {runtime['error']}")
        body = runtime.get("report") or {}
        counters = body.get("neuroncore_counters") or {}
        if counters.get("error"):
            sample.errors.append(f"neuroncore_counters (pid {pid}): {counters['error']}")
        for core, data in (counters.get("neuroncores_in_use") or {}).items():
            sample.busy_percent[f"NeuronCore {core}"] = float(data["neuroncore_utilization"])
        memory = body.get("memory_used") or {}
        if memory.get("error"):
            sample.errors.append(f"memory_used (pid {pid}): {memory['error']}")
        used = memory.get("neuron_runtime_used_bytes") or {}
        if "neuron_device" in used:
            sample.memory_bytes[f"device memory, pid {pid}"] = int(used["neuron_device"])
    return sample


class NeuronMonitorSource:
    """`neuron-monitor -c <config>` in the background; sample() returns its latest report."""

    label = NEURON_SOURCE

    def __init__(self, period_s: float = PERIOD_S, executable: str = "neuron-monitor"):
        self.period_s, self.executable = period_s, executable
        self.proc: subprocess.Popen | None = None
        self._reports: queue.Queue = queue.Queue()
        self._config = None

    def command(self, config_path: str) -> list[str]:
        return [self.executable, "-c", config_path]

    def start(self) -> None:
        self._config = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="neuron-monitor-",
                                                   delete=False)
        json.dump(neuron_monitor_config(self.period_s), self._config)
        self._config.close()
        # Dies with the kernel (child_process); its stderr is no report, kept out of the stream.
        self.proc = child_process.start(self.command(self._config.name), stderr=subprocess.DEVNULL,
                                        text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                try:
                    self._reports.put(parse_neuron_monitor_report(line))
                except ReportError as err:
                    self._reports.put(Sample(time.monotonic(), errors=[str(err)]))

    def sample(self) -> Sample | None:
        latest = None
        while True:
            try:
                latest = self._reports.get_nowait()
            except queue.Empty:
                return latest

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process_tree(self.proc, grace_s=2.0)
        if self._config is not None:
            os.unlink(self._config.name)
            self._config = None


class WorkerProcessSource:
    """CPU % and RSS of this process's descendants that run `script` with a RANK (torchrun
    workers), labelled by rank: what the stand-in can measure instead of a NeuronCore."""

    label = STAND_IN_SOURCE

    def __init__(self, script: str = "train_torchrun.py", root: psutil.Process | None = None):
        self.script, self.root = script, root or psutil.Process()
        self._known: dict[int, tuple[str, psutil.Process]] = {}

    def start(self) -> None:
        pass

    def _workers(self) -> dict[int, tuple[str, psutil.Process]]:
        for proc in self.root.children(recursive=True):
            if proc.pid in self._known:
                continue
            try:
                cmdline = proc.cmdline()
                rank = proc.environ().get("RANK") if any(self.script in a for a in cmdline) else None
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if rank is not None:
                proc.cpu_percent(None)  # primes the counter: the next call measures from here
                self._known[proc.pid] = (f"rank {rank}", proc)
        return self._known

    def sample(self) -> Sample:
        sample = Sample(time.monotonic())
        for pid, (label, proc) in list(self._workers().items()):
            try:
                with proc.oneshot():
                    sample.busy_percent[label] = proc.cpu_percent(None)
                    sample.memory_bytes[label] = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                del self._known[pid]
        return sample

    def stop(self) -> None:
        pass


def source_for(backend):
    """neuron-monitor on a Neuron backend, the workers' psutil figures elsewhere."""
    return NeuronMonitorSource() if getattr(backend, "name", backend) == "neuron" else WorkerProcessSource()


class UtilizationMonitor:
    """A widget (a counter line and a two-panel plot) redrawn every period_s from `source`
    while the `with` block runs. samples: every reading taken; updates: redraws done."""

    def __init__(self, backend=None, source=None, period_s: float = PERIOD_S,
                 title: str = "While it trains"):
        import ipywidgets as widgets

        self.source = source or source_for(backend)
        self.period_s, self.title = period_s, title
        self.samples: list[Sample] = []
        self.updates = 0
        self.status = widgets.HTML(self._status_text())
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="760px"))
        self.widget = widgets.VBox([self.status, self.image])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = None

    def _status_text(self, extra: str = "") -> str:
        return (f"<b>{self.title}</b> · source: {self.source.label} · "
                f"<span class='utilization-updates'>updates: {self.updates}</span>{extra}")

    def __enter__(self):
        from IPython.display import display

        display(self.widget)
        self._started = time.monotonic()
        self.source.start()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.tick()

    def tick(self) -> None:
        """Take one sample and redraw (what the background thread does every period)."""
        sample = self.source.sample()
        if sample is None:
            return
        self.samples.append(sample)
        if not (sample.busy_percent or sample.memory_bytes or sample.errors):
            return  # nothing running yet: no redraw, so `updates` counts real readings
        self.updates += 1
        self.image.value = self.render_png()
        busy = ", ".join(f"{k} {v:.0f}%" for k, v in sorted(sample.busy_percent.items()))
        errors = f" · <span style='color:#c00'>{'; '.join(sample.errors)}</span>" if sample.errors else ""
        self.status.value = self._status_text(f" · last: {busy or 'no activity'}{errors}")

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.source.stop()
        if self.updates:
            self.status.value = self._status_text(
                f" · done: {len(self.samples)} readings over "
                f"{self.samples[-1].time_s - self._started:.0f} s")

    def series(self, kind: str) -> dict[str, list[tuple[float, float]]]:
        """{label: [(seconds since start, value), ...]} for kind 'busy_percent' or 'memory_bytes'."""
        out: dict[str, list[tuple[float, float]]] = {}
        for s in self.samples:
            for label, value in getattr(s, kind).items():
                out.setdefault(label, []).append((s.time_s - self._started, value))
        return out

    def figure(self):
        from matplotlib.figure import Figure  # not pyplot: drawn from a thread, no GUI needed

        fig = Figure(figsize=(7.6, 2.6))
        busy_ax, memory_ax = fig.subplots(1, 2)
        stand_in = self.source.label == STAND_IN_SOURCE
        for label, points in sorted(self.series("busy_percent").items()):
            busy_ax.plot(*zip(*points), marker=".", label=label)
        busy_ax.set_title("CPU % per worker (stand-in)" if stand_in else "NeuronCore utilization %",
                          fontsize=9)
        for label, points in sorted(self.series("memory_bytes").items()):
            t, v = zip(*points)
            memory_ax.plot(t, [b / 2**20 for b in v], marker=".", label=label)
        memory_ax.set_title("RSS per worker, MiB (stand-in)" if stand_in
                            else "Neuron device memory, MiB", fontsize=9)
        for ax in (busy_ax, memory_ax):
            ax.set_xlabel("seconds", fontsize=8)
            ax.tick_params(labelsize=7)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="lower right")
        busy_ax.set_ylim(bottom=0)
        fig.tight_layout()
        return fig

    def snapshot(self):
        """The plot as it stands, as an image to keep in the notebook's saved output."""
        from IPython.display import Image

        return Image(data=self.render_png(), format="png")

    def render_png(self) -> bytes:
        buffer = io.BytesIO()
        self.figure().savefig(buffer, format="png", dpi=80)
        return buffer.getvalue()

"""helpers/inside/utilization.py: the neuron-monitor report parser on reports built from the documented
schema (Neuron Monitor User Guide, v2.31.0), the monitor's stream read from a real process, and
the stand-in's per-worker psutil readings of real busy processes."""
import json
import os
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest

from helpers.inside.utilization import (
    NEURON_MONITOR_DOCS,
    STAND_IN_SOURCE,
    NeuronMonitorSource,
    ReportError,
    UtilizationMonitor,
    WorkerProcessSource,
    neuron_monitor_config,
    parse_neuron_monitor_report,
    source_for,
)
from tests.paths import REPO_ROOT


def documented_report(utilization=(42.01, 42.02), device_bytes=12519788544, pid=1234,
                      runtime_error="", counters_error=""):
    """A report of the shape the guide documents: neuron_runtime_data[].report with
    neuroncore_counters and memory_used, plus system_data, instance and hardware info."""
    return {
        "neuron_runtime_data": [{
            "pid": pid, "address": "", "neuron_runtime_tag": str(pid), "error": runtime_error,
            "report": {
                "neuroncore_counters": {
                    "period": 1.000113182,
                    "neuroncores_in_use": {str(core): {"neuroncore_utilization": value,
                                                       "flops": 1234567891011}
                                           for core, value in enumerate(utilization)},
                    "error": counters_error},
                "memory_used": {
                    "period": 1.00001,
                    "neuron_runtime_used_bytes": {
                        "host": 6997643264, "neuron_device": device_bytes,
                        "usage_breakdown": {
                            "host": {"application_memory": 6996594688, "constants": 0,
                                     "dma_buffers": 1048576, "tensors": 0},
                            "neuroncore_memory_usage": {
                                "0": {"constants": 193986816, "model_code": 176285056,
                                      "model_shared_scratchpad": 0, "runtime_memory": 0,
                                      "tensors": 20971520}}}},
                    "loaded_models": [], "error": ""},
            }}],
        "system_data": {
            "vcpu_usage": {"period": 0.99, "average_usage": {"user": 32.77, "nice": 0,
                                                              "system": 22.87, "idle": 39.36,
                                                              "io_wait": 0, "irq": 0,
                                                              "soft_irq": 0},
                           "usage_data": {}, "context_switch_count": 123456, "error": ""},
            "memory_info": {"period": 5.3, "memory_total_bytes": 49345835008,
                            "memory_used_bytes": 16042344448, "swap_total_bytes": 0,
                            "swap_used_bytes": 0, "error": ""}},
        "instance_info": {"instance_type": "trn1.2xlarge", "error": ""},
        "neuron_hardware_info": {"neuron_device_type": "trainium", "neuroncore_version": "v2",
                                 "neuron_device_count": 1, "neuroncore_per_device_count": 2,
                                 "error": ""},
    }


def test_parses_per_core_utilization_and_device_memory():
    sample = parse_neuron_monitor_report(json.dumps(documented_report()), time_s=5.0)
    assert sample.busy_percent == {"NeuronCore 0": 42.01, "NeuronCore 1": 42.02}
    assert sample.memory_bytes == {"device memory, pid 1234": 12519788544}
    assert sample.errors == [] and sample.time_s == 5.0


def test_two_runtimes_each_with_their_cores():
    report = documented_report(utilization=(10.0,), pid=1)
    second = documented_report(utilization=(0.0, 90.5), pid=2)["neuron_runtime_data"][0]
    second["report"]["neuroncore_counters"]["neuroncores_in_use"] = {
        "1": {"neuroncore_utilization": 90.5}}
    report["neuron_runtime_data"].append(second)
    sample = parse_neuron_monitor_report(report)
    assert sample.busy_percent == {"NeuronCore 0": 10.0, "NeuronCore 1": 90.5}
    assert set(sample.memory_bytes) == {"device memory, pid 1", "device memory, pid 2"}


def test_errors_neuron_monitor_reports_are_kept():
    sample = parse_neuron_monitor_report(documented_report(
        runtime_error="runtime not responding", counters_error="no counters"))
    assert any("runtime not responding" in e for e in sample.errors)
    assert any("neuroncore_counters" in e and "no counters" in e for e in sample.errors)


def test_no_application_running_is_an_empty_sample():
    report = documented_report()
    report["neuron_runtime_data"] = []
    sample = parse_neuron_monitor_report(report)
    assert sample.busy_percent == {} and sample.memory_bytes == {}


@pytest.mark.parametrize("line, says", [
    ("neuron-monitor: command not found", "not JSON"),
    ('{"truncated": ', "not JSON"),
    ('{"system_data": {}}', "neuron_runtime_data"),
    ("[1, 2]", "neuron_runtime_data"),
])
def test_bad_lines_say_what_is_wrong_and_where_the_schema_is(line, says):
    with pytest.raises(ReportError) as err:
        parse_neuron_monitor_report(line)
    assert says in str(err.value) and NEURON_MONITOR_DOCS in str(err.value)
    assert "/en/v2.31.0/" in NEURON_MONITOR_DOCS


def test_config_is_the_documented_shape():
    config = neuron_monitor_config()
    assert config["period"] == "1s"
    assert [m["type"] for m in config["neuron_runtimes"][0]["metrics"]] == ["neuroncore_counters",
                                                                           "memory_used"]
    assert [m["type"] for m in config["system_metrics"]] == ["vcpu_usage", "memory_info"]


def test_monitor_source_runs_the_command_and_reads_its_stream(tmp_path):
    # An executable in neuron-monitor's place that checks the -c file it is given, then streams
    # three documented reports, one per line, and keeps running as neuron-monitor does. Its
    # last line, not JSON, waits for a go-ahead file: the reports arrive first, each sampled.
    reports = [json.dumps(documented_report(utilization=(u, 2 * u))) for u in (10.0, 20.0, 30.0)]
    go_ahead = tmp_path / "go-ahead"
    tool = tmp_path / "neuron-monitor"
    tool.write_text(f"""#!{sys.executable}
import json, os, sys, time
assert sys.argv[1] == "-c", sys.argv
config = json.load(open(sys.argv[2]))
assert config["period"] == "1s" and config["neuron_runtimes"], config
for line in {reports!r}:
    print(line, flush=True)
while not os.path.exists({str(go_ahead)!r}):
    time.sleep(0.02)
print("not json", flush=True)
time.sleep(60)
""")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    source = NeuronMonitorSource(executable=str(tool))
    source.start()

    def next_sample(timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sample = source.sample()
            if sample is not None:
                return sample
            time.sleep(0.02)
        raise AssertionError("no report read from the stream")

    try:
        seen = [next_sample()]
        while seen[-1].busy_percent.get("NeuronCore 1") != 60.0:  # the third report: the latest
            seen.append(next_sample())
        assert all(s.errors == [] and s.busy_percent["NeuronCore 1"] in (20.0, 40.0, 60.0)
                   for s in seen), seen
        go_ahead.touch()
        bad = next_sample()
        assert bad.busy_percent == {} and len(bad.errors) == 1 and "not JSON" in bad.errors[0]
        assert source.sample() is None, "each line is read once"
        config_path = source._config.name
        assert os.path.exists(config_path)
        assert source.proc.poll() is None, "neuron-monitor keeps running"
    finally:
        source.stop()
    assert source.proc.poll() is not None, "neuron-monitor is stopped"
    assert not os.path.exists(config_path), "its config file is removed"


def test_neuron_monitor_keeps_stderr_out_of_its_stream_and_dies_with_its_kernel(tmp_path):
    # A "kernel" starts the source on a stand-in neuron-monitor that writes a warning to stderr,
    # then (on a go-ahead) one report, and would run for five minutes; the kernel reads the
    # report and is killed outright (SIGKILL: no atexit, no stop()). The OS sends the monitor
    # SIGTERM (mnist_mlp.common.child_process), so it does not outlive the kernel.
    go_ahead = tmp_path / "go-ahead"
    tool = tmp_path / "neuron-monitor"
    tool.write_text(f"""#!{sys.executable}
import os, sys, time
print("a warning, not a report", file=sys.stderr, flush=True)
while not os.path.exists({str(go_ahead)!r}):
    time.sleep(0.02)
print({json.dumps(documented_report())!r}, flush=True)
time.sleep(300)
""")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    kernel_code = f"""
import os, pathlib, signal, time
from helpers.inside.utilization import NeuronMonitorSource
source = NeuronMonitorSource(executable={str(tool)!r})
source.start()
time.sleep(1.0)  # time for a stderr line to reach the stream, were it merged into it
early = source.sample()
pathlib.Path({str(go_ahead)!r}).touch()
report = None
while report is None:
    report = source.sample()
    time.sleep(0.02)
print(source.proc.pid, early, sorted(report.busy_percent), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    kernel = subprocess.run([sys.executable, "-c", kernel_code], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert kernel.returncode == -signal.SIGKILL, kernel.stderr
    pid, shown = kernel.stdout.split(" ", 1)
    assert shown.strip() == "None ['NeuronCore 0', 'NeuronCore 1']", shown
    monitor = int(pid)

    def gone():
        try:
            return psutil.Process(monitor).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    deadline = time.monotonic() + 60  # a guard: the monitor's SIGTERM acts at once when it runs
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not gone():
        psutil.Process(monitor).kill()
        raise AssertionError(f"neuron-monitor (pid {pid}) outlived the kernel that started it")


@pytest.fixture
def busy_workers(tmp_path):
    """Two processes as torchrun starts them (RANK set, the script on their command line), one
    spinning, one idle; and one without RANK, which is not a worker."""
    procs = []
    for rank, code in (("0", "while True: pass"), ("1", "import time; time.sleep(60)"), (None, "import time; time.sleep(60)")):
        env = {**os.environ, **({"RANK": rank} if rank else {})}
        procs.append(subprocess.Popen([sys.executable, "-c", code, "train_torchrun.py"], env=env))
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_worker_source_reads_each_rank(busy_workers):
    source = WorkerProcessSource()
    source.sample()  # finds them and primes cpu_percent
    # Sampled until the spinning worker has shown its load: on a loaded machine it may get
    # little CPU in any one period (a guard, not a wait, bounds it).
    deadline = time.monotonic() + 60
    while True:
        time.sleep(0.5)
        sample = source.sample()
        busy, idle = (sample.busy_percent.get(f"rank {r}", 0.0) for r in (0, 1))
        if set(sample.busy_percent) == {"rank 0", "rank 1"} and busy > 5 and busy > 5 * idle:
            break
        assert time.monotonic() < deadline, sample.busy_percent
    assert all(v > 1_000_000 for v in sample.memory_bytes.values())
    busy_workers[0].kill()
    busy_workers[0].wait()
    assert set(source.sample().busy_percent) == {"rank 1"}, "a finished worker drops out"


def test_source_follows_the_backend():
    assert isinstance(source_for("neuron"), NeuronMonitorSource)
    assert isinstance(source_for("xla-cpu"), WorkerProcessSource)


def test_widget_redraws_while_the_workers_run(busy_workers):
    with UtilizationMonitor(source=WorkerProcessSource(), period_s=0.2, title="test") as monitor:
        deadline = time.monotonic() + 30  # each redraw renders a plot: slow on a loaded machine
        while monitor.updates < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert monitor.updates >= 2
    assert bytes(monitor.image.value).startswith(b"\x89PNG"), "the plot is a PNG"
    assert f"updates: {monitor.updates}" in monitor.status.value
    assert STAND_IN_SOURCE in monitor.status.value and "done:" in monitor.status.value
    assert set(monitor.series("busy_percent")) == {"rank 0", "rank 1"}
    assert not monitor._thread.is_alive(), "the sampling thread ended with the block"


def test_widget_counts_no_update_before_anything_runs():
    monitor = UtilizationMonitor(source=WorkerProcessSource(root=psutil.Process()), period_s=0.1)
    monitor.tick()
    assert monitor.updates == 0 and len(monitor.samples) == 1

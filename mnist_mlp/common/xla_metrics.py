"""PyTorch/XLA's compile counters, read in-process (new graphs, their compile time, transfers).

torch_xla is imported inside the function, so importing this module cannot start the XLA
runtime before select_backend() has chosen the device."""
from __future__ import annotations

# Counters torch_xla keeps in torch_xla.debug.metrics (same names on Neuron and on CPU):
#   UncachedCompile    a graph seen for the first time was compiled (slow: minutes on Neuron)
#   CachedCompile      a graph was found in the in-memory compile cache (cheap)
#   ExecuteComputation a compiled graph ran on the device
COUNTERS = ("UncachedCompile", "CachedCompile", "ExecuteComputation")
# Metrics: (samples, accumulated nanoseconds). CompileTime samples once per real compile;
# TransferFromDeviceTime once per device-to-host copy (loss.item(), printing a tensor, ...).
COMPILE_TIME = "CompileTime"
TRANSFER_FROM_DEVICE = "TransferFromDeviceTime"
EAGER_COMPILE_TIME = "EagerOpCompileTime"  # eager mode's compiles sample this one instead
FIELDS = COUNTERS + ("compile_time_s", "transfers_from_device")


def read_compile_metrics() -> dict[str, float]:
    """The current totals of COUNTERS, compile time (s) and device-to-host transfers."""
    import torch_xla.debug.metrics as met

    totals: dict[str, float] = {name: int(met.counter_value(name) or 0) for name in COUNTERS}
    compile_data = met.metric_data(COMPILE_TIME)
    totals["compile_time_s"] = compile_data[1] / 1e9 if compile_data else 0.0
    transfer_data = met.metric_data(TRANSFER_FROM_DEVICE)
    totals["transfers_from_device"] = int(transfer_data[0]) if transfer_data else 0
    return totals


def compile_stats() -> tuple[int, float]:
    """(new graphs, seconds spent compiling them or loading them from the cache) so far in this
    process."""
    totals = read_compile_metrics()
    return int(totals["UncachedCompile"]), totals["compile_time_s"]


def compiles_started_and_finished() -> tuple[int, int]:
    """(UncachedCompile, CompileTime + EagerOpCompileTime samples) so far: the first counts a
    graph as its compile starts (it missed the in-memory cache), the others take a sample when a
    compile ends (eager mode's per-operation compiles in the second), so while they differ a
    compile is running (torch-xla 2.9: xla_graph_executor.cpp, pjrt_computation_client.cpp)."""
    import torch_xla.debug.metrics as met

    finished = sum(int(data[0]) for name in (COMPILE_TIME, EAGER_COMPILE_TIME)
                   if (data := met.metric_data(name)))
    return int(met.counter_value("UncachedCompile") or 0), finished

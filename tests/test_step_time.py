"""helpers/inside/step_time.py on the CPU stand-in, in-process: the per-step deltas of torch_xla's
metrics put the compile in step 0, one execution in every lazy step, and dozens in eager mode."""
import pytest
import torch

# The XLA device is started at collection, before any test of this process runs a CPU backward
# (tests/xla_stand_in.py says why).
from tests.xla_stand_in import stand_in_device

stand_in_device()

from helpers.inside.step_time import PARTS, StepTimeRecorder, plot_step_breakdown, summarize, train_step  # noqa: E402


@pytest.fixture
def xla_model():
    import torch_xla

    from mnist_mlp.model import MLP

    device = torch_xla.device()
    torch.manual_seed(0)
    model = MLP().to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), device


def batches(n, size):
    generator = torch.Generator().manual_seed(size)
    return [(torch.randn(size, 784, generator=generator), torch.randint(0, 10, (size,), generator=generator))
            for _ in range(n)]


def test_lazy_steps_compile_once_then_execute_one_graph_each(xla_model):
    import torch_xla

    model, optimizer, device = xla_model
    recorder = StepTimeRecorder()
    for x, y in batches(4, 24):  # a batch size no other test uses: a graph of its own
        train_step(model, optimizer, x.to(device), y.to(device))
        torch_xla.sync()
        recorder.record()
    rows = recorder.rows
    assert [r["UncachedCompile"] for r in rows] == [1, 0, 0, 0]
    assert rows[0]["compile_n"] == 1 and rows[0]["compile_s"] > 0
    assert [r["ExecuteComputation"] for r in rows] == [1, 1, 1, 1]
    assert all(r["execute_n"] == 1 for r in rows), "each execution lands in its own step's row"
    assert all(r["to_device_n"] >= 2 for r in rows), "the batch and its labels go to the device"
    for r in rows:
        assert r["other_s"] >= 0 and r["wall_s"] >= sum(r[f"{p}_s"] for p in PARTS) - 1e-6
    summary = summarize(rows)
    assert summary["compiles_total"] == 1 and summary["compiles_after_first"] == 0
    assert summary["executions_per_step"] == 1
    fig = plot_step_breakdown(rows)
    assert len(fig.axes) == 2 and fig.axes[0].get_ylabel() == "seconds"


def test_eager_mode_compiles_and_runs_each_operation_on_its_own(xla_model):
    import torch_xla

    model, optimizer, device = xla_model
    recorder = StepTimeRecorder()
    torch_xla.experimental.eager_mode(True)
    try:
        for x, y in batches(2, 40):
            train_step(model, optimizer, x.to(device), y.to(device))
            recorder.record()
    finally:
        torch_xla.experimental.eager_mode(False)
    first, second = recorder.rows
    assert first["eager_op_compile_n"] >= 10 and first["compile_n"] == 0
    assert second["eager_op_compile_n"] == 0, "the ops are found compiled the second time"
    assert second["ExecuteComputation"] >= 10 and second["eager_op_execute_n"] >= 10


def test_summarize_needs_steps_after_the_first():
    with pytest.raises(ValueError, match="need more than"):
        summarize([{"step": 0}])
    with pytest.raises(ValueError, match="no steps recorded"):
        plot_step_breakdown([])

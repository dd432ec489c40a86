"""StepTracker (warm-up, throughput, loss reads, divergence), the results schema, and the end of
a run on ranks other than 0."""
import argparse
import json
import math
import time

import pytest
import torch

from mnist_mlp.common.backend import select_backend
from mnist_mlp.common.cli import UsageError
from mnist_mlp.common.data import check_equal_steps, steps_per_rank
from mnist_mlp.common.results import RunResults, finish_run, load_all
from mnist_mlp.common.tracking import StepTracker, TrainingDiverged
from mnist_mlp.model import MLP


class SteppedClock:
    """A clock that moves only when the test says: a step takes exactly what the test gives it,
    however loaded the machine is."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_throughput_counts_only_the_steps_after_warm_up():
    """The timed span starts at the warm-up-th step (step() is called as each step's work is
    queued; its execution follows): step 1's 30 s compile lies outside it, and the 5 steps after
    the warm-up are divided by the time from there to stop()."""
    clock = SteppedClock()
    tracker = StepTracker(progress=False, warmup=2, clock=clock)
    for seconds in (30.0, 30.0):  # the warm-up steps compile
        tracker.step(torch.tensor(1.0))
        clock.now += seconds
    for _ in range(5):
        tracker.step(torch.tensor(1.0))
        clock.now += 0.5
    tracker.stop()
    assert tracker.steps == 7
    assert tracker.throughput == 5 / (30.0 + 5 * 0.5)


def test_throughput_is_nan_without_steps_past_warm_up():
    tracker = StepTracker(progress=False, warmup=2)
    tracker.step(torch.tensor(1.0))
    tracker.stop()
    assert math.isnan(tracker.throughput)


def test_max_steps_stops_the_loader_mid_epoch():
    tracker = StepTracker(max_steps=3, progress=False)
    seen = [b for b in tracker.limit(range(10)) if tracker.step(torch.tensor(0.5)) is None]
    assert seen == [0, 1, 2] and tracker.done
    assert list(tracker.limit(range(10))) == []


def test_loss_history_and_progress_lines(capsys):
    tracker = StepTracker(total_steps=200, loss_every=50)
    for step in range(1, 201):
        tracker.step(torch.tensor(1.0 / step))
    tracker.stop()
    assert [s for s, _ in tracker.loss_history] == [1, 50, 100, 150, 200]
    assert tracker.loss_history[1][1] == pytest.approx(1 / 50)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step 1/200: loss 1.0000" and lines[-1] == "step 200/200: loss 0.0050"
    assert tracker.final_loss == pytest.approx(1 / 200)


def test_progress_lines_are_about_ten_per_run(capsys):
    tracker = StepTracker(max_steps=7500, total_steps=7500)
    for _ in range(7500):
        tracker.step(torch.tensor(0.1))
    steps = [int(line.split()[1].split("/")[0]) for line in capsys.readouterr().out.splitlines()]
    assert steps == [1] + list(range(750, 7501, 750))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_stops_at_the_next_read(bad):
    tracker = StepTracker(progress=False, loss_every=10)
    tracker.step(torch.tensor(2.3))  # step 1 is read
    for _ in range(8):
        tracker.step(torch.tensor(bad))  # not read: only every 10th loss is
    with pytest.raises(TrainingDiverged, match="loss at step 10 is .*Lower --lr"):
        tracker.step(torch.tensor(bad))


def test_final_loss_refuses_a_non_finite_last_step():
    tracker = StepTracker(progress=False)
    tracker.step(torch.tensor(0.5))
    tracker.step(torch.tensor(math.nan))
    with pytest.raises(TrainingDiverged):
        _ = tracker.final_loss


def test_tensorboard_log_gets_the_loss_reads_and_every_step(tmp_path):
    """--tensorboard on the CPU stage: the loss where the tracker reads it, a throughput per
    step, no graphs-compiled tag (no XLA); the event file is complete once the tracker stops."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mnist_mlp.common.observe import LOSS_TAG, THROUGHPUT_TAG, TensorBoardLog

    tracker = StepTracker(progress=False, loss_every=50, log=TensorBoardLog(tmp_path, xla=False))
    for step in range(1, 121):
        tracker.step(torch.tensor(1.0 / step))
    tracker.stop()
    [events] = tmp_path.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert set(accumulator.Tags()["scalars"]) == {LOSS_TAG, THROUGHPUT_TAG}
    assert [(e.step, e.value) for e in accumulator.Scalars(LOSS_TAG)] == [
        (1, 1.0), (50, pytest.approx(1 / 50)), (100, pytest.approx(1 / 100))]
    assert [e.step for e in accumulator.Scalars(THROUGHPUT_TAG)] == list(range(1, 121))


def test_equal_steps_check_names_batch_sizes_that_work():
    assert steps_per_rank(60000, 7, 2143, drop_last=True) == [4, 4, 4, 3, 3, 3, 3]
    assert len(set(steps_per_rank(60000, 2, 32, drop_last=True))) == 1
    check_equal_steps(60000, 2, 32, drop_last=True)  # the default run: fine
    with pytest.raises(UsageError, match=r"3 or 4 steps.*--batch-size 2142 or 2144"):
        check_equal_steps(60000, 7, 2143, drop_last=True)
    for suggested in (2142, 2144):
        check_equal_steps(60000, 7, suggested, drop_last=True)


def sample_results(stage="cpu", **overrides):
    fields = dict(stage=stage, backend="cpu", world_size=1, epochs=1, steps=10, batch_size=32,
                  lr=0.01, loader="fast", throughput_it_s=100.0, final_loss=0.2,
                  test_accuracy=0.95, wall_time_s=1.0, loss_history=[[1, 2.3], [10, 0.2]])
    return RunResults(**{**fields, **overrides})


def test_results_round_trip_and_refuse_bad_files(tmp_path):
    written = sample_results("torchrun_w2", world_size=2, gradient_reduce="gloo",
                             loss_history_by_rank={"0": [[1, 2.0]], "1": [[1, 2.1]]})
    path = written.write(tmp_path)
    assert path.name == "results_torchrun_w2.json"
    assert RunResults.read(path) == written
    assert load_all(tmp_path) == {"torchrun_w2": written}
    data = json.loads(path.read_text())
    (tmp_path / "results_torchrun_w2.json").write_text(json.dumps({**data, "surprise": 1}))
    with pytest.raises(ValueError, match="unknown surprise.*re-run"):
        load_all(tmp_path)


def test_finish_run_on_a_rank_other_than_0_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    backend = select_backend(xla=False)
    args = argparse.Namespace(checkpoint_dir=tmp_path, epochs=1, batch_size=32, lr=0.01,
                              loader="fast")
    tracker = StepTracker(progress=False)
    for _ in range(3):
        tracker.step(torch.tensor(0.7))
    tracker.stop()
    model = MLP()
    result = finish_run("torchrun_w2", args, backend, model, tracker, test_loader=None,
                        started=time.perf_counter(), write=False, world_size=2)
    out = capsys.readouterr().out
    assert result is None
    assert "Final loss is 0.7000" in out and "----------End Training" in out
    assert "Test accuracy" not in out  # rank 0 evaluates for everyone
    assert list(tmp_path.iterdir()) == []


def test_finish_run_refuses_a_model_with_non_finite_weights(tmp_path):
    backend = select_backend(xla=False)
    args = argparse.Namespace(checkpoint_dir=tmp_path, epochs=1, batch_size=32, lr=0.01,
                              loader="fast")
    tracker = StepTracker(progress=False)
    tracker.step(torch.tensor(0.7))
    tracker.stop()
    model = MLP()
    with torch.no_grad():
        model.fc2.bias[3] = math.inf
    with pytest.raises(TrainingDiverged, match="fc2.bias"):
        finish_run("cpu", args, backend, model, tracker, None, started=time.perf_counter())
    assert list(tmp_path.iterdir()) == []

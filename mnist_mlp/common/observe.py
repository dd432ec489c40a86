"""What a run records for looking inside it, owned by the StepTracker so the training loops stay
the lesson: TensorBoard scalars (--tensorboard DIR) and a profiler trace of a few steady-state
steps (--profile DIR --profile-steps N). Neither adds a device sync to the loop."""
from __future__ import annotations

import contextlib
from pathlib import Path

# TensorBoard tags the scripts write (notebook 06 reads them).
LOSS_TAG = "train/loss"  # every LOSS_EVERY steps: the tracker's step-closure reads
THROUGHPUT_TAG = "train/throughput_it_s"  # per step, host clock: 1 / time since the previous step
GRAPHS_TAG = "xla/new_graphs"  # per step, XLA stages: new graphs so far in this process (UncachedCompile)
STEP_TRACE_NAME = "train_step"  # the profiler's name for one step (xp.StepTrace)
PROFILE_START_STEP = 3  # the first traced step: after the warm-up steps, which compile


class TensorBoardLog:
    """Scalars per step into a TensorBoard event file under `directory`. Values written are ones
    the host already has: no device read of its own."""

    def __init__(self, directory, xla: bool):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory))
        self.xla = xla

    def loss(self, step: int, value: float) -> None:
        self.writer.add_scalar(LOSS_TAG, value, step)

    def step_done(self, step: int, seconds: float | None) -> None:
        """Step `step` has finished on the host (its sync returned) `seconds` after the previous."""
        if seconds:
            self.writer.add_scalar(THROUGHPUT_TAG, 1 / seconds, step)
        if self.xla:
            import torch_xla.debug.metrics as met  # a host-side counter: no device work

            self.writer.add_scalar(GRAPHS_TAG, met.counter_value("UncachedCompile") or 0, step)

    def close(self) -> None:
        self.writer.close()


@contextlib.contextmanager
def _step_trace(xp, step: int):
    trace = xp.StepTrace(STEP_TRACE_NAME, step_num=step)
    with trace:
        del trace.scope  # the trace event stays; the IR scope goes (see ProfileWindow)
        yield


class ProfileWindow:
    """A torch_xla profiler trace of steps first..first+steps-1, each in xp.StepTrace.

    In-process (xp.start_trace / xp.stop_trace), not xp.start_server: that server listens on
    every network interface, and a trace requested from it covers a duration, not whole steps.
    The trace lands in <directory>/plugins/profile/<run>/, where TensorBoard's Profile tab
    (tensorboard-plugin-profile) finds it.

    StepTrace also opens an IR scope, inside which torch_xla.sync() refuses to run ("Expecting
    scope to be empty"): the scope is closed at once, so the loop's own sync runs inside the
    step's trace event. StepTrace's exit calls torch_xla.sync(): after the loop's sync it finds
    nothing to run; under MpDeviceLoader it runs the step and the loader skips its own sync
    (torch_xla's tracer_marked_step). Either way the same graphs, and no more of them.
    """

    def __init__(self, directory, steps: int, first: int = PROFILE_START_STEP):
        self.directory, self.first, self.last = Path(directory), first, first + steps - 1
        self.traced: list[int] = []
        self._active = False

    def scope(self, step: int):
        """A context for step `step`: starts the trace at the first, StepTrace inside the window."""
        if not self.first <= step <= self.last:
            return contextlib.nullcontext()
        import torch_xla.debug.profiler as xp

        if not self._active and not self.traced:
            self.directory.mkdir(parents=True, exist_ok=True)
            xp.start_trace(str(self.directory))
            self._active = True
        self.traced.append(step)
        return _step_trace(xp, step)

    def after_step(self, step: int) -> None:
        if self._active and step >= self.last:
            self.stop()

    def stop(self) -> None:
        """End the trace (at the window's end, or when the run ends first) and say where it is."""
        if not self._active:
            return
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.profiler as xp

        xm.wait_device_ops()  # the last traced step's device work belongs in the trace
        xp.stop_trace()
        self._active = False
        runs = sorted((self.directory / "plugins" / "profile").glob("*"))
        where = runs[-1] if runs else self.directory
        short = "" if self.traced[-1] == self.last else f" (the run ended before step {self.last})"
        print(f"Profile: steps {self.traced[0]}-{self.traced[-1]} traced{short} into {where} "
              f"(TensorBoard's Profile tab: tensorboard --logdir {self.directory})", flush=True)

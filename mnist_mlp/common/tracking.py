"""Step counting for the training loops: --steps-this-run, throughput after warm-up, the loss
history, progress lines, a stop with a clear error when the loss stops being finite, and what
--tensorboard and --profile record (mnist_mlp.common.observe)."""
from __future__ import annotations

import math
import time

import torch

from mnist_mlp.common.observe import ProfileWindow, TensorBoardLog

WARMUP_STEPS = 2  # steps left out of the throughput (the first ones compile on XLA), as in the sample
LOSS_EVERY = 50  # keep (and check) the loss every this many steps
PROGRESS_LINES = 10  # about this many progress lines per run


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: nothing of this run is saved."""


class StepTracker:
    """Counts steps, stops at max_steps, times the steps after warm-up, reads the loss.

    The loss is read every LOSS_EVERY steps only. On XLA it is read in a step closure, which
    runs after the step's graph has executed: a copy of a finished value, no extra device sync
    and no extra graph, so every graph of a run is the same whatever its length.
    """

    def __init__(self, max_steps: int | None = None, total_steps: int | None = None, *,
                 xla: bool = False, progress: bool = True, warmup: int = WARMUP_STEPS,
                 loss_every: int = LOSS_EVERY, log: TensorBoardLog | None = None,
                 profile: ProfileWindow | None = None, clock=time.perf_counter):
        self.max_steps, self.warmup, self.loss_every = max_steps, warmup, loss_every
        self.clock = clock  # seconds; the tests give one they advance themselves
        self.xla, self.progress = xla, progress
        self.log, self.profile = log, profile
        self._previous_step_time = None
        self.total_steps = min(filter(None, (max_steps, total_steps)), default=None)
        self.steps = 0
        self.loss_history: list[list[float]] = []  # [step, loss] pairs, read as the run goes
        self._start = self._end = None
        self._last_loss: torch.Tensor | None = None
        every = math.ceil((self.total_steps or 0) / PROGRESS_LINES / loss_every) * loss_every
        self._progress_every = max(every, loss_every)

    @classmethod
    def for_run(cls, args, steps_per_epoch: int, *, xla: bool = False, rank: int = 0) -> "StepTracker":
        """The tracker a stage script uses: its flags (--steps-this-run, --epochs, --tensorboard,
        --profile); under torchrun rank 0 alone prints progress, logs and profiles."""
        log = profile = None
        if rank == 0 and args.tensorboard:
            log = TensorBoardLog(args.tensorboard, xla=xla)
        if rank == 0 and args.profile:
            profile = ProfileWindow(args.profile, args.profile_steps)
        return cls(args.steps_this_run, steps_per_epoch * args.epochs, xla=xla,
                   progress=rank == 0, log=log, profile=profile)

    @property
    def done(self) -> bool:
        return self.max_steps is not None and self.steps >= self.max_steps

    def limit(self, loader):
        """Iterate `loader`, stopping once max_steps steps are done; with a profile window, each
        step (the loop body) runs in its scope."""
        if self.done:
            return
        for batch in loader:
            if self.profile is None:
                yield batch
            else:
                step = self.steps + 1
                with self.profile.scope(step):
                    yield batch
                self.profile.after_step(step)
            if self.done:
                return

    def step(self, loss: torch.Tensor) -> None:
        """Call once per step, before the step's torch_xla.sync() on XLA."""
        self.steps += 1
        self._last_loss = loss.detach()
        now = self.clock()
        if self.steps == self.warmup:
            self._start = now
        if self.log is not None:  # the previous step's sync has returned: it is done
            self._log_step_done(self.steps - 1, now)
        if self.steps == 1 or self.steps % self.loss_every == 0:
            if self.xla:
                import torch_xla.core.xla_model as xm

                xm.add_step_closure(self._record, args=(self.steps, self._last_loss))
            else:
                self._record(self.steps, self._last_loss)

    def _record(self, step: int, loss: torch.Tensor) -> None:
        value = float(loss)
        self.loss_history.append([step, value])
        if self.log is not None:
            self.log.loss(step, value)
        check_finite(value, f"the loss at step {step}")
        if self.progress and (step == 1 or step % self._progress_every == 0):
            total = f"/{self.total_steps}" if self.total_steps else ""
            note = " (the first step's new graphs: compiled or loaded from the cache)" if step == 1 and self.xla else ""
            print(f"step {step}{total}: loss {value:.4f}{note}", flush=True)

    def stop(self) -> None:
        """End the timed span. On XLA: run what is still queued (and its step closures) first,
        so the queued steps count and the last loss is read."""
        if self.xla:
            import torch_xla
            import torch_xla.core.xla_model as xm

            torch_xla.sync()
            xm.wait_device_ops()
        self._end = self.clock()
        if self.profile is not None:
            self.profile.stop()  # the run ended inside the window
        if self.log is not None:
            self._log_step_done(self.steps, self._end)
            self.log.close()

    def _log_step_done(self, step: int, now: float) -> None:
        if step >= 1:
            previous = self._previous_step_time
            self.log.step_done(step, None if previous is None else now - previous)
        self._previous_step_time = now

    @property
    def throughput(self) -> float:
        if self._start is None or self.steps <= self.warmup:
            return math.nan
        return (self.steps - self.warmup) / (self._end - self._start)

    @property
    def final_loss(self) -> float:
        """The last step's loss (raises TrainingDiverged if it is not finite)."""
        if self._last_loss is None:
            return math.nan
        value = float(self._last_loss.cpu())
        check_finite(value, f"the loss at step {self.steps}")
        return value


def check_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"training diverged: {what} is {value}. Nothing was saved (the last good checkpoint "
            f"is kept). Lower --lr and run again.")


def print_training_result(tracker: StepTracker) -> None:
    """The AWS sample's two result lines."""
    print("Train throughput (iter/sec): {}".format(tracker.throughput))
    print("Final loss is {:0.4f}".format(tracker.final_loss))

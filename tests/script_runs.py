"""The stage-script runs the end-to-end tests share: each distinct command line runs once per
test session (the `script_runs` fixture in conftest.py), on the first test that asks for it,
whichever xdist worker runs that test: the other worker waits for that run and reads it instead
of running it again (tests/built_once.py).

A test names the run it reads (RUNS below); tests that need the same run share it, so the
command lines are chosen to serve all their readers: e.g. the PT_XLA_DEBUG_LEVEL=1 runs of the
graph-parity test also serve the output checks of train.py and train_torchrun.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mnist_mlp.common.paths import REPO_ROOT
from tests.built_once import built_once
from tests.cpu_kinds import LOWERED_TO_AVX2

TRIAL_STEPS, LONG_STEPS = 5, 120  # LONG reads the loss at steps 1, 50 and 100; TRIAL at 1 only
# Two torchrun workers step in lockstep (a gloo all-reduce each step, several times slower than
# one process's step): their longer run stops soon after its loss read at step 50.
TORCHRUN_LONG_STEPS = 55


def torchrun_argv(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}", "mnist_mlp/train_torchrun.py", *args]


def script_argv(script: str, *args: str) -> list[str]:
    return [sys.executable, f"mnist_mlp/{script}", *args]


def script_environment() -> dict[str, str]:
    """The environment a user runs the scripts in: no PJRT_DEVICE preset (the script chooses),
    no CHECKPOINT_DIR, warnings on (a DeprecationWarning would show in the output)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CHECKPOINT_DIR")}
    env["PYTHONWARNINGS"] = "default"
    return env


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]  # "{dir}" in an argument becomes the run's own directory
    debug: bool = False  # PT_XLA_DEBUG_LEVEL=1: torch_xla prints a Graph Hash per compile
    env: tuple[tuple[str, str], ...] = ()  # set in the run's environment


def _steps(n: int) -> tuple[str, ...]:
    return ("--steps-this-run", str(n))


RUNS: dict[str, Command] = {
    # train_cpu.py and train.py ("xla long") take the same steps: the two must agree.
    "cpu": Command((*script_argv("train_cpu.py"), *_steps(LONG_STEPS))),
    "cpu torchvision": Command((*script_argv("train_cpu.py"), *_steps(20), "--loader",
                                "torchvision")),
    # The trial and the long run of each XLA script (graph parity). The long train.py run is
    # also profiled and logged for TensorBoard: its graphs must still be the trial's.
    "xla trial": Command((*script_argv("train.py"), *_steps(TRIAL_STEPS)), debug=True),
    "xla long": Command((*script_argv("train.py"), *_steps(LONG_STEPS), "--profile",
                         "{dir}/profile", "--profile-steps", "5", "--tensorboard", "{dir}/tb"),
                        debug=True),
    "xla device-loader trial": Command((*script_argv("train.py", "--device-loader"),
                                        *_steps(TRIAL_STEPS)), debug=True),
    "xla device-loader long": Command((*script_argv("train.py", "--device-loader"),
                                       *_steps(LONG_STEPS)), debug=True),
    "torchrun x2 trial": Command(tuple(torchrun_argv(2, *_steps(TRIAL_STEPS), "--tensorboard",
                                                     "{dir}/tb")), debug=True),
    "torchrun x2 long": Command(tuple(torchrun_argv(2, *_steps(TORCHRUN_LONG_STEPS),
                                                    "--tensorboard", "{dir}/tb")), debug=True),
    # One torchrun worker: notebook 04 runs it (tests/browser/test_notebook_runs.py reads its run).
    # As many steps as "xla long": --precision fp32 must compute exactly what train.py does.
    # The other modes' logs are read from "figures avx2" (tests/test_bf16_script.py says why).
    "bf16 fp32": Command((*script_argv("train_bf16.py", "--precision", "fp32"), *_steps(LONG_STEPS))),
    # The training whose figures the notebooks print, with their arguments, in one process
    # (tests/cpu_kinds.py), lowered to AVX2 (the highest level is the notebooks' own run). It
    # also serves the full-length train_cpu.py test and each BF16 mode's log.
    "figures avx2": Command((sys.executable, "-m", "tests.cpu_kinds"),
                            env=tuple(LOWERED_TO_AVX2.items())),
}


@dataclass
class ScriptRun:
    name: str
    argv: list[str]
    directory: Path  # its --checkpoint-dir, and "{dir}"
    output: str  # stdout then stderr

    def results(self, stage: str) -> dict:
        return json.loads((self.directory / f"results_{stage}.json").read_text())

    def state_dict(self, stage: str) -> dict:
        return torch.load(self.directory / f"checkpoint_{stage}.pt")["state_dict"]


@dataclass
class ScriptRuns:
    """Runs RUNS[name] the first time it is asked for in the session, by either xdist worker
    (tests/built_once.py: the other waits for it, then reads it), then hands out the same
    ScriptRun. <built-once dir>/run is the run's --checkpoint-dir and "{dir}"; command.json
    beside it keeps its argv and output."""
    tmp_path_factory: object
    env: dict = field(default_factory=script_environment)
    timeout: float = 900
    _done: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> ScriptRun:
        if name not in self._done:
            self._done[name] = self._shared_run(name, RUNS[name])
        return self._done[name]

    def _shared_run(self, name: str, command: Command) -> ScriptRun:
        built = built_once(self.tmp_path_factory, "script-run-" + name.replace(" ", "_"),
                           lambda directory: self._run(name, command, directory))
        ran = json.loads((built / "command.json").read_text())
        return ScriptRun(name, ran["argv"], built / "run", ran["output"])

    def _run(self, name: str, command: Command, built: Path) -> None:
        directory = built / "run"
        directory.mkdir()
        argv = [a.replace("{dir}", str(directory)) for a in command.argv]
        argv += ["--checkpoint-dir", str(directory)]
        env = dict(self.env, PT_XLA_DEBUG_LEVEL="1") if command.debug else self.env
        env = {**env, **dict(command.env)}
        proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=self.timeout)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{name}: {' '.join(argv)} failed:\n{output[-4000:]}"
        (built / "command.json").write_text(json.dumps({"argv": argv, "output": output}))


def assert_trained_as(directory: Path, one: ScriptRun, stage: str = "torchrun_w2") -> dict:
    """The run that wrote `directory` trained the model `one` trained: the same world size,
    steps and gradient reduce, the same loss and accuracy, every weight equal to 1e-6 (two
    processes that reduced over a network, not one host's loopback, may differ in the last
    bits). Returns its results."""
    import pytest

    two = json.loads((directory / f"results_{stage}.json").read_text())
    two_state = torch.load(directory / f"checkpoint_{stage}.pt")["state_dict"]
    first, first_state = one.results(stage), one.state_dict(stage)
    for key in ("world_size", "steps", "gradient_reduce"):
        assert two[key] == first[key], key
    assert two["final_loss"] == pytest.approx(first["final_loss"], abs=1e-5)
    assert two["test_accuracy"] == pytest.approx(first["test_accuracy"], abs=1e-3)
    assert set(two_state) == set(first_state)
    for name, tensor in first_state.items():
        assert two_state[name].allclose(tensor, atol=1e-6), name
    return two


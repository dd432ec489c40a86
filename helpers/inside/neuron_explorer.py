"""Neuron Explorer, Neuron 2.31's profiler (it replaced Neuron Profiler and Profiler 2.0): the
command lines notebook 06 shows everywhere and runs on a Neuron host.

Documented in the Neuron 2.31 guides this module links (DOCS); every command is built here, so a
test can check it against them.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from mnist_mlp.common.neuron_cc_flags import CACHE_DIR, ENV_VAR, set_flag

DOCS_ROOT = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/"
DOCS = {
    "capture": DOCS_ROOT + "tools/neuron-explorer/how-to-profile-workload.html",
    "get started": DOCS_ROOT + "tools/neuron-explorer/get-started.html",
    "migration": DOCS_ROOT + "tools/neuron-explorer/migration-faq.html",
    "tensorboard plugin": DOCS_ROOT + ("about-neuron/announcements/neuron2.x/"
                                       "announce-no-support-tensorboard-plugin.html"),
    "neuron-monitor": DOCS_ROOT + "tools/neuron-sys-tools/neuron-monitor-user-guide.html",
    "neuron-top": DOCS_ROOT + "tools/neuron-sys-tools/neuron-top-user-guide.html",
    "neuron-ls": DOCS_ROOT + "tools/neuron-sys-tools/neuron-ls.html",
    "eager debug mode": DOCS_ROOT + ("frameworks/torch/torch-neuronx/programming-guide/training/"
                                     "pytorch-neuron-debug.html"),
}
# Read when the graphs are compiled: layer names and source lines in the profile. A NEFF already
# cached without them is used as it is ("Previously-cached NEFFs don't have this metadata. Delete
# the compiler cache or set a new neff_cache_dir": TROUBLESHOOTING), so a capture compiles into a
# cache of its own.
COMPILE_DEBUG_ENV = {"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"}
TROUBLESHOOTING = DOCS_ROOT + "tools/neuron-explorer/troubleshooting.html"
CAPTURE_CACHE = "compile-cache"  # inside the capture's output directory


def capture_env(output_dir, cc_flags: str | None = None) -> dict[str, str]:
    """What the environment-variable capture sets before the workload starts (system profile;
    NEURON_RT_INSPECT_DEVICE_PROFILE=1 would add device traces), with NEURON_CC_FLAGS (default:
    this process's) pointed at a new cache inside output_dir."""
    flags = os.environ.get(ENV_VAR) if cc_flags is None else cc_flags
    return {"NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_OUTPUT_DIR": str(output_dir),
            **COMPILE_DEBUG_ENV, ENV_VAR: set_flag(flags, CACHE_DIR, str(Path(output_dir) / CAPTURE_CACHE))}


def workload(steps: int = 30, script: str = "mnist_mlp/train.py") -> list[str]:
    return ["python", script, "--steps-this-run", str(steps)]


def assignments(env: dict[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


def commands(output_dir, steps: int = 30) -> dict[str, str]:
    """The shell command lines, by what they do, for a profile written to output_dir."""
    out = str(output_dir)
    env = capture_env(out)
    # The wrapper sets the runtime's NEURON_RT_INSPECT_* itself; the compile-time variables
    # (debug metadata, a cache of the capture's own) are still the caller's to set.
    compile_env = {k: v for k, v in env.items() if not k.startswith("NEURON_RT_INSPECT_")}
    return {
        "capture a run (environment variables)": f"{assignments(env)} {shlex.join(workload(steps))}",
        "capture a run (CLI wrapper)": f"{assignments(compile_env)} " + shlex.join(
            ["neuron-explorer", "inspect", "-o", out, *workload(steps)]),
        "summary in the terminal": shlex.join(
            ["neuron-explorer", "view", "-d", out, "--output-format", "summary-text"]),
        "the UI (ports 3001 and 3002; forward both over SSH)": shlex.join(
            ["neuron-explorer", "view", "-d", out]),
        "profile one compiled graph (NEFF) on its own": shlex.join(
            ["neuron-explorer", "capture", "-n", "file.neff", "-s", "profile.ntff"]),
    }


def capture_argv(steps: int = 30, python: str = sys.executable,
                 script: str | Path = "../mnist_mlp/train.py") -> list[str]:
    """The workload run under capture_env() from a notebook (this venv's Python)."""
    return [python, str(script), "--steps-this-run", str(steps)]


def summary_argv(output_dir) -> list[str]:
    return ["neuron-explorer", "view", "-d", str(output_dir), "--output-format", "summary-text"]

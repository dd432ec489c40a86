"""Fill the compile cache ahead of training with neuron_parallel_compile, then train.

On Trainium, `neuron_parallel_compile <run command> --steps-this-run 10`, then `<run command>`
(explain() says what each does). The Neuron docs warn that, except for the step limit, the
trial's options must match the real run's, or the real run traces other graphs and compiles them
again: both command lines here are built from one argument list, so they cannot drift.

On the CPU stand-in there is no neuron_parallel_compile and no Neuron cache: `precompile()`
says what would happen, runs the short trial alone and reports the graphs it traced.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from helpers.cache.location import CompileCacheError, locate_cache
from helpers.cache.scan import CacheScan, scan_cache
from helpers.launch.processes import RANK_PREFIX_TEMPLATE, CommandFailed, free_port, run_streaming
from helpers.launch.torchrun import torchrun_argv
from mnist_mlp.common.backend import check_worker_count, instance_type
from mnist_mlp.common.paths import repo_relative

WRAPPER = "neuron_parallel_compile"
STEPS_FLAG = "--steps-this-run"  # the training scripts' step limit (mnist_mlp/common/cli.py)
TRIAL_STEPS = 10
# "Set NEURON_PARALLEL_COMPILE_MAX_RETRIES=1 when precompiling on trn1.2xlarge where there's limited
# host memory and CPU resources" (neuron_parallel_compile, Neuron 2.31, docs/sources.md).
RETRIES_VARIABLE = "NEURON_PARALLEL_COMPILE_MAX_RETRIES"
RETRIES_ON = {"trn1.2xlarge": "1"}
# the scripts' line, new and older forms
_GRAPHS_LINE = re.compile(r"(?:New graphs before evaluation|New graphs|Graphs compiled): (\d+)")
_NPC_TOTALS = {key: re.compile(rf"Total {words}: (\d+)") for key, words in (
    ("total", "graphs"), ("succeeded", "successful compilations"), ("failed", "failed compilations"))}


@dataclass(frozen=True)
class PrecompileCommands:
    run: list[str]  # the real run
    trial_run: list[str]  # the same, limited to trial_steps (what the wrapper launches)
    trial: list[str]  # neuron_parallel_compile + trial_run

    def shell(self) -> dict[str, str]:  # as a reader types them: this repo's paths relative to it
        return {name: shlex.join(repo_relative(a) if os.path.isabs(a) else a for a in argv)
                for name, argv in (("trial", self.trial), ("run", self.run))}


def build_commands(script: str | os.PathLike, script_args: Sequence[str] = (), *,
                   nproc_per_node: int | None = None, trial_steps: int = TRIAL_STEPS,
                   python: str = sys.executable, master_port: int | None = None,
                   wrapper: str = WRAPPER) -> PrecompileCommands:
    """The trial and the real run from one argument list: identical but for the step limit.
    The real run is `python script args`, or with nproc_per_node the torchrun of this Python."""
    if isinstance(trial_steps, bool) or not isinstance(trial_steps, int) or trial_steps < 1:
        raise ValueError(f"trial_steps must be a positive whole number, got {trial_steps!r}")
    args = [str(a) for a in script_args]
    for a in args:
        if a == STEPS_FLAG or a.startswith(STEPS_FLAG + "=") or a == "--steps_this_run":
            raise ValueError(f"{a} is in the training arguments: leave it out and pass "
                             "trial_steps= instead; the real run must run every step")
    run = ([python, os.fspath(script), *args] if nproc_per_node is None else
           torchrun_argv(script, args, nproc_per_node=nproc_per_node, python=python,
                         master_port=master_port))
    trial_run = [*run, STEPS_FLAG, str(trial_steps)]
    return PrecompileCommands(run=run, trial_run=trial_run, trial=[wrapper, *trial_run])


def new_graphs_from_output(lines: Sequence[str]) -> int | None:
    """The last 'New graphs before evaluation: N' the training script printed (rank 0's under torchrun)."""
    found = [int(m[1]) for line in lines if (m := _GRAPHS_LINE.search(line))]
    return found[-1] if found else None


def parallel_compile_totals(lines: Sequence[str]) -> dict[str, int]:
    """neuron_parallel_compile's closing summary: total, succeeded, failed (those it printed)."""
    totals = {}
    for line in lines:
        for key, pattern in _NPC_TOTALS.items():
            if m := pattern.search(line):
                totals[key] = int(m[1])
    return totals


def results_written_since(checkpoint_dir: str | os.PathLike, since: float) -> dict[str, dict]:
    """results_<stage>.json files the run wrote (modified at or after `since`), by stage."""
    out = {}
    for path in sorted(Path(checkpoint_dir).glob("results_*.json")):
        if path.stat().st_mtime >= since - 1:
            try:
                out[path.stem.removeprefix("results_")] = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
    return out


@dataclass
class CacheDiff:
    new: dict[str, str] = field(default_factory=dict)  # key -> state of entries that appeared

    @property
    def done(self) -> int:
        return sum(1 for s in self.new.values() if s == "done")

    @property
    def failed(self) -> int:
        return sum(1 for s in self.new.values() if s == "failed")


def cache_diff(before: CacheScan | None, after: CacheScan | None) -> CacheDiff:
    old = {e.key for e in before.entries} if before else set()
    return CacheDiff({e.key: e.state for e in after.entries if e.key not in old} if after else {})


@dataclass
class PrecompileReport:
    mode: str  # "neuron" or "stand-in"
    commands: PrecompileCommands
    cache_root: str | None
    cache_before: str | None = None
    cache_after_trial: str | None = None
    cache_after_run: str | None = None
    compiled_by_trial: CacheDiff | None = None  # entries neuron_parallel_compile added
    compiled_by_run: CacheDiff | None = None  # entries the real run still had to add (misses)
    parallel_totals: dict = field(default_factory=dict)
    graphs_traced: int | None = None  # stand-in: the new graphs the trial traced (compiled on the CPU)
    results: dict = field(default_factory=dict)  # results_<stage>.json the runs wrote
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"Precompile ({self.mode})", f"  trial: {self.commands.shell()['trial']}",
                 f"  run:   {self.commands.shell()['run']}"]
        if self.cache_root:
            lines.append(f"  cache: {self.cache_root}")
        for label, text in (("before", self.cache_before), ("after trial", self.cache_after_trial),
                            ("after run", self.cache_after_run)):
            if text:
                lines.append(f"  cache {label}: {text}")
        if self.compiled_by_trial is not None:
            lines.append(f"  graphs compiled ahead of time: {self.compiled_by_trial.done} "
                         f"(failed: {self.compiled_by_trial.failed})")
        if self.parallel_totals:
            lines.append("  neuron_parallel_compile reported: "
                         + ", ".join(f"{k} {v}" for k, v in self.parallel_totals.items()))
        if self.compiled_by_run is not None:
            lines.append(f"  graphs the real run still compiled (cache misses): "
                         f"{len(self.compiled_by_run.new)}")
        if self.graphs_traced is not None:
            lines.append(f"  graphs the trial traced: {self.graphs_traced}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _scan_or_none(root: Path | None) -> CacheScan | None:
    if root is None:
        return None
    try:
        return scan_cache(root)
    except CompileCacheError:
        return None  # not created yet (nothing compiled) or unreadable: shown as "empty"


def _summary(scan: CacheScan | None) -> str:
    return scan.summary() if scan else "empty (no cache directory yet)"


def explain(commands: PrecompileCommands, trial_steps: int) -> str:
    """What neuron_parallel_compile would do, for the reader of the stand-in."""
    return "\n".join([
        "No NeuronCore here, so no neuron_parallel_compile. On Trainium this runs:",
        f"  1. {commands.shell()['trial']}",
        f"     neuron_parallel_compile runs the script for {trial_steps} steps in graph-extraction",
        "     mode (its outputs are invalid), stores each traced graph's HLO in the Neuron cache,",
        "     then compiles them in parallel. On a trn1.2xlarge (32 GiB, 8 vCPUs) the Neuron docs",
        f"     advise {RETRIES_VARIABLE}=1 (limited host memory and CPU), which this sets there;",
        f"  2. {commands.shell()['run']}",
        "     the real run, with the same options: every graph it traces is already compiled.",
        "Here only the short trial runs, without the wrapper, on the XLA CPU stand-in: it shows",
        "how many graphs the script traces. CPU compiles take under a second and write no",
        "Neuron cache.",
    ])


def precompile(script: str | os.PathLike, script_args: Sequence[str] = (), *,
               nproc_per_node: int | None = None, trial_steps: int = TRIAL_STEPS,
               backend=None, run_real: bool = True, checkpoint_dir: str | os.PathLike | None = None,
               env: dict | None = None, cwd: str | os.PathLike | None = None,
               timeout: float = 3600, wrapper: str = WRAPPER,
               on_line: Callable[[str], object] = print,
               script_lines: Callable[[str], object] | None = None) -> PrecompileReport:
    """Precompile on Neuron and train; on the stand-in, explain and run the trial only.

    backend: a mnist_mlp.common.backend.Backend, or its name ("neuron", "xla-cpu", "cpu"); None calls
    select_backend(). checkpoint_dir: where the script writes results_<stage>.json (defaults
    to the --checkpoint-dir in script_args, if any). env: variables added for the commands
    (e.g. NEURON_CC_FLAGS, NEURON_COMPILE_CACHE_URL); the cache scanned is the one they select.
    script_lines: where the commands' own output lines go (default on_line, with the report).
    """
    if backend is None:
        from mnist_mlp.common.backend import select_backend

        backend = select_backend()
    mode_name = getattr(backend, "name", backend)
    args = [str(a) for a in script_args]
    if nproc_per_node is not None:
        check_worker_count(nproc_per_node, instance_type())
    # One port for both runs: built once, so the two command lines differ only in the steps.
    commands = build_commands(script, args, nproc_per_node=nproc_per_node,
                              trial_steps=trial_steps, wrapper=wrapper,
                              master_port=free_port() if nproc_per_node is not None else None)
    run_env = dict(env or {})
    retries = RETRIES_ON.get(instance_type() or "")
    if retries and RETRIES_VARIABLE not in os.environ:
        run_env.setdefault(RETRIES_VARIABLE, retries)
    if nproc_per_node is not None:
        run_env.setdefault("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", RANK_PREFIX_TEMPLATE)
    if checkpoint_dir is None and "--checkpoint-dir" in args:
        checkpoint_dir = args[args.index("--checkpoint-dir") + 1]

    def run(argv, check=True):
        started = time.time()
        result = run_streaming(argv, timeout=timeout, env=run_env, cwd=cwd, check=check,
                               on_line=script_lines or on_line)
        written = results_written_since(Path(cwd or ".") / checkpoint_dir, started) \
            if checkpoint_dir else {}
        return result, written

    if mode_name != "neuron":
        report = PrecompileReport("stand-in", commands, cache_root=None)
        on_line(explain(commands, trial_steps))
        trial, report.results = run(commands.trial_run)
        report.graphs_traced = new_graphs_from_output(trial.lines)
        if report.graphs_traced is None:
            report.graphs_traced = next((r.get("new_graphs") for r in report.results.values()
                                         if r.get("new_graphs") is not None), None)
        if report.graphs_traced is None:
            report.notes.append("the trial printed no 'New graphs before evaluation: N' line and "
                                "wrote no results JSON with new_graphs (plain PyTorch traces none)")
        on_line(report.render())
        return report

    if shutil.which(wrapper) is None:
        raise FileNotFoundError(f"{wrapper} is not on PATH: it comes with torch-neuronx; activate "
                                "the Neuron virtual environment (or the DLAMI's) and retry")
    location = locate_cache({**os.environ, **run_env})
    root = None if location.remote else location.path
    report = PrecompileReport("neuron", commands, cache_root=location.url)
    if root is None:
        report.notes.append(f"{location.url} is a remote cache: not scanned, so no counts of "
                            "cache entries (neuron_parallel_compile's own totals still show)")
    before = _scan_or_none(root)
    report.cache_before = _summary(before) if root else None
    on_line(f"Cache before: {report.cache_before or location.url}")
    # Its exit status is the number of graphs that failed (its source), which the report shows.
    trial, _ = run(commands.trial, check=False)
    report.parallel_totals = failed = parallel_compile_totals(trial.lines)
    if trial.returncode and failed.get("failed") != trial.returncode:
        raise CommandFailed(f"{WRAPPER} failed with exit code {trial.returncode}", cmd=trial.cmd,
                            returncode=trial.returncode, lines=trial.lines, summary="\n".join(trial.lines[-20:]))
    after_trial = _scan_or_none(root)
    if root:
        report.cache_after_trial = _summary(after_trial)
        report.compiled_by_trial = cache_diff(before, after_trial)
        on_line(f"Cache after the trial: {report.cache_after_trial}; "
                f"{report.compiled_by_trial.done} graph(s) compiled ahead of time")
    if failed.get("failed") or (report.compiled_by_trial and report.compiled_by_trial.failed):
        report.notes.append("some graphs failed to compile: `python -m helpers.cache ls --state "
                            "failed` shows their logs; the real run would stop at the first, so it "
                            "was not started (--retry_failed_compilation in NEURON_CC_FLAGS retries)")
    elif run_real:
        _, report.results = run(commands.run)
        after_run = _scan_or_none(root)
        if root:
            report.cache_after_run = _summary(after_run)
            report.compiled_by_run = cache_diff(after_trial, after_run)
            if report.compiled_by_run.new:
                report.notes.append("the real run compiled graphs the trial did not trace (a path "
                                    "not reached in the trial's steps, or options that differ)")
    on_line(report.render())
    return report

"""Workshop tools behind `make reset` and `make classroom-cache`.

    python -m helpers.classroom reset [--yes]        notebooks as committed; checkpoints/, results/ gone
    python -m helpers.classroom cache --archive F    precompile every script run of the workbook, export

Both show what they will do before doing it. `make classroom-import ARCHIVE=F` is
`python -m helpers.cache import F` on each student machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from helpers.tables import text_table
from mnist_mlp.paths import REPO_ROOT

# What `reset` removes besides restoring the notebooks: what runs wrote, all git-ignored.
RUN_OUTPUTS = ("checkpoints", "results", "notebooks/.ipynb_checkpoints")


# --------------------------------------------------------------------------- reset

class ResetError(RuntimeError):
    pass


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise ResetError("git is not installed: install it (apt-get install git) or restore the "
                         "notebooks from a fresh copy of the workbook") from None
    if done.returncode != 0:
        raise ResetError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def reset_plan(repo: Path) -> tuple[list[str], list[Path]]:
    """(notebook files that differ from the last commit, run-output paths that exist)."""
    if not (repo / ".git").exists():
        raise ResetError(f"{repo} is not a git checkout, so there is no committed state to go "
                         "back to: take a fresh copy of the workbook instead")
    status = _git(repo, "status", "--porcelain", "--untracked-files=no", "--", "notebooks")
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    outputs = [repo / name for name in RUN_OUTPUTS if os.path.lexists(repo / name)]
    return changed, outputs


def _remove_inside(repo: Path, path: Path) -> None:
    """Remove one run-output path; a symlink goes alone, never what it points to."""
    if path.is_symlink():
        path.unlink()
        return
    if repo.resolve() not in path.resolve().parents:
        raise ResetError(f"{path} is not inside {repo}: not removed")
    shutil.rmtree(path)


def reset(repo: Path = REPO_ROOT, *, yes: bool = False, ask: Callable[[str], str] | None = None,
          out: Callable[[str], object] = print) -> int:
    """Show the plan, then (with yes, or an answer of y) restore and remove. Returns an exit code."""
    try:
        changed, outputs = reset_plan(repo)
    except ResetError as err:
        out(f"make reset: {err}")
        return 2
    if not changed and not outputs:
        out("Nothing to reset: the notebooks are as committed and no run outputs exist.")
        return 0
    if changed:
        out("Restores to the last commit (git checkout -- notebooks/), losing your edits in:")
        out("\n".join(f"  {name}" for name in changed))
    if outputs:
        out("Removes what the runs wrote:")
        out("\n".join(f"  {p.relative_to(repo)}/" for p in outputs))
    out("Keeps data/, .venv/ and any notebook you created.")
    if os.environ.get("CHECKPOINT_DIR"):
        out(f"Keeps CHECKPOINT_DIR={os.environ['CHECKPOINT_DIR']}: yours to clear.")
    if not yes:
        if ask is None:
            out("Run again with --yes (make reset YES=1) to go ahead.")
            return 1
        if ask("Go ahead? [y/N] ").strip().lower() not in ("y", "yes"):
            out("Nothing changed.")
            return 1
    try:
        if changed:
            _git(repo, "checkout", "--", "notebooks")
        for path in outputs:
            _remove_inside(repo, path)
    except (ResetError, OSError) as err:
        out(f"make reset: {err}")
        return 2
    out("Reset done.")
    return 0


# --------------------------------------------------------------------------- classroom cache

@dataclass(frozen=True)
class ClassroomRun:
    """One script run of the workbook: the graphs its trial traces are the ones to precompile."""
    notebook: str
    script: str
    args: tuple[str, ...] = ()
    nproc_per_node: int | None = None

    def describe(self) -> str:
        launcher = f"torchrun --nproc_per_node={self.nproc_per_node} " if self.nproc_per_node else ""
        return f"{launcher}{self.script} {' '.join(self.args)}".strip()


def classroom_runs(repo: Path = REPO_ROOT) -> list[ClassroomRun]:
    """Every script and setting the notebooks run (the graphs do not depend on the run length)."""
    runs = [ClassroomRun("02, 03", "mnist_mlp/train.py"),
            ClassroomRun("02", "mnist_mlp/train.py", ("--device-loader",)),
            ClassroomRun("04", "mnist_mlp/train_torchrun.py", (), 2),
            ClassroomRun("04", "mnist_mlp/train_torchrun.py", (), 1)]
    if (repo / "mnist_mlp" / "train_bf16.py").exists():
        from mnist_mlp.precision import PRECISIONS

        runs += [ClassroomRun("05", "mnist_mlp/train_bf16.py", ("--precision", p)) for p in PRECISIONS]
    return runs


NOT_COVERED = ("Not in the archive: the few graphs notebooks 02 and 03 trace in their own kernel "
               "(step-by-step cells, the batch-size experiment); each compiles once when first run.")


def build_classroom_cache(archive: Path, *, repo: Path = REPO_ROOT, backend=None,
                          cache_dir: Path | None = None, trial_steps: int = 10,
                          runs: list[ClassroomRun] | None = None, scratch: Path | None = None,
                          on_line: Callable[[str], object] = print) -> int:
    """Precompile each run's graphs into one cache directory, then export it to archive.

    On the stand-in: the same runs, as short trials on XLA's CPU backend, and a report of the
    graphs each traces, i.e. what a Trainium machine would compile; no archive is written.
    """
    from helpers.cache import flags
    from helpers.cache.cli import main as cache_cli
    from helpers.cache.precompile import precompile

    if backend is None:
        from mnist_mlp.backend import select_backend

        backend = select_backend()
    on_neuron = (backend if isinstance(backend, str) else backend.name) == "neuron"
    runs = classroom_runs(repo) if runs is None else runs
    scratch = scratch or repo / "build" / "classroom-runs"  # the trials' checkpoints, not the learner's
    cache_dir = Path(cache_dir or repo / "build" / "classroom-neuron-cache").resolve()
    env = {}
    if on_neuron:  # one cache holding exactly the workbook's graphs, whatever else the machine has
        env[flags.ENV_VAR] = flags.set_flag(os.environ.get(flags.ENV_VAR), "--cache_dir", str(cache_dir))
    on_line(f"Classroom cache: {len(runs)} script runs, {trial_steps}-step trials, "
            + (f"compiled into {cache_dir}" if on_neuron else "on the CPU stand-in (no Neuron compiler)"))
    rows = []
    for number, run in enumerate(runs, 1):
        on_line(f"\n[{number}/{len(runs)}] notebook {run.notebook}: {run.describe()}")
        report = precompile(run.script, [*run.args, "--checkpoint-dir", str(scratch)],
                            nproc_per_node=run.nproc_per_node, trial_steps=trial_steps,
                            backend=backend, run_real=False, env=env, cwd=repo, on_line=on_line)
        count = (report.compiled_by_trial.done if report.compiled_by_trial is not None
                 else report.parallel_totals.get("succeeded", report.graphs_traced))
        rows.append([run.notebook, run.describe(), count])
    header = ["notebook", "run", "graphs compiled" if on_neuron else "graphs traced (would compile)"]
    on_line("\n" + text_table(rows, header, right={2}, rule=True))
    on_line(NOT_COVERED)
    if not on_neuron:
        on_line(f"On Trainium the next step is `python -m helpers.cache export --root {cache_dir} "
                f"{archive}`; this machine has no Neuron cache, so no archive is written. Students "
                f"then run `make classroom-import ARCHIVE={archive.name}`.")
        return 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    code = cache_cli(["export", "--root", str(cache_dir), str(archive)])
    if code == 0:
        on_line(f"Give every student machine {archive} and run there: "
                f"make classroom-import ARCHIVE={archive.name}")
    return code


# --------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    reset_cmd = commands.add_parser("reset", help="notebooks as committed, run outputs removed")
    reset_cmd.add_argument("--yes", action="store_true", help="do not ask")
    cache_cmd = commands.add_parser("cache", help="precompile the workbook's graphs, one archive")
    cache_cmd.add_argument("--archive", type=Path, default=REPO_ROOT / "build" / "classroom-cache.tar.gz")
    cache_cmd.add_argument("--trial-steps", type=int, default=10)
    args = parser.parse_args(argv)
    if args.command == "reset":
        return reset(yes=args.yes, ask=input if sys.stdin.isatty() and not args.yes else None)
    from helpers.processes import CommandError

    try:
        return build_classroom_cache(args.archive.resolve(), trial_steps=args.trial_steps)
    except (CommandError, ValueError, OSError) as err:
        print(f"make classroom-cache: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

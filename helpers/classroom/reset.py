"""`make reset` (python -m helpers.classroom reset): the notebooks as committed, and what runs
wrote (checkpoints/, results/) removed, after showing what goes."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

from helpers.cache.location import CompileCacheError
from helpers.cache.plans import remove_inside
from mnist_mlp.common.paths import REPO_ROOT

# What `reset` removes besides restoring the notebooks: what runs wrote, all git-ignored.
RUN_OUTPUTS = ("checkpoints", "results", "notebooks/.ipynb_checkpoints")


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
        for path in outputs:  # a symlink goes alone; the rest through the one root guard
            if path.is_symlink():
                path.unlink()
            else:
                remove_inside(repo.resolve() / path.relative_to(repo), repo)
    except (ResetError, CompileCacheError, OSError) as err:
        out(f"make reset: {err}")
        return 2
    out("Reset done.")
    if any(p.name == "checkpoints" for p in outputs):
        # Notebook 04 on reads the results_<stage>.json the notebooks before it wrote there.
        out("checkpoints/ held each stage's results_<stage>.json, which notebook 04 and later read: "
            "run the notebooks again in order from 01.")
    return 0

"""Workshop tools behind `make reset` and `make classroom-cache`.

    python -m helpers.classroom reset [--yes]        notebooks as committed; checkpoints/, results/ gone
    python -m helpers.classroom cache --archive F    run every notebook into one compile cache, export it
    python -m helpers.classroom check                a student's pass: any graph the cache lacks?

Both show what they will do before doing it. `make classroom-import ARCHIVE=F` is
`python -m helpers.cache import F` on each student machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
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

SOLUTIONS = "notebooks/solutions"
GRAPHS_RECORD = "graphs.json"  # what the classroom pass compiled, beside the archive


def workbook_notebooks(repo: Path) -> list[Path]:
    return sorted((repo / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def execute_notebook(path: Path, env: dict[str, str], timeout: float = 900) -> float:
    """Run a notebook top to bottom in a fresh python3 kernel (its directory as cwd), as a
    student's Run All does; the file is not changed. Returns the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    started = time.perf_counter()
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=timeout,
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    return time.perf_counter() - started


@dataclass
class GraphPass:
    """One pass through the workbook: the graphs each notebook (with what it started) compiled."""
    graphs: dict[str, set]  # notebook or solution name -> graph hashes
    seconds: dict[str, float]

    @property
    def all_graphs(self) -> set:
        return set().union(*self.graphs.values()) if self.graphs else set()

    def write(self, path: Path, **extra) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"graphs": sorted(self.all_graphs), "by_notebook": {k: sorted(v) for k, v in self.graphs.items()},
                  "seconds": {k: round(v, 1) for k, v in self.seconds.items()}, **extra}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(path)


def read_graphs_record(path: Path) -> set[str]:
    try:
        return set(json.loads(path.read_text())["graphs"])
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist: run `make classroom-cache` first") from None


def graph_pass(repo: Path, workdir: Path, *, notebooks: list[Path] | None = None,
               solutions: bool = True, extra_env: dict[str, str] | None = None,
               on_line: Callable[[str], object] = print) -> GraphPass:
    """Execute every notebook (then every exercise solution) with each process's compiled graphs
    logged (helpers.graph_log); their checkpoints go to workdir, not the student's."""
    from helpers.graph_log import graph_log_env, read_graph_log
    from helpers.processes import venv_bin_first, run_streaming

    notebooks = workbook_notebooks(repo) if notebooks is None else notebooks
    scripts = sorted((repo / SOLUTIONS).glob("[0-9][0-9]_*.py")) if solutions else []
    logs = workdir / "graph-logs"
    if logs.exists():  # ours alone: build/classroom/graph-logs, recreated each pass
        shutil.rmtree(logs)
    logs.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}  # as a student's kernel
    base.update(extra_env or {})
    base["CHECKPOINT_DIR"] = str(workdir / "checkpoints")
    base["PATH"] = venv_bin_first(base.get("PATH"))
    result = GraphPass({}, {})
    seen: set = set()
    for number, item in enumerate([*notebooks, *scripts], 1):
        log = logs / f"{item.name}.log"  # 03_x.ipynb and solutions/03_x.py: two logs
        env = {**base, **graph_log_env(log)}
        if item.suffix == ".ipynb":
            seconds = execute_notebook(item, env)
        else:
            started = time.perf_counter()
            run_streaming([sys.executable, str(item)], timeout=900, env=env, cwd=repo,
                          on_line=lambda line: None)
            seconds = time.perf_counter() - started
        graphs = read_graph_log(log)
        result.graphs[item.name], result.seconds[item.name] = graphs, seconds
        on_line(f"[{number}/{len(notebooks) + len(scripts)}] {item.relative_to(repo)}: "
                f"{seconds:.0f} s, {len(graphs)} graphs compiled, {len(graphs - seen)} not met before")
        seen |= graphs
    return result


def build_classroom_cache(archive: Path, *, repo: Path = REPO_ROOT, backend=None,
                          cache_dir: Path | None = None, workdir: Path | None = None,
                          notebooks: list[Path] | None = None, solutions: bool = True,
                          on_line: Callable[[str], object] = print) -> int:
    """Run every notebook and exercise solution as a student would, into one fresh compile cache,
    then export that cache: every graph a student's pass compiles is in it.

    On the stand-in: the same pass on XLA's CPU backend, and the set of graphs it compiled
    (what a Trainium machine compiles and the archive would hold); no archive is written.
    """
    from helpers.cache import flags
    from helpers.cache.cli import main as cache_cli

    if backend is None:
        from mnist_mlp.backend import select_backend

        backend = select_backend()
    on_neuron = (backend if isinstance(backend, str) else backend.name) == "neuron"
    workdir = Path(workdir or repo / "build" / "classroom").resolve()
    cache_dir = Path(cache_dir or workdir / "neuron-cache").resolve()
    env = {}
    if on_neuron:  # one cache holding exactly the workbook's graphs, whatever else the machine has
        env[flags.ENV_VAR] = flags.set_flag(os.environ.get(flags.ENV_VAR), "--cache_dir", str(cache_dir))
    items = len(workbook_notebooks(repo) if notebooks is None else notebooks)
    on_line(f"Classroom cache: runs the {items} notebooks top to bottom, then each exercise "
            f"solution, as a student would; their checkpoints go to {workdir}, "
            + (f"their graphs are compiled into {cache_dir}" if on_neuron
               else "on the CPU stand-in (no Neuron compiler: the graphs are counted)"))
    done = graph_pass(repo, workdir, notebooks=notebooks, solutions=solutions, extra_env=env,
                      on_line=on_line)
    graphs = done.all_graphs
    seen: set = set()
    rows = []
    for name, hashes in done.graphs.items():
        rows.append([name, f"{done.seconds[name]:.0f}", len(hashes), len(hashes - seen)])
        seen |= hashes
    on_line("\n" + text_table(rows, ["notebook / solution", "seconds", "graphs compiled",
                                      "new (compiled into the cache)"], right={1, 2, 3}, rule=True))
    record = workdir / GRAPHS_RECORD
    done.write(record, backend="neuron" if on_neuron else "stand-in")
    total = sum(done.seconds.values())
    on_line(f"\n{len(graphs)} distinct graphs compiled by the whole pass ({total / 60:.1f} min); "
            f"recorded in {record}.")
    if not on_neuron:
        on_line(f"On Trainium each is one neuronx-cc compile, made here once; the archive would "
                f"hold all {len(graphs)}, so a student machine that imports it compiles 0. This "
                f"machine has no Neuron cache: no archive is written. `python -m helpers.classroom "
                f"check` compares another pass with this record.")
        return 0
    from helpers.cache.scan import scan_cache

    entries = [e for e in scan_cache(cache_dir).entries if e.state == "done"]
    archive.parent.mkdir(parents=True, exist_ok=True)
    code = cache_cli(["export", "--root", str(cache_dir), str(archive)])
    if code == 0:
        shutil.copyfile(record, archive.with_name(archive.name + "." + GRAPHS_RECORD))
        on_line(f"The archive holds {len(entries)} compiled graphs (NEFFs) of the {len(graphs)} "
                f"graphs the pass traced (graphs with the same HLO share one): all of them, so a "
                f"student machine that imports it compiles 0. Give every student machine "
                f"{archive} and run there: make classroom-import ARCHIVE={archive.name}")
    return code


def check_pass(record: Path, log_dir: Path, on_line: Callable[[str], object] = print) -> int:
    """Compare the graphs logged under log_dir (a student's pass) with the classroom record."""
    from helpers.graph_log import coverage, read_graph_log

    traced = set().union(set(), *(read_graph_log(p) for p in sorted(Path(log_dir).glob("*.log"))))
    result = coverage(traced, read_graphs_record(record))
    on_line(result.describe())
    return 0 if result.ok else 1


# --------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    reset_cmd = commands.add_parser("reset", help="notebooks as committed, run outputs removed")
    reset_cmd.add_argument("--yes", action="store_true", help="do not ask")
    cache_cmd = commands.add_parser("cache", help="precompile the workbook's graphs, one archive")
    cache_cmd.add_argument("--archive", type=Path, default=REPO_ROOT / "build" / "classroom-cache.tar.gz")
    check_cmd = commands.add_parser("check", help="run the workbook as a student would; compare "
                                    "its graphs with the classroom cache's record")
    check_cmd.add_argument("--record", type=Path,
                           default=REPO_ROOT / "build" / "classroom" / GRAPHS_RECORD)
    args = parser.parse_args(argv)
    if args.command == "reset":
        return reset(yes=args.yes, ask=input if sys.stdin.isatty() and not args.yes else None)
    from helpers.processes import CommandError

    try:
        if args.command == "cache":
            return build_classroom_cache(args.archive.resolve())
        read_graphs_record(args.record)  # before a long pass: is there anything to compare with?
        workdir = REPO_ROOT / "build" / "classroom-check"
        graph_pass(REPO_ROOT, workdir)
        return check_pass(args.record, workdir / "graph-logs")
    except (CommandError, ValueError, OSError) as err:
        print(f"make classroom-{args.command}: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # a notebook cell failed (nbclient's CellExecutionError)
        print(f"make classroom-{args.command}: a notebook failed: {str(err)[-2000:]}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

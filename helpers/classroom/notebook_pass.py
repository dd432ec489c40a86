"""Executing the workbook as a class would, and what it compiles: `make notebooks` (in place,
recording the graphs), `make classroom-cache` (into one compile cache, exported) and the pass
`make classroom-check` compares with the record."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from helpers.show.tables import text_table
from mnist_mlp.common.neuron_cc_flags import CACHE_DIR, ENV_VAR, set_flag
from mnist_mlp.common.paths import REPO_ROOT

SOLUTIONS = "notebooks/solutions"


def workbook_notebooks(repo: Path) -> list[Path]:
    return sorted((repo / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def workbook_solutions(repo: Path) -> list[Path]:
    return sorted((repo / SOLUTIONS).glob("[0-9][0-9]_*.py"))


def item_name(repo: Path, item: Path) -> str:
    """The record's name of a notebook ("02_x.ipynb") or a solution ("solutions/02_x.py")."""
    return Path(os.path.abspath(item)).relative_to(os.path.abspath(repo / "notebooks")).as_posix()


def execute_notebook(path: Path, env: dict[str, str], timeout: float = 900) -> None:
    """Run a notebook top to bottom in a fresh python3 kernel (its directory as cwd), as a
    student's Run All does; the file is not changed."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=timeout,
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=env)


def execute_in_place(path: Path, env: dict[str, str], timeout: float = 900) -> None:
    """What `make notebooks` runs: nbconvert executes the notebook and saves it over itself."""
    jupyter = Path(sys.executable).parent / "jupyter"
    subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    "--ExecutePreprocessor.kernel_name=python3",
                    f"--ExecutePreprocessor.timeout={timeout:g}",
                    "--ExecutePreprocessor.record_timing=False", str(path)], env=env, check=True)


@dataclass
class GraphPass:
    """One pass through the workbook: the graphs each notebook (with what it started) compiled."""
    graphs: dict[str, set]  # item_name -> fingerprints (helpers.classroom.graph_log)
    seconds: dict[str, float]

    @property
    def all_graphs(self) -> set:
        return set().union(*self.graphs.values()) if self.graphs else set()

    def table(self) -> str:
        seen: set = set()
        rows = []
        for name, graphs in self.graphs.items():
            rows.append([name, f"{self.seconds[name]:.0f}", len(graphs), len(graphs - seen)])
            seen |= graphs
        return text_table(rows, ["notebook / solution", "seconds", "graphs it met",
                                 "new to the pass (compiled into the cache)"], right={1, 2, 3}, rule=True)


def graph_pass(repo: Path, workdir: Path, *, notebooks: list[Path] | None = None,
               solutions: list[Path] | None = None, extra_env: dict[str, str] | None = None,
               in_place: bool = False, on_line: Callable[[str], object] = print) -> GraphPass:
    """Execute every notebook (then every exercise solution) with each compiled graph's HLO
    dumped (helpers.classroom.graph_log). A student's pass (the default) runs copies in memory, its
    checkpoints in workdir; in_place is `make notebooks`: nbconvert saves each notebook, this
    environment as it is."""
    from helpers.classroom.graph_log import GraphDumps
    from helpers.launch.processes import run_streaming, venv_bin_first

    notebooks = workbook_notebooks(repo) if notebooks is None else notebooks
    scripts = workbook_solutions(repo) if solutions is None else solutions
    if (workdir / "hlo-dumps").exists():  # ours alone: recreated each pass
        shutil.rmtree(workdir / "hlo-dumps")
    dumps = GraphDumps(workdir / "hlo-dumps")
    base = dict(os.environ)
    if not in_place:  # as a student's kernel: the backend chosen by the notebook
        base.pop("PJRT_DEVICE", None)
        base["CHECKPOINT_DIR"] = str(workdir / "checkpoints")
        base["PATH"] = venv_bin_first(base.get("PATH"))
    base.update(extra_env or {})
    result = GraphPass({}, {})
    seen: set = set()
    items = [*notebooks, *scripts]
    for number, item in enumerate(items, 1):
        name, env = item_name(repo, item), {**base, **dumps.env(base)}
        started = time.perf_counter()
        if item.suffix == ".ipynb":
            on_line(f"executing {item}")
            (execute_in_place if in_place else execute_notebook)(item, env)
        else:
            run_streaming([sys.executable, str(item)], timeout=900, env=env, cwd=repo,
                          on_line=lambda line: None)
        result.seconds[name] = time.perf_counter() - started
        result.graphs[name] = graphs = dumps.collect(name)
        on_line(f"[{number}/{len(items)}] {name}: {result.seconds[name]:.0f} s, "
                f"{len(graphs)} graphs met, {len(graphs - seen)} new to the pass")
        seen |= graphs
    return result


def done_entries(root: Path) -> set[str]:
    """The compiled graphs (done entries) of a Neuron cache; none where there is no cache yet."""
    from helpers.cache.location import CompileCacheError
    from helpers.cache.scan import scan_cache

    try:
        return {e.key for e in scan_cache(root).entries if e.state == "done" and e.layout != "xla"}
    except CompileCacheError:
        return set()


def forget_earlier_results(repo: Path, on_line: Callable[[str], object] = print) -> None:
    """The stage comparisons the notebooks print read every results file in the checkpoint
    directory: an earlier run's (another length, a stage since renamed) would be committed with
    them. This pass writes each stage's again; the checkpoints themselves stay."""
    from mnist_mlp.common.paths import default_checkpoint_dir
    from mnist_mlp.common.results import RESULTS_GLOB

    # The kernels' checkpoint directory: the repo's (or $CHECKPOINT_DIR) for the workbook itself.
    directory = default_checkpoint_dir() if repo.resolve() == REPO_ROOT.resolve() else repo / "checkpoints"
    earlier = sorted(directory.glob(RESULTS_GLOB))
    if earlier:
        on_line(f"A fresh pass: removing the earlier results in {directory}: "
                + ", ".join(p.name for p in earlier))
        for path in earlier:
            path.unlink()


def record_notebooks(repo: Path = REPO_ROOT, *, notebooks: list[Path] | None = None,
                     solutions: list[Path] | None = None, record: Path | None = None,
                     on_line: Callable[[str], object] = print) -> int:
    """`make notebooks`: re-execute the notebooks in place, in order, then the exercise
    solutions, and write the graphs they compiled into the committed record."""
    from helpers.classroom.graph_record import GraphRecord, installed_torch_xla, kernel_backend, write_record

    record = record or repo / "notebooks" / "classroom_graphs.json"
    backend = kernel_backend()
    every_notebook = {p.resolve() for p in workbook_notebooks(repo)}
    if notebooks is None or {Path(p).resolve() for p in notebooks} == every_notebook:
        forget_earlier_results(repo, on_line)  # a part of the workbook reads the rest's results
    done = graph_pass(repo, repo / "build" / "notebooks-pass", notebooks=notebooks,
                      solutions=solutions, in_place=True, on_line=on_line)
    on_line("\n" + done.table())
    if backend == "neuron" and not done.all_graphs:
        on_line("The Neuron PJRT plugin wrote no HLO dumps (--xla_dump_to): no neuron record "
                "written. `make classroom-check` checks a pass against the compile cache itself.")
        return 0
    every = [item_name(repo, p) for p in [*workbook_notebooks(repo), *workbook_solutions(repo)]]
    written = write_record(GraphRecord(backend, installed_torch_xla(), done.graphs), record,
                           keep=every)
    on_line(f"\n{record}: {len(written.graphs)} distinct graphs on {backend}, from "
            f"{len(written.by_item)} notebooks and solutions ({len(done.graphs)} run now). "
            "Commit it with the notebooks.")
    return 0


def build_classroom_cache(archive: Path, *, repo: Path = REPO_ROOT, backend: str | None = None,
                          cache_dir: Path | None = None, workdir: Path | None = None,
                          notebooks: list[Path] | None = None, solutions: list[Path] | None = None,
                          record: Path | None = None,
                          on_line: Callable[[str], object] = print) -> int:
    """Run every notebook and exercise solution as a student would, into one fresh compile cache,
    then export that cache: every graph a student's pass compiles is in it. The graphs' record
    (notebooks/classroom_graphs.json, this backend's part) is written too.

    On the stand-in: the same pass on XLA's CPU backend, and the set of graphs it compiled
    (what a Trainium machine compiles and the archive would hold); no archive is written.
    """
    from helpers.cache.command_line import main as cache_cli
    from helpers.classroom.graph_record import GraphRecord, installed_torch_xla, kernel_backend, write_record

    backend = backend or kernel_backend()
    on_neuron = backend == "neuron"
    record = record or repo / "notebooks" / "classroom_graphs.json"
    workdir = Path(workdir or repo / "build" / "classroom").resolve()
    cache_dir = Path(cache_dir or workdir / "neuron-cache").resolve()
    env = {}
    if on_neuron:  # one cache holding exactly the workbook's graphs, whatever else the machine has
        env[ENV_VAR] = set_flag(os.environ.get(ENV_VAR), CACHE_DIR, str(cache_dir))
    items = len(workbook_notebooks(repo) if notebooks is None else notebooks)
    on_line(f"Classroom cache: runs the {items} notebooks top to bottom, then each exercise "
            f"solution, as a student would; their checkpoints go to {workdir}, "
            + (f"their graphs are compiled into {cache_dir}" if on_neuron
               else "on the CPU stand-in (no Neuron compiler: the graphs are counted)"))
    done = graph_pass(repo, workdir, notebooks=notebooks, solutions=solutions, extra_env=env,
                      on_line=on_line)
    graphs = done.all_graphs
    on_line("\n" + done.table())
    total = sum(done.seconds.values())
    on_line(f"\n{len(graphs)} distinct graphs compiled by the whole pass ({total / 60:.1f} min).")
    if graphs:
        write_record(GraphRecord(backend, installed_torch_xla(), done.graphs), record)
        on_line(f"Recorded in {record} ({backend}): the record covers all {len(graphs)}.")
    if not on_neuron:
        on_line(f"On Trainium each is one neuronx-cc compile, made here once; the archive would "
                f"hold all {len(graphs)}, so a student machine that imports it compiles 0. This "
                f"machine has no Neuron cache: no archive is written.")
        return 0
    if not graphs:
        on_line("The Neuron PJRT plugin wrote no HLO dumps (--xla_dump_to): no neuron record "
                "written; the archive's cache is the record (`make classroom-check`).")
    entries = done_entries(cache_dir)
    archive.parent.mkdir(parents=True, exist_ok=True)
    code = cache_cli(["export", "--root", str(cache_dir), str(archive)])
    if code == 0:
        on_line(f"The archive holds {len(entries)} compiled graphs (NEFFs): every graph the pass "
                f"compiled went into that one fresh cache, so it covers all of them (graphs with "
                f"the same HLO and flags share one). Give every student machine {archive} and run "
                f"there: make classroom-import ARCHIVE={archive.name}")
    return code


def check_pass(done: GraphPass, record, path: Path, on_line: Callable[[str], object] = print) -> int:
    """Compare a student's pass with the record of its backend (a GraphRecord)."""
    from helpers.classroom.graph_record import describe_uncovered, uncovered

    missing = uncovered(done.graphs, record)
    if missing:
        on_line(describe_uncovered(missing, record, path))
        return 1
    on_line(f"all {len(done.all_graphs)} graphs compiled by this pass are among the "
            f"{len(record.graphs)} of {path.name} ({record.backend}): a student machine with the "
            "classroom cache compiles 0")
    return 0


def check_cache(before: set[str], cache: Path, on_line: Callable[[str], object] = print) -> int:
    """On Trainium: the done entries a pass added to the compile cache are its compiles."""
    added = done_entries(cache) - before
    if added:
        on_line(f"{len(added)} graphs were compiled into {cache} during this pass: the classroom "
                f"cache lacked them ({', '.join(sorted(added)[:5])}{', ...' if len(added) > 5 else ''})."
                " Run `make classroom-cache` again and import the new archive.")
        return 1
    on_line(f"0 graphs compiled into {cache} during this pass: the classroom cache held every one")
    return 0

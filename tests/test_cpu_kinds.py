"""Committed outputs hold on any x86-64 CPU, with AVX-512 kernels or without (issue 44).

PyTorch picks its CPU kernels by what the CPU has (AVX-512 where it can), and PyTorch/XLA's CPU
backend compiles for the host CPU: a test accuracy or a loss then differs in its fourth decimal
between a CPU with AVX-512 and one without. check() prints those figures at a precision the CPU
cannot change (helpers/checks/__init__.py); this test shows it holds. The training whose figures
the notebooks print runs at two kernel levels, each compared with the committed cells through the
same sanitizers (tests/nbval_sanitize.cfg): at this CPU's highest level it is the notebooks' own
run in JupyterLab (on the trn1 double, whose XLA computes on this CPU), which
tests/notebook_outputs.py compares cell by cell in the Neuron mode, so it is not run again here
(a figure cell whose output is the backend's, 05's accuracy gaps, is compared lowered only); lowered to AVX2 (tests/cpu_kinds.py's LOWERED_TO_AVX2: ATEN_CPU_CAPABILITY,
ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS, XLA_FLAGS=--xla_cpu_max_isa), as on a CPU without
AVX-512, it is this test's one run (tests/cpu_kinds.py, shared through tests/script_runs.py):
each figure cell, executed from the committed notebooks on its results, must print what the
committed cell shows. Committed outputs made on either kind of CPU then hold on both. On a CPU
without AVX-512 the lowered run is its highest level, and the test says so.

By hand (docs/testing.md): `.venv/bin/python -m pytest -p no:xdist -s tests/test_cpu_kinds.py`.
"""
import difflib
import json
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import coalesce_streams

from tests.cpu_kinds import NOTEBOOKS
from tests.notebook_outputs import read_sanitizer, sanitize
from tests.paths import REPO_ROOT

SANITIZER = REPO_ROOT / "tests" / "nbval_sanitize.cfg"
HIGHEST, LOWERED = "highest kernel level", "lowered to AVX2"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def committed_stdout(notebook: str, index: int) -> str:
    """What code cell `index` of the committed notebook printed to stdout."""
    cell = [c for c in nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
            if c.cell_type == "code"][index]
    streams = coalesce_streams([o for o in cell.get("outputs", []) if o.output_type == "stream"])
    return "".join(o.text for o in streams if o.name == "stdout")


def printed_lines(text: str, patterns) -> list[str]:
    return [line for line in sanitize(text, patterns).splitlines() if line.strip()]


def differences(figures: dict, patterns) -> list[str]:
    """Each figure cell whose lines (sanitized) are not the last lines of the committed cell's
    output (a cell that starts a run shows that run's log first; here the run had run)."""
    found = []
    for notebook, cells in figures.items():
        for index, text in cells.items():
            ours = printed_lines(text, patterns)
            theirs = printed_lines(committed_stdout(notebook, int(index)), patterns)
            theirs = theirs[len(theirs) - len(ours):] if ours else []
            if ours != theirs:
                found.append(f"{notebook} code cell {index}:\n" + "\n".join(difflib.unified_diff(
                    theirs, ours, "committed", "this run", lineterm="")))
    return found


def test_cpu_flags_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n\nprocessor\t: 1\n")
    assert {"avx2", "avx512f"} <= cpu_flags(cpuinfo)
    cpuinfo.write_text("processor\t: 0\n")
    assert cpu_flags(cpuinfo) == set()


def test_a_figure_cell_is_compared_with_the_committed_cells_last_lines():
    patterns = read_sanitizer(SANITIZER)
    cell = "01_cpu_training.ipynb"
    index = next(i for i, c in enumerate(c for c in nbformat.read(NOTEBOOKS / cell, as_version=4)
                                         .cells if c.cell_type == "code")
                 if 'check("test accuracy", results.test_accuracy' in c.source)
    shown = committed_stdout(cell, index)
    assert not differences({cell: {str(index): shown}}, patterns)
    changed = shown.replace("✓ test accuracy", "✓ test accuracy 1", 1)
    assert differences({cell: {str(index): changed}}, patterns)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_training_figures_read_the_same_with_and_without_avx512(script_runs, record_property):
    patterns = read_sanitizer(SANITIZER)
    if "avx512f" not in cpu_flags():
        print(f"\nthis CPU has no AVX-512: its {HIGHEST} is AVX2, the level of this run")
        record_property("cpu_kinds", "no AVX-512: the run lowered to AVX2 is this CPU's highest level")
    run = script_runs["figures avx2"]
    figures = json.loads((run.directory / "figures.json").read_text())
    problems = [f"{LOWERED}: {d}" for d in differences(figures, patterns)]
    assert not problems, "\n\n".join(problems)
    assert sum(len(cells) for cells in figures.values()) >= 6  # every figure cell ran



def test_every_figure_cell_is_found_once_in_the_committed_notebooks():
    """A notebook edit that moves or rewrites a figure cell fails here, in make test-quick, not
    only after the two training runs; what runs of each cell imports none of the names the run
    provides, and leaves out the graph-count check."""
    import ast

    from tests.cpu_kinds import FIGURE_CELLS, NOT_FIGURES, PROVIDED, figure_cells, without_provided_imports

    for notebook, lines in FIGURE_CELLS.items():
        cells = figure_cells(notebook)
        assert len(cells) == len(lines) == len({index for index, _ in cells})
        for _, source in cells:
            tree = without_provided_imports(source)
            imported = {a.asname or a.name for node in ast.walk(tree)
                        if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
            assert not imported & PROVIDED
            assert not any(isinstance(node, ast.Constant) and node.value in NOT_FIGURES
                           for node in ast.walk(tree))
    left_out = without_provided_imports('from helpers.launch import run_streaming, summary_only\n'
                                        'check("every mode met the new graphs expected here", True)\n'
                                        'check("kept", True)\n')
    assert ast.unparse(left_out) == "from helpers.launch import summary_only\ncheck('kept', True)"

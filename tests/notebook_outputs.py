"""Committed notebook outputs against this run's single execution, with nbval's own comparison.

Each notebook is executed once per test run (in JupyterLab by the browser test, or by nbclient
where no browser is found outside CI) and saved; each code cell's saved outputs are then compared
with the committed ones by nbval's IPyNbCell.compare_outputs: the same sanitizer file
(tests/nbval_sanitize.cfg), stream coalescing and nbval's cell tags (nbval-ignore-output,
nbval-skip, nbval-raises-exception, nbval-check-output), kept in cell metadata so that the code a
learner reads carries no markers.

Cell metadata `"backend_output": "<why>"`: the cell's output depends on the backend
(graph counts, cache layout, core counts...). The committed outputs come from the CPU stand-in, so
in the Neuron mode such a cell's output is not compared (its asserts, which take their expected
values from helpers/checks/expected.py, still ran); every other cell is, but for its stderr (where
the compiler wrapper's stamped lines go on Neuron; which stream a trn1 uses is not in the sources:
the double writes stderr, and a line on stdout would fail the comparison). make test compares in
the Neuron mode: its one execution runs on the trn1 double, or on a trn1's NeuronCores
(tests/browser/conftest.py). Every run reports how many cells were compared and why the others
were not.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import nbformat
from nbval.plugin import (
    IPyNbCell,
    bcolors,
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    get_sanitize_patterns,
    nocolors,
)

BACKEND_KEY = "backend_output"  # cell metadata: why this cell's output depends on the backend
# nbval skips these when comparing; images too, unless --nbdime (never used here).
SKIP_COMPARE = ('metadata', 'traceback', 'prompt_number', 'output_type', 'name', 'execution_count',
                'application/vnd.jupyter.widget-view+json', 'image/png', 'image/jpeg')


def read_sanitizer(path: Path) -> list[tuple[str, str]]:
    return get_sanitize_patterns(path.read_text())


def sanitize(text, patterns) -> object:
    if not isinstance(text, str):
        return text
    for regex, replace in patterns:
        text = re.sub(regex, replace, text)
    return text


@dataclass
class CellOptions:
    check: bool  # compare the outputs
    skip: bool  # NBVAL_SKIP: nbval would not run it; its outputs are not compared
    raises: bool  # NBVAL_RAISES_EXCEPTION: an error output is expected
    backend_reason: str | None  # the BACKEND_OUTPUT marker's reason, if marked


def cell_options(cell) -> CellOptions:
    """nbval's markers (its cell tags; comments win over tags, as in nbval) and ours."""
    metadata = cell.get("metadata", {})
    options = dict(find_metadata_tags(metadata))
    options.update(dict(find_comment_markers(cell.source)))
    reason = metadata.get(BACKEND_KEY)
    return CellOptions(check=options.get("check", True), skip=options.get("skip", False),
                       raises=options.get("check_exception", False),
                       backend_reason=str(reason).strip() if reason else None)


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


class OutputMismatch(AssertionError):
    pass


def _nbval_comparer(patterns, config=None):
    """An object with what IPyNbCell.compare_outputs reads from its cell item."""
    parent = SimpleNamespace(skip_compare=SKIP_COMPARE, sanitize_patterns=dict(patterns))
    comparer = SimpleNamespace(parent=parent, colors=nocolors if config is None else bcolors,
                               comparison_traceback=[], config=config)
    comparer.sanitize = lambda s: IPyNbCell.sanitize(comparer, s)
    comparer.format_output_compare = (
        lambda key, left, right: IPyNbCell.format_output_compare(comparer, key, left, right))
    comparer.ihook = SimpleNamespace(pytest_assertrepr_compare=lambda **kw: [
        _assertrepr(config, kw["left"], kw["right"])])
    return comparer


def _assertrepr(config, left, right) -> list[str]:
    """A unified diff of committed and this run's text; long lines cut to where they differ."""
    import difflib

    if not (isinstance(left, str) and isinstance(right, str)):
        return [f"{left!r} != {right!r}"]
    old, new = left.splitlines(), right.splitlines()
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b and max(len(a), len(b)) > 160:
            start = max(0, next(k for k, (x, y) in enumerate(zip(a + "\0", b + "\1")) if x != y) - 60)
            old[i], new[i] = f"[from char {start}] " + a[start:start + 160], f"[from char {start}] " + b[start:start + 160]
    return ["committed != this run", *difflib.unified_diff(old, new, "committed", "this run", lineterm="")]


def compare_cell(committed, executed, patterns, mode: str = "stand-in") -> str:
    """Compare one code cell; return what was done ("compared" or "not compared: <why>").

    Raises OutputMismatch with nbval's diff when the outputs differ, or when the cell raised in
    this run without nbval-raises-exception."""
    if committed.source != executed.source:
        raise OutputMismatch("the executed cell's source differs from the committed one: "
                             "the notebook changed during the run")
    options = cell_options(committed)
    errors = [o for o in executed.get("outputs", []) if o.output_type == "error"]
    if errors and not options.raises:
        raise OutputMismatch(f"the cell raised {errors[0].ename}: {errors[0].evalue}")
    if options.skip:
        return "not compared: nbval-skip"
    if not options.check:
        return "not compared: nbval-ignore-output"
    if committed.execution_count is None:
        return "not compared: never executed in the committed notebook"
    if mode == "neuron" and options.backend_reason:
        return f"not compared: backend output ({options.backend_reason})"
    comparer = _nbval_comparer(patterns)
    test = coalesce_streams(copy.deepcopy(list(executed.get("outputs", []))))
    ref = coalesce_streams(copy.deepcopy(list(committed.get("outputs", []))))
    if mode == "neuron":  # a cell that compiles prints the compiler wrapper's lines to stderr there
        test, ref = without_stderr(test), without_stderr(ref)
    if not IPyNbCell.compare_outputs(comparer, test, ref):
        raise OutputMismatch("outputs differ from the committed notebook (after "
                             "tests/nbval_sanitize.cfg):\n" + "\n".join(comparer.comparison_traceback))
    return "compared"


def without_stderr(outputs: list) -> list:
    return [o for o in outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


def read_notebook(path: Path):
    return nbformat.read(str(path), as_version=4)


def cell_seconds(nb) -> list[tuple[int, float, str]]:
    """(code cell index, seconds, first line) from the timings JupyterLab (recordTiming) and
    nbclient keep in each executed cell's metadata."""
    from datetime import datetime

    timed = []
    for index, cell in enumerate(code_cells(nb)):
        execution = cell.get("metadata", {}).get("execution", {})
        start = execution.get("iopub.execute_input") or execution.get("iopub.status.busy")
        end = execution.get("shell.execute_reply") or execution.get("iopub.status.idle")
        if start and end:
            seconds = (datetime.fromisoformat(end.replace("Z", "+00:00"))
                       - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
            first = next((line for line in cell.source.splitlines()
                          if line.strip() and not line.startswith("#")), "")
            timed.append((index, seconds, first[:70]))
    return timed

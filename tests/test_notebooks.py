"""The notebooks' house rules, checked on the committed files (nbval re-runs them separately).

Every notebooks/NN_*.ipynb:
  - runs on the `python3` kernel (what `make notebooks` and nbval use);
  - is committed executed: every code cell ran, in order, in one top-to-bottom run;
  - has no error output, traceback or warning in what it shows;
  - starts with a markdown title, and its first code cell is the setup cell;
  - defines no functions or classes. Logic a notebook needs lives in helpers/, where it is
    unit-tested and shared; in a notebook it would be untested and would hide the lesson's
    code behind a name. A lambda (e.g. for xm.add_step_closure) is fine. The one exception:
    a cell whose first line starts with TEACHING_DEF_MARKER, where writing the function is
    itself the lesson; at most one such cell per notebook.
"""
import ast
import re
from pathlib import Path

import nbformat
import pytest

from mnist_mlp.common.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
TEACHING_DEF_MARKER = "# Teaching def:"
SETUP_LINES = (
    re.compile(r"^from helpers\.setup import setup$"),
    # neuron_cores=None: a kernel that takes no NeuronCore (notebook 04's: its workers take them)
    re.compile(r"^backend = setup\((xla=(True|False)|neuron_cores=(None|\"[0-9-]+\"))?\)"),
)
WARNING = re.compile(r"\b\w*Warning: ")  # how Python's warnings module prints one
TRACEBACK = "Traceback (most recent call last)"


def read(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def python_source(cell) -> str:
    """The cell as plain Python: IPython magics and shell escapes blanked out."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell.source.splitlines())


def output_texts(cell):
    """Every text an output shows: streams, plain/HTML data, error name and traceback."""
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            yield out.name, out.text
        elif out.output_type in ("execute_result", "display_data"):
            for mime in ("text/plain", "text/html", "text/markdown"):
                if mime in out.get("data", {}):
                    yield mime, out.data[mime]
        elif out.output_type == "error":
            yield "error", "\n".join([out.ename, out.evalue, *out.traceback])


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks matching [0-9][0-9]_*.ipynb in {NOTEBOOK_DIR}"


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.name)
def notebook(request):
    return request.param, read(request.param)


def test_kernel_is_python3(notebook):
    path, nb = notebook
    kernelspec = nb.metadata.get("kernelspec", {})
    assert kernelspec.get("name") == "python3", (
        f"{path.name}: kernelspec {kernelspec.get('name')!r}; re-run `make notebooks`, which "
        f"executes with --ExecutePreprocessor.kernel_name=python3")


def test_committed_executed_top_to_bottom(notebook):
    path, nb = notebook
    cells = code_cells(nb)
    assert cells, f"{path.name} has no code cells"
    empty = [i for i, c in enumerate(cells) if not c.source.strip()]
    assert not empty, f"{path.name}: empty code cells (index {empty}) never execute: remove them"
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts}: commit it as `make notebooks` leaves it "
        f"(one clean run, top to bottom)")
    assert any(c.outputs for c in cells), f"{path.name} has no outputs: execute it before committing"


def test_no_errors_tracebacks_or_warnings_in_outputs(notebook):
    path, nb = notebook
    for index, cell in enumerate(code_cells(nb)):
        for kind, text in output_texts(cell):
            where = f"{path.name} code cell {index} ({kind})"
            assert kind != "error", f"{where}: the cell raised: {text[:500]}"
            assert TRACEBACK not in text, f"{where} shows a traceback: {text[:500]}"
            warning = WARNING.search(text)
            assert not warning, f"{where} shows a warning: {text[warning.start():][:300]}"


def test_starts_with_a_title_then_the_setup_cell(notebook):
    path, nb = notebook
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), (
        f"{path.name}: the first cell should be a markdown title ('# ...')")
    setup_lines = [line for line in code_cells(nb)[0].source.splitlines()
                   if line.strip() and not line.lstrip().startswith("#")]
    assert len(setup_lines) == len(SETUP_LINES) and all(
        pattern.match(line) for pattern, line in zip(SETUP_LINES, setup_lines)), (
        f"{path.name}: the first code cell must be the setup cell:\n"
        "from helpers.setup import setup\n"
        "backend = setup()  # or setup(xla=False), setup(neuron_cores=None)\n"
        f"found:\n{code_cells(nb)[0].source}")


def definitions(source: str) -> list[str]:
    tree = ast.parse(source)
    return [f"{type(node).__name__.replace('Def', '').lower()} {node.name} (line {node.lineno})"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def test_definitions_finds_functions_and_classes_but_not_lambdas():
    # The rule below is only as good as this detector.
    source = "f = lambda x: x\nclass A:\n    def m(self): pass\nasync def g(): pass\n"
    assert definitions(source) == ["class A (line 2)", "asyncfunction g (line 4)",
                                   "function m (line 3)"]
    assert definitions("xm.add_step_closure(lambda l: print(l.item()), args=(loss,))") == []


def test_no_helper_logic_defined_in_the_notebook(notebook):
    path, nb = notebook
    teaching_cells = []
    for index, cell in enumerate(code_cells(nb)):
        source = python_source(cell)
        try:
            found = definitions(source)
        except SyntaxError as err:
            pytest.fail(f"{path.name} code cell {index} is not valid Python: {err}")
        if not found:
            continue
        if cell.source.lstrip().startswith(TEACHING_DEF_MARKER):
            teaching_cells.append(index)
            continue
        pytest.fail(f"{path.name} code cell {index} defines {', '.join(found)}: move it to a "
                    f"helpers/ module with a unit test, or, if writing it is the lesson, start "
                    f"the cell with '{TEACHING_DEF_MARKER} <why>'")
    assert len(teaching_cells) <= 1, (
        f"{path.name}: cells {teaching_cells} are all marked {TEACHING_DEF_MARKER!r}; "
        f"one per notebook at most: move the others to helpers/")


def test_output_markers_live_in_metadata_spelled_as_the_comparison_reads_them(notebook):
    # A misspelt tag would leave a cell compared (or not) without anyone noticing; the learner's
    # code carries no marker comments (tests/test_lesson_limits.py).
    from tests.notebook_outputs import BACKEND_KEY

    path, nb = notebook
    known = {"nbval-ignore-output", "nbval-check-output", "nbval-skip", "nbval-raises-exception",
             "raises-exception", "exercise", "hide-output"}  # hide-output: an output folded (time_budget)
    for index, cell in enumerate(nb.cells):
        where = f"{path.name} cell {index}"
        unknown = set(cell.metadata.get("tags", [])) - known
        assert not unknown, f"{where}: tags {sorted(unknown)} unknown; use one of {sorted(known)}"
        if BACKEND_KEY in cell.metadata:
            reason = cell.metadata[BACKEND_KEY]
            assert cell.cell_type == "code" and isinstance(reason, str) and reason.strip(), (
                f"{where}: metadata {BACKEND_KEY!r} takes why the output depends on the backend")

"""Every notebook, run in JupyterLab in headless Chromium as a learner runs it (Run > Run All
Cells), shows no error, no broken or stuck widget and no browser console error; the compile-cache
widgets work when clicked. Screenshots go to build/screenshots/ (git-ignored)."""
from __future__ import annotations

import json
import re

import nbformat
import pytest

from tests.browser.conftest import SCREENSHOTS, shut_down_kernel, workbook_notebooks
from tests.browser.lab_page import WIDGET_ERROR, WIDGET_LOADING, run_notebook
from tests.conftest import REPO_ROOT

NOTEBOOKS = workbook_notebooks(REPO_ROOT / "notebooks")


def notebook_using(name: str) -> str:
    """The workbook notebook whose code constructs `name` (e.g. the CacheBrowser)."""
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        if any(f"{name}(" in "".join(c["source"]) for c in cells if c["cell_type"] == "code"):
            return path.name
    pytest.fail(f"no notebook constructs a {name}: the browser test clicks through it")


def test_the_detector_catches_errors_broken_widgets_and_console_errors(lab, chromium, lab_notebooks):
    # The checks below are only as good as this: a notebook that does each bad thing once.
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell("print('fine')"),
        nbformat.v4.new_code_cell(
            "from IPython.display import Javascript, display\n"
            "display(Javascript(\"console.error('selftest: a console error')\"))"),
        nbformat.v4.new_code_cell(
            "display({'application/vnd.jupyter.widget-view+json': {'model_id': 'no-such-model', "
            "'version_major': 2, 'version_minor': 0}}, raw=True)"),
        nbformat.v4.new_code_cell("raise ValueError('selftest: boom')"),
        nbformat.v4.new_code_cell("print('never runs')"),
    ]
    path = lab_notebooks / "zz_browser_selftest.ipynb"
    nbformat.write(nb, path)
    page = chromium.new_page()
    try:
        run = run_notebook(page, lab, path, timeout=120)
    finally:
        page.close()
        shut_down_kernel(lab, path.name)
        path.unlink()
    problems = "\n".join(run.problems)
    assert "Traceback" in problems or "ValueError" in problems, problems
    assert "selftest: boom" in problems, "the saved file's error output is found"
    assert "1 code cell(s) did not run" in problems, problems
    assert WIDGET_ERROR in problems or WIDGET_LOADING in problems, problems
    assert any("selftest: a console error" in e for e in run.console_errors), run.console_errors


@pytest.mark.parametrize("notebook", [p.name for p in NOTEBOOKS])
def test_notebook_runs_clean_in_jupyterlab(notebook_runs, notebook):
    run = notebook_runs.get(notebook)
    print(f"{notebook}: Run All took {run.seconds:.0f} s in the browser; "
          f"screenshot {SCREENSHOTS / notebook.replace('.ipynb', '.png')}")
    assert not run.problems, f"{notebook} in JupyterLab:\n" + "\n".join(run.problems)
    assert not run.console_errors, (f"{notebook}: the browser console logged errors:\n"
                                    + "\n".join(run.console_errors[:20]))

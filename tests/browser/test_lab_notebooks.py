"""Every notebook, run in JupyterLab in headless Chromium as a learner runs it (Run > Run All
Cells), shows no error, no broken or stuck widget and no browser console error; the compile-cache
widgets work when clicked. Screenshots go to build/screenshots/ (git-ignored)."""
from __future__ import annotations

import json
import re
import time

import nbformat
import pytest

from helpers.classroom.notebook_pass import workbook_notebooks
from tests.browser.conftest import SCREENSHOTS, shut_down_kernel
from tests.browser.lab_page import WIDGET_ERROR, WIDGET_LOADING, open_page, run_notebook
from tests.browser.widget_clicks import (
    click_through_cache_browser,
    click_through_flags_editor,
    code_cell,
    rerun_cell,
    wait_for,
)
from tests.paths import REPO_ROOT

NOTEBOOKS = workbook_notebooks(REPO_ROOT)


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
        run = run_notebook(open_page(page, lab, path), lab, path, timeout=120)
    finally:
        page.close()
        shut_down_kernel(lab, path.name)
        path.unlink()
    problems = "\n".join(run.problems)
    assert "Traceback" in problems or "ValueError" in problems, problems
    assert "selftest: boom" in problems, "the saved file's error output is found"
    assert any(p.startswith("1 code cell(s) did not run") for p in run.problems), problems  # not 11
    assert WIDGET_ERROR in problems or WIDGET_LOADING in problems, problems
    assert any("selftest: a console error" in e for e in run.console_errors), run.console_errors


# The widget tests come before the per-notebook ones: they keep their notebook's kernel alive
# for the clicks; the per-notebook test then shuts it down before the next notebook runs (on
# Trainium a kernel that touched the device holds a NeuronCore).

def ran_clean(run) -> None:
    """Widgets of a notebook that failed half way are not there to click: say why first."""
    assert not run.problems, f"{run.name} did not run clean:\n" + "\n".join(run.problems)


def test_checklist_check_again_says_when_it_ran(notebook_runs):
    name = notebook_using("Checklist")
    run = notebook_runs.get(name, keep_open=True)
    ran_clean(run)
    cell = code_cell(run.page, "Checklist(")
    summary = re.compile(r"checked at (\d\d:\d\d:\d\d): (\d+) of (\d+) OK")
    first = summary.search(cell.inner_text())
    assert first, f"no 'checked at ...' beside the button: {cell.inner_text()[-300:]}"
    time.sleep(1.1)  # a later second, so the new time differs
    cell.get_by_role("button", name="Check again").click()
    again = wait_for(lambda: (lambda m: m if m and m.group(1) != first.group(1) else None)(
        summary.search(cell.inner_text())), "a new 'checked at' time after the click")
    cell.screenshot(path=str(SCREENSHOTS / f"{name[:-6]}_checklist.png"))
    assert again.group(3) == first.group(3), "the same checks ran again"
    notebook_runs.finish(name)


def test_cache_browser_filter_plan_confirm(notebook_runs, lab):
    name = notebook_using("CacheBrowser")
    run = notebook_runs.get(name, keep_open=True)
    ran_clean(run)
    # Its own cell again: Run All ends with the notebook's clean-up, which may remove the cache.
    cell = code_cell(run.page, "CacheBrowser(", "build_demo_cache")
    rerun_cell(run.page, lab, name, cell)
    seen = click_through_cache_browser(cell, state="failed")
    cell.locator(".cc-browser").first.screenshot(path=str(SCREENSHOTS / f"{name[:-6]}_cache_browser.png"))
    assert len(seen["filtered"]) < len(seen["entries_before"]), "the filter hid the other states"
    plan = seen["plan"]
    assert re.search(rf"remove {len(seen['filtered'])} item\(s\)", plan), plan
    removed = re.search(r"Removed (\d+) item", seen["after_confirm"])
    assert int(removed.group(1)) == len(seen["filtered"]), seen["after_confirm"]
    assert seen["entries_after"] == [], "no failed entry is left to list"
    assert "failed 0" in seen["after_confirm"], "the header's counts were refreshed"
    assert not seen["confirm_enabled_after"], "the plan is spent: Confirm is off again"


def test_flags_editor_tick_and_apply(notebook_runs):
    name = notebook_using("FlagsEditor")
    run = notebook_runs.get(name, keep_open=True)
    ran_clean(run)
    cell = code_cell(run.page, "FlagsEditor(")
    seen = click_through_flags_editor(cell)
    cell.locator(".cc-flags-editor").first.screenshot(
        path=str(SCREENSHOTS / f"{name[:-6]}_flags_editor.png"))
    assert seen["flag"].startswith("--") and seen["flag"] in seen["text"].split()
    applied = re.findall(r"NEURON_CC_FLAGS='([^']*)'", seen["message"])
    assert applied and seen["flag"] in applied[-1].split(), seen["message"]


@pytest.mark.ends_kernels
@pytest.mark.parametrize("notebook", [p.name for p in NOTEBOOKS])
def test_notebook_runs_clean_in_jupyterlab(notebook_runs, notebook):
    run = notebook_runs.get(notebook)
    notebook_runs.finish(notebook)
    print(f"{notebook}: Run All took {run.seconds:.0f} s in the browser; "
          f"screenshot {SCREENSHOTS / notebook.replace('.ipynb', '.png')}")
    assert not run.problems, f"{notebook} in JupyterLab:\n" + "\n".join(run.problems)
    assert not run.console_errors, (f"{notebook}: the browser console logged errors:\n"
                                    + "\n".join(run.console_errors[:20]))

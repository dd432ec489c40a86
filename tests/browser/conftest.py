"""Fixtures of the browser test: one JupyterLab over a copy of the notebooks, one headless
Chromium, and each notebook run once (in order: later notebooks read what earlier ones wrote)."""
from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.browser.lab_page import NotebookRun, run_notebook
from tests.browser.lab_server import CHROMIUM, CHROMIUM_ARGS, LabServer, browser_problem, make_workspace
from tests.conftest import REPO_ROOT

NOTEBOOK_TIMEOUT_S = float(os.environ.get("BROWSER_TEST_NOTEBOOK_TIMEOUT", "900"))
SCREENSHOTS = REPO_ROOT / "build" / "screenshots"
VIEWPORT = {"width": 1280, "height": 1000}


def workbook_notebooks(directory: Path) -> list[Path]:
    return sorted(directory.glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session")
def browser_ready():
    """Fails, loudly, where the browser or its driver is missing: never a silent skip."""
    problem = browser_problem()
    if problem:
        pytest.fail(f"the browser test cannot run: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def lab_notebooks(tmp_path_factory) -> Path:
    return make_workspace(REPO_ROOT, tmp_path_factory.mktemp("lab") / "workbook")


@pytest.fixture(scope="session")
def lab(browser_ready, lab_notebooks, tmp_path_factory):
    # Kernels see what a learner's would: no PJRT_DEVICE preset by the test session; their
    # checkpoints and results go to the copy, not the repo.
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    env["CHECKPOINT_DIR"] = str(lab_notebooks.parent / "checkpoints")
    server = LabServer(lab_notebooks, tmp_path_factory.mktemp("lab-state"), env=env).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chromium(browser_ready, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT)
        yield context
        context.close()


def shut_down_kernel(server, notebook_name: str) -> None:
    """What File > Close and Shut Down does: a NeuronCore held by a kernel is freed only so."""
    with urllib.request.urlopen(server.url("api/sessions"), timeout=10) as response:
        sessions = json.load(response)
    for session in sessions:
        if Path(session.get("path", "")).name == notebook_name:
            request = urllib.request.Request(server.url(f"api/sessions/{session['id']}"),
                                             method="DELETE")
            urllib.request.urlopen(request, timeout=30).close()


class NotebookRuns:
    """Runs each notebook once, in order, and keeps what was found for the tests to assert."""

    def __init__(self, server, context, notebooks: list[Path]):
        self.server, self.context, self.notebooks = server, context, notebooks
        self.runs: dict[str, NotebookRun] = {}
        self.kept_open: set[str] = set()

    def get(self, name: str, keep_open: bool = False) -> NotebookRun:
        """The run of `name`, running it (and every notebook before it) first if needed.

        keep_open leaves its page and kernel alive for widget clicks; release() ends them."""
        names = [p.name for p in self.notebooks]
        assert name in names, f"{name} is not among {names}"
        if keep_open and name in self.runs and self.runs[name].page.is_closed():
            del self.runs[name]  # released already: run it again for the clicks
        for path in self.notebooks[:names.index(name) + 1]:
            if path.name not in self.runs:
                page = self.context.new_page()
                run = run_notebook(page, self.server, path, NOTEBOOK_TIMEOUT_S)
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / f"{path.stem}.png"))
                self.runs[path.name] = run
                if path.name == name and keep_open:
                    self.kept_open.add(name)
                else:
                    self.release(path.name)
        return self.runs[name]

    def finish(self, name: str) -> None:
        """Done with its widgets: shut its kernel down (if kept open) before the next notebook."""
        if name in self.kept_open:
            self.release(name)

    def release(self, name: str) -> None:
        run = self.runs[name]
        if not run.page.is_closed():
            run.page.close()  # first: the page would log the kernel's end as a console error
        shut_down_kernel(self.server, name)
        self.kept_open.discard(name)


@pytest.fixture(scope="session")
def notebook_runs(lab, chromium, lab_notebooks):
    runs = NotebookRuns(lab, chromium, workbook_notebooks(lab_notebooks))
    yield runs
    for name in list(runs.kept_open):
        runs.release(name)

"""Fixtures of the browser test: one JupyterLab over a copy of the notebooks, one headless
Chromium, and each notebook run once (in order: later notebooks read what earlier ones wrote).

That run is the test session's only execution of each notebook: `executed_notebooks` hands the
saved result to the output comparison (test_notebook_outputs.py). Where no browser is found
outside CI, nbclient executes them instead, once, and the browser tests are skipped. Either way
the kernels dump the HLO of every graph they (and what they start) compile: `notebook_graphs`
files them under the notebook whose Run All was going (test_notebook_graphs.py)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest

from helpers.classroom.graph_log import GraphDumps
from helpers.classroom.notebook_pass import workbook_notebooks
from tests.browser.find_browser import find_chromium, in_ci, profile_parent
from tests.browser.lab_page import NotebookRun, open_page, run_notebook
from tests.browser.lab_server import CHROMIUM_ARGS, LabServer, browser_problem, make_workspace
from tests.paths import REPO_ROOT

NOTEBOOK_TIMEOUT_S = float(os.environ.get("BROWSER_TEST_NOTEBOOK_TIMEOUT", "900"))
SCREENSHOTS = REPO_ROOT / "build" / "screenshots"
EXECUTED = REPO_ROOT / "build" / "executed"  # each run's executed notebooks (CI keeps them)
VIEWPORT = {"width": 1280, "height": 1000}


@pytest.fixture(scope="session")
def browser_ready():
    """Skips where the browser or its driver is missing (the session header said so in one
    line); under CI=true fails instead: CI must never pass without the browser test."""
    problem = browser_problem()
    if problem and in_ci():
        pytest.fail(f"the browser test cannot run (CI=true): {problem}", pytrace=False)
    if problem:
        pytest.skip(f"browser test skipped: {problem}")


@pytest.fixture(scope="session")
def lab_notebooks(tmp_path_factory) -> Path:
    return make_workspace(REPO_ROOT, tmp_path_factory.mktemp("lab") / "workbook")


def kernel_env(lab_notebooks: Path, graphs: GraphDumps | None = None) -> dict[str, str]:
    """Kernels see what a learner's would: no PJRT_DEVICE preset by the test session; their
    checkpoints and results go to the copy, not the repo; with graphs, XLA dumps their HLO there."""
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    env["CHECKPOINT_DIR"] = str(lab_notebooks.parent / "checkpoints")
    if graphs is not None:
        env.update(graphs.env(env))
    return env


@pytest.fixture(scope="session")
def notebook_graphs(tmp_path_factory) -> GraphDumps:
    """The graphs the session's execution of the notebooks compiled, by notebook (by_label)."""
    return GraphDumps(tmp_path_factory.mktemp("hlo-dumps"))


@pytest.fixture(scope="session")
def lab(browser_ready, lab_notebooks, notebook_graphs, tmp_path_factory):
    server = LabServer(lab_notebooks, tmp_path_factory.mktemp("lab-state"),
                       env=kernel_env(lab_notebooks, notebook_graphs)).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chromium(browser_ready, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    # A snap's Chromium cannot see /tmp: its profile goes where the snap may write.
    parent = profile_parent(chromium, tmp_path_factory.getbasetemp())
    parent.mkdir(parents=True, exist_ok=True)
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=parent))
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                str(profile), executable_path=str(chromium),
                headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT)
            yield context
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def shut_down_kernel(server, notebook_name: str) -> None:
    """What File > Close and Shut Down does: a NeuronCore held by a kernel is freed only so."""
    with urllib.request.urlopen(server.url("api/sessions"), timeout=10) as response:
        sessions = json.load(response)
    for session in sessions:
        if Path(session.get("path", "")).name == notebook_name:
            request = urllib.request.Request(server.url(f"api/sessions/{session['id']}"),
                                             method="DELETE")
            urllib.request.urlopen(request, timeout=30).close()


def keep_executed(saved: Path) -> Path:
    """A copy of the notebook as the run saved it, before widget clicks or autosave change it;
    and another in build/executed/ for a person (or CI's artifacts) to open."""
    kept = saved.parent.parent / "executed" / saved.name
    kept.parent.mkdir(exist_ok=True)
    shutil.copyfile(saved, kept)
    EXECUTED.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(saved, EXECUTED / saved.name)
    return kept


class NotebookRuns:
    """Runs each notebook once, in order, and keeps what was found for the tests to assert."""

    def __init__(self, server, context, notebooks: list[Path], graphs: GraphDumps):
        self.server, self.context, self.notebooks, self.graphs = server, context, notebooks, graphs
        self.runs: dict[str, NotebookRun] = {}
        self.kept_open: set[str] = set()
        # The next notebook's page, loaded (and its kernel started, idle: no cell runs) while the
        # one before it runs: about 6 s of page load and kernel start per notebook off the clock.
        self.loading: dict[str, NotebookRun] = {}

    def get(self, name: str, keep_open: bool = False) -> NotebookRun:
        """The run of `name`, running it (and every notebook before it) first if needed.

        keep_open leaves its page and kernel alive for widget clicks; release() ends them."""
        names = [p.name for p in self.notebooks]
        assert name in names, f"{name} is not among {names}"
        if keep_open and name in self.runs and self.runs[name].page.is_closed():
            del self.runs[name]  # released already: run it again for the clicks
        for index, path in enumerate(self.notebooks[:names.index(name) + 1]):
            if path.name not in self.runs:
                self.graphs.collect(between_runs(self.kept_open))
                self.load(path)  # unless it is loading already
                following = self.notebooks[index + 1:index + 2]
                run = run_notebook(self.loading.pop(path.name), self.server, path,
                                   NOTEBOOK_TIMEOUT_S,
                                   meanwhile=lambda following=following: [self.load(p) for p in following])
                self.graphs.collect(path.name)
                run.executed = keep_executed(path)
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                run.page.screenshot(path=str(SCREENSHOTS / f"{path.stem}.png"))
                self.runs[path.name] = run
                if path.name == name and keep_open:
                    self.kept_open.add(name)
                else:
                    self.release(path.name)
        run = self.runs[name]
        if name in self.kept_open:
            run.page.bring_to_front()  # its widgets are clicked next: not throttled behind another
        return run

    def load(self, path: Path) -> None:
        """Start loading path's page, unless it ran or is loading already."""
        if path.name not in self.runs and path.name not in self.loading:
            self.loading[path.name] = open_page(self.context.new_page(), self.server, path)

    def close_loading(self) -> None:
        for name, opened in self.loading.items():
            opened.page.close()
            shut_down_kernel(self.server, name)
        self.loading.clear()

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


def between_runs(kept_open) -> str:
    """The label of graphs compiled outside any notebook's Run All."""
    still_open = ", ".join(sorted(kept_open)) or "none"
    return f"outside Run All (widget clicks, cells re-run; kernels open: {still_open})"


@pytest.fixture(scope="session")
def notebook_runs(lab, chromium, lab_notebooks, notebook_graphs):
    runs = NotebookRuns(lab, chromium, workbook_notebooks(lab_notebooks.parent), notebook_graphs)
    yield runs
    runs.close_loading()
    for name in list(runs.kept_open):
        runs.release(name)


class KernelRuns:
    """Where no browser is found (outside CI): each notebook executed once by nbclient in the same
    copy, with the same kernel environment, and saved as the browser run would save it."""

    def __init__(self, notebooks: list[Path], graphs: GraphDumps):
        self.notebooks, self.graphs = notebooks, graphs
        self.executed: dict[str, Path] = {}

    def get(self, name: str) -> Path:
        import nbclient
        import nbformat

        names = [p.name for p in self.notebooks]
        assert name in names, f"{name} is not among {names}"
        for path in self.notebooks[:names.index(name) + 1]:
            if path.name in self.executed:
                continue
            nb = nbformat.read(path, as_version=4)
            client = nbclient.NotebookClient(
                nb, timeout=NOTEBOOK_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                resources={"metadata": {"path": str(path.parent)}})
            client.execute(env=kernel_env(path.parent, self.graphs))
            self.graphs.collect(path.name)
            nbformat.write(nb, path)
            self.executed[path.name] = keep_executed(path)
        return self.executed[name]


@pytest.fixture(scope="session")
def executed_notebooks(request, lab_notebooks, notebook_graphs):
    """name -> the path of that notebook as this session's one execution saved it."""
    if browser_problem() is None or in_ci():
        runs = request.getfixturevalue("notebook_runs")
        return lambda name: runs.get(name).executed
    runs = KernelRuns(workbook_notebooks(lab_notebooks.parent), notebook_graphs)
    return runs.get

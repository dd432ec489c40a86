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

import nbformat
import pytest

from helpers.classroom.graph_log import GraphDumps
from helpers.classroom.notebook_pass import workbook_notebooks
from mnist_mlp.common.backend import neuron_device_nodes
from tests.browser.find_browser import find_chromium, in_ci, profile_parent
from tests.browser.lab_page import NotebookRun, open_page, run_notebook, whole_notebook_text
from tests.browser.lab_server import CHROMIUM_ARGS, LabServer, browser_problem, make_workspace
from tests.paths import REPO_ROOT
from tests.trn1_double import instance_env, journal
from tests.trn1_double.workbook_pass import (
    KEPT_OPEN,
    NotebookOnDouble,
    first_error,
    holds_a_core,
    judged,
    refuse_at_setup,
    run_workbook,
    shut_before,
    started,
)

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
def trn1_instance(lab_notebooks) -> Path | None:
    """The trn1 double's instance (tests/trn1_double) the session's one execution of the
    workbook runs on; None on a host with NeuronCores (this machine's own /dev, read by the
    workbook's one reader of Neuron devices), where it runs on them."""
    return None if neuron_device_nodes(Path("/dev")) else lab_notebooks.parent / "instance"


def lab_kernel_env(lab_notebooks: Path, graphs: GraphDumps, instance: Path | None) -> dict[str, str]:
    """kernel_env() on the instance: what a learner's kernel on a trn1.2xlarge sees."""
    env = kernel_env(lab_notebooks)
    if instance is not None:
        env = instance_env(instance, CHECKPOINT_DIR=env["CHECKPOINT_DIR"])
    env.update(graphs.env(env))
    return env


@pytest.fixture(scope="session")
def lab(browser_ready, lab_notebooks, notebook_graphs, trn1_instance, tmp_path_factory):
    server = LabServer(lab_notebooks, tmp_path_factory.mktemp("lab-state"),
                       env=lab_kernel_env(lab_notebooks, notebook_graphs, trn1_instance)).start()
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
    text = whole_notebook_text(saved)
    kept.write_text(text)
    EXECUTED.mkdir(parents=True, exist_ok=True)
    (EXECUTED / saved.name).write_text(text)
    return kept


class NotebookRuns:
    """Runs each notebook once, in order, on one trn1 double's instance, as one learner on one
    trn1.2xlarge (tests/trn1_double/workbook_pass.py: the kernels the learner leaves open, the
    refusal a core-holding one meets); keeps what was found for the tests to assert, and each
    notebook's record on the double (`on_double`, by two-digit number) for the pass's tests."""

    def __init__(self, server, context, notebooks: list[Path], graphs: GraphDumps,
                 instance: Path | None = None, env: dict[str, str] | None = None):
        self.server, self.context, self.notebooks, self.graphs = server, context, notebooks, graphs
        self.instance, self.env = instance, env or {}
        self.runs: dict[str, NotebookRun] = {}
        self.kept_open: set[str] = set()
        # The next notebook's page, loaded (and its kernel started, idle: no cell runs) while the
        # one before it runs: about 6 s of page load and kernel start per notebook off the clock.
        self.loading: dict[str, NotebookRun] = {}
        self.on_double: dict[str, NotebookOnDouble] = {}
        self.learner_open: dict[str, tuple[str, bool]] = {}  # name -> (shut before NN, holds a core)
        self.pending: dict[str, tuple[NotebookOnDouble, int, object]] = {}  # judged when its kernel ends

    def get(self, name: str, keep_open: bool = False) -> NotebookRun:
        """The run of `name`, running it (and every notebook before it) first if needed.

        keep_open leaves its page and kernel alive for widget clicks; release() ends them."""
        names = [p.name for p in self.notebooks]
        assert name in names, f"{name} is not among {names}"
        if keep_open and name in self.runs and self.runs[name].page.is_closed():
            del self.runs[name]  # released already: run it again for the clicks
        for index, path in enumerate(self.notebooks[:names.index(name) + 1]):
            if path.name not in self.runs:
                first_run = path.name[:2] not in self.on_double
                if first_run:
                    result, seen = self.before(path)
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
                if first_run:
                    self.after(path, run, result, seen)
                if path.name == name and keep_open:
                    self.kept_open.add(path.name)
                else:
                    self.release(path.name)
        run = self.runs[name]
        if name in self.kept_open:
            run.page.bring_to_front()  # its widgets are clicked next: not throttled behind another
        return run

    def before(self, path: Path) -> tuple[NotebookOnDouble, int]:
        """What the learner does before a notebook: the notebooks kept for widget clicks end
        (00's rule: close a notebook before the next), the kernels they leave open whose time is
        up are shut down; a core-holding one still open is met by this notebook's setup(), which
        refuses, naming it, and the learner shuts it down."""
        for kept in list(self.kept_open):
            self.release(kept)
        number = path.name[:2]
        for open_name, (until, _) in list(self.learner_open.items()):
            if until <= number:
                self.end_kernel(open_name)
        result = started(path, nbformat.reads(whole_notebook_text(path), as_version=4),
                         sorted(n[:2] for n in self.learner_open))
        if holders := [n for n, (_, holds) in self.learner_open.items() if holds]:
            refuse_at_setup(result, path, self.env, self.instance)
            for holder in holders:
                self.end_kernel(holder)
        return result, len(journal(self.instance)) if self.instance else 0

    def after(self, path: Path, run: NotebookRun, result: NotebookOnDouble, seen: int) -> None:
        nb = nbformat.read(run.executed, as_version=4)
        result.seconds, result.error = run.seconds, first_error(nb)
        result.kernel_pid = kernel_pid(self.server, path.name)
        until = shut_before(nb, path.name[:2], KEPT_OPEN)
        self.pending[path.name] = (result, seen, nb)
        if until and result.error is None:  # judged now: its kernel goes on beside the next ones
            events = self.judge(path.name)
            self.learner_open[path.name] = (until, holds_a_core(result, events))

    def judge(self, name: str) -> list[dict]:
        result, seen, nb = self.pending.pop(name)
        events = journal(self.instance)[seen:] if self.instance else []
        self.on_double[name[:2]] = judged(result, nb, events)
        return events

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
        """Its page closes; its kernel too (File > Close and Shut Down), unless the learner keeps
        it open (KEPT_OPEN)."""
        run = self.runs[name]
        if not run.page.is_closed():
            run.page.close()  # first: the page would log the kernel's end as a console error
        self.kept_open.discard(name)
        if name not in self.learner_open:
            self.end_kernel(name)

    def end_kernel(self, name: str) -> None:
        """Kernel > Shut Down Kernel; a notebook whose record waited on its kernel's end is judged."""
        shut_down_kernel(self.server, name)
        self.learner_open.pop(name, None)
        if name in self.pending:
            self.judge(name)

    def end_all(self) -> None:
        self.close_loading()
        for name in list(self.kept_open):
            self.release(name)
        for name in list(self.learner_open):
            self.end_kernel(name)


def kernel_pid(server, notebook_name: str) -> int | None:
    """The pid of the kernel of the session that has notebook_name open (its connection file,
    kernel-<id>.json, is on its command line)."""
    with urllib.request.urlopen(server.url("api/sessions"), timeout=10) as response:
        sessions = json.load(response)
    ids = [s["kernel"]["id"] for s in sessions if Path(s.get("path", "")).name == notebook_name]
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if ids and f"kernel-{ids[0]}.json" in cmdline:
            return int(proc.name)
    return None


def between_runs(kept_open) -> str:
    """The label of graphs compiled outside any notebook's Run All."""
    still_open = ", ".join(sorted(kept_open)) or "none"
    return f"outside Run All (widget clicks, cells re-run; kernels open: {still_open})"


@pytest.fixture(scope="session")
def notebook_runs(lab, chromium, lab_notebooks, notebook_graphs, trn1_instance):
    runs = NotebookRuns(lab, chromium, workbook_notebooks(lab_notebooks.parent), notebook_graphs,
                        trn1_instance, lab.env)
    yield runs
    runs.end_all()


class KernelRuns:
    """Where no browser is found (outside CI): the workbook executed once by nbclient in the same
    copy, on the same instance, with the same kernel environment and the learner's same open
    kernels (tests/trn1_double/workbook_pass.py: run_workbook), and saved as the browser run would
    save it."""

    def __init__(self, notebooks: list[Path], graphs: GraphDumps, instance: Path | None,
                 env: dict[str, str]):
        self.notebooks, self.graphs, self.instance, self.env = notebooks, graphs, instance, env
        self.executed: dict[str, Path] = {}
        self.on_double: dict[str, NotebookOnDouble] = {}

    def get(self, name: str) -> Path:
        names = [p.name for p in self.notebooks]
        assert name in names, f"{name} is not among {names}"
        if not self.executed:  # all of them, in order: the graphs are filed by the whole pass
            results = run_workbook(self.notebooks, self.instance, self.env,
                                   timeout=int(NOTEBOOK_TIMEOUT_S), kept_open=KEPT_OPEN, save=True,
                                   ran=lambda path: self.graphs.collect(path.name))
            self.on_double = {r.name[:2]: r for r in results} if self.instance else {}
            self.executed = {path.name: keep_executed(path) for path in self.notebooks}
        return self.executed[name]


def browser_run() -> bool:
    """The session's execution is JupyterLab's (a browser found, or CI, which requires one)."""
    return browser_problem() is None or in_ci()


@pytest.fixture(scope="session")
def kernel_runs(lab_notebooks, notebook_graphs, trn1_instance):
    return KernelRuns(workbook_notebooks(lab_notebooks.parent), notebook_graphs, trn1_instance,
                      lab_kernel_env(lab_notebooks, notebook_graphs, trn1_instance))


@pytest.fixture(scope="session")
def executed_notebooks(request, lab_notebooks, notebook_graphs):
    """name -> the path of that notebook as this session's one execution saved it."""
    if browser_run():
        runs = request.getfixturevalue("notebook_runs")
        return lambda name: runs.get(name).executed
    return request.getfixturevalue("kernel_runs").get


@pytest.fixture(scope="session")
def workbook_on_trn1(request, trn1_instance) -> dict[str, NotebookOnDouble]:
    """Each notebook's record on the trn1 double, by two-digit number, from the session's one
    execution of the workbook (every notebook run, every kernel ended)."""
    if trn1_instance is None:
        pytest.skip("this host has NeuronCores: the session ran the workbook on them, not on the double")
    if browser_run():
        runs = request.getfixturevalue("notebook_runs")
        runs.get(runs.notebooks[-1].name)
        runs.end_all()
    else:
        runs = request.getfixturevalue("kernel_runs")
        runs.get(runs.notebooks[-1].name)
    return runs.on_double

import gc
import os
import sys

import pytest

# Tests that touch torch_xla in-process run it on the CPU stand-in; must be set before it loads.
os.environ.setdefault("PJRT_DEVICE", "CPU")


@pytest.fixture(scope="session")
def mnist_root():
    """The verified MNIST root (`make data` has normally built it already)."""
    from mnist_mlp.common.download import ensure_mnist

    return ensure_mnist(progress=False)


@pytest.fixture
def script_env():
    """Environment for running the scripts as a user would: no PJRT_DEVICE preset, warnings on."""
    from tests.script_runs import script_environment

    return script_environment()


PYTHON = sys.executable


@pytest.fixture
def tree(tmp_path):
    """A compile-cache tree in every layout (tests/cache_trees.py); afterwards, whatever the
    test did, the symlink targets outside the root are all there, unchanged."""
    from tests.cache_trees import build_cache_tree, outside_snapshot

    t = build_cache_tree(tmp_path)
    before = outside_snapshot(t)
    yield t
    assert outside_snapshot(t) == before
    assert (t.root / "escape").is_symlink()


@pytest.fixture
def immutable():
    """Mark paths immutable (chattr +i: even root cannot remove them or write into such a
    directory), undone afterwards; skipped where the filesystem cannot set the flag."""
    import shutil
    import subprocess

    marked = []

    def mark(path):
        if shutil.which("chattr") is None:
            pytest.skip("no chattr here")
        r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"chattr +i not possible here: {r.stderr.strip()}")
        marked.append(path)

    yield mark
    for path in reversed(marked):
        subprocess.run(["chattr", "-i", str(path)], check=True)


# ---- the test session's shape (make test): notebooks in one xdist group, one-line reports

# Tests that drive or read the one execution of the notebooks run on one xdist worker, in
# collection order (`-n 2 --dist loadgroup`): the browser tests first, then the output comparison.
NOTEBOOK_FIXTURES = {"lab", "chromium", "notebook_runs", "executed_notebooks"}
NOTEBOOK_GROUP = "notebooks"


def notebook_order(item) -> int:
    """Within the notebook group: tests that click a notebook's widgets keep its kernel open, so
    they come before the plain runs (marked ends_kernels), which end each kernel (a later widget
    test would otherwise execute that notebook a second time); tests that only read the runs'
    results come last."""
    if item.get_closest_marker("ends_kernels"):
        return 1
    fixtures = set(getattr(item, "fixturenames", ()))
    return 2 if "executed_notebooks" in fixtures and "notebook_runs" not in fixtures else 0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if NOTEBOOK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(NOTEBOOK_GROUP))
            item.add_marker(pytest.mark.e2e)
        item.user_properties.append((FAMILY_PROPERTY, item_family(item)))
    items[:] = sorted(items, key=session_order)  # stable: file order kept within each part


FAMILY_PROPERTY = "time_family"  # each test's family (tests/time_units.py), carried by its reports


def item_family(item) -> str:
    from tests.time_units import family_of

    groups = {str((m.args or [m.kwargs.get("name")])[0]) for m in item.iter_markers("xdist_group")}
    return family_of(item.nodeid.split("::")[0], {m.name for m in item.iter_markers()}, groups,
                     set(getattr(item, "fixturenames", ())))


def session_order(item) -> tuple[int, int]:
    """make test hands tests to its two workers in this order: the notebook group first (one
    worker takes it at once: it is the longest chain), then the other end-to-end tests, the
    quick unit tests last, so that whichever worker is free takes them and both end together."""
    if item.get_closest_marker("xdist_group"):
        return 0, notebook_order(item)
    return (1 if item.get_closest_marker("e2e") else 2), 0


def pytest_addoption(parser):
    parser.addoption("--budget-units", type=float, default=None,
                     help="print the session's wall time in units of one fresh `python -c "
                          "\"import torch_xla\"` and this budget beside it (tests/time_units.py)")


def pytest_sessionstart(session):
    import time

    session.config._workbook_started = time.monotonic()


def pytest_configure(config):
    # A SIGTERM (timeout, a cancelled CI job) ends the session like Ctrl+C: fixture teardown still
    # stops JupyterLab, its kernels and Chromium instead of leaving them running.
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    # Under mutmut (make mutants) each mutant's tests run in a process forked from one that has
    # imported torch: a full garbage collection there walks, and so copies, that whole inherited
    # heap (about a second per mutant). Frozen, collections walk only what the tests made.
    if os.environ.get("MUTANT_UNDER_TEST"):
        gc.freeze()


def pytest_report_header(config):
    from tests.browser.find_browser import find_chromium, in_ci
    from tests.browser.lab_server import browser_problem
    problem = browser_problem()
    if problem is None:
        browser = f"browser test: {find_chromium()}"
    elif in_ci():
        browser = f"browser test: FAILS under CI=true: {problem}"
    else:
        browser = f"browser test: SKIPPED, notebooks executed by nbclient instead: {problem}"
    return [browser, "notebook outputs: executed on the trn1 double (on NeuronCores where this host "
                     "has them), compared in the Neuron mode"]


_notebook_outcomes: dict[str, list[str]] = {"notebook_output": []}
# family -> {"intervals": [(start, stop) of each set-up, call and tear-down], "tests": count}
_family_times: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    for key, value in report.user_properties:
        if report.when == "call" and key in _notebook_outcomes:
            _notebook_outcomes[key].append(value)
        if key == FAMILY_PROPERTY and hasattr(report, "stop"):  # not a crashed worker's stand-in report
            times = _family_times.setdefault(value, {"intervals": [], "tests": 0})
            times["intervals"].append((report.start, report.stop))
            times["tests"] += report.when == "setup"


def pytest_terminal_summary(terminalreporter):
    from collections import Counter

    titles = {"notebook_output": "notebook outputs (the Neuron mode)"}
    for key, outcomes in _notebook_outcomes.items():
        if not outcomes:
            continue
        counts = Counter(outcomes)
        compared = counts.pop("compared", 0)
        terminalreporter.write_sep("-", titles[key])
        terminalreporter.write_line(f"{compared} code cells compared with the committed outputs, "
                                    f"{sum(counts.values())} not compared:")
        for why, n in sorted(counts.items()):
            terminalreporter.write_line(f"  {n:4d}  {why}")
    if _notebook_outcomes["notebook_output"]:
        slowest_notebook_cells(terminalreporter)
    time_in_units(terminalreporter)


def time_in_units(terminalreporter) -> None:
    """make test and make test-quick (--budget-units): the session's wall time, in minutes and in
    units of one fresh torch_xla import measured now, beside the budget; then each family's
    time (tests/time_units.py's FAMILIES). In the controller only (an xdist worker has
    workerinput); the wall time is read before the imports are timed."""
    import time

    from tests.time_units import budget_line, family_lines, import_seconds

    config = terminalreporter.config
    budget = config.getoption("--budget-units")
    if budget is None or hasattr(config, "workerinput"):
        return
    wall = time.monotonic() - config._workbook_started
    unit_s = import_seconds()
    terminalreporter.write_sep("-", "time in units (tests/time_units.py)")
    terminalreporter.write_line(budget_line(wall, unit_s, budget))
    terminalreporter.write_sep("-", "time by family: wall (one of its tests running), "
                                    "cumulative (its tests' durations summed)")
    for line in family_lines(_family_times, unit_s):
        terminalreporter.write_line(line)


def slowest_notebook_cells(terminalreporter, count: int = 12) -> None:
    """The run's slowest notebook cells, from the timings the executed notebooks keep."""
    from tests.browser.conftest import EXECUTED
    from tests.notebook_outputs import cell_seconds, read_notebook

    timed = []
    for path in sorted(EXECUTED.glob("[0-9][0-9]_*.ipynb")):
        timed += [(s, f"{path.name} cell {i}: {first}") for i, s, first in cell_seconds(read_notebook(path))]
    if timed:
        terminalreporter.write_sep("-", f"slowest notebook cells (of {len(timed)}, "
                                        f"{sum(s for s, _ in timed):.0f} s in all)")
        for seconds, what in sorted(timed, reverse=True)[:count]:
            terminalreporter.write_line(f"{seconds:7.1f} s  {what}")


# --------------------------------------------------------------------------- stage-script runs
# Each distinct stage-script command line runs once per session and is shared
# by the tests that read it: tests/script_runs.py names them.


@pytest.fixture(scope="session")
def script_runs(tmp_path_factory, mnist_root):
    """script_runs["xla long"] -> the ScriptRun of that command line (run on first use, once
    for both xdist workers)."""
    from tests.script_runs import ScriptRuns

    return ScriptRuns(tmp_path_factory)

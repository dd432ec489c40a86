"""The suite's budget in units that mean the same on a fast machine and a slow one.

One unit is the wall time of one fresh `python -c "import torch_xla"` with the venv's python on
the same machine, measured by the suite itself at its end (one warm-up run, then the median of
three): most of the suite's time is such processes starting (docs/testing.md, "Where make test's
time goes"), so its time over that figure stays nearly the same from one machine to another
while its minutes do not. `make test` and `make test-quick` pass `--budget-units` (150 and 25);
the session then prints its wall time, the same in units, and the budget beside it. Without the
option (a single test run by hand) nothing is measured: the probe itself takes four imports.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

IMPORT = "import torch_xla"
WARM_UPS, MEASURED = 1, 3


def import_seconds(python: str = sys.executable, warm_ups: int = WARM_UPS,
                   measured: int = MEASURED) -> float:
    """The median wall time of `measured` fresh `python -c "import torch_xla"` processes, after
    `warm_ups` whose time is dropped (they fill the page cache). A failing import raises."""
    times = []
    for run in range(warm_ups + measured):
        start = time.perf_counter()
        done = subprocess.run([python, "-c", IMPORT], capture_output=True, text=True, timeout=300)
        elapsed = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(f"{python} -c {IMPORT!r} failed: {done.stderr.strip()[-500:]}")
        if run >= warm_ups:
            times.append(elapsed)
    return statistics.median(times)


def budget_line(wall_s: float, unit_s: float, budget_units: float) -> str:
    """'wall 642 s (10 min 42 s) = 137 units of one `python -c "import torch_xla"` (4.70 s
    here); budget 150 units: within'."""
    units = wall_s / unit_s
    minutes, seconds = divmod(round(wall_s), 60)
    verdict = "within" if units <= budget_units else f"OVER by {units - budget_units:.0f} units"
    return (f"wall {wall_s:.0f} s ({minutes} min {seconds} s) = {units:.0f} units of one "
            f"`python -c \"{IMPORT}\"` ({unit_s:.2f} s here, median of {MEASURED} after "
            f"{WARM_UPS} warm-up); budget {budget_units:g} units: {verdict}")


# ---- where the time goes, by family of tests (printed after the units line)

FAMILIES = ("unit", "end-to-end", "browser", "the double", "Slurm", "notebooks")
# A test that takes one of these drives JupyterLab or Chromium: the JupyterLab run of the
# notebooks is the set-up of the first one that asks for a notebook, so its time is theirs.
BROWSER_FIXTURES = frozenset({"lab", "chromium", "notebook_runs"})
BROWSER_FOLDER = "tests/browser/"
NOTEBOOK_FIXTURE = "executed_notebooks"  # reads the session's one execution of the notebooks
DOUBLE_FILES = "test_trn1_double"  # tests/test_trn1_double*.py: the trn1 double's own tests
SLURM_GROUP = "slurm"  # tests/test_slurm.py's xdist group: its local cluster


def family_of(path: str, markers: set[str], groups: set[str], fixtures: set[str]) -> str:
    """The family a test's time counts under, the first that applies: browser (it drives
    JupyterLab or Chromium), notebooks (it reads the notebooks' execution without a browser),
    browser again (any other end-to-end test in tests/browser/: its own JupyterLab), the double (tests/test_trn1_double*.py), Slurm (the cluster's xdist group), end-to-end
    (marked e2e), else unit. `path` is the test file's path relative to the repository."""
    if fixtures & BROWSER_FIXTURES:
        return "browser"
    if NOTEBOOK_FIXTURE in fixtures:
        return "notebooks"
    if path.startswith(BROWSER_FOLDER) and "e2e" in markers:
        return "browser"
    if path.rsplit("/", 1)[-1].startswith(DOUBLE_FILES):
        return "the double"
    if SLURM_GROUP in groups:
        return "Slurm"
    return "end-to-end" if "e2e" in markers else "unit"


def wall_seconds(intervals: list[tuple[float, float]]) -> float:
    """The time during which at least one of the (start, stop) intervals ran (two xdist
    workers' tests overlap: each second counts once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def family_lines(times: dict[str, dict], unit_s: float) -> list[str]:
    """One line per family, in FAMILIES' order: its wall time (some test of it running) and its
    cumulative time (the sum of its tests' set-up, call and tear-down durations), in seconds and
    units, and its count of tests. `times[family]` holds "intervals" and "tests"."""
    lines = []
    for name in FAMILIES:
        got = times.get(name, {"intervals": [], "tests": 0})
        wall = wall_seconds(got["intervals"])
        cumulative = sum(stop - start for start, stop in got["intervals"])
        lines.append(f"{name:<11} wall {wall:6.0f} s = {wall / unit_s:4.0f} units | cumulative "
                     f"{cumulative:6.0f} s = {cumulative / unit_s:4.0f} units | {got['tests']} tests")
    return lines

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

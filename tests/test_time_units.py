"""tests/time_units.py: the suite's wall time in units of one fresh torch_xla import."""
import pytest

from tests.time_units import budget_line, import_seconds


def test_the_budget_line_says_minutes_units_and_the_verdict():
    assert budget_line(642, 4.7, 150) == (
        'wall 642 s (10 min 42 s) = 137 units of one `python -c "import torch_xla"` (4.70 s here, '
        "median of 3 after 1 warm-up); budget 150 units: within")
    assert budget_line(130, 4.0, 25).endswith("budget 25 units: OVER by 8 units")


def test_the_import_is_timed_in_fresh_processes_and_a_failing_one_refused(tmp_path):
    runs = tmp_path / "runs"
    fake = tmp_path / "python"  # records each start, takes its arguments as python would
    fake.write_text(f'#!/bin/sh\n[ "$1 $2" = "-c import torch_xla" ] && echo x >> {runs}\n')
    fake.chmod(0o755)
    assert 0 <= import_seconds(str(fake)) < 5
    assert runs.read_text().count("x") == 4  # one warm-up, three measured
    with pytest.raises(RuntimeError, match="failed"):
        import_seconds("/bin/false")

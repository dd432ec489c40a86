"""tests/time_units.py: the suite's wall time in units of one fresh torch_xla import."""
import pytest

from tests.time_units import FAMILIES, budget_line, family_lines, family_of, import_seconds, wall_seconds


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


@pytest.mark.parametrize("path, markers, groups, fixtures, family", [
    ("tests/test_model.py", set(), set(), {"tmp_path"}, "unit"),
    ("tests/test_scripts.py", {"e2e"}, set(), {"script_runs"}, "end-to-end"),
    # the JupyterLab run is the set-up of a browser test, whichever other fixture it takes too
    ("tests/browser/test_lab_tensorboard.py", {"e2e", "xdist_group"}, {"notebooks"},
     {"notebook_runs", "lab", "executed_notebooks"}, "browser"),
    ("tests/browser/test_book.py", {"e2e"}, {"notebooks"}, {"chromium"}, "browser"),
    ("tests/browser/test_lab_server.py", {"e2e"}, set(), {"tmp_path"}, "browser"),
    ("tests/browser/test_lab_server.py", set(), set(), set(), "unit"),
    ("tests/browser/test_notebook_outputs.py", {"e2e"}, {"notebooks"}, {"executed_notebooks"},
     "notebooks"),
    ("tests/test_trn1_double_faults.py", {"e2e"}, set(), {"tmp_path"}, "the double"),
    ("tests/test_trn1_double.py", set(), set(), {"tmp_path"}, "the double"),
    ("tests/test_slurm.py", {"e2e"}, {"slurm"}, {"cluster"}, "Slurm"),
    ("tests/test_slurm.py", set(), {"slurm"}, set(), "Slurm"),
    ("tests/test_two_nodes.py", {"e2e"}, set(), {"script_runs"}, "end-to-end"),
])
def test_each_test_counts_under_one_family(path, markers, groups, fixtures, family):
    assert family_of(path, markers, groups, fixtures) == family


def test_the_suites_own_tests_fall_into_the_families_as_named(request):
    """The classification as conftest.py applies it to collected items: this test is a unit test."""
    assert dict(request.node.user_properties)["time_family"] == "unit"


def test_a_familys_wall_time_counts_overlapping_seconds_once():
    assert wall_seconds([]) == 0
    assert wall_seconds([(0, 10), (5, 12), (20, 21), (20.5, 20.7)]) == 13
    assert wall_seconds([(3, 4), (0, 1)]) == 2


def test_every_family_gets_a_line_with_wall_cumulative_and_count():
    lines = family_lines({"browser": {"intervals": [(0, 100), (50, 150)], "tests": 2}}, 5.0)
    assert [line.split(" wall ")[0].strip() for line in lines] == list(FAMILIES)
    browser = lines[FAMILIES.index("browser")]
    assert browser == ("browser     wall    150 s =   30 units | cumulative    200 s =   40 units | "
                       "2 tests")
    assert lines[0].endswith("| 0 tests")

"""The checklist's "Check again": busy while the checks run, then when it ran and how many pass."""
import re
from datetime import datetime

import pytest

from helpers.setup.checklist import FAIL_COLOUR, OK_COLOUR, Checklist, CheckResult, summary_html

SUMMARY = re.compile(r"checked at (\d\d:\d\d:\d\d): (\d+) of (\d+) OK")


def test_summary_names_the_time_and_the_counts():
    results = [CheckResult("a", True, "", ""), CheckResult("b", False, "", "fix b")]
    at = datetime(2026, 6, 1, 14, 3, 7)
    assert "checked at 14:03:07: 1 of 2 OK, 1 to fix" in summary_html(results, at)
    assert FAIL_COLOUR in summary_html(results, at)
    assert OK_COLOUR in summary_html(results[:1], at)
    assert "to fix" not in summary_html(results[:1], at)


def test_a_fix_that_restarts_the_kernel_says_to_run_the_notebook_again():
    at = datetime(2026, 6, 1, 14, 3, 7)
    restart = CheckResult("venv", False, "", "pip install -r requirements.txt, then restart the kernel")
    other = CheckResult("cores", False, "", "shut down the other kernel")
    assert "Run All Cells" in summary_html([restart, other], at)
    assert "Run All Cells" not in summary_html([other, restart._replace(ok=True)], at)


def test_check_again_shows_busy_then_when_it_ran(tmp_path):
    fixed = tmp_path / "fixed"
    seen_while_running = []

    def checks():
        if checklist is not None:  # the first run happens inside the constructor
            seen_while_running.append((checklist.button.disabled, checklist.button.description,
                                       checklist.summary.value))
        return [CheckResult("Always fine", True, "all good", ""),
                CheckResult("Needs a file", fixed.exists(), "", f"touch {fixed}")]

    checklist = None
    checklist = Checklist(checks)
    assert SUMMARY.search(checklist.summary.value).groups()[1:] == ("1", "2")
    assert "1 to fix" in checklist.summary.value and not checklist.all_ok

    fixed.touch()
    before = checklist.checked_at
    checklist.button.click()
    disabled, description, summary = seen_while_running[-1]
    assert disabled and description == "Checking…" and "checking" in summary
    assert not checklist.button.disabled and checklist.button.description == "Check again"
    assert checklist.checked_at >= before
    time, ok, total = SUMMARY.search(checklist.summary.value).groups()
    assert (ok, total) == ("2", "2") and time == f"{checklist.checked_at:%H:%M:%S}"
    assert checklist.all_ok


def test_a_check_that_raises_leaves_the_button_usable():
    calls = []

    def checks():
        calls.append(1)
        if len(calls) > 1:
            raise OSError("disk went away")
        return [CheckResult("a", True, "", "")]

    checklist = Checklist(checks)
    with pytest.raises(OSError):
        checklist.refresh()  # what the button calls (its dispatcher logs the error)
    assert not checklist.button.disabled and checklist.button.description == "Check again"
    assert "the checks stopped at" in checklist.summary.value
    assert "disk went away" in checklist.summary.value

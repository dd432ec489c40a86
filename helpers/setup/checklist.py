"""The setup checklist of notebook 00: one green or red row per check, with the fix when red.

    Checklist(lambda: run_checks(backend))

Displayed in Jupyter it is an ipywidgets box with a "Check again" button (shut down the other
kernel, click, see the row turn green). It re-runs the checks in the same kernel, so a fix that
restarts the kernel or JupyterLab is seen only by running the notebook again. Widgets do not
render on GitHub or in nbviewer without a kernel, so the same display also carries an HTML table
and a plain-text version of the rows.
"""
from __future__ import annotations

import html
from datetime import datetime
from typing import Callable, Iterable, NamedTuple

import ipywidgets as widgets


class CheckResult(NamedTuple):
    item: str  # what was checked, e.g. "NeuronCores free"
    ok: bool
    message: str  # what the check found
    fix: str  # what to do when not ok ("" when ok)


OK_COLOUR = "#1a7f37"
FAIL_COLOUR = "#cf222e"
OK_MARK, FAIL_MARK = "\u2705", "\u274c"  # the status is readable without colour too


def _status(result: CheckResult) -> tuple[str, str]:
    """(colour, the status as marked and coloured HTML) for a row."""
    mark, colour, word = (OK_MARK, OK_COLOUR, "OK") if result.ok else (FAIL_MARK, FAIL_COLOUR, "FIX")
    return colour, f'{mark} <b style="color:{colour}">{word}</b>'


def row_html(result: CheckResult) -> str:
    colour, status = _status(result)
    fix = (f'<div style="margin-left:1.8em">Fix: {html.escape(result.fix)}</div>'
           if not result.ok and result.fix else "")
    return (f'<div style="border-left:6px solid {colour};padding:2px 8px;margin:2px 0">'
            f'{status} <b>{html.escape(result.item)}</b>: {html.escape(result.message)}{fix}</div>')


def checklist_html(results: Iterable[CheckResult]) -> str:
    """The rows as an HTML table: what GitHub and nbviewer show."""
    rows = [f'<tr><td>{_status(r)[1]}</td><td><b>{html.escape(r.item)}</b></td>'
            f'<td>{html.escape(r.message)}</td><td>{html.escape(r.fix)}</td></tr>' for r in results]
    return ('<table><thead><tr><th>Status</th><th>Check</th><th>Found</th><th>Fix</th></tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table>')


def checklist_text(results: Iterable[CheckResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"[{'OK ' if r.ok else 'FIX'}] {r.item}: {r.message}")
        if not r.ok and r.fix:
            lines.append(f"      fix: {r.fix}")
    return "\n".join(lines)


RERUN_NOTE = ("a fix that restarts the kernel or JupyterLab is seen only by running this notebook "
              "again (Run > Run All Cells): Check again runs in the same kernel")


def needs_restart(result: CheckResult) -> bool:
    """A red row whose fix restarts the kernel or JupyterLab: Check again cannot see it."""
    return not result.ok and "restart" in result.fix.lower()


def summary_html(results: list[CheckResult], checked_at: datetime) -> str:
    """'checked at 14:03:07: 9 of 9 OK', in green, or '…: 8 of 9 OK, 1 to fix' in red; when a
    fix restarts the kernel, that this button cannot see it (RERUN_NOTE)."""
    ok = sum(r.ok for r in results)
    failing = len(results) - ok
    colour = OK_COLOUR if not failing else FAIL_COLOUR
    to_fix = f", {failing} to fix" if failing else ""
    rerun = f"; {RERUN_NOTE}" if any(needs_restart(r) for r in results) else ""
    return (f'<span style="color:{colour}">checked at {checked_at:%H:%M:%S}: '
            f'{ok} of {len(results)} OK{to_fix}{html.escape(rerun)}</span>')


class Checklist:
    """The checks run now, shown as widget rows; `refresh()` (the button) runs them again."""

    def __init__(self, run_checks: Callable[[], Iterable[CheckResult]]):
        self._run_checks = run_checks
        self.rows = widgets.VBox()
        self.button = widgets.Button(description="Check again", icon="refresh",
                                     tooltip="Run every check again, e.g. after a fix")
        self.button.on_click(lambda _button: self.refresh())
        self.summary = widgets.HTML()
        self.widget = widgets.VBox([self.rows, widgets.HBox([self.button, self.summary])])
        self.results: list[CheckResult] = []
        self.checked_at: datetime | None = None
        self.refresh()

    @property
    def all_ok(self) -> bool:
        return all(r.ok for r in self.results)

    def refresh(self) -> None:
        # The summary names the time the checks finished: a click that changes no row still shows it ran.
        self.button.disabled, self.button.description = True, "Checking…"
        self.summary.value = '<span style="color:#57606a">checking…</span>'
        try:
            self.results = list(self._run_checks())
        except Exception as err:  # say so beside the button: a click's traceback goes to no cell
            self.summary.value = (f'<span style="color:{FAIL_COLOUR}">the checks stopped at '
                                  f'{datetime.now():%H:%M:%S}: {html.escape(repr(err))}</span>')
            raise
        finally:
            self.button.disabled, self.button.description = False, "Check again"
        rows = []
        for result in self.results:
            row = widgets.HTML(row_html(result))
            row.add_class("checklist-ok" if result.ok else "checklist-fail")
            rows.append(row)
        self.rows.children = rows
        self.checked_at = datetime.now()
        self.summary.value = summary_html(self.results, self.checked_at)

    def _repr_mimebundle_(self, **kwargs):
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = checklist_html(self.results)
        bundle["text/plain"] = checklist_text(self.results)
        return bundle

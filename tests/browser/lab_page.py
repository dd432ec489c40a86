"""Driving one notebook in JupyterLab through Playwright, as a learner would, and reading back
what the page shows: error outputs, widgets that failed or never loaded, console errors."""
from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

WIDGET_ERROR = "Error displaying widget"
WIDGET_LOADING = "Loading widget..."
TRACEBACK = "Traceback (most recent call last)"
RUNNING_PROMPT = re.compile(r"\[\*\]")
DONE_PROMPT = re.compile(r"^\[\d+\]:$")


@dataclass
class NotebookRun:
    """One notebook opened and run in the page, and everything the page said meanwhile."""
    name: str
    page: object
    console_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    executed: Path | None = None  # a copy of the notebook as this run saved it


def watch_console(page, sink: list[str]) -> None:
    """Collect console errors and uncaught page exceptions into sink."""
    page.on("console", lambda msg: sink.append(f"console.{msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("pageerror", lambda err: sink.append(f"uncaught exception: {err}"))


def kernel_state(server, notebook_name: str) -> str | None:
    """The execution state of the kernel of the session that has notebook_name open."""
    with urllib.request.urlopen(server.url("api/sessions"), timeout=10) as response:
        sessions = json.load(response)
    for session in sessions:
        if Path(session.get("path", "")).name == notebook_name and session.get("kernel"):
            return session["kernel"].get("execution_state")
    return None


def wait_for_kernel_idle(server, notebook_name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = kernel_state(server, notebook_name)
        if state == "idle":
            return
        time.sleep(0.5)
    raise TimeoutError(f"{notebook_name}: the kernel is not idle after {timeout:.0f} s "
                       f"(state {state!r})")


def open_page(page, server, notebook_path: Path) -> NotebookRun:
    """Start loading the notebook in page, its console watched from the first moment. Returns
    as soon as the page has loaded: JupyterLab goes on rendering the notebook and starting its
    kernel in the browser meanwhile (run_notebook waits for both)."""
    run = NotebookRun(notebook_path.name, page)
    watch_console(page, run.console_errors)
    # A workspace of its own, reset: no tab of an earlier notebook is restored beside this one.
    workspace = re.sub(r"[^A-Za-z0-9_-]", "-", notebook_path.stem)
    page.goto(server.url(f"lab/workspaces/{workspace}/tree/{notebook_path.name}") + "&reset")
    return run


def wait_until_open(page, server, notebook_name: str, timeout: float = 120.0) -> None:
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout * 1000)
    wait_for_kernel_idle(server, notebook_name, timeout)


def click_menu(page, menu: str, item: str, guard_s: float = 120.0) -> None:
    """Menu bar `menu` > `item`, by their visible labels. A click on the menu bar that lands while
    JupyterLab is busy (a notebook opening, a kernel starting) may leave the menu shut: it is
    opened again until the item shows, with a guard deadline only."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # An item's accessible name may end with its shortcut ("Save Notebook Ctrl+S").
    entry = page.get_by_role("menuitem", name=re.compile(rf"^{re.escape(item)}\b")).first
    deadline = time.monotonic() + guard_s
    while True:
        page.get_by_role("menuitem", name=menu, exact=True).click()
        try:
            entry.wait_for(state="visible", timeout=5_000)
            break
        except PlaywrightTimeout:
            assert time.monotonic() < deadline, f"the menu {menu} > {item} never showed in {guard_s:.0f} s"
            page.keyboard.press("Escape")  # shut whatever opened, then open the menu again
    entry.click()


def prompts(page) -> list[str]:
    return page.eval_on_selector_all(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt",
        "nodes => nodes.map(n => n.textContent.trim())")


def wait_until_run_done(page, server, notebook_name: str, timeout: float) -> None:
    """Until no cell is queued or running and the kernel is idle, twice in a row."""
    deadline = time.monotonic() + timeout
    settled = 0
    while time.monotonic() < deadline:
        busy = any(RUNNING_PROMPT.search(p) for p in prompts(page))
        settled = settled + 1 if not busy and kernel_state(server, notebook_name) == "idle" else 0
        if settled >= 2:
            return
        time.sleep(0.5)
    raise TimeoutError(f"{notebook_name}: still running after {timeout:.0f} s; prompts: {prompts(page)}")


def wait_for_widgets(page, timeout: float = 30.0) -> None:
    """Give widget views that are still loading a moment to render."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and WIDGET_LOADING in page_text(page):
        time.sleep(0.5)


def page_text(page) -> str:
    return page.eval_on_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook",
                                 "node => node.innerText")


def output_problems(page) -> list[str]:
    """What the rendered outputs show that a learner should never see."""
    found = []
    outputs = page.eval_on_selector_all(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output",
        "nodes => nodes.map(n => n.innerText)")
    for text in outputs:
        for marker in (TRACEBACK, WIDGET_ERROR, WIDGET_LOADING):
            if marker in text:
                found.append(f"an output shows {marker!r}: {text.strip()[:400]}")
                break
    not_run = [p for p in prompts(page) if not DONE_PROMPT.match(p)]
    if not_run:
        found.append(f"{len(not_run)} code cell(s) did not run (prompts {prompts(page)}): "
                     f"Run All stops at the first error")
    return found


def whole_notebook_text(path: Path, guard_s: float = 60.0) -> str:
    """The notebook file's text once it holds a whole notebook. The Jupyter server saves in place
    (jupyter_server's atomic_writing opens the file for writing, then serializes and validates the
    notebook into it), so a read during any save, ours or an autosave, can meet an empty or partial
    file: it is read again until it parses, within a guard."""
    deadline = time.monotonic() + guard_s
    while True:
        text = path.read_text()
        try:
            json.loads(text)
            return text
        except json.JSONDecodeError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{path.name} held no whole notebook for {guard_s:.0f} s "
                                     f"({len(text)} characters)") from None
            time.sleep(0.1)


def saved_error_outputs(path: Path) -> list[str]:
    """Error outputs in the notebook file as JupyterLab saved it (the copy the page ran)."""
    nb = json.loads(whole_notebook_text(path))
    found = []
    for index, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"code cell {index} raised {out.get('ename')}: {out.get('evalue')}")
    return found


def save_notebook(page, server, notebook_name: str) -> None:
    path = server.root_dir / notebook_name
    asked = time.time_ns() - 5_000_000  # a file system's clock may lag by a tick
    click_menu(page, "File", "Save Notebook")
    # Saved when the tab has lost its "dirty" mark and the file is written since (the mark may not
    # have shown yet when first looked at) and whole.
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden)", timeout=10_000)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        dirty = page.eval_on_selector_all(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty",
                                          "nodes => nodes.length")
        if not dirty and path.stat().st_mtime_ns >= asked:
            whole_notebook_text(path)
            return
        time.sleep(0.5)
    raise TimeoutError(f"{notebook_name}: JupyterLab did not save within 30 s")


def run_notebook(run: NotebookRun, server, notebook_path: Path, timeout: float, *,
                 meanwhile: Callable[[], object] | None = None) -> NotebookRun:
    """The notebook open_page started loading: Run > Run All Cells, wait, save; collect every
    problem the page or file shows. meanwhile() is called once Run All is under way (the next
    notebook's page loads while this one runs)."""
    saved_before = notebook_path.stat().st_mtime_ns
    wait_until_open(run.page, server, notebook_path.name)
    page = run.page
    started = time.monotonic()
    click_menu(page, "Run", "Run All Cells")
    if meanwhile is not None:
        meanwhile()
        # In front again: Chromium throttles the timers of a page behind another, and JupyterLab
        # then renders (and answers the test) many times slower.
        page.bring_to_front()
    wait_until_run_done(page, server, notebook_path.name, timeout)
    run.seconds = time.monotonic() - started
    wait_for_widgets(page)
    save_notebook(page, server, notebook_path.name)
    run.problems = output_problems(page)
    if notebook_path.stat().st_mtime_ns == saved_before:
        run.problems.append("JupyterLab did not save the run, so its file could not be checked")
    else:
        run.problems += saved_error_outputs(notebook_path)
    return run

"""Clicking through the compile-cache widgets in the page, as a learner would, and reading back
what they show. Widgets are found by the CSS classes helpers/cache/widgets.py gives them."""
from __future__ import annotations

import re
import time

from tests.browser.lab_page import DONE_PROMPT, kernel_state

TIMEOUT_MS = 30_000


def code_cell(page, *needles: str):
    """The (first) code cell whose source contains every needle."""
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell")
    for needle in needles:
        cells = cells.filter(has=page.locator(".jp-InputArea", has_text=needle))
    return cells.first


def rerun_cell(page, server, notebook_name: str, cell, timeout: float = 120.0) -> None:
    """Select the cell, Ctrl+Enter (run it in place), wait for a new prompt and an idle kernel."""
    prompt = cell.locator(".jp-InputPrompt").first
    before = prompt.inner_text().strip()
    prompt.click()
    page.keyboard.press("Escape")  # command mode: the shortcut runs the selected cell
    page.keyboard.press("Control+Enter")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = prompt.inner_text().strip()
        if now != before and DONE_PROMPT.match(now) and kernel_state(server, notebook_name) == "idle":
            return
        time.sleep(0.5)
    raise TimeoutError(f"{notebook_name}: the cell did not run again within {timeout:.0f} s")


def select_options(select) -> list[str]:
    return select.evaluate("s => [...s.options].map(o => o.textContent)")


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"the page never showed {what} within {timeout:.0f} s")


def click_through_cache_browser(cell, state: str = "failed") -> dict:
    """Filter to one state, plan its removal, confirm; what the page showed at each step."""
    browser = cell.locator(".cc-browser").first
    browser.wait_for(timeout=TIMEOUT_MS)
    seen = {}
    entries = browser.locator(".cc-entries select")
    seen["entries_before"] = select_options(entries)
    browser.locator(".widget-select-multiple select").select_option(label=[state])
    seen["filtered"] = wait_for(
        lambda: (lambda rows: rows if rows and all(r.startswith(state) for r in rows) else None)(
            select_options(entries)), f"only {state} entries after filtering")
    browser.locator("button.cc-plan-failed").click()
    confirm = browser.locator("button.cc-confirm")
    wait_for(lambda: confirm.is_enabled(), "an enabled 'Confirm removal' after planning")
    seen["plan"] = browser.inner_text()
    confirm.click()
    seen["after_confirm"] = wait_for(
        lambda: (lambda text: text if re.search(r"Removed \d+ item", text) else None)(
            browser.inner_text()), "the removal's result")
    seen["entries_after"] = select_options(entries)
    seen["confirm_enabled_after"] = confirm.is_enabled()
    return seen


def click_through_flags_editor(cell) -> dict:
    """Tick the first unticked flag box, Apply; the flag text and the message afterwards."""
    editor = cell.locator(".cc-flags-editor").first
    editor.wait_for(timeout=TIMEOUT_MS)
    boxes = editor.locator(".widget-checkbox")
    for index in range(boxes.count()):
        box = boxes.nth(index)
        if not box.locator("input[type=checkbox]").is_checked():
            break
    else:
        raise AssertionError("every flag box in the FlagsEditor is ticked already")
    flag = box.inner_text().strip()
    box.locator("input[type=checkbox]").check()
    text_box = editor.locator(".cc-flags-text input")
    wait_for(lambda: flag in text_box.input_value(), f"{flag} in the NEURON_CC_FLAGS box")
    editor.locator("button.cc-flags-apply").click()
    message = wait_for(lambda: (lambda t: t if "NEURON_CC_FLAGS=" in t else None)(
        editor.inner_text()), "the Apply message")
    return {"flag": flag, "text": text_box.input_value(), "message": message}

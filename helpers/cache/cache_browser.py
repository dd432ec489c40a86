"""CacheBrowser: the compile cache as a widget (notebook 03): a summary, a filterable table, an
entry's details, and cleanup that shows its plan before anything is removed (only
`confirm_button` removes). Every control is an attribute with a stable description and CSS
class (cc-…), so tests and readers can drive it: set `.value`, call `.click()`."""
from __future__ import annotations

import html
import re

import ipywidgets as W

from helpers.cache import plans, removal
from helpers.cache.location import CompileCacheError, installed_compiler_version, same_compiler_version, version_order
from helpers.cache.render import render_entry
from helpers.cache.scan import LOCK_STALE_AFTER_S, STATES, CacheScan, scan_cache
from helpers.cache.units import human_bytes, parse_size
from helpers.cache.widget_parts import (
    ALL,
    ERROR,
    FULL,
    LABEL,
    NOTE,
    STYLE,
    button,
    coloured,
    pre_html,
    row_label,
    row_layout,
    with_text,
)


class CacheBrowser:
    """Browse one cache root; `root=None` uses the cache Neuron would use (locate_cache())."""

    def __init__(self, root=None, min_lock_age_s: float = LOCK_STALE_AFTER_S):
        self.root = root
        self.min_lock_age_s = plans.check_amount(min_lock_age_s, "min_lock_age_s")
        self.scan: CacheScan | None = None
        self.pending: list[plans.Plan] = []
        self.removed_note: str | None = None

        self.header = W.HTML(layout=W.Layout(overflow="auto", width=FULL))
        self.state_filter = W.SelectMultiple(options=STATES, value=STATES, rows=len(STATES),
                                             description="State", style=LABEL,
                                             tooltip="show entries in these states")
        self.version_filter = W.Dropdown(options=[ALL], value=ALL, description="Version",
                                         style=LABEL, layout=W.Layout(width="auto"),
                                         tooltip="show one compiler version's entries")
        self.table = W.Select(options=[], rows=12, layout=W.Layout(width=FULL))
        self.table.add_class("cc-mono")
        self.table.add_class("cc-entries")
        self.detail = W.HTML(layout=W.Layout(width=FULL))
        self.refresh_button = button("Refresh", "scan the cache again", "cc-refresh",
                                      icon="refresh")

        self.failed_button = button("Remove failed entries…", "plan: remove every failed "
                                     "entry (nothing is removed before Confirm)", "cc-plan-failed")
        self.locks_button = button("Clear stale locks…", "plan: remove lock files older than "
                                    f"{self.min_lock_age_s / 60:g} min while no compiler runs",
                                    "cc-plan-locks")
        self.keep_version = W.Dropdown(options=[], description="Keep compiler version",
                                       style=LABEL, layout=W.Layout(width="auto"),
                                       tooltip="the version whose entries stay")
        self.versions_button = button("Remove other versions…", "plan: remove entries of "
                                       "every other compiler version", "cc-plan-versions")
        self.max_size = W.Text(placeholder="e.g. 20G", description="Max size on disk",
                               style=LABEL, layout=W.Layout(width="19em"),
                               tooltip="size budget: least recently used entries go until "
                                       "the cache fits (K/M/G/T = powers of 1024)")
        self.older_than_days = W.BoundedIntText(value=0, min=0, max=100000,
                                                description="Unused for days (0 = off)",
                                                style=LABEL, layout=W.Layout(width="20em"),
                                                tooltip="remove entries not used for this long")
        self.prune_button = button("Prune least recently used…", "plan: LRU entries beyond "
                                    "the size budget and/or age", "cc-plan-prune")
        self.plan_view = W.HTML(layout=W.Layout(overflow="auto", width=FULL))
        self.confirm_button = button("Confirm removal", "remove what the plan above lists",
                                      "cc-confirm", button_style="danger", disabled=True)
        self.cancel_button = button("Cancel", "drop the plan, remove nothing", "cc-cancel",
                                     disabled=True)
        self.message = W.HTML()
        self._actions = (self.failed_button, self.locks_button, self.versions_button,
                         self.prune_button)

        self.state_filter.observe(lambda _: self._fill_table(), names="value")
        self.version_filter.observe(lambda _: self._fill_table(), names="value")
        self.table.observe(lambda _: self._show_detail(), names="value")
        self.refresh_button.on_click(lambda _: self.refresh())
        self.failed_button.on_click(lambda _: self._propose(
            lambda s: [plans.plan_remove_failed(s)]))
        self.locks_button.on_click(lambda _: self._propose(
            lambda s: [plans.plan_clear_stale_locks(s, self.min_lock_age_s)]))
        self.versions_button.on_click(lambda _: self._propose(
            lambda s: [plans.plan_remove_other_versions(s, self.keep_version.value or None,
                                                        self.min_lock_age_s)]))
        self.prune_button.on_click(lambda _: self._propose(self._prune_plans))
        self.confirm_button.on_click(lambda _: self.confirm())
        self.cancel_button.on_click(lambda _: self.cancel())

        self.widget = W.VBox([
            STYLE, self.header,
            W.HBox([self.state_filter, W.VBox([self.version_filter, self.refresh_button])],
                   layout=row_layout()),
            self.table, self.detail,
            W.HTML("<b>Cleanup</b> (each button shows its plan first)"),
            W.HBox([self.failed_button, self.locks_button], layout=row_layout()),
            W.HBox([self.keep_version, self.versions_button], layout=row_layout()),
            W.HBox([self.max_size, self.older_than_days, self.prune_button], layout=row_layout()),
            self.plan_view, W.HBox([self.confirm_button, self.cancel_button], layout=row_layout()),
            self.message,
        ], layout=W.Layout(width="100%"))
        self.widget.add_class("cc-mono")
        self.widget.add_class("cc-browser")
        self.refresh()

    def _repr_mimebundle_(self, **kwargs):
        return with_text(self.widget._repr_mimebundle_(**kwargs), self.summary())

    def summary(self) -> str:
        """One line saying what the browser shows: its plain-text form where widgets do not
        render (GitHub, a terminal), instead of ipywidgets' repr of every child widget."""
        if self.removed_note:
            return f"CacheBrowser: {self.removed_note}"
        if self.scan is None:
            return "CacheBrowser: " + html.unescape(re.sub(r"<[^>]+>", "", self.header.value))
        return f"CacheBrowser over {self.scan.root}: {self.scan.summary()}"

    # -- reading
    def refresh(self) -> None:
        if self.removed_note:
            return
        try:
            self.scan = scan_cache(self.root)
        except CompileCacheError as err:
            self.scan = None
            self.header.value = coloured(str(err), ERROR)
            self.table.options = []
            self.detail.value = ""
            for b in self._actions:
                b.disabled = True
            return
        for b in self._actions:
            b.disabled = False
        self.header.value = self._header_html(self.scan)
        versions = sorted({e.version_dir for e in self.scan.entries})
        current = self.version_filter.value
        self.version_filter.options = [ALL, *versions]
        self.version_filter.value = current if current in versions else ALL
        neuron_versions = sorted({e.compiler_version for e in self.scan.entries
                                  if e.layout == "neuronxcc"})
        chosen = self.keep_version.value  # the reader's choice survives a refresh
        self.keep_version.options = neuron_versions
        self.keep_version.value = (chosen if chosen in neuron_versions
                                   else self._default_keep(neuron_versions))
        self._fill_table()

    @staticmethod
    def _header_html(scan: CacheScan) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(v)}</td><td>{s.entries}</td>"
            + "".join(f"<td>{s.by_state[st]}</td>" for st in STATES)
            + f"<td>{human_bytes(s.size_bytes)}</td><td>{human_bytes(s.disk_bytes)}</td></tr>"
            for v, s in scan.by_version().items())
        head = "".join(f"<th>{h}</th>" for h in ("version", "entries", *STATES, "size",
                                                  "on disk"))
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in scan.notes)
        unknown = (f"<br>{len(scan.unknown)} item(s) not recognised, left alone: "
                   + html.escape(", ".join(u.key for u in scan.unknown[:8]))
                   + (" …" if len(scan.unknown) > 8 else "")) if scan.unknown else ""
        return (f"<b>{html.escape(str(scan.root))}</b>: {html.escape(scan.summary())}{unknown}"
                f"<div class='cc-scroll'><table><tr>{head}</tr>{rows}</table></div>"
                + (f"<ul>{notes}</ul>" if notes else ""))

    @staticmethod
    def _default_keep(versions: list[str]) -> str | None:
        installed = installed_compiler_version()
        for v in versions:
            if installed and same_compiler_version(v, installed):
                return v
        # Not installed here (the CPU stand-in): the newest version. The plan shows it anyway.
        return max(versions, key=version_order, default=None)

    def _fill_table(self) -> None:
        if self.scan is None:
            return
        versions = None if self.version_filter.value == ALL else [self.version_filter.value]
        states = self.state_filter.value
        shown = self.scan.filter(states, versions) if states else []
        keep = self.table.value
        self.table.options = [(row_label(e), e.key) for e in shown]
        keys = [e.key for e in shown]
        self.table.value = keep if keep in keys else (keys[0] if keys else None)
        self._show_detail()

    def _show_detail(self) -> None:
        if self.scan is None or self.table.value is None:
            self.detail.value = ""
            return
        self.detail.value = pre_html(render_entry(self.scan.find(self.table.value)))

    # -- cleanup: plan, then confirm
    def _prune_plans(self, scan: CacheScan) -> list[plans.Plan]:
        size = parse_size(self.max_size.value) if self.max_size.value.strip() else None
        days = self.older_than_days.value or None
        return [plans.plan_prune(scan, size, days)]

    def _propose(self, make_plans) -> None:
        self.refresh()
        self.message.value = ""
        if self.scan is None or self.removed_note:
            return
        try:
            made = make_plans(self.scan)
        except (CompileCacheError, ValueError) as err:
            self.cancel()
            self.message.value = coloured(str(err), ERROR)
            return
        self.pending = list(made)
        self.plan_view.value = pre_html("\n\n".join(p.render() for p in made))
        removable = any(p.items for p in made)
        self.confirm_button.disabled = not removable
        self.cancel_button.disabled = False
        if not removable:
            self.message.value = "Nothing to remove."

    def confirm(self) -> list[removal.ApplyResult]:
        results = [removal.apply_plan(p, self.min_lock_age_s) for p in self.pending]
        self.pending = []
        self.confirm_button.disabled = self.cancel_button.disabled = True
        self.plan_view.value = ""
        self.refresh()  # first: when the result line shows, the counts above are already new
        failed = any(r.failed for r in results)
        text = "\n".join(r.render() for r in results)
        self.message.value = coloured(text, ERROR, pre=True) if failed else pre_html(text)
        return results

    def cancel(self) -> None:
        self.pending = []
        self.confirm_button.disabled = self.cancel_button.disabled = True
        self.plan_view.value = ""
        self.message.value = "Cancelled: nothing removed."

    def mark_removed(self, why: str) -> None:
        """The cache was deleted on purpose (e.g. a notebook's clean-up cell): keep the last
        listing browsable, disable what would touch the disk, and say so in the widget."""
        self.removed_note = why
        self.pending = []
        for b in (*self._actions, self.refresh_button, self.confirm_button, self.cancel_button):
            b.disabled = True
        self.plan_view.value = ""
        self.message.value = coloured(f"{why} The listing above is what it held; cleanup "
                                       "buttons are off.", NOTE)



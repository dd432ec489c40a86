"""The cache as widgets (notebook 03). CacheBrowser: a summary, a filterable table, an entry's
details, and cleanup that shows its plan before anything is removed (only `confirm_button`
removes). FlagsEditor: NEURON_CC_FLAGS edited without losing the flags already set (the text
box is the truth, the controls read and write single flags in it). Every control is an
attribute with a stable description and CSS class (cc-…), so tests and readers can drive it:
set `.value`, call `.click()`.
"""
from __future__ import annotations

import html
import os
import re

import ipywidgets as W

from helpers.cache import flags as cache_flags
from helpers.cache import plans
from helpers.cache.location import CompileCacheError, installed_compiler_version, same_compiler_version, version_order
from helpers.cache.render import render_entry
from helpers.cache.scan import LOCK_STALE_AFTER_S, STATES, CacheScan, scan_cache
from helpers.cache.units import human_bytes, parse_size, short_time

STYLE = W.HTML("<style>.cc-mono select, .cc-mono pre {font-family: monospace; font-size: 12px}"
              ".cc-scroll {overflow-x: auto}</style>")
ALL = "(all)"
UNSET = "(unset)"
LABEL = {"description_width": "initial"}  # descriptions never cut to "Keep vers…"
FULL = "99%"  # of the output area: 100% plus a widget's 2 px margin would overflow it


def row_layout() -> W.Layout:
    """A row that wraps where the output area is narrow."""
    return W.Layout(flex_flow="row wrap", align_items="center", width=FULL)


ERROR, NOTE, OK = "#b00", "#a60", "#070"


def pre_html(text: str) -> str:
    return f"<pre style='white-space: pre-wrap; margin: 0'>{html.escape(text)}</pre>"


def coloured(text: str, colour: str, pre: bool = False) -> str:
    body = pre_html(text) if pre else f"<b>{html.escape(text)}</b>"
    return f"<div style='color:{colour}'>{body}</div>"


def with_text(bundle, text: str):
    """A widget's display bundle with `text` as its text/plain."""
    bundle = dict(bundle or {})
    bundle["text/plain"] = text
    return bundle


def button(description: str, tooltip: str, css: str, **kwargs) -> W.Button:
    b = W.Button(description=description, tooltip=tooltip, layout=W.Layout(width="auto"),
                 **kwargs)
    b.add_class(css)
    return b


def row_label(e) -> str:
    """One table row: state, size, last use, compiler version, MODULE_ name (fits ~800 px)."""
    name = e.key.split("/", 1)[-1]
    return (f"{e.state:<10} {human_bytes(e.size_bytes):>10}  {short_time(e.last_used)}  "
            f"{e.compiler_version:<22} {name}")


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
            b.disabled = self.scan is None
        if self.scan is None:
            return
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

    def _drop_plan(self) -> None:
        self.pending = []
        self.confirm_button.disabled = self.cancel_button.disabled = True
        self.plan_view.value = ""

    def confirm(self) -> list[plans.ApplyResult]:
        results = [plans.apply_plan(p, self.min_lock_age_s) for p in self.pending]
        self._drop_plan()
        self.refresh()  # first: when the result line shows, the counts above are already new
        failed = any(r.failed for r in results)
        text = "\n".join(r.render() for r in results)
        self.message.value = coloured(text, ERROR, pre=True) if failed else pre_html(text)
        return results

    def cancel(self) -> None:
        self._drop_plan()
        self.message.value = "Cancelled: nothing removed."

    def mark_removed(self, why: str) -> None:
        """The cache was deleted on purpose (e.g. a notebook's clean-up cell): keep the last
        listing browsable, disable what would touch the disk, and say so in the widget."""
        self.removed_note = why
        self._drop_plan()
        for b in (*self._actions, self.refresh_button):
            b.disabled = True
        self.message.value = coloured(f"{why} The listing above is what it held; cleanup "
                                       "buttons are off.", NOTE)


class FlagsEditor:
    """Edit NEURON_CC_FLAGS: the text is the truth; the controls read and write single flags
    in it, so flags they do not know about are kept as they are. Apply writes the
    environment (`env`, os.environ by default); the compiler wrapper reads it at each compile."""

    def __init__(self, env=None):
        self.env = os.environ if env is None else env
        self._syncing = False
        self.text = W.Text(description=cache_flags.ENV_VAR, layout=W.Layout(width=FULL), style=LABEL,
                           tooltip="the whole variable: edit it freely")
        self.cache_dir = W.Text(description="--cache_dir", style=LABEL,
                                placeholder="empty: the default cache (see locate_cache)",
                                layout=W.Layout(width=FULL),
                                tooltip="where the persistent cache lives (a directory or s3://)")
        spaced = dict(width="auto", margin="2px 1.5em 2px 2px")
        self.retry = W.Checkbox(description="--retry_failed_compilation", indent=False,
                                layout=W.Layout(**spaced),
                                tooltip="compile again graphs whose failure is cached")
        self.no_cache = W.Checkbox(description="--no_cache", indent=False,
                                   layout=W.Layout(**spaced),
                                   tooltip="do not read or write the persistent cache")
        self.log_level = W.Dropdown(options=[UNSET, *cache_flags.LOG_LEVELS], description="--log_level",
                                    tooltip="how much the compiler wrapper logs", style=LABEL,
                                    layout=W.Layout(**spaced))
        self.auto_cast = W.Dropdown(options=[UNSET, *cache_flags.AUTO_CAST], description="--auto-cast",
                                    tooltip="neuronx-cc: which operations to cast down",
                                    style=LABEL, layout=W.Layout(**spaced))
        self.model_type = W.Dropdown(options=[UNSET, *cache_flags.MODEL_TYPES], description="--model-type",
                                     tooltip="neuronx-cc: optimisations for a model family",
                                     style=LABEL, layout=W.Layout(**spaced))
        self.apply_button = button("Apply", f"write {cache_flags.ENV_VAR} to the environment",
                                    "cc-flags-apply", button_style="primary")
        self.reload_button = button("Reload from environment", f"read {cache_flags.ENV_VAR} again, "
                                     "dropping unapplied edits", "cc-flags-reload")
        self.message = W.HTML()
        self._controls = {"--cache_dir": self.cache_dir, "--retry_failed_compilation": self.retry,
                          "--no_cache": self.no_cache, "--log_level": self.log_level,
                          "--auto-cast": self.auto_cast, "--model-type": self.model_type}
        for name, control in self._controls.items():
            control.add_class("cc-flag" + name.replace("_", "-"))
            control.observe(lambda change, name=name: self._control_changed(name, change["new"]),
                            names="value")
        self.text.add_class("cc-flags-text")
        self.text.observe(lambda _: self._text_changed(), names="value")
        self.apply_button.on_click(lambda _: self.apply())
        self.reload_button.on_click(lambda _: self.reload())
        self.widget = W.VBox([
            self.text, self.cache_dir,
            W.HBox([self.retry, self.no_cache], layout=row_layout()),
            W.HBox([self.log_level, self.auto_cast, self.model_type], layout=row_layout()),
            W.HBox([self.apply_button, self.reload_button], layout=row_layout()), self.message,
        ], layout=W.Layout(width="100%"))
        self.widget.add_class("cc-flags-editor")
        self.reload()

    def _repr_mimebundle_(self, **kwargs):
        return with_text(self.widget._repr_mimebundle_(**kwargs), self.summary())

    def summary(self) -> str:
        """The flags being edited, as one line (the editor's plain-text form)."""
        return f"FlagsEditor: {cache_flags.ENV_VAR}={self.text.value!r}"

    def reload(self) -> None:
        self.text.value = self.env.get(cache_flags.ENV_VAR, "")
        self.message.value = ""

    def _control_changed(self, name: str, value) -> None:
        if self._syncing:
            return
        if isinstance(value, str):
            value = False if value in ("", UNSET) else value.strip()
        try:
            self.text.value = cache_flags.set_flag(self.text.value, name, value)
        except cache_flags.FlagsError as err:
            self.message.value = coloured(str(err), ERROR)

    def _text_changed(self) -> None:
        try:
            flags = self.text.value
            values = {name: cache_flags.get_flag(flags, name) for name in self._controls}
        except cache_flags.FlagsError as err:
            self.message.value = coloured(str(err), ERROR)
            return
        self.message.value = ""
        self._syncing = True
        try:
            for name, control in self._controls.items():
                v = values[name]
                if isinstance(control, W.Checkbox):
                    control.value = v is True
                elif isinstance(control, W.Dropdown):
                    control.value = v if v in control.options else UNSET
                else:
                    control.value = v if isinstance(v, str) else ""
        finally:
            self._syncing = False

    def apply(self) -> cache_flags.FlagsChange | None:
        try:
            change = cache_flags.replace_env(self.text.value, self.env)
        except cache_flags.FlagsError as err:
            self.message.value = coloured(str(err), ERROR)
            return None
        self.message.value = coloured(change.message(), NOTE if change.note else OK, pre=True)
        return change

"""ipywidgets UI over helpers.compile_cache and helpers.neuron_flags (JupyterLab, ipywidgets 8).

    from helpers.cache_widgets import CacheBrowser, FlagsEditor
    CacheBrowser()          # summary, filterable table, details, cleanup with confirmation
    FlagsEditor()           # edit NEURON_CC_FLAGS without losing the flags already set

Every widget is an attribute, so tests (and curious readers) can drive them without a
browser: set `.value`, call `.click()` on a button. Cleanup buttons only compute and show a
plan; nothing is removed until `confirm_button` is clicked.
"""
from __future__ import annotations

import html
import os
import re

import ipywidgets as W

from helpers import compile_cache as cc
from helpers import neuron_flags as nf

_CSS = W.HTML("<style>.cc-mono select, .cc-mono pre {font-family: monospace; "
              "font-size: 12px}</style>")
ALL = "(all)"
UNSET = "(unset)"


def _pre(text: str) -> str:
    return f"<pre style='white-space: pre-wrap; margin: 0'>{html.escape(text)}</pre>"


def _with_text(bundle, text: str):
    """A widget's display bundle with `text` as its text/plain."""
    bundle = dict(bundle or {})
    bundle["text/plain"] = text
    return bundle


def _row_label(e: cc.Entry) -> str:
    return (f"{e.state:<10} {cc.human_bytes(e.size_bytes):>10}  {cc.short_time(e.last_used)}  "
            f"{e.key}")


def _version_key(version: str) -> tuple:
    """'2.21.33363.0+82129205' -> (2, 21, 33363, 0): compiler versions in release order."""
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("+")[0].split("."))


class CacheBrowser:
    """Browse one cache root; `root=None` uses the cache Neuron would use (locate_cache())."""

    def __init__(self, root=None, min_lock_age_s: float = cc.LOCK_STALE_AFTER_S):
        self.root = root
        self.min_lock_age_s = min_lock_age_s
        self.scan: cc.CacheScan | None = None
        self.pending: list[cc.Plan] = []

        self.header = W.HTML()
        self.state_filter = W.SelectMultiple(options=cc.STATES, value=cc.STATES, rows=4,
                                             description="State")
        self.version_filter = W.Dropdown(options=[ALL], value=ALL, description="Version")
        self.table = W.Select(options=[], rows=12, layout=W.Layout(width="100%"))
        self.table.add_class("cc-mono")
        self.detail = W.HTML()
        self.refresh_button = W.Button(description="Refresh", icon="refresh")

        self.failed_button = W.Button(description="Remove failed…")
        self.locks_button = W.Button(description="Clear stale locks…")
        self.keep_version = W.Dropdown(options=[], description="Keep version")
        self.versions_button = W.Button(description="Remove other versions…")
        self.max_size = W.Text(placeholder="e.g. 20G", description="Max size")
        self.older_than_days = W.BoundedIntText(value=0, min=0, max=100000,
                                                description="Older than (days, 0 = off)")
        self.prune_button = W.Button(description="Prune LRU…")
        self.plan_view = W.HTML()
        self.confirm_button = W.Button(description="Confirm removal", button_style="danger",
                                       disabled=True)
        self.cancel_button = W.Button(description="Cancel", disabled=True)
        self.message = W.HTML()

        self.state_filter.observe(lambda _: self._fill_table(), names="value")
        self.version_filter.observe(lambda _: self._fill_table(), names="value")
        self.table.observe(lambda _: self._show_detail(), names="value")
        self.refresh_button.on_click(lambda _: self.refresh())
        self.failed_button.on_click(lambda _: self._propose(
            lambda s: [cc.plan_remove_failed(s)]))
        self.locks_button.on_click(lambda _: self._propose(
            lambda s: [cc.plan_clear_stale_locks(s, self.min_lock_age_s)]))
        self.versions_button.on_click(lambda _: self._propose(
            lambda s: [cc.plan_remove_other_versions(s, self.keep_version.value or None,
                                                     self.min_lock_age_s)]))
        self.prune_button.on_click(lambda _: self._propose(self._prune_plans))
        self.confirm_button.on_click(lambda _: self.confirm())
        self.cancel_button.on_click(lambda _: self.cancel())

        self.widget = W.VBox([
            _CSS, self.header,
            W.HBox([self.state_filter, W.VBox([self.version_filter, self.refresh_button])]),
            self.table, self.detail,
            W.HTML("<b>Cleanup</b> (each shows its plan first)"),
            W.HBox([self.failed_button, self.locks_button]),
            W.HBox([self.keep_version, self.versions_button]),
            W.HBox([self.max_size, self.older_than_days, self.prune_button]),
            self.plan_view, W.HBox([self.confirm_button, self.cancel_button]), self.message,
        ])
        self.widget.add_class("cc-mono")
        self.refresh()

    def _repr_mimebundle_(self, **kwargs):
        return _with_text(self.widget._repr_mimebundle_(**kwargs), self.summary())

    def summary(self) -> str:
        """One line saying what the browser shows: its plain-text form where widgets do not
        render (GitHub, a terminal), instead of ipywidgets' repr of every child widget."""
        if self.scan is None:
            return "CacheBrowser: " + html.unescape(re.sub(r"<[^>]+>", "", self.header.value))
        return f"CacheBrowser over {self.scan.root}: {self.scan.summary()}"

    # -- reading
    def refresh(self) -> None:
        try:
            self.scan = cc.scan_cache(self.root)
        except cc.CompileCacheError as err:
            self.scan = None
            self.header.value = f"<b style='color:#b00'>{html.escape(str(err))}</b>"
            self.table.options = []
            self.detail.value = ""
            for b in (self.failed_button, self.locks_button, self.versions_button,
                      self.prune_button):
                b.disabled = True
            return
        for b in (self.failed_button, self.locks_button, self.versions_button, self.prune_button):
            b.disabled = False
        scan = self.scan
        rows = "".join(
            f"<tr><td>{html.escape(v)}</td><td>{s.entries}</td>"
            + "".join(f"<td>{s.by_state[st]}</td>" for st in cc.STATES)
            + f"<td>{cc.human_bytes(s.size_bytes)}</td><td>{cc.human_bytes(s.disk_bytes)}</td></tr>"
            for v, s in scan.by_version().items())
        head = "".join(f"<th>{h}</th>" for h in ("version", "entries", *cc.STATES, "size",
                                                  "on disk"))
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in scan.notes)
        unknown = (f"<br>{len(scan.unknown)} item(s) not recognised, left alone: "
                   + html.escape(", ".join(u.key for u in scan.unknown[:8]))
                   + (" …" if len(scan.unknown) > 8 else "")) if scan.unknown else ""
        self.header.value = (f"<b>{html.escape(str(scan.root))}</b>: "
                             f"{html.escape(scan.summary())}{unknown}"
                             f"<table><tr>{head}</tr>{rows}</table>"
                             + (f"<ul>{notes}</ul>" if notes else ""))
        versions = sorted({e.version_dir for e in scan.entries})
        current = self.version_filter.value
        self.version_filter.options = [ALL, *versions]
        self.version_filter.value = current if current in versions else ALL
        neuron_versions = sorted({e.compiler_version for e in scan.entries
                                  if e.layout == "neuronxcc"})
        chosen = self.keep_version.value  # the reader's choice survives a refresh
        self.keep_version.options = neuron_versions
        self.keep_version.value = (chosen if chosen in neuron_versions
                                   else self._default_keep(neuron_versions))
        self._fill_table()

    def _default_keep(self, versions: list[str]) -> str | None:
        installed = cc.installed_compiler_version()
        for v in versions:
            if installed and cc.same_compiler_version(v, installed):
                return v
        # Not installed here (the CPU stand-in): the newest version. The plan shows it anyway.
        return max(versions, key=_version_key, default=None)

    def _fill_table(self) -> None:
        if self.scan is None:
            return
        versions = None if self.version_filter.value == ALL else [self.version_filter.value]
        states = self.state_filter.value
        shown = self.scan.filter(states, versions) if states else []
        keep = self.table.value
        self.table.options = [(_row_label(e), e.key) for e in shown]
        keys = [e.key for e in shown]
        self.table.value = keep if keep in keys else (keys[0] if keys else None)
        self._show_detail()

    def _show_detail(self) -> None:
        if self.scan is None or self.table.value is None:
            self.detail.value = ""
            return
        e = self.scan.find(self.table.value)
        self.detail.value = _pre(cc.render_entry(e))

    # -- cleanup: plan, then confirm
    def _prune_plans(self, scan: cc.CacheScan) -> list[cc.Plan]:
        size = cc.parse_size(self.max_size.value) if self.max_size.value.strip() else None
        days = self.older_than_days.value or None
        return [cc.plan_prune(scan, size, days)]

    def _propose(self, make_plans) -> None:
        self.refresh()
        self.message.value = ""
        if self.scan is None:
            return
        try:
            plans = make_plans(self.scan)
        except (cc.CompileCacheError, ValueError) as err:
            self.cancel()
            self.message.value = f"<b style='color:#b00'>{html.escape(str(err))}</b>"
            return
        self.pending = [p for p in plans]
        self.plan_view.value = _pre("\n\n".join(p.render() for p in plans))
        removable = any(p.items for p in plans)
        self.confirm_button.disabled = not removable
        self.cancel_button.disabled = False
        if not removable:
            self.message.value = "Nothing to remove."

    def confirm(self) -> list[cc.ApplyResult]:
        results = [cc.apply_plan(p, self.min_lock_age_s) for p in self.pending]
        self.pending = []
        self.confirm_button.disabled = self.cancel_button.disabled = True
        self.plan_view.value = ""
        self.message.value = _pre("\n".join(r.render() for r in results))
        self.refresh()
        return results

    def cancel(self) -> None:
        self.pending = []
        self.confirm_button.disabled = self.cancel_button.disabled = True
        self.plan_view.value = ""
        self.message.value = "Cancelled: nothing removed."


class FlagsEditor:
    """Edit NEURON_CC_FLAGS: the text is the truth; the controls read and write single flags
    in it, so flags they do not know about are kept as they are. Apply writes the
    environment (`env`, os.environ by default) and warns when torch_xla is already up."""

    def __init__(self, env=None):
        self.env = os.environ if env is None else env
        self._syncing = False
        self.text = W.Text(description=nf.ENV_VAR, layout=W.Layout(width="100%"),
                           style={"description_width": "initial"})
        self.cache_dir = W.Text(description="--cache_dir", placeholder="default (see locate_cache)")
        self.retry = W.Checkbox(description="--retry_failed_compilation", indent=False)
        self.no_cache = W.Checkbox(description="--no_cache", indent=False)
        self.log_level = W.Dropdown(options=[UNSET, *nf.LOG_LEVELS], description="--log_level")
        self.auto_cast = W.Dropdown(options=[UNSET, *nf.AUTO_CAST], description="--auto-cast")
        self.model_type = W.Dropdown(options=[UNSET, *nf.MODEL_TYPES], description="--model-type")
        self.apply_button = W.Button(description="Apply", button_style="primary")
        self.reload_button = W.Button(description="Reload from environment")
        self.message = W.HTML()
        self._controls = {"--cache_dir": self.cache_dir, "--retry_failed_compilation": self.retry,
                          "--no_cache": self.no_cache, "--log_level": self.log_level,
                          "--auto-cast": self.auto_cast, "--model-type": self.model_type}
        for name, control in self._controls.items():
            control.observe(lambda change, name=name: self._control_changed(name, change["new"]),
                            names="value")
        self.text.observe(lambda _: self._text_changed(), names="value")
        self.apply_button.on_click(lambda _: self.apply())
        self.reload_button.on_click(lambda _: self.reload())
        self.widget = W.VBox([
            self.text,
            W.HBox([self.retry, self.no_cache]),
            W.HBox([self.cache_dir, self.log_level]),
            W.HBox([self.auto_cast, self.model_type]),
            W.HBox([self.apply_button, self.reload_button]), self.message,
        ])
        self.reload()

    def _repr_mimebundle_(self, **kwargs):
        return _with_text(self.widget._repr_mimebundle_(**kwargs), self.summary())

    def summary(self) -> str:
        """The flags being edited, as one line (the editor's plain-text form)."""
        return f"FlagsEditor: {nf.ENV_VAR}={self.text.value!r}"

    def reload(self) -> None:
        self.text.value = self.env.get(nf.ENV_VAR, "")
        self.message.value = ""

    def _control_changed(self, name: str, value) -> None:
        if self._syncing:
            return
        if isinstance(value, str):
            value = False if value in ("", UNSET) else value.strip()
        try:
            self.text.value = nf.set_flag(self.text.value, name, value)
        except ValueError as err:
            self.message.value = f"<b style='color:#b00'>{html.escape(str(err))}</b>"

    def _text_changed(self) -> None:
        try:
            flags = self.text.value
            values = {name: nf.get_flag(flags, name) for name in self._controls}
        except ValueError as err:
            self.message.value = f"<b style='color:#b00'>{html.escape(str(err))}</b>"
            return
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

    def apply(self) -> nf.FlagsChange | None:
        try:
            change = nf.replace_env(self.text.value, self.env)
        except ValueError as err:
            self.message.value = f"<b style='color:#b00'>{html.escape(str(err))}</b>"
            return None
        color = "#b00" if change.warning else "#070"
        self.message.value = f"<span style='color:{color}'>{_pre(change.message())}</span>"
        return change

"""FlagsEditor: NEURON_CC_FLAGS as a widget (notebook 03), edited without losing the flags already
set: the text box is the truth, the controls read and write single flags in it."""
from __future__ import annotations

import os

import ipywidgets as W

from helpers.cache import flags as cache_flags
from helpers.cache.widget_parts import ERROR, FULL, LABEL, NOTE, OK, UNSET, button, coloured, row_layout, with_text


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

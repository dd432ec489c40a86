"""The cache widgets, built and driven without a browser: values set, buttons clicked."""
from __future__ import annotations

import shutil

import ipywidgets as W

from helpers.cache.scan import scan_cache
from helpers.cache.widgets import ALL, UNSET, CacheBrowser, FlagsEditor, row_label
from tests.cache_trees import CUR_DIR, CURRENT, OLD, OLD_DIR


def test_header_table_and_filters(tree):
    b = CacheBrowser(tree.root)
    assert "12 entries (done 5, failed 3, locked 3, incomplete 1)" in b.header.value
    assert OLD_DIR in b.header.value and "2.0 GiB" in b.header.value
    assert len(b.table.options) == 12
    b.state_filter.value = ("failed",)
    assert {key for _, key in b.table.options} == {
        tree.key("failed"), tree.key("failed_with_link"), tree.key("old_failed")}
    b.version_filter.value = OLD_DIR
    assert [key for _, key in b.table.options] == [tree.key("old_failed")]
    b.version_filter.value = ALL
    b.state_filter.value = ()
    assert b.table.options == () and b.detail.value == ""


def test_detail_pane_shows_flags_sizes_and_log_tail(tree):
    b = CacheBrowser(tree.root)
    b.table.value = tree.key("failed")
    assert "Compiler status ERROR" in b.detail.value
    assert "--target=trn1 --model-type=transformer" in b.detail.value
    assert "stored failure" in b.detail.value and "KeyError: &#x27;transpose.17&#x27;" in b.detail.value
    b.table.value = tree.key("bad_flags")
    assert "not valid JSON" in b.detail.value


def test_remove_failed_shows_plan_then_confirm_removes(tree):
    b = CacheBrowser(tree.root)
    failed = [tree.path(key) for key in ("failed", "failed_with_link", "old_failed")]
    b.failed_button.click()
    assert "Plan: remove failed entries" in b.plan_view.value
    assert tree.key("failed") in b.plan_view.value
    assert not b.confirm_button.disabled
    assert all(p.is_dir() for p in failed)  # nothing removed before confirming
    b.confirm_button.click()
    assert not any(p.exists() for p in failed)
    assert "Removed 3 item(s)" in b.message.value
    assert "failed 0" in b.header.value and b.confirm_button.disabled


def test_cancel_removes_nothing(tree):
    b = CacheBrowser(tree.root)
    b.max_size.value = "1"
    b.prune_button.click()
    assert "Plan: prune least recently used" in b.plan_view.value
    b.cancel_button.click()
    assert b.pending == [] and b.confirm_button.disabled
    assert len(scan_cache(tree.root).entries) == 12
    b.confirm_button.click()  # disabled in the browser; and with nothing pending, a no-op
    assert len(scan_cache(tree.root).entries) == 12


def test_prune_lru_and_other_versions_buttons(tree):
    b = CacheBrowser(tree.root, min_lock_age_s=600)
    b.older_than_days.value = 50
    b.prune_button.click()
    b.confirm_button.click()
    left = {e.key for e in scan_cache(tree.root).entries}
    assert tree.key("old_done") not in left and tree.key("legacy") not in left
    assert tree.key("old_locked_fresh") in left
    # neuronx-cc is not installed here: the default keep is the newest version present.
    assert b.keep_version.value == CURRENT
    b.keep_version.value = OLD
    b.versions_button.click()
    assert f"keep={OLD}" in b.plan_view.value
    b.confirm_button.click()
    assert {e.version_dir for e in scan_cache(tree.root).entries} == {OLD_DIR, CUR_DIR}
    assert not any(e.version_dir == CUR_DIR and e.state != "locked"
                   for e in scan_cache(tree.root).entries)


def test_bad_input_and_bad_root_are_shown(tree, tmp_path):
    b = CacheBrowser(tree.root)
    b.max_size.value = "lots"
    b.prune_button.click()
    assert "expected e.g. 500M" in b.message.value and b.confirm_button.disabled
    missing = CacheBrowser(tmp_path / "missing")
    assert "does not exist" in missing.header.value and missing.failed_button.disabled


def test_flags_editor_controls_edit_the_text_and_apply():
    env = {"NEURON_CC_FLAGS": "--model-type transformer -O1"}
    ed = FlagsEditor(env=env)
    assert ed.model_type.value == "transformer" and not ed.retry.value
    ed.retry.value = True
    ed.cache_dir.value = "/mnt/cache dir"
    ed.log_level.value = "INFO"
    assert env["NEURON_CC_FLAGS"] == "--model-type transformer -O1"  # not until Apply
    ed.apply_button.click()
    flags = env["NEURON_CC_FLAGS"]
    assert flags == ("--model-type transformer -O1 --retry_failed_compilation "
                     "'--cache_dir=/mnt/cache dir' --log_level=INFO")
    assert "NEURON_CC_FLAGS=" in ed.message.value
    ed.model_type.value = UNSET
    ed.apply_button.click()
    assert "--model-type" not in env["NEURON_CC_FLAGS"] and "-O1" in env["NEURON_CC_FLAGS"]


def test_flags_editor_text_drives_controls_and_rejects_bad_quotes():
    env = {}
    ed = FlagsEditor(env=env)
    ed.text.value = "--no_cache --auto-cast matmult --my-own-flag=3"
    assert ed.no_cache.value and ed.auto_cast.value == "matmult"
    ed.no_cache.value = False
    assert ed.text.value == "--auto-cast matmult --my-own-flag=3"  # the user's flag is kept
    ed.text.value = "--cache_dir 'oops"
    assert "check its quotes" in ed.message.value
    assert ed.apply() is None and env == {}
    ed.reload_button.click()
    assert ed.text.value == ""


def test_plain_text_form_is_one_readable_line(tree, tmp_path):
    # Where widgets do not render (GitHub, nbval's comparison), text/plain is what shows.
    b = CacheBrowser(tree.root)
    bundle = b._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == (f"CacheBrowser over {tree.root.resolve()}: 12 entries (done 5, "
                                    f"failed 3, locked 3, incomplete 1); "
                                    + scan_cache(tree.root).summary().split("); ")[1])
    missing = CacheBrowser(tmp_path / "missing")
    text = missing._repr_mimebundle_()["text/plain"]
    assert text.startswith("CacheBrowser: no compile cache at") and "<b" not in text
    ed = FlagsEditor(env={"NEURON_CC_FLAGS": "--retry_failed_compilation"})
    assert ed._repr_mimebundle_()["text/plain"] == (
        "FlagsEditor: NEURON_CC_FLAGS='--retry_failed_compilation'")


def _described(widget):
    """Every widget inside `widget` (itself included) that shows a description."""
    found = [widget] if getattr(widget, "description", "") else []
    for child in getattr(widget, "children", ()):
        found += _described(child)
    return found


def test_labels_and_values_are_not_cut(tree):
    """Descriptions get the width they need (no "Keep vers…"), buttons size to their text,
    and a table row fits the ~800 px of JupyterLab's output area in 12 px monospace."""
    b = CacheBrowser(tree.root)
    ed = FlagsEditor(env={})
    for w in _described(b.widget) + _described(ed.widget):
        if isinstance(w, W.Button):
            assert w.layout.width == "auto", w.description
        elif not isinstance(w, W.Checkbox):
            assert w.style.description_width == "initial", w.description
    assert all(w.layout.width in ("auto", "99%") for w in (b.keep_version, b.version_filter,
                                                            ed.log_level, ed.cache_dir))
    longest = max(len(label) for label, _ in b.table.options)
    assert longest <= 110, longest  # ~7.2 px a character: under 800 px
    assert row_label(scan_cache(tree.root).find(tree.key("failed"))).endswith(
        "MODULE_17890aeca56402771161+24129607")


def test_widgets_have_stable_names_for_browser_tests(tree):
    b = CacheBrowser(tree.root)
    ed = FlagsEditor(env={})
    classes = {c for w in (b.failed_button, b.locks_button, b.versions_button, b.prune_button,
                           b.confirm_button, b.cancel_button, b.refresh_button, b.table,
                           ed.apply_button, ed.reload_button, ed.retry, ed.no_cache, ed.cache_dir,
                           ed.text) for c in w._dom_classes}
    assert {"cc-plan-failed", "cc-plan-locks", "cc-plan-versions", "cc-plan-prune", "cc-confirm",
            "cc-cancel", "cc-refresh", "cc-entries", "cc-flags-apply", "cc-flags-reload",
            "cc-flag--retry-failed-compilation", "cc-flag--no-cache", "cc-flag--cache-dir",
            "cc-flags-text"} <= classes
    assert all(w.tooltip for w in (b.failed_button, b.confirm_button, ed.apply_button, ed.retry))


def test_removed_cache_keeps_its_listing_and_says_why(tree):
    b = CacheBrowser(tree.root)
    shown = list(b.table.options)
    shutil.rmtree(tree.root)  # a notebook's clean-up cell
    tree.root.mkdir()  # (the fixture checks the tree's symlink afterwards)
    (tree.root / "escape").symlink_to(tree.outside)
    b.mark_removed("The notebook's last cell removed this demo cache.")
    assert "removed this demo cache" in b.message.value
    assert all(btn.disabled for btn in (b.failed_button, b.locks_button, b.versions_button,
                                        b.prune_button, b.refresh_button, b.confirm_button))
    b.refresh()  # nothing to re-read: the listing stays as it was
    assert list(b.table.options) == shown and "does not exist" not in b.header.value
    b.state_filter.value = ("failed",)  # still browsable
    b.table.value = tree.key("failed")
    assert len(b.table.options) == 3 and "Compiler status ERROR" in b.detail.value
    b.failed_button.click()
    assert b.pending == [] and b.plan_view.value == ""
    assert b.summary() == "CacheBrowser: The notebook's last cell removed this demo cache."


def test_zero_size_budget_is_refused_in_the_widget(tree):
    b = CacheBrowser(tree.root)
    b.max_size.value = "0"
    b.prune_button.click()
    assert "more than 0 bytes" in b.message.value and b.confirm_button.disabled
    assert len(scan_cache(tree.root).entries) == 12


def test_failed_removal_shows_in_the_widget(tree, immutable):
    b = CacheBrowser(tree.root)
    immutable(tree.path("old_failed") / "model.hlo_module.pb")
    b.failed_button.click()
    results = b.confirm()
    assert [k for r in results for k, _ in r.failed] == [tree.key("old_failed")]
    assert "FAILED" in b.message.value and "#b00" in b.message.value
    assert "removal failed part way" in b.message.value


def test_flags_editor_refuses_an_empty_cache_dir():
    env = {"NEURON_CC_FLAGS": "-O1"}
    ed = FlagsEditor(env=env)
    ed.text.value = "-O1 --cache_dir="
    assert ed.apply() is None and "has no value" in ed.message.value
    assert env == {"NEURON_CC_FLAGS": "-O1"}

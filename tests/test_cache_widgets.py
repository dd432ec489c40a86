"""The cache widgets, built and driven without a browser: values set, buttons clicked."""
from __future__ import annotations

import pytest

from helpers import compile_cache as cc
from helpers.cache_widgets import ALL, UNSET, CacheBrowser, FlagsEditor
from tests.test_compile_cache_layouts import tree  # noqa: F401  (the shared fixture)
from tests.test_compile_cache_layouts import (CUR_DIR, CURRENT, OLD, OLD_DIR, build_cache_tree,
                                              outside_snapshot)




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
    b.table.value = tree.key("bad_flags")
    assert "not valid JSON" in b.detail.value


def test_remove_failed_shows_plan_then_confirm_removes(tree):
    b = CacheBrowser(tree.root)
    failed = [tree.path(l) for l in ("failed", "failed_with_link", "old_failed")]
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
    b.max_size.value = "0"
    b.prune_button.click()
    assert "Plan: prune least recently used" in b.plan_view.value
    b.cancel_button.click()
    assert b.pending == [] and b.confirm_button.disabled
    assert len(cc.scan_cache(tree.root).entries) == 12
    b.confirm_button.click()  # disabled in the browser; and with nothing pending, a no-op
    assert len(cc.scan_cache(tree.root).entries) == 12


def test_prune_lru_and_other_versions_buttons(tree):
    b = CacheBrowser(tree.root, min_lock_age_s=600)
    b.older_than_days.value = 50
    b.prune_button.click()
    b.confirm_button.click()
    left = {e.key for e in cc.scan_cache(tree.root).entries}
    assert tree.key("old_done") not in left and tree.key("legacy") not in left
    assert tree.key("old_locked_fresh") in left
    # neuronx-cc is not installed here: the default keep is the newest version present.
    assert b.keep_version.value == CURRENT
    b.keep_version.value = OLD
    b.versions_button.click()
    assert f"keep={OLD}" in b.plan_view.value
    b.confirm_button.click()
    assert {e.version_dir for e in cc.scan_cache(tree.root).entries} == {OLD_DIR, CUR_DIR}
    assert not any(e.version_dir == CUR_DIR and e.state != "locked"
                   for e in cc.scan_cache(tree.root).entries)


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
                                    + cc.scan_cache(tree.root).summary().split("); ")[1])
    missing = CacheBrowser(tmp_path / "missing")
    text = missing._repr_mimebundle_()["text/plain"]
    assert text.startswith("CacheBrowser: no compile cache at") and "<b" not in text
    ed = FlagsEditor(env={"NEURON_CC_FLAGS": "--retry_failed_compilation"})
    assert ed._repr_mimebundle_()["text/plain"] == (
        "FlagsEditor: NEURON_CC_FLAGS='--retry_failed_compilation'")

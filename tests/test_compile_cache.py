"""Cleanup plans and their application on real cache trees: what goes, what stays, and that
nothing outside the root (symlink targets included) is ever touched."""
from __future__ import annotations

import subprocess
import time

import pytest

from helpers import compile_cache as cc
from tests.test_compile_cache_layouts import tree  # noqa: F401  (the shared fixture)
from tests.test_compile_cache_layouts import (CUR_DIR, CURRENT, LEGACY_DIR, OLD, OLD_DIR,
                                              build_cache_tree, outside_snapshot)




@pytest.fixture
def fake_compiler():
    """A real process on this host whose argv[0] is neuronx-cc, as /proc shows a compile."""
    proc = subprocess.Popen(["bash", "-c", "exec -a neuronx-cc sleep 60"])
    deadline = time.monotonic() + 10
    while not any(pid == proc.pid for pid, _ in cc.compiler_processes()):
        assert time.monotonic() < deadline, "the stand-in compiler process never showed in /proc"
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


def keys(plan):
    return {i.key for i in plan.items}


def test_remove_failed_plan_then_apply(tree):
    scan = cc.scan_cache(tree.root)
    plan = cc.plan_remove_failed(scan)
    failed = {tree.key("failed"), tree.key("failed_with_link"), tree.key("old_failed")}
    assert keys(plan) == failed
    assert plan.size_bytes == sum(scan.find(k).size_bytes for k in failed)
    assert "remove 3 item(s)" in plan.render()
    assert all(tree.root.joinpath(k).exists() for k in failed)  # planning removes nothing

    result = cc.apply_plan(plan)
    assert set(result.removed) == failed and result.skipped == []
    assert result.size_bytes == plan.size_bytes
    assert not any(tree.root.joinpath(k).exists() for k in failed)
    after = cc.scan_cache(tree.root)
    assert after.by_state() == {"done": 5, "failed": 0, "locked": 3, "incomplete": 1}


def test_stale_lock_cleared_fresh_lock_kept(tree):
    scan = cc.scan_cache(tree.root)
    plan = cc.plan_clear_stale_locks(scan, min_age_s=30 * 60, compilers=[])
    stale_lock = f"{tree.key('locked_stale')}/model.hlo_module.pb.lock"
    assert keys(plan) == {stale_lock}
    kept = dict(plan.kept)
    assert "fresh lock" in kept[f"{tree.key('locked_fresh')}/model.hlo_module.pb.lock"]
    assert f"{tree.key('old_locked_fresh')}/model.hlo_module.pb.lock" in kept

    cc.apply_plan(plan)
    entry = tree.path("locked_stale")
    assert not (entry / "model.hlo_module.pb.lock").exists()
    assert (entry / "model.hlo_module.pb").exists()  # only the lock goes: the HLO recompiles
    assert cc.scan_cache(tree.root).find(tree.key("locked_stale")).state == "incomplete"
    assert (tree.path("locked_fresh") / "model.hlo_module.pb.lock").exists()


def test_no_lock_is_stale_while_a_compiler_runs(tree, fake_compiler):
    scan = cc.scan_cache(tree.root)
    plan = cc.plan_clear_stale_locks(scan, min_age_s=600)  # reads /proc itself
    assert plan.items == []
    assert any("compiler is running" in n and str(fake_compiler.pid) in n for n in plan.notes)
    # A plan made while nothing ran is re-checked when applied: the compile now running wins.
    stale = cc.plan_clear_stale_locks(scan, min_age_s=600, compilers=[])
    result = cc.apply_plan(stale, min_lock_age_s=600)
    assert result.removed == [] and len(result.skipped) == 1
    assert (tree.path("locked_stale") / "model.hlo_module.pb.lock").exists()


def test_remove_other_versions(tree):
    scan = cc.scan_cache(tree.root)
    plan = cc.plan_remove_other_versions(scan, keep_version=CURRENT, compilers=[])
    assert keys(plan) == {tree.key("old_done"), tree.key("old_failed"), tree.key("legacy")}
    assert dict(plan.kept) == {tree.key("old_locked_fresh"): "locked by a compile that may be running"}
    cc.apply_plan(plan)
    after = cc.scan_cache(tree.root)
    assert {e.version_dir for e in after.entries} == {CUR_DIR, OLD_DIR}
    assert not (tree.root / LEGACY_DIR).exists()  # emptied, so removed
    assert (tree.root / OLD_DIR).is_dir()  # still holds the locked entry
    assert len(after.filter(versions=[CUR_DIR])) == 8


def test_other_versions_needs_a_known_version(tree):
    scan = cc.scan_cache(tree.root)
    if cc.installed_compiler_version() is None:  # the CPU stand-in: no neuronx-cc
        with pytest.raises(cc.CompileCacheError, match="pass the version to keep"):
            cc.plan_remove_other_versions(scan)
    else:
        assert cc.plan_remove_other_versions(scan).params["keep"] == cc.installed_compiler_version()
    with pytest.raises(cc.CompileCacheError, match="a typo would remove everything"):
        cc.plan_remove_other_versions(scan, keep_version="2.99.0+deadbeef")
    assert cc.same_compiler_version(OLD, OLD.split("+")[0])
    assert not cc.same_compiler_version(OLD, CURRENT)


def test_prune_older_than_days(tree):
    plan = cc.plan_prune(cc.scan_cache(tree.root), older_than_days=50)
    assert keys(plan) == {tree.key("old_done"), tree.key("old_failed"), tree.key("legacy")}
    assert (tree.key("old_locked_fresh"), "locked") in plan.kept


def test_prune_lru_to_budget(tree):
    scan = cc.scan_cache(tree.root)
    legacy, old_done = scan.find(tree.key("legacy")), scan.find(tree.key("old_done"))
    # Just under the total: only the least recently used entry (the 2022 one) goes.
    plan = cc.plan_prune(scan, max_disk_bytes=scan.disk_bytes - 1)
    assert keys(plan) == {legacy.key}
    # Two entries' worth: the two oldest, in order of last use.
    plan = cc.plan_prune(scan, max_disk_bytes=scan.disk_bytes - legacy.disk_bytes - 1)
    assert [i.key for i in plan.items] == [legacy.key, old_done.key]
    # Budget 0: everything but the locked entries, which stay whatever the budget.
    plan = cc.plan_prune(scan, max_disk_bytes=0)
    locked = {e.key for e in scan.entries if e.state == "locked"}
    assert keys(plan) == {e.key for e in scan.entries} - locked
    assert any("above the budget" in n for n in plan.notes)
    cc.apply_plan(plan)
    assert {e.key for e in cc.scan_cache(tree.root).entries} == locked
    with pytest.raises(cc.CompileCacheError, match="needs a size budget"):
        cc.plan_prune(scan)


def test_apply_skips_an_entry_locked_after_planning(tree):
    plan = cc.plan_remove_failed(cc.scan_cache(tree.root))
    (tree.path("failed") / "model.hlo_module.pb.lock").write_bytes(b"")  # a retry started
    result = cc.apply_plan(plan)
    assert (tree.key("failed"), "locked since the plan was made") in result.skipped
    assert tree.path("failed").is_dir()
    assert tree.key("old_failed") in result.removed


def test_apply_skips_an_entry_whose_state_changed(tree):
    plan = cc.plan_remove_failed(cc.scan_cache(tree.root))
    entry = tree.path("failed")  # recompiled successfully with --retry_failed_compilation
    (entry / "model.log").unlink()
    (entry / "model.neff").write_bytes(b"n")
    (entry / "model.done").write_bytes(b"")
    result = cc.apply_plan(plan)
    assert (tree.key("failed"), "changed since the plan: now done") in result.skipped
    assert (entry / "model.neff").exists()


def test_apply_refuses_paths_outside_the_root_and_symlinks(tree):
    plan = cc.Plan("tampered", tree.root, items=[
        cc.PlanItem("outside", tree.outside, "entry", "", 0, 0),
        cc.PlanItem("secret", tree.outside / "secret.txt", "lock", "", 0, 0),
        cc.PlanItem("escape", tree.root / "escape", "entry", "", 0, 0),
        cc.PlanItem("through-link", tree.root / "escape" / "entry_dir", "entry", "", 0, 0),
        cc.PlanItem("linked-entry", tree.root / CUR_DIR / "MODULE_eeee0000eeee0000eeee+ede6753c",
                    "entry", "", 0, 0),
        cc.PlanItem("root", tree.root, "entry", "", 0, 0),
    ])
    result = cc.apply_plan(plan, min_lock_age_s=0)
    assert result.removed == []
    reasons = dict(result.skipped)
    assert set(reasons) == {"outside", "secret", "escape", "through-link", "linked-entry", "root"}
    assert "not inside the cache root" in reasons["outside"]
    assert "symbolic link" in reasons["escape"] and "symbolic link" in reasons["linked-entry"]
    assert "symbolic link" in reasons["through-link"]
    assert tree.root.is_dir() and (tree.root / CUR_DIR / "MODULE_eeee0000eeee0000eeee+ede6753c").is_symlink()


def test_check_inside(tree):
    entry = tree.path("done_hex")
    assert cc.check_inside(entry, tree.root) == entry.resolve()
    for bad in (tree.root, tree.outside, tree.root / "escape", tree.root / ".." / "outside",
                tree.root / "escape" / "secret.txt"):
        with pytest.raises(cc.CompileCacheError, match="refusing"):
            cc.check_inside(bad, tree.root)


def test_every_cleanup_together_keeps_fresh_locks_and_outside(tree):
    scan = cc.scan_cache(tree.root)
    plans = [cc.plan_clear_stale_locks(scan, compilers=[]), cc.plan_remove_failed(scan),
             cc.plan_remove_other_versions(scan, CURRENT, compilers=[]),
             cc.plan_prune(scan, max_disk_bytes=0, older_than_days=0)]
    for plan in plans:
        cc.apply_plan(plan)
    left = cc.scan_cache(tree.root)
    # Every plan came from the same scan: the prune saw the stale-locked entry locked and kept
    # it; the lock-clearing plan took its lock.
    assert {e.key for e in left.entries} == {tree.key("locked_fresh"), tree.key("old_locked_fresh"),
                                             tree.key("locked_stale")}
    assert left.find(tree.key("locked_stale")).state == "incomplete"
    assert (tree.path("locked_fresh") / "model.hlo_module.pb.lock").exists()
    assert {u.key for u in left.unknown} >= {"escape", f"{CUR_DIR}/MODULE_eeee0000eeee0000eeee+ede6753c"}


def test_network_filesystem_note(tree, tmp_path):
    mounts = tmp_path / "mounts"  # /proc/mounts as on a host with the cache on EFS
    mounts.write_text(f"/dev/vda1 / ext4 rw 0 0\n"
                      f"fs-0123.efs.us-east-1.amazonaws.com:/ {tree.root} nfs4 rw,vers=4.1 0 0\n")
    assert cc.filesystem_type(tree.root / CUR_DIR, mounts) == "nfs4"
    notes = cc.scan_cache(tree.root, mounts=mounts).notes
    assert any("network filesystem (nfs4)" in n for n in notes)
    assert any("--retry_failed_compilation" in n for n in notes)
    assert any("2022-era" in n for n in notes)
    assert any(n.startswith("1 lock(s) older than 30 min") for n in notes)


def test_filesystem_type_reads_proc_mounts(tmp_path):
    fs = cc.filesystem_type(tmp_path)
    assert fs and fs == cc.filesystem_type(tmp_path / "nested" / "path")
    with open("/proc/mounts") as f:
        assert fs in {line.split()[2] for line in f}

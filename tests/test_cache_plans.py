"""Cleanup plans and their application on real cache trees: what goes, what stays, and that
nothing outside the root (symlink targets included) is ever touched; nonsense values refused."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from helpers.cache.demo import neff_bytes
from helpers.cache.location import CompileCacheError, filesystem_type, installed_compiler_version, same_compiler_version
from helpers.cache.plans import (
    UNKNOWN_KEPT,
    Plan,
    PlanItem,
    apply_plan,
    check_inside,
    compiler_processes,
    lock_is_stale,
    plan_clear_stale_locks,
    plan_prune,
    plan_remove_failed,
    plan_remove_other_versions,
)
from helpers.cache.scan import scan_cache
from helpers.cache.units import human_bytes, iso_time
from mnist_mlp.common.platform_paths import PLATFORM_ROOT_ENV
from tests.cache_trees import CUR_DIR, CURRENT, LEGACY_DIR, LINKED, OLD, OLD_DIR
from tests.proc_trees import fake_process

# Whether a compiler runs on this machine decides what a lock removal may do (no lock is stale
# while one runs). A compiler on another platform root (WORKBOOK_PLATFORM_ROOT) runs on another
# machine: the trn1 double's compiles do not count here, nor this module's stand-in elsewhere.


@pytest.fixture
def fake_compiler(tmp_path, monkeypatch):
    """A real process on this host whose argv[0] is neuronx-cc, as /proc shows a compile, on a
    platform root of this test's own (set here and inherited): no other test's cache tool sees it."""
    monkeypatch.setenv(PLATFORM_ROOT_ENV, str(tmp_path / "platform"))
    proc = subprocess.Popen(["bash", "-c", "exec -a neuronx-cc sleep 60"])
    deadline = time.monotonic() + 60  # a guard: the loop ends when /proc shows it
    while not any(pid == proc.pid for pid, _ in compiler_processes()):
        assert time.monotonic() < deadline, "the stand-in compiler process never showed in /proc"
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


def keys(plan):
    return {i.key for i in plan.items}


def test_remove_failed_plan_then_apply(tree):
    scan = scan_cache(tree.root)
    plan = plan_remove_failed(scan)
    failed = {tree.key("failed"), tree.key("failed_with_link"), tree.key("old_failed")}
    assert keys(plan) == failed
    assert plan.size_bytes == sum(scan.find(k).size_bytes for k in failed)
    assert "remove 3 item(s)" in plan.render()
    assert all(tree.root.joinpath(k).exists() for k in failed)  # planning removes nothing

    result = apply_plan(plan)
    assert set(result.removed) == failed and result.skipped == []
    assert result.size_bytes == plan.size_bytes
    assert not any(tree.root.joinpath(k).exists() for k in failed)
    after = scan_cache(tree.root)
    assert after.by_state() == {"done": 5, "failed": 0, "locked": 3, "incomplete": 1, "unknown": 0}


def test_stale_lock_cleared_fresh_lock_kept(tree):
    scan = scan_cache(tree.root)
    plan = plan_clear_stale_locks(scan, min_age_s=30 * 60, compilers=[])
    stale_lock = f"{tree.key('locked_stale')}/model.hlo_module.pb.lock"
    assert keys(plan) == {stale_lock}
    kept = dict(plan.kept)
    assert "fresh lock" in kept[f"{tree.key('locked_fresh')}/model.hlo_module.pb.lock"]
    assert f"{tree.key('old_locked_fresh')}/model.hlo_module.pb.lock" in kept

    apply_plan(plan)
    entry = tree.path("locked_stale")
    assert not (entry / "model.hlo_module.pb.lock").exists()
    assert (entry / "model.hlo_module.pb").exists()  # only the lock goes: the HLO recompiles
    assert scan_cache(tree.root).find(tree.key("locked_stale")).state == "incomplete"
    assert (tree.path("locked_fresh") / "model.hlo_module.pb.lock").exists()


def test_no_lock_is_stale_while_a_compiler_runs(tree, fake_compiler):
    scan = scan_cache(tree.root)
    plan = plan_clear_stale_locks(scan, min_age_s=600)  # reads /proc itself
    assert plan.items == []
    assert any("compiler is running" in n and str(fake_compiler.pid) in n for n in plan.notes)
    # A plan made while nothing ran is re-checked when applied: the compile now running wins.
    stale = plan_clear_stale_locks(scan, min_age_s=600, compilers=[])
    result = apply_plan(stale, min_lock_age_s=600)
    assert result.removed == [] and len(result.skipped) == 1
    why = result.skipped[0][1]  # the compilers note (other compiles on this host may show too)
    assert why.startswith("a compiler is running (pid ") and f"pid {fake_compiler.pid}: " in why
    assert (tree.path("locked_stale") / "model.hlo_module.pb.lock").exists()


def test_a_compiler_on_another_platform_root_runs_on_another_machine(tmp_path, monkeypatch):
    """The seam's rule (mnist_mlp/common/platform_paths.py), on a fake /proc: a compiler counts
    when its WORKBOOK_PLATFORM_ROOT is ours (unset in both: equal), or its environ is unreadable."""
    proc, here, there = tmp_path / "proc", str(tmp_path / "here"), str(tmp_path / "there")
    fake_process(proc, 101, ["neuronx-cc", "compile"], {}, environ={PLATFORM_ROOT_ENV: there})
    fake_process(proc, 102, ["/opt/bin/neuron_parallel_compile", "python3", "train.py"], {},
                 environ={"PATH": "/usr/bin", PLATFORM_ROOT_ENV: here})
    fake_process(proc, 103, ["python3", "/opt/bin/neuron_cc_wrapper"], {})  # environ unreadable
    fake_process(proc, 104, ["neuronx-cc", "compile"], {}, environ={"PATH": "/usr/bin"})
    fake_process(proc, 105, ["python3", "train.py"], {}, environ={PLATFORM_ROOT_ENV: here})  # no compiler
    monkeypatch.setenv(PLATFORM_ROOT_ENV, here)
    assert sorted(compiler_processes(proc)) == [
        (102, "/opt/bin/neuron_parallel_compile python3 train.py"), (103, "python3 /opt/bin/neuron_cc_wrapper")]
    monkeypatch.delenv(PLATFORM_ROOT_ENV)
    assert sorted(pid for pid, _ in compiler_processes(proc)) == [103, 104]  # unset here and there
    (proc / "103" / "environ").mkdir()  # there but unreadable (as another user's is): it counts
    assert sorted(pid for pid, _ in compiler_processes(proc)) == [103, 104]


def test_remove_other_versions(tree):
    scan = scan_cache(tree.root)
    plan = plan_remove_other_versions(scan, keep_version=CURRENT, compilers=[])
    assert keys(plan) == {tree.key("old_done"), tree.key("old_failed"), tree.key("legacy")}
    assert dict(plan.kept) == {tree.key("old_locked_fresh"): "locked by a compile that may be running"}
    apply_plan(plan)
    after = scan_cache(tree.root)
    assert {e.version_dir for e in after.entries} == {CUR_DIR, OLD_DIR}
    assert not (tree.root / LEGACY_DIR).exists()  # emptied, so removed
    assert (tree.root / OLD_DIR).is_dir()  # still holds the locked entry
    assert len(after.filter(versions=[CUR_DIR])) == 8


def test_other_versions_needs_a_known_version(tree):
    scan = scan_cache(tree.root)
    if installed_compiler_version() is None:  # the CPU stand-in: no neuronx-cc
        with pytest.raises(CompileCacheError, match="pass the version to keep"):
            plan_remove_other_versions(scan)
    else:
        assert plan_remove_other_versions(scan).params["keep"] == installed_compiler_version()
    with pytest.raises(CompileCacheError, match="a typo would remove everything"):
        plan_remove_other_versions(scan, keep_version="2.99.0+deadbeef")
    assert same_compiler_version(OLD, OLD.split("+")[0])
    assert not same_compiler_version(OLD, CURRENT)


def test_prune_older_than_days(tree):
    plan = plan_prune(scan_cache(tree.root), older_than_days=50)
    assert keys(plan) == {tree.key("old_done"), tree.key("old_failed"), tree.key("legacy")}
    assert (tree.key("old_locked_fresh"), "locked") in plan.kept


def test_prune_lru_to_budget(tree):
    scan = scan_cache(tree.root)
    legacy, old_done = scan.find(tree.key("legacy")), scan.find(tree.key("old_done"))
    # Just under the total: only the least recently used entry (the 2022 one) goes.
    plan = plan_prune(scan, max_disk_bytes=scan.disk_bytes - 1)
    assert keys(plan) == {legacy.key}
    # Two entries' worth: the two oldest, in order of last use.
    plan = plan_prune(scan, max_disk_bytes=scan.disk_bytes - legacy.disk_bytes - 1)
    assert [i.key for i in plan.items] == [legacy.key, old_done.key]
    # A one-byte budget: everything but the locked entries, which stay whatever the budget.
    plan = plan_prune(scan, max_disk_bytes=1)
    locked = {e.key for e in scan.entries if e.state == "locked"}
    assert keys(plan) == {e.key for e in scan.entries} - locked
    assert any("above the budget" in n for n in plan.notes)
    apply_plan(plan)
    assert {e.key for e in scan_cache(tree.root).entries} == locked
    with pytest.raises(CompileCacheError, match="needs a size budget"):
        plan_prune(scan)


def test_apply_skips_an_entry_locked_after_planning(tree):
    plan = plan_remove_failed(scan_cache(tree.root))
    (tree.path("failed") / "model.hlo_module.pb.lock").write_bytes(b"")  # a retry started
    result = apply_plan(plan)
    assert (tree.key("failed"), "locked since the plan was made") in result.skipped
    assert tree.path("failed").is_dir()
    assert tree.key("old_failed") in result.removed


def test_apply_skips_an_entry_whose_state_changed(tree):
    plan = plan_remove_failed(scan_cache(tree.root))
    entry = tree.path("failed")  # recompiled successfully with --retry_failed_compilation
    (entry / "model.log").unlink()
    (entry / "model.neff").write_bytes(neff_bytes())  # the stored failure, replaced by a NEFF
    (entry / "model.done").write_bytes(b"")
    result = apply_plan(plan)
    assert (tree.key("failed"), "changed since the plan: now done") in result.skipped
    assert (entry / "model.neff").exists()


def test_apply_refuses_paths_outside_the_root_and_symlinks(tree):
    plan = Plan("tampered", tree.root, items=[
        PlanItem("outside", tree.outside, "entry", "", 0, 0),
        PlanItem("secret", tree.outside / "secret.txt", "lock", "", 0, 0),
        PlanItem("escape", tree.root / "escape", "entry", "", 0, 0),
        PlanItem("through-link", tree.root / "escape" / "entry_dir", "entry", "", 0, 0),
        PlanItem("linked-entry", tree.root / LINKED,
                    "entry", "", 0, 0),
        PlanItem("root", tree.root, "entry", "", 0, 0),
    ])
    result = apply_plan(plan, min_lock_age_s=0)
    assert result.removed == []
    reasons = dict(result.skipped)
    assert set(reasons) == {"outside", "secret", "escape", "through-link", "linked-entry", "root"}
    assert "not inside the cache root" in reasons["outside"]
    assert "symbolic link" in reasons["escape"] and "symbolic link" in reasons["linked-entry"]
    assert "symbolic link" in reasons["through-link"]
    assert tree.root.is_dir() and (tree.root / LINKED).is_symlink()


def test_check_inside(tree):
    entry = tree.path("done_hex")
    assert check_inside(entry, tree.root) == entry.resolve()
    for bad in (tree.root, tree.outside, tree.root / "escape", tree.root / ".." / "outside",
                tree.root / "escape" / "secret.txt"):
        with pytest.raises(CompileCacheError, match="refusing"):
            check_inside(bad, tree.root)


def test_every_cleanup_together_keeps_fresh_locks_and_outside(tree):
    scan = scan_cache(tree.root)
    plans = [plan_clear_stale_locks(scan, compilers=[]), plan_remove_failed(scan),
             plan_remove_other_versions(scan, CURRENT, compilers=[]),
             plan_prune(scan, max_disk_bytes=1, older_than_days=0)]
    for plan in plans:
        apply_plan(plan)
    left = scan_cache(tree.root)
    # Every plan came from the same scan: the prune saw the stale-locked entry locked and kept
    # it; the lock-clearing plan took its lock.
    assert {e.key for e in left.entries} == {tree.key("locked_fresh"), tree.key("old_locked_fresh"),
                                             tree.key("locked_stale")}
    assert left.find(tree.key("locked_stale")).state == "incomplete"
    assert (tree.path("locked_fresh") / "model.hlo_module.pb.lock").exists()
    assert {u.key for u in left.unknown} >= {"escape", LINKED}


def test_network_filesystem_note(tree, tmp_path):
    mounts = tmp_path / "mounts"  # /proc/mounts as on a host with the cache on EFS
    mounts.write_text(f"/dev/vda1 / ext4 rw 0 0\n"
                      f"fs-0123.efs.us-east-1.amazonaws.com:/ {tree.root} nfs4 rw,vers=4.1 0 0\n")
    assert filesystem_type(tree.root / CUR_DIR, mounts) == "nfs4"
    notes = scan_cache(tree.root, mounts=mounts).notes
    assert any("network filesystem (nfs4)" in n for n in notes)
    assert any("--retry_failed_compilation" in n for n in notes)
    assert any("2022-era" in n for n in notes)
    assert any(n.startswith("1 lock(s) older than 30 min") for n in notes)


def test_filesystem_type_reads_proc_mounts(tmp_path):
    fs = filesystem_type(tmp_path)
    assert fs and fs == filesystem_type(tmp_path / "nested" / "path")
    with open("/proc/mounts") as f:
        assert fs in {line.split()[2] for line in f}


@pytest.mark.parametrize("make", [
    lambda s: plan_prune(s, max_disk_bytes=0),
    lambda s: plan_prune(s, max_disk_bytes=-5),
    lambda s: plan_prune(s, older_than_days=-1),
    lambda s: plan_prune(s, older_than_days=float("nan")),
    lambda s: plan_prune(s, max_disk_bytes="lots"),
    lambda s: plan_clear_stale_locks(s, min_age_s=-60, compilers=[]),
    lambda s: plan_remove_other_versions(s, CURRENT, min_lock_age_s=float("-inf"), compilers=[]),
    lambda s: apply_plan(plan_remove_failed(s), min_lock_age_s=-1),
], ids=["budget 0", "budget < 0", "days < 0", "days NaN", "budget text", "lock age < 0",
        "versions lock age", "apply lock age"])
def test_nonsense_values_are_refused_and_nothing_goes(tree, make):
    scan = scan_cache(tree.root)
    with pytest.raises(CompileCacheError, match="must be a number"):
        make(scan)
    assert scan_cache(tree.root).by_state() == scan.by_state()


def test_removal_failing_part_way_is_reported_and_not_left_done(tree, immutable):
    entry = tree.path("old_done")
    immutable(entry / "model.hlo_module.pb")  # unlinking it fails, as root too
    plan = plan_prune(scan_cache(tree.root), older_than_days=50)
    result = apply_plan(plan)
    failed = dict(result.failed)
    assert set(failed) == {tree.key("old_done")}
    assert "removal failed part way" in failed[tree.key("old_done")]
    assert "no longer marked done" in failed[tree.key("old_done")]
    assert set(result.removed) == {tree.key("old_failed"), tree.key("legacy")}  # the rest went
    assert "FAILED " + tree.key("old_done") in result.render()
    assert (entry / "model.hlo_module.pb").exists()
    assert scan_cache(tree.root).find(tree.key("old_done")).state != "done"


# ---- the boundaries of what prune and the lock rules delete (each was once moved by one
# character without a test failing: docs/mutation-testing.md)

def test_the_size_budget_is_inclusive(tree):
    """A cache exactly at its budget fits: nothing goes, and no note says it is above. Pruning
    stops as soon as the cache fits, so an entry that brings it exactly to the budget is the
    last to go."""
    scan = scan_cache(tree.root)
    legacy = scan.find(tree.key("legacy"))  # the least recently used entry
    at_budget = plan_prune(scan, max_disk_bytes=scan.disk_bytes)
    assert at_budget.items == [] and at_budget.notes == []
    one_entry_over = plan_prune(scan, max_disk_bytes=scan.disk_bytes - legacy.disk_bytes)
    assert [i.key for i in one_entry_over.items] == [legacy.key]


def test_a_lock_exactly_the_stale_age_is_stale(tree):
    """min_age_s is "at least this old": a lock exactly that old is stale, a second younger not."""
    assert lock_is_stale(600.0, 600.0, compilers=[])
    assert not lock_is_stale(599.0, 600.0, compilers=[])
    assert not lock_is_stale(None, 0.0, compilers=[])  # no lock at all is never stale
    scan = scan_cache(tree.root)
    lock = tree.path("locked_stale") / "model.hlo_module.pb.lock"
    age = scan.scanned_at - lock.lstat().st_mtime  # as plan_clear_stale_locks computes it
    plan = plan_clear_stale_locks(scan, min_age_s=age, compilers=[])
    assert f"{tree.key('locked_stale')}/model.hlo_module.pb.lock" in keys(plan)


def test_an_entry_used_exactly_the_age_limit_ago_stays(tree):
    """older_than_days=50 removes what was last used MORE than 50 days ago: an entry used exactly
    50 days (to the second) before the scan stays; one second earlier, it goes."""
    entry = tree.path("old_done")
    now = float(int(time.time()))
    for used_at in (now - 50 * 86400, now - 50 * 86400 - 1):
        for path in (entry, *entry.rglob("*")):
            os.utime(path, (used_at, used_at), follow_symlinks=False)
        plan = plan_prune(scan_cache(tree.root, now=now), older_than_days=50)
        assert (tree.key("old_done") in keys(plan)) is (used_at < now - 50 * 86400)


# ---- what a reader sees: each plan's text, word for word (the CLI and the cache widget print
# render(); --json prints to_dict()). Sizes and times come from the scan, the words from here.

def item_line(scan, key, reason, kind="entry"):
    return f"    - {key}  [{kind}, {human_bytes(scan.find(key).size_bytes)}]  {reason}"


def remove_line(plan):
    return (f"  remove {len(plan.items)} item(s): {human_bytes(plan.size_bytes)} apparent, "
            f"{human_bytes(plan.disk_bytes)} on disk")


def test_the_failed_entries_plan_reads(tree):
    scan = scan_cache(tree.root, now=tree.now)
    plan = plan_remove_failed(scan)
    failed = sorted(tree.key(label) for label in ("failed", "failed_with_link", "old_failed"))
    assert plan.render() == "\n".join([
        f"Plan: remove failed entries in {tree.root}", remove_line(plan),
        *(item_line(scan, k, "failed compile (its cached failure blocks a retry)")
          for k in failed)])
    assert plan.size_bytes == sum(scan.find(k).size_bytes for k in failed)
    assert plan.disk_bytes == sum(scan.find(k).disk_bytes for k in failed)
    assert plan.to_dict() == {
        "action": "remove failed entries", "root": str(tree.root), "params": {},
        "size_bytes": plan.size_bytes, "disk_bytes": plan.disk_bytes,
        "items": [{"key": k, "path": str(tree.root / k), "kind": "entry",
                   "reason": "failed compile (its cached failure blocks a retry)",
                   "size_bytes": scan.find(k).size_bytes, "disk_bytes": scan.find(k).disk_bytes,
                   "expect_state": "failed"} for k in failed],
        "kept": [], "notes": []}
    assert Plan("nothing", tree.root).render() == (f"Plan: nothing in {tree.root}\n"
                                                   "  nothing to remove")


def test_the_stale_locks_plan_reads(tree):
    """The demo's locks: a stale one two hours old, fresh ones a minute and half a minute old."""
    scan = scan_cache(tree.root, now=tree.now)
    lock = "model.hlo_module.pb.lock"
    stale, fresh, old_fresh = (f"{tree.key(label)}/{lock}" for label in
                               ("locked_stale", "locked_fresh", "old_locked_fresh"))
    plan = plan_clear_stale_locks(scan, compilers=[])
    stale_path = tree.root / stale
    assert plan.render() == "\n".join([
        f"Plan: clear stale locks in {tree.root} (min_age=30 min)", remove_line(plan),
        f"    - {stale}  [lock, 0 B]  lock 120 min old, no compiler running",
        f"  keep {fresh}: fresh lock (1.0 min old < 30 min): a compile may be running",
        f"  keep {old_fresh}: fresh lock (0.5 min old < 30 min): a compile may be running"])
    item = plan.to_dict()["items"][0]
    assert item == {"key": stale, "path": str(stale_path), "kind": "lock",
                    "reason": "lock 120 min old, no compiler running",
                    "size_bytes": stale_path.lstat().st_size,
                    "disk_bytes": stale_path.lstat().st_blocks * 512, "expect_state": None}
    assert plan.to_dict()["kept"][0] == {
        "key": fresh, "why": "fresh lock (1.0 min old < 30 min): a compile may be running"}
    assert plan_clear_stale_locks(scan, min_age_s=90, compilers=[]).params == {"min_age": "1.5 min"}


def test_while_a_compiler_runs_the_locks_plan_names_the_first_three(tree):
    scan = scan_cache(tree.root, now=tree.now)
    long_command = "neuronx-cc compile --framework=XLA " + "x" * 100
    compilers = [(101, long_command), (102, "neuronx-cc b"), (103, "walrus_driver c"),
                 (104, "neuronx-cc d")]
    plan = plan_clear_stale_locks(scan, compilers=compilers)
    note = (f"a compiler is running (pid 101: {long_command[:80]}; pid 102: neuronx-cc b; "
            "pid 103: walrus_driver c): no lock is stale while it runs")
    assert plan.notes == [note] and plan.items == []
    locks = sorted(f"{tree.key(label)}/model.hlo_module.pb.lock"
                   for label in ("locked_stale", "locked_fresh", "old_locked_fresh"))
    assert plan.render() == "\n".join([
        f"Plan: clear stale locks in {tree.root} (min_age=30 min)", "  nothing to remove",
        *(f"  keep {k}: a compiler is running" for k in locks), f"  note: {note}"])


def test_the_other_versions_plan_reads(tree):
    scan = scan_cache(tree.root, now=tree.now)
    plan = plan_remove_other_versions(scan, keep_version=CURRENT, compilers=[])
    gone = [(tree.key("legacy"), LEGACY_DIR), (tree.key("old_failed"), OLD_DIR),
            (tree.key("old_done"), OLD_DIR)]
    assert plan.render() == "\n".join([
        f"Plan: remove other compiler versions in {tree.root} (keep={CURRENT})", remove_line(plan),
        *(item_line(scan, k, f"compiler {d}, not {CURRENT}") for k, d in gone),
        f"  keep {tree.key('old_locked_fresh')}: locked by a compile that may be running"])
    assert [i.expect_state for i in plan.items] == ["done", "failed", "done"]


def test_the_prune_plan_reads(tree):
    """Age first (the demo's 400, 100 and 90 days), then least recently used to the budget,
    the locked entries kept and the note saying the cache stays above the budget."""
    scan = scan_cache(tree.root, now=tree.now)
    plan = plan_prune(scan, max_disk_bytes=1, older_than_days=50)
    by_age = [(tree.key("legacy"), 400), (tree.key("old_done"), 100), (tree.key("old_failed"), 90)]
    by_use = [e.key for e in sorted(scan.entries, key=lambda e: e.last_used)
              if e.state != "locked" and e.key not in dict(by_age)]
    locked = sorted(e.key for e in scan.entries if e.state == "locked")
    left = scan.disk_bytes - plan.disk_bytes
    assert left == sum(scan.find(k).disk_bytes for k in locked)
    assert plan.render() == "\n".join([
        f"Plan: prune least recently used in {tree.root} (max_size=1 B, older_than_days=50.0)",
        remove_line(plan),
        *(item_line(scan, k, f"last used {days} days ago") for k, days in by_age),
        *(item_line(scan, k, f"least recently used ({iso_time(scan.find(k).last_used)})")
          for k in by_use),
        *(f"  keep {k}: locked" for k in locked),
        f"  note: the cache stays at {human_bytes(left)} on disk, above the budget: what is left "
        "is locked"])
    assert plan_prune(scan, max_disk_bytes=5 * 2**30).params == {"max_size": "5.0 GiB"}


def test_what_apply_reports_reads(tree):
    plan = plan_remove_failed(scan_cache(tree.root))
    (tree.path("failed") / "model.hlo_module.pb.lock").write_bytes(b"")  # a retry started
    result = apply_plan(plan)
    gone = sorted({tree.key("failed_with_link"), tree.key("old_failed")})
    assert sorted(result.removed) == gone
    assert result.render() == (
        f"Removed 2 item(s), freed {human_bytes(result.size_bytes)} apparent, "
        f"{human_bytes(result.disk_bytes)} on disk\n"
        f"  skipped {tree.key('failed')}: locked since the plan was made")
    assert result.to_dict() == {
        "removed": result.removed, "skipped": [{"key": tree.key("failed"),
                                                "why": "locked since the plan was made"}],
        "failed": [], "size_bytes": result.size_bytes, "disk_bytes": result.disk_bytes}
    assert result.size_bytes == sum(i.size_bytes for i in plan.items if i.key in gone)
    assert result.disk_bytes == sum(i.disk_bytes for i in plan.items if i.key in gone)


def test_a_removal_that_fails_says_why_with_its_errno(tmp_path, immutable):
    """A lock that cannot be unlinked, and an entry that cannot be removed completely: the
    error keeps the system's errno, names the file it stopped at and counts what is left; the
    entry's done marker went first, so it no longer looks compiled (whichever file rmtree meets
    first)."""
    import errno

    from helpers.cache.plans import remove_inside

    root = tmp_path / "cache"
    entry = root / f"neuronxcc-{CURRENT}" / "MODULE_ab+cd"
    entry.mkdir(parents=True)
    (entry / "model.done").write_bytes(b"")
    (entry / "model.neff").write_bytes(neff_bytes())  # after the marker: listed first on tmpfs
    lock = entry / "model.hlo_module.pb.lock"
    lock.write_bytes(b"")
    immutable(lock)
    with pytest.raises(OSError) as err:
        remove_inside(lock, root)
    assert (err.value.errno, err.value.strerror) == (errno.EPERM, "cannot remove it: Operation "
                                                                  "not permitted")
    immutable(entry / "model.neff")
    with pytest.raises(OSError) as err:
        remove_inside(entry, root)
    assert err.value.errno == errno.EPERM
    assert sorted(p.name for p in entry.iterdir()) == ["model.hlo_module.pb.lock", "model.neff"]
    assert err.value.strerror in [  # rmtree stops at the first immutable file it meets
        f"removal failed part way: Operation not permitted ({name}); 2 file(s) left in place, no "
        "longer marked done" for name in ("model.neff", "model.hlo_module.pb.lock")]


# ---- what each cleanup refuses, word for word, and the entries it passes over

@pytest.mark.parametrize("make, message", [
    (lambda s: plan_prune(s, max_disk_bytes=0), "the size budget must be a number more than 0, "
                                                "got 0"),
    (lambda s: plan_prune(s, older_than_days=-1), "--older-than-days must be a number 0 or more, "
                                                  "got -1"),
    (lambda s: plan_clear_stale_locks(s, min_age_s="soon", compilers=[]),
     "the lock age must be a number 0 or more, got 'soon'"),
    (lambda s: plan_remove_other_versions(s, CURRENT, min_lock_age_s=-1.5, compilers=[]),
     "the lock age must be a number 0 or more, got -1.5"),
    (lambda s: plan_prune(s), "prune needs a size budget (max_disk_bytes / --max-size 5G) and/or "
                              "an age (older_than_days / --older-than-days 30)"),
    (lambda s: apply_plan(plan_remove_failed(s), min_lock_age_s=-1),
     "the lock age must be a number 0 or more, got -1"),
])
def test_what_a_refusal_says(tmp_path, make, message):
    with pytest.raises(CompileCacheError) as err:
        make(scan_cache(tmp_path))
    assert str(err.value) == message


def neuronx_cc_installed(monkeypatch, tmp_path, version):
    """neuronx-cc's installed-package record on the path, as pip leaves it on a Trainium host."""
    info = tmp_path / "site" / f"neuronx_cc-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: neuronx-cc\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert installed_compiler_version() == version


def test_the_version_to_keep_is_the_installed_compiler_unless_given(tree, tmp_path, monkeypatch):
    """By default the installed neuronx-cc's entries stay; a version with no entries may still be
    kept when it is the installed one; without neuronx-cc, or for a version neither present nor
    installed (a typo), the plan is refused and names the versions present."""
    scan = scan_cache(tree.root, now=tree.now)
    present = ", ".join(sorted({CURRENT, OLD}))
    (tmp_path / "empty").mkdir()
    if installed_compiler_version() is None:
        with pytest.raises(CompileCacheError) as err:
            plan_remove_other_versions(scan, compilers=[])
        assert str(err.value) == (
            "neuronx-cc is not installed here, so the current compiler version is unknown: pass "
            f"the version to keep (--keep-version / keep_version=), one of: {present}")
        with pytest.raises(CompileCacheError, match=r"one of: \(no neuronxcc-\* directories\)$"):
            plan_remove_other_versions(scan_cache(tmp_path / "empty"), compilers=[])
    with pytest.raises(CompileCacheError) as err:
        plan_remove_other_versions(scan, keep_version="2.99.0+deadbeef", compilers=[])
    assert str(err.value) == (
        f"no entries of compiler version '2.99.0+deadbeef' in {tree.root}, and it is not the "
        f"installed one: a typo would remove everything. Versions present: {present}")
    with pytest.raises(CompileCacheError, match="Versions present: none$"):
        plan_remove_other_versions(scan_cache(tmp_path / "empty"), keep_version="2.99.0",
                                   compilers=[])
    neuronx_cc_installed(monkeypatch, tmp_path, OLD)
    plan = plan_remove_other_versions(scan, compilers=[])
    assert plan.params == {"keep": OLD}
    assert tree.key("old_done") not in keys(plan) and tree.key("done_hex") in keys(plan)
    newer = plan_remove_other_versions(scan, keep_version=OLD.split("+")[0], compilers=[])
    assert keys(newer) == keys(plan)
    neuronx_cc_installed(monkeypatch, tmp_path / "newer", "2.30.1+abc")
    keep_new = plan_remove_other_versions(scan, keep_version="2.30.1", compilers=[])
    assert tree.key("done_hex") in keys(keep_new) and tree.key("old_done") in keys(keep_new)


def test_other_versions_pass_over_torch_xla_files_unknown_and_locked_entries(tree, fake_compiler):
    """torch-xla's own cache files are not neuronx-cc's; an entry nothing can identify stays; an
    old entry with a lock stays while a compiler runs (found in /proc) or the lock is fresh. Each
    passed over, the entries after it are still planned."""
    (tree.root / "1234567890123456789").write_bytes(b"an XLA executable")  # sorts first
    old = tree.root / OLD_DIR
    (old / "MODULE_0000000000000000001+d41d8cd9").mkdir()
    (old / "MODULE_0000000000000000001+d41d8cd9" / "model.neff").write_bytes(b"hello\n")
    stale = old / "MODULE_0000000000000000002+d41d8cd9"
    stale.mkdir()
    (stale / "model.hlo_module.pb").write_bytes(b"hlo")
    (stale / "model.hlo_module.pb.lock").write_bytes(b"")
    os.utime(stale / "model.hlo_module.pb.lock", (tree.now - 7200, tree.now - 7200))
    scan = scan_cache(tree.root, now=tree.now)
    gone = {tree.key("legacy"), tree.key("old_done"), tree.key("old_failed")}
    while_compiling = plan_remove_other_versions(scan, CURRENT)  # reads /proc: neuronx-cc runs
    assert keys(while_compiling) == gone
    assert dict(while_compiling.kept) == {
        f"{OLD_DIR}/{stale.name}": "locked by a compile that may be running",
        f"{OLD_DIR}/MODULE_0000000000000000001+d41d8cd9": UNKNOWN_KEPT,
        tree.key("old_locked_fresh"): "locked by a compile that may be running"}
    idle = plan_remove_other_versions(scan, CURRENT, compilers=[])
    assert keys(idle) == gone | {f"{OLD_DIR}/{stale.name}"}


def test_a_lock_gone_since_the_scan_is_passed_over(tree):
    """Between the scan and the plan a compile finished and took its lock away: that lock is
    neither planned nor kept, and the locks after it are judged as usual."""
    second = tree.path("locked_stale") / "model.neff.lock"  # a second lock in the stale entry
    second.write_bytes(b"")
    os.utime(second, (tree.now - 7200, tree.now - 7200))
    scan = scan_cache(tree.root, now=tree.now)
    (tree.path("locked_fresh") / "model.hlo_module.pb.lock").unlink()  # sorts before the stale one
    (tree.path("locked_stale") / "model.hlo_module.pb.lock").unlink()  # sorts before model.neff's
    plan = plan_clear_stale_locks(scan, compilers=[])
    assert keys(plan) == {f"{tree.key('locked_stale')}/model.neff.lock"}
    assert [k for k, _ in plan.kept] == [f"{tree.key('old_locked_fresh')}/model.hlo_module.pb.lock"]


def test_lock_and_entry_ages_as_printed(tree):
    """A lock 20 minutes old is '20.0 min old'; a lock's on-disk size is its allocated blocks; an
    entry last used 60.5 days (and ten seconds) ago is '61 days'."""
    fresh = tree.path("locked_fresh") / "model.hlo_module.pb.lock"
    os.utime(fresh, (tree.now - 1200, tree.now - 1200))
    stale = tree.path("locked_stale") / "model.hlo_module.pb.lock"
    stale_time = stale.lstat().st_mtime
    stale.write_bytes(b"pid 4242\n" * 1000)
    os.utime(stale, (stale_time, stale_time))
    scan = scan_cache(tree.root, now=tree.now)
    plan = plan_clear_stale_locks(scan, compilers=[])
    assert dict(plan.kept)[f"{tree.key('locked_fresh')}/model.hlo_module.pb.lock"] == (
        "fresh lock (20.0 min old < 30 min): a compile may be running")
    (item,) = plan.items
    assert (item.size_bytes, item.disk_bytes) == (9000, stale.lstat().st_blocks * 512)
    assert item.disk_bytes >= 9000
    used = tree.now - 60.5 * 86400 - 10
    for path in (tree.path("old_done"), *tree.path("old_done").rglob("*")):
        os.utime(path, (used, used), follow_symlinks=False)
    pruned = plan_prune(scan_cache(tree.root, now=tree.now), older_than_days=60)
    assert {i.key: i.reason for i in pruned.items}[tree.key("old_done")] == "last used 61 days ago"


def test_apply_judges_each_item_on_its_own(tree, immutable):
    """Each item is checked just before it goes and, when it cannot go, recorded with why, word
    for word; the items after it are still judged. A lock removed leaves its entry directory."""
    plan_age = 30 * 60
    scan = scan_cache(tree.root, now=tree.now)
    fresh_again = tree.path("locked_stale") / "model.hlo_module.pb.lock"
    os.utime(fresh_again, None)  # a compile took the lock again since the plan
    lock_only = tree.root / CUR_DIR / "MODULE_0000000000000000abcd+ede6753c"
    lock_only.mkdir()
    (lock_only / "model.hlo_module.pb.lock").write_bytes(b"")
    os.utime(lock_only / "model.hlo_module.pb.lock", (tree.now - 7200, tree.now - 7200))
    stale_locked = tree.path("done_big")  # a stale lock left by a killed compile: as other
    # versions plans such an entry (state "locked"), the lock old enough to be called stale
    (stale_locked / "model.hlo_module.pb.lock").write_bytes(b"")
    os.utime(stale_locked / "model.hlo_module.pb.lock", (tree.now - 7200, tree.now - 7200))
    changed = tree.path("failed")
    (changed / "model.log").unlink()
    (changed / "model.neff").write_bytes(neff_bytes())
    (changed / "model.done").write_bytes(b"")
    not_a_dir = tree.root / CUR_DIR / "MODULE_0000000000000000ffff+ede6753c"  # a file, not a dir
    not_a_dir.write_bytes(b"")
    stuck = tree.path("done_hex") / "model.neff"
    immutable(stuck)
    item = {e.key: e for e in scan.entries}

    def entry(label):
        e = item[tree.key(label)]
        return PlanItem(e.key, e.path, "entry", "", e.size_bytes, e.disk_bytes, e.state)

    plan = Plan("by hand", tree.root, items=[
        PlanItem("gone", tree.root / CUR_DIR / "MODULE_gone", "entry", "", 0, 0),
        entry("old_done"),
        PlanItem("fresh-again", fresh_again, "lock", "", 0, 0),
        entry("old_failed"),
        PlanItem("lock-only", lock_only / "model.hlo_module.pb.lock", "lock", "", 0, 0),
        PlanItem(stale_locked.name, stale_locked, "entry", "", 7, 9, "locked"),
        entry("failed"),
        entry("legacy"),
        PlanItem("outside", tree.outside, "entry", "", 0, 0),
        entry("bad_flags"),
        PlanItem("not-a-dir", not_a_dir, "entry", "", 0, 0),
        entry("incomplete"),
        PlanItem("stuck", stuck, "lock", "", 0, 0),
        entry("failed_with_link"),
    ])
    result = apply_plan(plan, min_lock_age_s=plan_age)
    assert result.removed == [tree.key("old_done"), tree.key("old_failed"), "lock-only",
                              stale_locked.name, tree.key("legacy"), tree.key("bad_flags"),
                              tree.key("incomplete"), tree.key("failed_with_link")]
    assert result.skipped == [
        ("gone", "already gone"), ("fresh-again", "the lock is fresh again"),
        (tree.key("failed"), "changed since the plan: now done"),
        ("outside", f"refusing {tree.outside}: it is not inside the cache root {tree.root}")]
    assert result.failed == [
        ("not-a-dir", f"cannot check it: [Errno 20] Not a directory: '{not_a_dir}'"),
        ("stuck", "cannot remove it: Operation not permitted")]
    assert lock_only.is_dir() and not any(lock_only.iterdir())  # the lock went, not its entry
    assert not stale_locked.exists() and changed.is_dir() and fresh_again.exists()


def test_apply_keeps_a_locked_entry_while_a_compiler_runs(tree, fake_compiler):
    stale_locked = tree.path("done_big")
    (stale_locked / "model.hlo_module.pb.lock").write_bytes(b"")
    os.utime(stale_locked / "model.hlo_module.pb.lock", (tree.now - 7200, tree.now - 7200))
    plan = Plan("by hand", tree.root, items=[
        PlanItem("entry", stale_locked, "entry", "", 0, 0, "locked")])
    assert apply_plan(plan).skipped == [("entry", "locked since the plan was made")]
    assert stale_locked.is_dir()


def test_check_inside_needs_both_to_exist(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "file").write_text("")
    with pytest.raises(FileNotFoundError):
        check_inside(tmp_path / "root" / "missing", tmp_path / "root")
    with pytest.raises(FileNotFoundError):
        check_inside(tmp_path / "file", tmp_path / "no-root")

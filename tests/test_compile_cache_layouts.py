"""Cache trees in the real Neuron layouts, built here, and how helpers.compile_cache reads them.

`build_cache_tree` (helpers.compile_cache.build_demo_cache plus symlinks and strays) is
shared by the other compile-cache tests (CLI, archives, widgets).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import compile_cache as cc

# The tree's entries come from helpers.compile_cache.DEMO_ENTRIES (notebook 03 shows the same
# tree); the states expected of them are spelled out here, independently.
CURRENT, OLD, LEGACY = cc.DEMO_VERSION, cc.DEMO_OLD_VERSION, cc.DEMO_LEGACY_VERSION
CUR_DIR = f"neuronxcc-{CURRENT}"
OLD_DIR = f"neuronxcc-{OLD}"
LEGACY_DIR = f"USER_neuroncc-{LEGACY}"
DAY = 86400
BIG_NEFF = 2 * 1024**3
FLAGS = ["--target=trn1", "--model-type=transformer"]
ENTRIES = cc.DEMO_ENTRIES
STATE_OF = {"done_hex": "done", "done_big": "done", "failed": "failed",
            "failed_with_link": "failed", "locked_fresh": "locked", "locked_stale": "locked",
            "incomplete": "incomplete", "bad_flags": "done", "old_done": "done",
            "old_failed": "failed", "old_locked_fresh": "locked", "legacy": "done"}


@dataclass
class CacheTree:
    root: Path
    outside: Path  # what the symlinks in the tree point at: must survive everything
    now: float

    def key(self, label: str) -> str:
        return ENTRIES[label].key

    def path(self, label: str) -> Path:
        return self.root / self.key(label)


def build_cache_tree(base: Path, labels=None) -> CacheTree:
    """The demo cache under base/cache, plus symlinks out of it to targets under base/outside
    and stray items (full tree only)."""
    now = time.time()
    root, outside = base / "cache", base / "outside"
    (outside / "entry_dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside the cache: must never be touched\n")
    (outside / "entry_dir" / "model.neff").write_bytes(b"outside neff")
    (outside / "entry_dir" / "model.done").write_bytes(b"")
    cc.build_demo_cache(root, labels, now=now)
    if labels is None:
        cur = root / CUR_DIR
        (cur / "MODULE_0b0ead5e2dfe538e89a4+2c2d707e" / "notes.lnk").symlink_to(outside / "secret.txt")
        (cur / "MODULE_eeee0000eeee0000eeee+ede6753c").symlink_to(outside / "entry_dir")
        (cur / "README.txt").write_text("a stray file\n")
        (root / "escape").symlink_to(outside)
        (root / "stray_dir").mkdir()
    return CacheTree(root, outside, now)


def outside_snapshot(tree: CacheTree) -> dict[str, str]:
    return {p.relative_to(tree.outside).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.outside.rglob("*")) if p.is_file()}


@pytest.fixture
def tree(tmp_path) -> CacheTree:
    """A cache tree in every layout; the other cache test modules import this fixture."""
    t = build_cache_tree(tmp_path)
    before = outside_snapshot(t)
    yield t
    # Whatever a test did, the symlink targets outside the root are all there, unchanged.
    assert outside_snapshot(t) == before
    assert (t.root / "escape").is_symlink()


def test_states_of_every_entry(tree):
    scan = cc.scan_cache(tree.root)
    states = {e.key: e.state for e in scan.entries}
    assert states == {tree.key(label): state for label, state in STATE_OF.items()}
    assert scan.by_state() == {"done": 5, "failed": 3, "locked": 3, "incomplete": 1}


def test_hashes_versions_and_flags(tree):
    scan = cc.scan_cache(tree.root)
    hexed = scan.find(tree.key("done_hex"))
    assert (hexed.compiler_version, hexed.module_hash, hexed.flags_hash, hexed.hash_style) == (
        CURRENT, "50a122f44c378e1567a4", "ede6753c", "hex")
    assert hexed.flags == FLAGS and hexed.flags_error is None
    old = scan.find(tree.key("old_done"))
    assert (old.compiler_version, old.module_hash, old.hash_style) == (
        OLD, "198775565831884870", "decimal")
    bad = scan.find(tree.key("bad_flags"))
    assert bad.flags is None and "not valid JSON" in bad.flags_error
    assert bad.state == "done"  # unreadable flags do not hide a good neff


def test_sizes_apparent_and_on_disk(tree):
    scan = cc.scan_cache(tree.root)
    big = scan.find(tree.key("done_big"))
    assert big.neff_bytes == BIG_NEFF
    assert big.size_bytes == BIG_NEFF + 300 + len(json.dumps(FLAGS))
    assert big.disk_bytes < 1024 * 1024  # sparse: the 2 GiB is apparent only
    small = scan.find(tree.key("done_hex"))
    assert small.neff_bytes == 8000 and small.hlo_bytes == 300
    assert small.disk_bytes >= small.size_bytes  # whole blocks
    versions = scan.by_version()
    assert set(versions) == {CUR_DIR, OLD_DIR, LEGACY_DIR}
    assert versions[CUR_DIR].size_bytes > BIG_NEFF
    assert versions[OLD_DIR].entries == 3 and versions[OLD_DIR].by_state["locked"] == 1
    assert scan.size_bytes == sum(v.size_bytes for v in versions.values())


def test_failed_entry_log_tail_and_locks(tree):
    scan = cc.scan_cache(tree.root)
    failed = scan.find(tree.key("failed"))
    tail = failed.log_tail.splitlines()
    assert len(tail) == cc.LOG_TAIL_LINES and tail[-1] == "Compiler status ERROR"
    assert "INFO compiler pass 0" not in failed.log_tail
    stale = scan.find(tree.key("locked_stale"))
    assert stale.lock_files == ["model.hlo_module.pb.lock"]
    assert 2 * 3600 - 60 < stale.lock_age_s < 2 * 3600 + 60
    assert scan.find(tree.key("done_hex")).log_tail is None
    # last used: the newest file, not the scan time
    assert abs(scan.find(tree.key("old_done")).last_used - (tree.now - 100 * DAY)) < 5


def test_legacy_2022_tree(tree):
    legacy = cc.scan_cache(tree.root).find(tree.key("legacy"))
    assert (legacy.layout, legacy.compiler_version, legacy.state) == ("legacy", LEGACY, "done")
    assert legacy.neff_bytes == 700 and legacy.hlo_bytes == 50
    assert legacy.module_hash == "16554925436865022292" and legacy.flags_hash is None


def test_unknown_items_and_symlinks_listed_not_followed(tree):
    scan = cc.scan_cache(tree.root)
    unknown = {u.key: u.reason for u in scan.unknown}
    assert set(unknown) == {"escape", "stray_dir", f"{CUR_DIR}/README.txt",
                            f"{CUR_DIR}/MODULE_eeee0000eeee0000eeee+ede6753c"}
    assert "not followed" in unknown["escape"]
    assert "not followed" in unknown[f"{CUR_DIR}/MODULE_eeee0000eeee0000eeee+ede6753c"]
    linked = scan.find(tree.key("failed_with_link"))
    assert linked.symlinks == ["notes.lnk"] and "notes.lnk" not in linked.files
    assert linked.size_bytes == 100 + len("boom\n")  # the link's target is not counted
    assert not any(e.key.startswith("escape") for e in scan.entries)


def test_find_by_prefix_and_ambiguity(tree):
    scan = cc.scan_cache(tree.root)
    assert scan.find("50a122").key == tree.key("done_hex")
    assert scan.find("MODULE_198775565831884870+d41d8cd9").key == tree.key("old_done")
    with pytest.raises(cc.CompileCacheError, match="matches 4 entries"):
        scan.find("1")  # 17890aec..., 12486829..., 198775..., 16554...
    with pytest.raises(cc.CompileCacheError, match="no entry"):
        scan.find("ffff")


def test_filters(tree):
    scan = cc.scan_cache(tree.root)
    assert {e.key for e in scan.filter(states=["failed"], versions=[OLD])} == {tree.key("old_failed")}
    assert len(scan.filter(versions=[CUR_DIR])) == 8


def test_locate_cache_order():
    assert cc.locate_cache({}).url == cc.DEFAULT_ROOT
    env = {"NEURON_COMPILE_CACHE_URL": "/data/cache"}
    assert cc.locate_cache(env) == cc.CacheLocation("/data/cache", "NEURON_COMPILE_CACHE_URL")
    env["NEURON_CC_FLAGS"] = "--model-type transformer --cache_dir /fast/cache -O1"
    assert cc.locate_cache(env).url == "/fast/cache"  # --cache_dir wins
    s3 = cc.locate_cache({"NEURON_CC_FLAGS": "--cache_dir=s3://bucket/neuron"})
    assert s3.remote
    with pytest.raises(cc.RemoteCacheError, match="remote cache"):
        s3.path
    assert cc.locate_cache({"NEURON_COMPILE_CACHE_URL": "file:///x/y"}).path == Path("/x/y")


def test_root_errors(tmp_path):
    with pytest.raises(cc.CompileCacheError, match="does not exist"):
        cc.scan_cache(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(cc.CompileCacheError, match="not a directory"):
        cc.scan_cache(tmp_path / "file")
    with pytest.raises(cc.RemoteCacheError, match="remote cache"):
        cc.scan_cache("s3://bucket/cache")
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    (home / ".bashrc").write_text("")
    with pytest.raises(cc.CompileCacheError, match="does not look like a compile cache"):
        cc.scan_cache(home)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cc.scan_cache(empty).entries == []  # a fresh cache is not an error


def test_version_dir_given_as_root_hints_at_parent(tree):
    with pytest.raises(cc.CompileCacheError, match="did you mean its parent"):
        cc.scan_cache(tree.root / CUR_DIR)


def test_parse_and_human_sizes():
    assert cc.parse_size("5G") == 5 * 1024**3
    assert cc.parse_size("1.5 GiB") == int(1.5 * 1024**3)
    assert cc.parse_size("700") == 700
    with pytest.raises(ValueError, match="expected e.g."):
        cc.parse_size("five gigs")
    assert cc.human_bytes(BIG_NEFF) == "2.0 GiB"
    assert cc.human_bytes(512) == "512 B"


def test_demo_cache_with_a_fixed_clock(tmp_path):
    fixed = time.mktime((2025, 6, 2, 9, 0, 0, 0, 0, -1))
    root = cc.build_demo_cache(tmp_path / "demo", now=fixed)
    scan = cc.scan_cache(root)
    assert scan.by_state() == {"done": 5, "failed": 3, "locked": 3, "incomplete": 1}
    old = scan.find(ENTRIES["old_done"].key)
    assert old.last_used == fixed - 100 * DAY  # the listing is the same on every run
    assert cc.short_time(scan.find(ENTRIES["done_hex"].key).last_used) == "2025-05-31 09:00"
    # Locks count from the real clock, so the fresh one is fresh whatever `now` was.
    fresh = scan.find(ENTRIES["locked_fresh"].key)
    assert fresh.lock_age_s < 5 * 60
    plan = cc.plan_clear_stale_locks(scan, compilers=[])
    assert {i.key for i in plan.items} == {f"{ENTRIES['locked_stale'].key}/model.hlo_module.pb.lock"}


def test_demo_cache_refuses_a_used_directory_and_unknown_labels(tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(cc.CompileCacheError, match="not an empty directory"):
        cc.build_demo_cache(used)
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]  # nothing added
    with pytest.raises(ValueError, match="unknown demo entries"):
        cc.build_demo_cache(tmp_path / "new", labels=["done_hex", "nope"])
    assert not (tmp_path / "new").exists()
    subset = cc.build_demo_cache(tmp_path / "subset", labels=["done_hex", "failed"])
    assert {e.key: e.state for e in cc.scan_cache(subset).entries} == {
        ENTRIES["done_hex"].key: "done", ENTRIES["failed"].key: "failed"}

"""Cache trees in the real Neuron layouts, built here, and how helpers.compile_cache reads them.

`build_cache_tree` is shared by the other compile-cache tests (CLI, archives, widgets).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import compile_cache as cc

CURRENT = "2.21.33363.0+82129205"
OLD = "2.8.0.25+a3ad0f342"
LEGACY = "2.4.0.21+b7621be18"
CUR_DIR = f"neuronxcc-{CURRENT}"
OLD_DIR = f"neuronxcc-{OLD}"
LEGACY_DIR = f"USER_neuroncc-{LEGACY}"
DAY = 86400
BIG_NEFF = 2 * 1024**3  # sparse: 2 GiB apparent, next to nothing on disk
LEGACY_GRAPH = ("MODULE_0_SyncTensorsGraph.305_16554925436865022292_"
                "ip-172-31-55-249-6c54106d-25758-5f5ddf7b170ab")
FAILED_LOG = "\n".join([f"INFO compiler pass {i}" for i in range(40)]
                       + ["ERROR 103915 [neuronx-cc]: Error class:    KeyError",
                          "Compiler status ERROR"]) + "\n"
FLAGS = ["--target=trn1", "--model-type=transformer"]

# label -> (version dir, MODULE dir, files, age of the files in seconds, lock age or None)
ENTRIES = {
    "done_hex": (CUR_DIR, "MODULE_50a122f44c378e1567a4+ede6753c",
                 {"model.hlo_module.pb": b"h" * 300, "compile_flags.json": json.dumps(FLAGS),
                  "model.neff": b"n" * 8000, "model.done": b""}, 2 * DAY, None),
    "done_big": (CUR_DIR, "MODULE_77f1b8fbe51833738f1c+24129607",
                 {"model.hlo_module.pb": b"h" * 300, "compile_flags.json": json.dumps(FLAGS),
                  "model.neff": BIG_NEFF, "model.done": b""}, 1 * DAY, None),
    "failed": (CUR_DIR, "MODULE_17890aeca56402771161+24129607",
               {"model.hlo_module.pb": b"h" * 300, "compile_flags.json": json.dumps(FLAGS),
                "model.log": FAILED_LOG}, 3 * DAY, None),
    "failed_with_link": (CUR_DIR, "MODULE_0b0ead5e2dfe538e89a4+2c2d707e",
                         {"model.hlo_module.pb": b"h" * 100, "model.log": "boom\n"}, 4 * DAY, None),
    "locked_fresh": (CUR_DIR, "MODULE_aaaa0000aaaa0000aaaa+ede6753c",
                     {"model.hlo_module.pb": b"h" * 100, "compile_flags.json": "[]"}, 60, 60),
    "locked_stale": (CUR_DIR, "MODULE_bbbb0000bbbb0000bbbb+ede6753c",
                     {"model.hlo_module.pb": b"h" * 100, "compile_flags.json": "[]"},
                     2 * 3600, 2 * 3600),
    "incomplete": (CUR_DIR, "MODULE_cccc0000cccc0000cccc+ede6753c",
                   {"model.hlo_module.pb": b"h" * 100}, 5 * DAY, None),
    "bad_flags": (CUR_DIR, "MODULE_dddd0000dddd0000dddd+ede6753c",
                  {"model.hlo_module.pb": b"h" * 100, "compile_flags.json": "{not json",
                   "model.neff": b"n" * 500, "model.done": b""}, 6 * DAY, None),
    "old_done": (OLD_DIR, "MODULE_198775565831884870+d41d8cd9",
                 {"model.hlo_module.pb": b"h" * 200, "compile_flags.json": '["--target=trn1"]',
                  "model.neff": b"n" * 3000, "model.done": b""}, 100 * DAY, None),
    "old_failed": (OLD_DIR, "MODULE_12486829708343293975+d41d8cd9",
                   {"model.hlo_module.pb": b"h" * 200, "model.log": "failed long ago\n"},
                   90 * DAY, None),
    "old_locked_fresh": (OLD_DIR, "MODULE_3024185903572207584+e30acd3a",
                         {"model.hlo_module.pb": b"h" * 200}, 30, 30),
    "legacy": (LEGACY_DIR, "MODULE_16554925436865022292",
               {f"{LEGACY_GRAPH}/2afbe37c-93ff-4f66-88d0-0e8e5d98e497/{LEGACY_GRAPH}.neff": b"n" * 700,
                f"{LEGACY_GRAPH}/2afbe37c-93ff-4f66-88d0-0e8e5d98e497/{LEGACY_GRAPH}.hlo.pb": b"h" * 50},
               400 * DAY, None),
}
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
        version_dir, module = ENTRIES[label][:2]
        return f"{version_dir}/{module}"

    def path(self, label: str) -> Path:
        return self.root / self.key(label)


def _set_age(path: Path, age_s: float, now: float) -> None:
    os.utime(path, (now - age_s, now - age_s), follow_symlinks=False)


def build_cache_tree(base: Path, labels=None) -> CacheTree:
    """Build the cache under base/cache and the symlink targets under base/outside."""
    now = time.time()
    root, outside = base / "cache", base / "outside"
    (outside / "entry_dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside the cache: must never be touched\n")
    (outside / "entry_dir" / "model.neff").write_bytes(b"outside neff")
    (outside / "entry_dir" / "model.done").write_bytes(b"")
    for label in labels or ENTRIES:
        version_dir, module, files, age, lock_age = ENTRIES[label]
        entry = root / version_dir / module
        for name, content in files.items():
            path = entry / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, int):
                with open(path, "wb") as f:
                    f.truncate(content)  # sparse
            else:
                path.write_bytes(content if isinstance(content, bytes) else content.encode())
            _set_age(path, age, now)
        if lock_age is not None:
            lock = entry / "model.hlo_module.pb.lock"
            lock.write_bytes(b"")
            _set_age(lock, lock_age, now)
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
    return build_cache_tree(tmp_path)


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

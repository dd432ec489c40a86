"""How helpers.cache reads cache trees in the real Neuron layouts: states (a failed compile
told apart by its model.neff's content), hashes, sizes, flags, logs, unknown items, roots."""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from helpers.cache.demo import DEMO_BIG_NEFF, DEMO_FLAGS, build_demo_cache, neff_bytes
from helpers.cache.flags import FlagsError
from helpers.cache.location import CacheLocation, CompileCacheError, RemoteCacheError, locate_cache
from helpers.cache.plans import (
    UNKNOWN_KEPT,
    plan_clear_stale_locks,
    plan_prune,
    plan_remove_failed,
    plan_remove_other_versions,
)
from helpers.cache.render import render_entry
from helpers.cache.scan import LOG_TAIL_LINES, NEFF_HEADER, neff_kind, scan_cache
from helpers.cache.units import human_bytes, parse_size, short_time
from tests.cache_trees import (
    ALL_STATES,
    CUR_DIR,
    CURRENT,
    DAY,
    ENTRIES,
    LEGACY,
    LEGACY_DIR,
    LINKED,
    OLD,
    OLD_DIR,
    STATE_OF,
)


def test_states_of_every_entry(tree):
    scan = scan_cache(tree.root)
    states = {e.key: e.state for e in scan.entries}
    assert states == {tree.key(label): state for label, state in STATE_OF.items()}
    assert scan.by_state() == ALL_STATES


def test_failed_neff_is_told_apart_by_its_content(tree):
    scan = scan_cache(tree.root)
    failed = scan.find(tree.key("failed"))  # model.neff and model.done both there
    assert {"model.neff", "model.done"} <= set(failed.files)
    assert failed.failure.startswith("Failed compilation with ['neuronx-cc', 'compile'")
    assert "KeyError: 'transpose.17'" in failed.failure
    old = scan.find(tree.key("old_failed"))  # the entry the Neuron caching guide shows failing
    assert old.state == "failed" and "interrupted" in old.failure
    assert scan.find(tree.key("failed_with_link")).failure is None  # a log and no NEFF
    assert scan.find(tree.key("done_hex")).failure is None


def test_neff_kinds(tmp_path):
    random_8k = random.Random(16).randbytes(8192)
    newer_header = NEFF_HEADER.pack(3, 2048, 4096) + bytes(4096)  # a NEFF version we do not know
    cases = {"program": neff_bytes(4096), "failure": b"Failed compilation with ['neuronx-cc']: x",
             "compiler log": b"INFO pass 1\nERROR 103915 [neuronx-cc]\nCompiler status ERROR\n",
             "error code": "2026-05-29 [NCC_EVRF009] shape mismatch \u2192 retry\n".encode(),
             "other text": b"oops, not a program\n", "binary": b"\x7fELF\0\0\0" + bytes(100),
             "random 8 KiB": random_8k, "newer header": newer_header,
             "latin-1 text": "d\xe9j\xe0 vu: Failed compilation with x".encode("latin-1"),
             "empty": b""}
    kinds = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        kinds[name] = neff_kind(tmp_path / name)[0]
    assert kinds == {"program": "neff", "binary": "neff", "random 8 KiB": "neff",
                     "newer header": "neff", "latin-1 text": "neff", "failure": "failed",
                     "compiler log": "failed", "error code": "failed", "other text": "unknown",
                     "empty": "empty"}
    assert neff_kind(tmp_path / "failure")[1] == "Failed compilation with ['neuronx-cc']: x"
    big = tmp_path / "big"
    big.write_bytes(b"Failed compilation with x: " + "\u00e9".encode() * 50_000)  # cut mid-character
    kind, text = neff_kind(big)
    assert kind == "failed" and len(text.encode()) in (4095, 4096)  # a bounded prefix is read


def test_a_program_is_never_called_failed_nor_pruned(tmp_path):
    """Issue 16.7: random bytes or a newer NEFF header is a program; text without the wrapper's
    markers is "unknown"; neither is removed by prune --failed or any other plan."""
    root = tmp_path / "cache"
    base = root / f"neuronxcc-{CURRENT}"
    cases = {"MODULE_bb+01": {"model.neff": random.Random(7).randbytes(8192), "model.done": b""},
             "MODULE_bb+02": {"model.neff": NEFF_HEADER.pack(3, 2048, 0), "model.done": b""},
             "MODULE_bb+03": {"model.neff": b"hello, world\n", "model.done": b""},
             "MODULE_bb+04": {"model.neff": b"Failed compilation with [...]: boom",
                              "model.done": b""}}
    for module, files in cases.items():
        (base / module).mkdir(parents=True)
        for name, data in files.items():
            (base / module / name).write_bytes(data)
    scan = scan_cache(root)
    assert {e.path.name: e.state for e in scan.entries} == {
        "MODULE_bb+01": "done", "MODULE_bb+02": "done", "MODULE_bb+03": "unknown",
        "MODULE_bb+04": "failed"}
    assert [e.failure for e in scan.entries if e.path.name != "MODULE_bb+04"] == [None] * 3
    assert "hello, world" in render_entry(scan.find(f"neuronxcc-{CURRENT}/MODULE_bb+03"))
    assert [i.key for i in plan_remove_failed(scan).items] == [f"neuronxcc-{CURRENT}/MODULE_bb+04"]
    pruned = plan_prune(scan, older_than_days=0)
    assert f"neuronxcc-{CURRENT}/MODULE_bb+03" not in {i.key for i in pruned.items}
    assert (f"neuronxcc-{CURRENT}/MODULE_bb+03", UNKNOWN_KEPT) in pruned.kept
    old_unknown = root / f"neuronxcc-{OLD}" / "MODULE_cc+01"
    old_unknown.mkdir(parents=True)
    (old_unknown / "model.neff").write_bytes(b"not ours\n")
    others = plan_remove_other_versions(scan_cache(root), keep_version=CURRENT, compilers=[])
    assert (f"neuronxcc-{OLD}/MODULE_cc+01", UNKNOWN_KEPT) in others.kept and not others.items


def test_entry_states_from_neff_content(tmp_path):
    root = tmp_path / "cache"
    base = root / f"neuronxcc-{CURRENT}"
    cases = {"MODULE_aa+01": {"model.neff": neff_bytes(), "model.done": b""},
             "MODULE_aa+02": {"model.neff": b"Failed compilation with [...]: boom",
                              "model.done": b""},
             "MODULE_aa+03": {"model.neff": neff_bytes()},  # written, not yet marked done
             "MODULE_aa+04": {"model.neff": b"", "model.done": b""}}
    for module, files in cases.items():
        for name, data in files.items():
            (base / module).mkdir(parents=True, exist_ok=True)
            (base / module / name).write_bytes(data)
    states = {e.path.name: e.state for e in scan_cache(root).entries}
    assert states == {"MODULE_aa+01": "done", "MODULE_aa+02": "failed",
                      "MODULE_aa+03": "incomplete", "MODULE_aa+04": "incomplete"}


def test_hashes_versions_and_flags(tree):
    scan = scan_cache(tree.root)
    hexed = scan.find(tree.key("done_hex"))
    assert (hexed.compiler_version, hexed.module_hash, hexed.flags_hash, hexed.hash_style) == (
        CURRENT, "50a122f44c378e1567a4", "ede6753c", "hex")
    assert hexed.flags == DEMO_FLAGS and hexed.flags_error is None
    old = scan.find(tree.key("old_done"))
    assert (old.compiler_version, old.module_hash, old.hash_style) == (
        OLD, "198775565831884870", "decimal")
    bad = scan.find(tree.key("bad_flags"))
    assert bad.flags is None and "not valid JSON" in bad.flags_error
    assert bad.state == "done"  # unreadable flags do not hide a good neff


def test_sizes_apparent_and_on_disk(tree):
    scan = scan_cache(tree.root)
    big = scan.find(tree.key("done_big"))
    assert big.neff_bytes == DEMO_BIG_NEFF
    assert big.size_bytes == DEMO_BIG_NEFF + 300 + len(json.dumps(DEMO_FLAGS))
    assert big.disk_bytes < 1024 * 1024  # sparse: the 2 GiB is apparent only
    small = scan.find(tree.key("done_hex"))
    assert small.neff_bytes == 8000 and small.hlo_bytes == 300
    assert small.disk_bytes >= small.size_bytes  # whole blocks
    versions = scan.by_version()
    assert set(versions) == {CUR_DIR, OLD_DIR, LEGACY_DIR}
    assert versions[CUR_DIR].size_bytes > DEMO_BIG_NEFF
    assert versions[OLD_DIR].entries == 3 and versions[OLD_DIR].by_state["locked"] == 1
    assert scan.size_bytes == sum(v.size_bytes for v in versions.values())


def test_failed_entry_log_tail_and_locks(tree):
    scan = scan_cache(tree.root)
    failed = scan.find(tree.key("failed"))
    tail = failed.log_tail.splitlines()
    assert len(tail) == LOG_TAIL_LINES and tail[-1] == "Compiler status ERROR"
    assert "INFO compiler pass 0" not in failed.log_tail
    stale = scan.find(tree.key("locked_stale"))
    assert stale.lock_files == ["model.hlo_module.pb.lock"]
    assert 2 * 3600 - 60 < stale.lock_age_s < 2 * 3600 + 60
    assert scan.find(tree.key("done_hex")).log_tail is None
    # last used: the newest file, not the scan time
    assert abs(scan.find(tree.key("old_done")).last_used - (tree.now - 100 * DAY)) < 5


def test_legacy_2022_tree(tree):
    legacy = scan_cache(tree.root).find(tree.key("legacy"))
    assert (legacy.layout, legacy.compiler_version, legacy.state) == ("legacy", LEGACY, "done")
    assert legacy.neff_bytes == 1700 and legacy.hlo_bytes == 50
    assert legacy.module_hash == "16554925436865022292" and legacy.flags_hash is None


def test_unknown_items_and_symlinks_listed_not_followed(tree):
    scan = scan_cache(tree.root)
    unknown = {u.key: u.reason for u in scan.unknown}
    assert set(unknown) == {"escape", "stray_dir", f"{CUR_DIR}/README.txt", LINKED}
    assert "not followed" in unknown["escape"] and "not followed" in unknown[LINKED]
    linked = scan.find(tree.key("failed_with_link"))
    assert linked.symlinks == ["notes.lnk"] and "notes.lnk" not in linked.files
    assert linked.size_bytes == 100 + len("boom\n")  # the link's target is not counted
    assert not any(e.key.startswith("escape") for e in scan.entries)


def test_find_by_prefix_and_ambiguity(tree):
    scan = scan_cache(tree.root)
    assert scan.find("50a122").key == tree.key("done_hex")
    assert scan.find("MODULE_198775565831884870+d41d8cd9").key == tree.key("old_done")
    with pytest.raises(CompileCacheError, match="matches 4 entries"):
        scan.find("1")  # 17890aec..., 12486829..., 198775..., 16554...
    with pytest.raises(CompileCacheError, match="no entry"):
        scan.find("ffff")


def test_filters(tree):
    scan = scan_cache(tree.root)
    assert {e.key for e in scan.filter(states=["failed"], versions=[OLD])} == {tree.key("old_failed")}
    assert len(scan.filter(versions=[CUR_DIR])) == 8


def test_locate_cache_order():
    assert locate_cache({}).url == "/var/tmp/neuron-compile-cache"
    assert locate_cache({"WORKBOOK_PLATFORM_ROOT": "/double"}).url == "/double/var/tmp/neuron-compile-cache"
    env = {"NEURON_COMPILE_CACHE_URL": "/data/cache"}
    assert locate_cache(env) == CacheLocation("/data/cache", "NEURON_COMPILE_CACHE_URL")
    env["NEURON_CC_FLAGS"] = "--model-type transformer --cache_dir /fast/cache -O1"
    assert locate_cache(env).url == "/fast/cache"  # --cache_dir wins
    s3 = locate_cache({"NEURON_CC_FLAGS": "--cache_dir=s3://bucket/neuron"})
    assert s3.remote
    with pytest.raises(RemoteCacheError, match="remote cache"):
        _ = s3.path
    assert locate_cache({"NEURON_COMPILE_CACHE_URL": "file:///x/y"}).path == Path("/x/y")


@pytest.mark.parametrize("flags", ["--cache_dir=", "--cache_dir", "-O1 --cache_dir --no_cache"])
def test_cache_dir_without_a_value_is_an_error_not_the_default(flags):
    with pytest.raises(FlagsError, match="--cache_dir with no value"):
        locate_cache({"NEURON_CC_FLAGS": flags, "NEURON_COMPILE_CACHE_URL": "/data/cache"})


def test_root_errors(tmp_path):
    with pytest.raises(CompileCacheError, match="does not exist"):
        scan_cache(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CompileCacheError, match="not a directory"):
        scan_cache(tmp_path / "file")
    with pytest.raises(RemoteCacheError, match="remote cache"):
        scan_cache("s3://bucket/cache")
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    (home / ".bashrc").write_text("")
    with pytest.raises(CompileCacheError, match="does not look like a compile cache"):
        scan_cache(home)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert scan_cache(empty).entries == []  # a fresh cache is not an error


def test_version_dir_given_as_root_hints_at_parent(tree):
    with pytest.raises(CompileCacheError, match="did you mean its parent"):
        scan_cache(tree.root / CUR_DIR)


def test_parse_and_human_sizes():
    assert parse_size("5G") == 5 * 1024**3
    assert parse_size("1.5 GiB") == int(1.5 * 1024**3)
    assert parse_size("700") == 700
    for bad, message in (("five gigs", "expected e.g."), ("-1G", "expected e.g."),
                         ("0", "more than 0"), ("0.0001K", "more than 0")):
        with pytest.raises(ValueError, match=message):
            parse_size(bad)
    assert human_bytes(DEMO_BIG_NEFF) == "2.0 GiB"
    assert human_bytes(512) == "512 B"


def test_demo_cache_with_a_fixed_clock(tmp_path):
    fixed = time.mktime((2025, 6, 2, 9, 0, 0, 0, 0, -1))
    root = build_demo_cache(tmp_path / "demo", now=fixed)
    scan = scan_cache(root)
    assert scan.by_state() == ALL_STATES
    old = scan.find(ENTRIES["old_done"].key)
    assert old.last_used == fixed - 100 * DAY  # the listing is the same on every run
    assert short_time(scan.find(ENTRIES["done_hex"].key).last_used) == "2025-05-31 09:00"
    # Locks count from the real clock, so the fresh one is fresh whatever `now` was.
    fresh = scan.find(ENTRIES["locked_fresh"].key)
    assert fresh.lock_age_s < 5 * 60
    plan = plan_clear_stale_locks(scan, compilers=[])
    assert {i.key for i in plan.items} == {f"{ENTRIES['locked_stale'].key}/model.hlo_module.pb.lock"}


def test_demo_cache_refuses_a_used_directory_and_unknown_labels(tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(CompileCacheError, match="not an empty directory"):
        build_demo_cache(used)
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]  # nothing added
    with pytest.raises(ValueError, match="unknown demo entries"):
        build_demo_cache(tmp_path / "new", labels=["done_hex", "nope"])
    assert not (tmp_path / "new").exists()
    subset = build_demo_cache(tmp_path / "subset", labels=["done_hex", "failed"])
    assert {e.key: e.state for e in scan_cache(subset).entries} == {
        ENTRIES["done_hex"].key: "done", ENTRIES["failed"].key: "failed"}

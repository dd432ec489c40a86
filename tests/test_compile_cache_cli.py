"""`python -m helpers.compile_cache ...` run as a user runs it: a subprocess, on real trees."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import compile_cache as cc
from tests.test_compile_cache_layouts import tree  # noqa: F401  (the shared fixture)
from tests.test_compile_cache_layouts import (CUR_DIR, OLD, OLD_DIR, build_cache_tree,
                                              outside_snapshot)

REPO = Path(__file__).resolve().parents[1]


def cli(*args, env=None, prefix=()):
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("NEURON_CC_FLAGS", "NEURON_COMPILE_CACHE_URL")}
    full_env.update(env or {})
    return subprocess.run([*prefix, sys.executable, "-m", "helpers.compile_cache",
                           *map(str, args)],
                          cwd=REPO, env=full_env, capture_output=True, text=True, timeout=60)




def test_ls_table(tree):
    r = cli("ls", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"Compile cache: {tree.root} (--root)" in out
    assert "12 entries (done 5, failed 3, locked 3, incomplete 1)" in out
    assert "2.0 GiB" in out  # human-readable sizes (the sparse neff, apparent)
    header = next(line for line in out.splitlines() if line.startswith("VERSION"))
    assert header.split() == ["VERSION", "ENTRIES", "DONE", "FAILED", "LOCKED", "INCOMPLETE",
                              "SIZE", "ON", "DISK"]
    row = next(line for line in out.splitlines() if line.startswith(OLD_DIR))
    assert row.split()[1:6] == ["3", "1", "1", "1", "0"]
    assert f"failed {tree.key('failed')}" not in out  # columns, not run together
    assert any(line.startswith("failed") and line.endswith(tree.key("failed"))
               for line in out.splitlines())
    assert "Not recognised (4), left alone:" in out and "escape: symbolic link" in out


def test_ls_json_and_filters(tree):
    r = cli("ls", "--root", tree.root, "--json", "--state", "failed", "--version", OLD)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [e["key"] for e in data["entries"]] == [tree.key("old_failed")]
    assert data["summary"]["by_state"] == {"done": 5, "failed": 3, "locked": 3, "incomplete": 1}
    assert data["summary"]["by_version"][CUR_DIR]["entries"] == 8


def test_root_from_environment(tree):
    r = cli("ls", env={"NEURON_CC_FLAGS": f"-O1 --cache_dir={tree.root}"})
    assert r.returncode == 0 and "(from --cache_dir in NEURON_CC_FLAGS)" in r.stdout
    r = cli("ls", env={"NEURON_COMPILE_CACHE_URL": str(tree.root)})
    assert r.returncode == 0 and "(from NEURON_COMPILE_CACHE_URL)" in r.stdout


def test_show_failed_entry(tree):
    r = cli("show", "17890aec", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    assert f"Entry {tree.key('failed')}" in r.stdout
    assert "state:     failed" in r.stdout
    assert "--target=trn1 --model-type=transformer" in r.stdout
    assert "Compiler status ERROR" in r.stdout  # the log tail
    r = cli("show", "ffff", "--root", tree.root)
    assert r.returncode == 2 and "no entry 'ffff'" in r.stderr


def test_prune_dry_run_then_apply(tree):
    failed = tree.path("failed")
    r = cli("prune", "--failed", "--dry-run", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    assert "Plan: remove failed entries" in r.stdout and "remove 3 item(s)" in r.stdout
    assert "(dry run: nothing removed)" in r.stdout
    assert failed.is_dir()

    r = cli("prune", "--failed", "--stale-locks", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index("Plan: clear stale locks") < out.index("Applying") < out.index("Removed")
    assert "Removed 3 item(s)" in out and "Removed 1 item(s)" in out
    assert not failed.exists() and tree.path("locked_fresh").joinpath(
        "model.hlo_module.pb.lock").exists()


def test_prune_json_and_budget(tree):
    r = cli("prune", "--max-size", "0", "--json", "--dry-run", "--root", tree.root)
    data = json.loads(r.stdout)
    assert data["dry_run"] and data["results"] == []
    assert len(data["plans"][0]["items"]) == 9  # all but the 3 locked
    r = cli("prune", "--other-versions", "--keep-version", OLD, "--dry-run", "--root", tree.root)
    assert r.returncode == 0 and "keep=" + OLD in r.stdout


def test_prune_needs_an_action(tree):
    r = cli("prune", "--root", tree.root)
    assert r.returncode == 2 and "say what to remove" in r.stderr


def test_export_import_via_cli(tree, tmp_path):
    archive = tmp_path / "old.tar.gz"
    r = cli("export", archive, "--version", OLD, "--root", tree.root, "--no-progress")
    assert r.returncode == 0 and "Exported 1 entries" in r.stdout, r.stderr
    target = tmp_path / "target"
    r = cli("import", archive, "--root", target, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["added"] == [tree.key("old_done")]
    assert (target / tree.key("old_done") / "model.neff").read_bytes() == \
        (tree.path("old_done") / "model.neff").read_bytes()


def test_errors_are_clear(tmp_path):
    r = cli("ls", "--root", tmp_path / "nope")
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    r = cli("ls", env={"NEURON_CC_FLAGS": "--cache_dir=s3://my-bucket/cache"})
    assert r.returncode == 2 and "remote cache" in r.stderr and "aws s3 ls" in r.stderr
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "a.txt").write_text("x")
    r = cli("ls", "--root", tmp_path / "stuff")
    assert r.returncode == 2 and "does not look like a compile cache" in r.stderr


def test_unreadable_root(tmp_path):
    root = tmp_path / "cache"
    (root / f"neuronxcc-{OLD}").mkdir(parents=True)
    root.chmod(0)
    try:
        # Root reads everything: without its file-permission capabilities it is refused too.
        prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
                  if os.geteuid() == 0 else [])
        r = cli("ls", "--root", root, prefix=prefix)
    finally:
        root.chmod(0o700)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot read the compile cache" in r.stderr and "Permission denied" in r.stderr


def test_combined_prune_lists_each_entry_once_and_budgets_what_is_left(tree):
    # Failed and other-version entries go first; the LRU budget counts what they leave, so it
    # does not also take done entries to free bytes the earlier plans already free.
    r = cli("prune", "--failed", "--other-versions", "--keep-version", cc.DEMO_VERSION,
            "--max-size", "0", "--json", "--dry-run", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    failed, versions, lru = json.loads(r.stdout)["plans"]
    listed = [i["key"] for plan in (failed, versions, lru) for i in plan["items"]]
    assert len(listed) == len(set(listed)) == 9  # every entry but the 3 locked, once
    assert {i["key"] for i in versions["items"]} == {tree.key("old_done"), tree.key("legacy")}
    scan = cc.scan_cache(tree.root)
    after_first_two = scan.disk_bytes - sum(i["disk_bytes"] for i in failed["items"] + versions["items"])
    budget = after_first_two - 1  # one byte over: only the least recently used entry left goes
    r = cli("prune", "--failed", "--other-versions", "--keep-version", cc.DEMO_VERSION,
            "--max-size", budget, "--json", "--dry-run", "--root", tree.root)
    lru = json.loads(r.stdout)["plans"][2]
    assert [i["key"] for i in lru["items"]] == [tree.key("bad_flags")]

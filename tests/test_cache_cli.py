"""`python -m helpers.cache ...` run as a user runs it: a subprocess, on real trees. Bad input
and faults end with a short message on stderr and a non-zero exit, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.cache.demo import DEMO_VERSION
from helpers.cache.scan import scan_cache
from mnist_mlp.common.paths import REPO_ROOT as REPO
from tests.cache_trees import CUR_DIR, OLD, OLD_DIR

# Whether a compiler runs on this machine decides what a lock removal may do (no lock is stale
# while one runs). The trn1 double's compilers run on its own platform root (WORKBOOK_PLATFORM_ROOT),
# another machine to the cache tool here (helpers/cache/plans.py compiler_processes): no matter.


def cli(*args, env=None, prefix=(), timeout=60):
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("NEURON_CC_FLAGS", "NEURON_COMPILE_CACHE_URL")}
    full_env.update(env or {})
    return subprocess.run([*prefix, sys.executable, "-m", "helpers.cache",
                           *map(str, args)],
                          cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)


def refused(r, *phrases, code=2):
    """The run ended with `code` and a short stderr naming every phrase, no traceback."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3, r.stderr
    for phrase in phrases:
        assert phrase in r.stderr, (phrase, r.stderr)
    return True


# Drop root's way around file permissions, so a read-only directory is read-only for the run.
NO_DAC = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
          if os.geteuid() == 0 else [])


def test_ls_table(tree):
    r = cli("ls", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"Compile cache: {tree.root} (--root)" in out
    assert "12 entries (done 5, failed 3, locked 3, incomplete 1)" in out
    assert "2.0 GiB" in out  # human-readable sizes (the sparse neff, apparent)
    header = next(line for line in out.splitlines() if line.startswith("VERSION"))
    assert header.split() == ["VERSION", "ENTRIES", "DONE", "FAILED", "LOCKED", "INCOMPLETE", "UNKNOWN",
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
    assert data["summary"]["by_state"] == {"done": 5, "failed": 3, "locked": 3, "incomplete": 1, "unknown": 0}
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
    assert "stored failure" in r.stdout and "Failed compilation with ['neuronx-cc'" in r.stdout
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
    r = cli("prune", "--max-size", "1", "--json", "--dry-run", "--root", tree.root)
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
    r = cli("prune", "--failed", "--other-versions", "--keep-version", DEMO_VERSION,
            "--max-size", "1", "--json", "--dry-run", "--root", tree.root)
    assert r.returncode == 0, r.stderr
    failed, versions, lru = json.loads(r.stdout)["plans"]
    listed = [i["key"] for plan in (failed, versions, lru) for i in plan["items"]]
    assert len(listed) == len(set(listed)) == 9  # every entry but the 3 locked, once
    assert {i["key"] for i in versions["items"]} == {tree.key("old_done"), tree.key("legacy")}
    scan = scan_cache(tree.root)
    after_first_two = scan.disk_bytes - sum(i["disk_bytes"] for i in failed["items"] + versions["items"])
    budget = after_first_two - 1  # one byte over: only the least recently used entry left goes
    r = cli("prune", "--failed", "--other-versions", "--keep-version", DEMO_VERSION,
            "--max-size", budget, "--json", "--dry-run", "--root", tree.root)
    lru = json.loads(r.stdout)["plans"][2]
    assert [i["key"] for i in lru["items"]] == [tree.key("bad_flags")]


def test_help():
    r = cli("--help")
    assert r.returncode == 0 and "ls,show,prune,export,import" in r.stdout
    r = cli("prune", "--help")
    assert r.returncode == 0 and "--older-than-days" in r.stdout


@pytest.mark.parametrize("args, phrase", [
    (["--older-than-days", "-1"], "argument --older-than-days: '-1': expected a number, 0 or more"),
    (["--older-than-days", "nan"], "expected a number, 0 or more"),
    (["--stale-locks", "--lock-age-minutes", "-1"], "argument --lock-age-minutes"),
    (["--max-size", "0"], "a size budget must be more than 0 bytes"),
    (["--max-size=-5G"], "expected e.g. 500M"),
])
def test_prune_refuses_nonsense_values(tree, args, phrase):
    r = cli("prune", *args, "--root", tree.root)
    assert refused(r, phrase)
    assert scan_cache(tree.root).by_state() == {"done": 5, "failed": 3, "locked": 3, "incomplete": 1, "unknown": 0}


def test_prune_failing_part_way_reports_and_exits_non_zero(tree):
    """A read-only directory inside an entry: its files cannot be unlinked (root is run without
    its permission override), so the removal stops half way through that entry."""
    entry = tree.path("old_done")
    sub = entry / "extra"
    sub.mkdir()
    (sub / "part.bin").write_bytes(b"x" * 10)
    old = tree.now - 100 * 86400  # as old as the rest of the entry: still pruned by age
    os.utime(sub / "part.bin", (old, old))
    sub.chmod(0o555)
    try:
        r = cli("prune", "--older-than-days", "50", "--root", tree.root, prefix=NO_DAC)
    finally:
        sub.chmod(0o755)
    assert refused(r, "1 item(s) could not be removed", code=1)
    assert f"FAILED {tree.key('old_done')}: removal failed part way: Permission denied" in r.stdout
    assert "Removed 2 item(s)" in r.stdout  # the other two entries went
    assert (sub / "part.bin").exists() and not (entry / "model.done").exists()


def test_import_and_export_faults_are_one_line_errors(tree, tmp_path):
    archive = tmp_path / "old.tar.gz"
    assert cli("export", archive, "--version", OLD, "--root", tree.root,
               "--no-progress").returncode == 0
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    assert refused(cli("import", truncated, "--root", tmp_path / "target"), "truncated")
    assert not (tmp_path / "target").exists()
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert refused(cli("import", archive, "--root", a_file), "is a file, not a directory")
    assert refused(cli("export", tmp_path, "--root", tree.root), "is a directory")
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    shelf.chmod(0o555)
    try:
        r = cli("export", shelf / "c.tar.gz", "--root", tree.root, "--version", OLD,
                prefix=NO_DAC)
    finally:
        shelf.chmod(0o755)
    assert refused(r, "cannot write the archive", "not writable")
    assert list(shelf.iterdir()) == []


@pytest.mark.parametrize("flags, phrase", [
    ("--model-type 'transformer", "check its quotes"),
    ("--cache_dir=", "--cache_dir with no value"),
])
def test_bad_neuron_cc_flags_are_one_line_errors(flags, phrase):
    assert refused(cli("ls", env={"NEURON_CC_FLAGS": flags}), phrase)


def test_fifos_in_entries_are_listed_never_opened(tmp_path):
    """A FIFO would block any open() for reading forever: ls, show and export must not open one.
    (The timeout turns a hang into a failure.)"""
    from tests.cache_trees import build_cache_tree

    t = build_cache_tree(tmp_path, labels=["old_done", "failed", "done_hex"])
    os.mkfifo(t.path("old_done") / "stream.fifo")
    (t.path("failed") / "model.log").unlink()
    os.mkfifo(t.path("failed") / "model.log")  # the log tail would be read
    (t.path("done_hex") / "compile_flags.json").unlink()
    os.mkfifo(t.path("done_hex") / "compile_flags.json")  # flags would be read
    r = cli("ls", "--root", t.root, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "FIFOs, sockets or devices" in r.stdout
    for label in ("old_done", "failed", "done_hex"):
        r = cli("show", t.key(label), "--root", t.root, timeout=30)
        assert r.returncode == 0, r.stderr
        assert "not regular files (never read)" in r.stdout
    archive = tmp_path / "out.tar.gz"
    r = cli("export", archive, "--root", t.root, "--no-progress", timeout=30)
    assert r.returncode == 0 and "Exported 2 entries" in r.stdout, r.stderr
    import tarfile

    with tarfile.open(archive) as tar:
        assert all(m.isreg() for m in tar.getmembers())
        assert not any(n.endswith((".fifo", "compile_flags.json")) for n in tar.getnames()
                       if "MODULE_50a1" in n or "stream" in n)

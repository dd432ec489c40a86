"""Export a cache to tar.gz and import it elsewhere; archives that could escape are refused."""
from __future__ import annotations

import io
import json
import tarfile

import pytest

from helpers import compile_cache as cc
from tests.test_compile_cache_layouts import tree  # noqa: F401  (the shared fixture)
from tests.test_compile_cache_layouts import CUR_DIR, OLD, OLD_DIR, build_cache_tree, outside_snapshot




def tree_files(root):
    """Every regular file's content (size and mtime for the 2 GiB sparse one: reading it is slow)."""
    def content(p):
        st = p.stat()
        return (st.st_size, st.st_mtime_ns) if st.st_size > 1024**2 else p.read_bytes()
    return {p.relative_to(root).as_posix(): content(p)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_export_import_round_trip(tree, tmp_path):
    archive = tmp_path / "share" / "old.tar.gz"
    # The old version only: the current one holds the 2 GiB sparse neff.
    exported = cc.export_cache(tree.root, archive, versions=[OLD], progress=False)
    assert exported.entries == 1 and archive.is_file()  # done only: not failed, not locked
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(cc.MANIFEST_NAME))
    assert names[0] == cc.MANIFEST_NAME
    entry = tree.key("old_done")
    assert sorted(names[1:]) == sorted(f"{entry}/{n}" for n in
                                       ("compile_flags.json", "model.done", "model.hlo_module.pb",
                                        "model.neff"))
    assert manifest["compiler_versions"] == [OLD_DIR] and manifest["entries"][0]["key"] == entry
    assert manifest["format"] == cc.MANIFEST_FORMAT

    fresh = tmp_path / "other-host" / "cache"  # does not exist yet: import creates it
    result = cc.import_cache(archive, fresh, progress=False)
    assert result.added == [entry] and result.manifest == manifest
    assert tree_files(fresh) == {k: v for k, v in tree_files(tree.root).items()
                                 if k.startswith(entry + "/")}
    imported = cc.scan_cache(fresh).find(entry)
    assert imported.state == "done"
    assert abs(imported.last_used - cc.scan_cache(tree.root).find(entry).last_used) < 1.5
    assert not any(p.name.startswith(".import-") for p in fresh.iterdir())

    again = cc.import_cache(archive, fresh, progress=False)  # never overwrites a done entry
    assert again.added == [] and again.skipped == [(entry, "already done here")]


def test_import_replaces_failed_keeps_done_and_locked(tree, tmp_path):
    source = build_cache_tree(tmp_path / "source", labels=["old_done", "done_hex", "locked_fresh"])
    archive = tmp_path / "a.tar.gz"
    cc.export_cache(source.root, archive, progress=False)

    target = build_cache_tree(tmp_path / "target", labels=["old_failed", "done_hex"])
    # Here the old_done entry failed: its failure would block the compile; the archive's
    # done copy replaces it.
    failed_here = target.root / source.key("old_done")
    failed_here.mkdir(parents=True)
    (failed_here / "model.log").write_text("failed here\n")
    (target.path("done_hex") / "model.neff").write_bytes(b"local neff, keep me")
    result = cc.import_cache(archive, target.root, progress=False)
    assert result.replaced == [source.key("old_done")]
    assert (source.key("done_hex"), "already done here") in result.skipped
    assert (target.path("done_hex") / "model.neff").read_bytes() == b"local neff, keep me"
    assert not (target.root / source.key("locked_fresh")).exists()  # never exported
    states = {e.key: e.state for e in cc.scan_cache(target.root).entries}
    assert states[source.key("old_done")] == "done"
    assert states[target.key("old_failed")] == "failed"  # not in the archive: untouched


def test_export_refuses_bad_requests(tree, tmp_path):
    with pytest.raises(cc.CompileCacheError, match="inside the cache"):
        cc.export_cache(tree.root, tree.root / "x.tar.gz", progress=False)
    with pytest.raises(cc.CompileCacheError, match="no entries of version"):
        cc.export_cache(tree.root, tmp_path / "x.tar.gz", versions=["9.9"], progress=False)
    assert not (tmp_path / "x.tar.gz").exists()


def test_import_refuses_a_directory_that_is_not_a_cache(tree, tmp_path):
    archive = tmp_path / "a.tar.gz"
    cc.export_cache(tree.root, archive, versions=[OLD], progress=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(cc.CompileCacheError, match="does not look like a compile cache"):
        cc.import_cache(archive, home, progress=False)
    assert [p.name for p in home.iterdir()] == ["notes.txt"]


def _add(tar, name, data=b"x", **attrs):
    info = tarfile.TarInfo(name)
    info.size = len(data) if attrs.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for k, v in attrs.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if info.size else None)


MALICIOUS = {
    "absolute path": dict(name="/tmp/evil/model.neff"),
    "'..' in the path": dict(name=f"{CUR_DIR}/../../evil.neff"),
    "symbolic link": dict(name=f"{CUR_DIR}/MODULE_1+2/model.neff", type=tarfile.SYMTYPE,
                          linkname="/etc/passwd"),
    "hard link": dict(name=f"{CUR_DIR}/MODULE_1+2/model.neff", type=tarfile.LNKTYPE,
                      linkname="/etc/passwd"),
    "device or fifo": dict(name=f"{CUR_DIR}/MODULE_1+2/model.neff", type=tarfile.CHRTYPE,
                           devmajor=1, devminor=3),
}


@pytest.mark.parametrize("problem", MALICIOUS)
def test_malicious_archive_refused_before_anything_is_written(tree, tmp_path, problem):
    archive = tmp_path / "evil.tar.gz"
    good = f"{CUR_DIR}/MODULE_1234+abcd"
    with tarfile.open(archive, "w:gz") as tar:
        # Good members first: refusal must not leave them behind either.
        for name in ("model.hlo_module.pb", "model.neff", "model.done"):
            _add(tar, f"{good}/{name}")
        attrs = dict(MALICIOUS[problem])
        _add(tar, attrs.pop("name"), **attrs)
    before = tree_files(tree.root)
    with pytest.raises(cc.UnsafeArchiveError, match=problem.split()[0]) as err:
        cc.import_cache(archive, tree.root, progress=False)
    assert "Nothing was extracted" in str(err.value)
    assert tree_files(tree.root) == before
    assert not (tree.root / good).exists()
    assert not any(p.name.startswith(".import-") for p in tree.root.iterdir())
    assert not (tmp_path.parent / "evil.neff").exists() and not (tmp_path / "evil.neff").exists()


def test_import_ignores_what_is_not_cache_layout(tree, tmp_path):
    archive = tmp_path / "mixed.tar.gz"
    entry = f"{CUR_DIR}/MODULE_1234+abcd"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("model.hlo_module.pb", "model.neff", "model.done"):
            _add(tar, f"{entry}/{name}")
        _add(tar, "home/user/.bashrc")
        _add(tar, f"{CUR_DIR}/not_a_module.txt")
    result = cc.import_cache(archive, tree.root, progress=False)
    assert result.added == [entry]
    ignored = dict(result.ignored)
    assert "home/user/.bashrc" in ignored and f"{CUR_DIR}/not_a_module.txt" in ignored
    assert not (tree.root / "home").exists()
    assert not (tree.root / CUR_DIR / "not_a_module.txt").exists()


def test_import_errors(tmp_path):
    with pytest.raises(cc.CompileCacheError, match="no archive"):
        cc.import_cache(tmp_path / "missing.tar.gz", tmp_path / "cache", progress=False)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar file at all")
    with pytest.raises(cc.CompileCacheError, match="not a readable tar archive"):
        cc.import_cache(junk, tmp_path / "cache", progress=False)
    with pytest.raises(cc.RemoteCacheError):
        cc.import_cache(junk, "s3://bucket/cache", progress=False)


def test_import_does_not_write_through_a_symlinked_version_dir(tree, tmp_path):
    archive = tmp_path / "old.tar.gz"
    cc.export_cache(tree.root, archive, versions=[OLD], progress=False)
    target = tmp_path / "target"
    target.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (target / OLD_DIR).symlink_to(elsewhere)  # the version directory points out of the cache
    result = cc.import_cache(archive, target, progress=False)
    assert result.added == [] and "symbolic link" in dict(result.skipped)[tree.key("old_done")]
    assert list(elsewhere.iterdir()) == []
    assert not any(p.name.startswith(".import-") for p in target.iterdir())

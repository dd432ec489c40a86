"""Export a cache to tar.gz and import it elsewhere; archives that could escape are refused."""
from __future__ import annotations

import io
import json
import tarfile

import pytest

from helpers.cache.archive import MANIFEST_FORMAT, MANIFEST_NAME, UnsafeArchiveError, export_cache, import_cache
from helpers.cache.demo import neff_bytes
from helpers.cache.location import CompileCacheError, RemoteCacheError
from helpers.cache.scan import scan_cache
from tests.cache_trees import CUR_DIR, ENTRIES, OLD, OLD_DIR, build_cache_tree, tree_files


def test_export_import_round_trip(tree, tmp_path):
    archive = tmp_path / "share" / "old.tar.gz"
    # The old version only: the current one holds the 2 GiB sparse neff.
    exported = export_cache(tree.root, archive, versions=[OLD], progress=False)
    assert exported.entries == 1 and archive.is_file()  # done only: not failed, not locked
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(MANIFEST_NAME))
    assert names[0] == MANIFEST_NAME
    entry = tree.key("old_done")
    assert sorted(names[1:]) == sorted(f"{entry}/{n}" for n in
                                       ("compile_flags.json", "model.done", "model.hlo_module.pb",
                                        "model.neff"))
    assert manifest["compiler_versions"] == [OLD_DIR] and manifest["entries"][0]["key"] == entry
    assert manifest["format"] == MANIFEST_FORMAT
    sizes = {n: (tree.path("old_done") / n).stat().st_size for n in manifest["entries"][0]["files"]}
    assert manifest["entries"][0]["files"] == sizes and manifest["total_bytes"] == sum(sizes.values())

    fresh = tmp_path / "other-host" / "cache"  # does not exist yet: import creates it
    result = import_cache(archive, fresh, progress=False)
    assert result.added == [entry] and result.manifest == manifest
    assert tree_files(fresh) == {k: v for k, v in tree_files(tree.root).items()
                                 if k.startswith(entry + "/")}
    imported = scan_cache(fresh).find(entry)
    assert imported.state == "done"
    assert abs(imported.last_used - scan_cache(tree.root).find(entry).last_used) < 1.5
    assert not any(p.name.startswith(".import-") for p in fresh.iterdir())

    again = import_cache(archive, fresh, progress=False)  # never overwrites a done entry
    assert again.added == [] and again.skipped == [(entry, "already done here")]


def test_import_replaces_failed_keeps_done_and_locked(tree, tmp_path):
    source = build_cache_tree(tmp_path / "source", labels=["old_done", "done_hex", "locked_fresh"])
    archive = tmp_path / "a.tar.gz"
    export_cache(source.root, archive, progress=False)

    target = build_cache_tree(tmp_path / "target", labels=["old_failed", "done_hex"])
    # Here the old_done entry failed: its failure would block the compile; the archive's
    # done copy replaces it.
    failed_here = target.root / source.key("old_done")
    failed_here.mkdir(parents=True)
    (failed_here / "model.log").write_text("failed here\n")
    local = neff_bytes(3000)  # a program compiled here: kept, whatever the archive holds
    (target.path("done_hex") / "model.neff").write_bytes(local)
    result = import_cache(archive, target.root, progress=False)
    assert result.replaced == [source.key("old_done")]
    assert (source.key("done_hex"), "already done here") in result.skipped
    assert (target.path("done_hex") / "model.neff").read_bytes() == local
    assert not (target.root / source.key("locked_fresh")).exists()  # never exported
    states = {e.key: e.state for e in scan_cache(target.root).entries}
    assert states[source.key("old_done")] == "done"
    assert states[target.key("old_failed")] == "failed"  # not in the archive: untouched


def test_export_refuses_bad_requests(tree, tmp_path):
    with pytest.raises(CompileCacheError, match="inside the cache"):
        export_cache(tree.root, tree.root / "x.tar.gz", progress=False)
    with pytest.raises(CompileCacheError, match="no entries of version"):
        export_cache(tree.root, tmp_path / "x.tar.gz", versions=["9.9"], progress=False)
    assert not (tmp_path / "x.tar.gz").exists()


def test_import_refuses_a_directory_that_is_not_a_cache(tree, tmp_path):
    archive = tmp_path / "a.tar.gz"
    export_cache(tree.root, archive, versions=[OLD], progress=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(CompileCacheError, match="does not look like a compile cache"):
        import_cache(archive, home, progress=False)
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
    with pytest.raises(UnsafeArchiveError, match=problem.split()[0]) as err:
        import_cache(archive, tree.root, progress=False)
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
            _add(tar, f"{entry}/{name}", neff_bytes() if name == "model.neff" else b"x")
        _add(tar, "home/user/.bashrc")
        _add(tar, f"{CUR_DIR}/not_a_module.txt")
    result = import_cache(archive, tree.root, progress=False)
    assert result.added == [entry]
    ignored = dict(result.ignored)
    assert "home/user/.bashrc" in ignored and f"{CUR_DIR}/not_a_module.txt" in ignored
    assert not (tree.root / "home").exists()
    assert not (tree.root / CUR_DIR / "not_a_module.txt").exists()


def test_import_errors(tmp_path):
    with pytest.raises(CompileCacheError, match="no archive"):
        import_cache(tmp_path / "missing.tar.gz", tmp_path / "cache", progress=False)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar file at all")
    with pytest.raises(CompileCacheError, match="not a readable tar archive"):
        import_cache(junk, tmp_path / "cache", progress=False)
    with pytest.raises(RemoteCacheError):
        import_cache(junk, "s3://bucket/cache", progress=False)


def test_import_does_not_write_through_a_symlinked_version_dir(tree, tmp_path):
    archive = tmp_path / "old.tar.gz"
    export_cache(tree.root, archive, versions=[OLD], progress=False)
    target = tmp_path / "target"
    target.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (target / OLD_DIR).symlink_to(elsewhere)  # the version directory points out of the cache
    result = import_cache(archive, target, progress=False)
    assert result.added == [] and "symbolic link" in dict(result.skipped)[tree.key("old_done")]
    assert list(elsewhere.iterdir()) == []
    assert not any(p.name.startswith(".import-") for p in target.iterdir())


def _rewrite(archive, change_manifest=None, drop=None, out=None):
    """A copy of an exported archive with its manifest edited and/or a member left out."""
    out = out or archive.with_name("edited.tar.gz")
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isreg() else None
            if m.name == MANIFEST_NAME and change_manifest:
                manifest = json.loads(data)
                change_manifest(manifest)
                data = json.dumps(manifest).encode()
                m.size = len(data)
            if drop and m.name.endswith(drop):
                continue
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    return out


def _grow_neff(manifest):
    files = manifest["entries"][0]["files"]
    files["model.neff"] += 1


def _list_a_ghost(manifest):
    manifest["entries"][0]["files"]["model.extra"] = 5
    manifest["total_bytes"] += 5


@pytest.mark.parametrize("edit, expected", [
    (dict(change_manifest=_grow_neff), "manifest says"),
    (dict(change_manifest=_list_a_ghost), "listed, not in the archive"),
    (dict(drop="model.done"), "listed, not in the archive"),
    (dict(change_manifest=lambda m: m.update(total_bytes=m["total_bytes"] * 100)),
     "manifest total"),
    (dict(change_manifest=lambda m: m["entries"][0].pop("files")), "malformed"),
    (dict(change_manifest=lambda m: m.update(format="someone-else/1")), "manifest format"),
], ids=["size", "ghost file", "missing member", "total", "malformed", "format"])
def test_archive_contradicting_its_manifest_is_refused(tree, tmp_path, edit, expected):
    archive = tmp_path / "old.tar.gz"
    export_cache(tree.root, archive, versions=[OLD], progress=False)
    edited = _rewrite(archive, **edit)
    target = tmp_path / "target"
    with pytest.raises(CompileCacheError, match=expected):
        import_cache(edited, target, progress=False)
    assert not target.exists()  # created for the import, removed again when it was refused


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_archive_is_refused_and_nothing_is_written(tree, tmp_path, keep):
    archive = tmp_path / "old.tar.gz"
    export_cache(tree.root, archive, versions=[OLD], progress=False)
    data = archive.read_bytes()
    archive.write_bytes(data[: int(len(data) * keep)])
    target = build_cache_tree(tmp_path / "target", labels=["done_hex"]).root
    before = tree_files(target)
    with pytest.raises(CompileCacheError, match="truncated|damaged"):
        import_cache(archive, target, progress=False)
    assert tree_files(target) == before
    assert not any(p.name.startswith(".import-") for p in target.iterdir())


def test_import_larger_than_the_free_space_is_refused(tree, tmp_path):
    """A real (sparse) tar whose one member is bigger than the filesystem's free space."""
    import shutil

    target = build_cache_tree(tmp_path / "target", labels=["done_hex"]).root
    size = shutil.disk_usage(target).free + 1024**3
    if size > 15 * 1024**4:
        pytest.skip("more free space than one sparse file can stand for on ext4")
    info = tarfile.TarInfo(f"{CUR_DIR}/MODULE_9999+abcd/model.neff")
    info.size = size
    archive = tmp_path / "huge.tar"
    with open(archive, "wb") as f:
        f.write(info.tobuf(tarfile.GNU_FORMAT))
        f.truncate(f.tell() + -(-size // 512) * 512 + 2 * 512)  # data, then the end blocks
    assert archive.stat().st_blocks * 512 < 1024**2  # sparse: nothing written
    before = tree_files(target)
    with pytest.raises(CompileCacheError, match="unpacks to .* free"):
        import_cache(archive, target, progress=False)
    assert tree_files(target) == before
    assert not any(p.name.startswith(".import-") for p in target.iterdir())


def test_failed_entries_never_travel(tmp_path):
    labels = [label for label in ENTRIES if label != "done_big"]  # 2 GiB of zeros: slow to gzip
    source = build_cache_tree(tmp_path / "source", labels=labels)
    archive = tmp_path / "all.tar.gz"
    exported = export_cache(source.root, archive, progress=False)
    keys = {e["key"] for e in exported.manifest["entries"]}
    assert keys == {e.key for e in scan_cache(source.root).entries if e.state == "done"}
    assert len(keys) == 4
    with tarfile.open(archive) as tar:
        assert not any(n.endswith(".lock") for n in tar.getnames())
    # An archive made by hand that carries a failed entry: the failure is not imported.
    failed = f"{CUR_DIR}/MODULE_4444+abcd"
    handmade = tmp_path / "handmade.tar.gz"
    with tarfile.open(handmade, "w:gz") as tar:
        _add(tar, f"{failed}/model.hlo_module.pb")
        _add(tar, f"{failed}/model.neff", b"Failed compilation with ['neuronx-cc']: boom")
        _add(tar, f"{failed}/model.done", b"")
    target = tmp_path / "target"
    result = import_cache(handmade, target, progress=False)
    assert result.added == [] and "failed in the archive" in dict(result.skipped)[failed]
    assert not (target / failed).exists()


def test_import_root_that_is_a_file_and_export_to_a_directory(tree, tmp_path):
    archive = tmp_path / "old.tar.gz"
    export_cache(tree.root, archive, versions=[OLD], progress=False)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    with pytest.raises(CompileCacheError, match="is a file, not a directory"):
        import_cache(archive, a_file, progress=False)
    with pytest.raises(CompileCacheError, match="cannot create the cache directory"):
        import_cache(archive, a_file / "cache", progress=False)
    assert a_file.read_text() == "mine"
    with pytest.raises(CompileCacheError, match="is a directory: give the archive a file name"):
        export_cache(tree.root, tmp_path, progress=False)
    with pytest.raises(CompileCacheError, match=r"no archive at .* \(it is a directory\)"):
        import_cache(tmp_path, tmp_path / "cache", progress=False)


def test_export_into_a_directory_that_cannot_be_written(tree, tmp_path, immutable):
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    immutable(shelf)  # nothing can be created in it, by root either
    with pytest.raises(CompileCacheError, match="cannot write the archive .*not writable"):
        export_cache(tree.root, shelf / "cache.tar.gz", versions=[OLD], progress=False)
    assert list(shelf.iterdir()) == []  # no partial archive left behind

"""Share a cache: export done entries to a tar.gz with a manifest, and import one
(docs/cache-archive.md).

Failed entries are never exported or imported (a stored failure blocks that graph's compile
wherever it lands); lock files never travel. An import is checked whole before anything is
written (import_cache says what it refuses), then merged entry by entry.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.cache.location import CompileCacheError, local_path, open_root
from helpers.cache.plans import check_inside, compiler_processes, lock_is_stale, remove_inside
from helpers.cache.render import reason_dicts, report
from helpers.cache.safe_tar import READ_ERRORS, check_archive
from helpers.cache.scan import LOCK_STALE_AFTER_S, XLA_CACHE_FILE, Entry, NotRegularFile, scan_cache, scan_entry
from helpers.cache.units import human_bytes, iso_time
from mnist_mlp.common.atomic_files import UnwritableDirError, atomic_path

MANIFEST_NAME = "compile-cache-manifest.json"
MANIFEST_FORMAT = "trainium-workbook/compile-cache-export/2"
FREE_SPACE_MARGIN = 64 * 1024**2  # left free after an import, for the compiles that follow


class UnsafeArchiveError(CompileCacheError):
    """An archive to import holds members that could write outside the cache."""


@dataclass
class ExportResult:
    archive: Path
    entries: int
    files: int
    size_bytes: int
    manifest: dict

    def render(self) -> str:
        return (f"Exported {self.entries} entries ({self.files} files, "
                f"{human_bytes(self.size_bytes)}) to {self.archive}")


def progress_bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not enabled, file=sys.stderr)


def export_cache(root, archive: str | os.PathLike, versions=None,
                 progress: bool = True) -> ExportResult:
    """Write a tar.gz of the cache's done entries (or those of the chosen compiler versions)
    with a manifest naming every file and its size. Written atomically: a failed export
    leaves no partial archive."""
    scan = scan_cache(root)
    archive = Path(archive).expanduser().absolute()
    if archive.is_dir():
        raise CompileCacheError(f"{archive} is a directory: give the archive a file name, e.g. "
                                f"{archive / 'compile-cache.tar.gz'}")
    if archive.resolve().is_relative_to(scan.root):
        raise CompileCacheError(f"the archive {archive} would be inside the cache it archives: "
                                "write it elsewhere")
    if versions:
        known = {e.version_dir for e in scan.entries} | {e.compiler_version for e in scan.entries}
        missing = [v for v in versions if v not in known]
        if missing:
            raise CompileCacheError(
                f"no entries of version(s) {', '.join(missing)} in {scan.root}; present: "
                + ", ".join(sorted({e.version_dir for e in scan.entries})))
    chosen = scan.filter(states=["done"], versions=versions)
    members, listed = [], []
    for e in chosen:
        files = {}
        entry_files = ([(e.path, e.key)] if e.layout == "xla" else  # lock files never travel
                       [(e.path / n, f"{e.key}/{n}") for n in e.files if not n.endswith(".lock")])
        for path, arcname in entry_files:
            size = path.lstat().st_size
            members.append((path, arcname))
            files[arcname.removeprefix(e.key + "/")] = size  # xla: the file is the entry
        listed.append({"key": e.key, "files": files})
    manifest = {
        "format": MANIFEST_FORMAT,
        "created": iso_time(time.time()),
        "source_root": str(scan.root),
        "compiler_versions": sorted({e.version_dir for e in chosen}),
        "total_bytes": sum(size for e in listed for size in e["files"].values()),
        "entries": listed,
    }
    try:
        with atomic_path(archive, hint="Write the archive somewhere else.") as tmp:
            _write_tar(tmp, manifest, members, progress)
    except UnwritableDirError as err:
        raise CompileCacheError(f"cannot write the archive {archive}: {err}") from err
    except OSError as err:
        raise CompileCacheError(f"cannot write the archive {archive}: "
                                f"{err.strerror or err}") from err
    return ExportResult(archive, len(chosen), len(members), manifest["total_bytes"], manifest)


def _write_tar(path: Path, manifest: dict, members, progress: bool) -> None:
    from tqdm.utils import CallbackIOWrapper

    with tarfile.open(path, "w:gz", compresslevel=6) as tar, \
            progress_bar(manifest["total_bytes"], "export", progress) as bar:
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
        for path, arcname in members:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with open(fd, "rb") as f:
                info = tar.gettarinfo(arcname=arcname, fileobj=f)
                if not info.isreg():
                    raise NotRegularFile(f"{path} is no longer a regular file")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, CallbackIOWrapper(bar.update, f, "read"))


@dataclass
class ImportResult:
    root: Path
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # archive items not imported
    manifest: dict | None = None

    def render(self) -> str:
        return report(f"Imported into {self.root}: {len(self.added)} added, {len(self.replaced)} "
                      f"replaced (were failed or incomplete), {len(self.skipped)} kept as they "
                      "were", kept=self.skipped, ignored=self.ignored)

    def to_dict(self) -> dict:
        return {"root": str(self.root), "added": self.added, "replaced": self.replaced,
                "skipped": reason_dicts(self.skipped), "ignored": reason_dicts(self.ignored),
                "manifest": self.manifest}


def _open_target(root) -> tuple[Path, bool]:
    """The import's cache root, created if missing: (path, whether this call created it)."""
    path = local_path(root)
    if path.exists() and not path.is_dir():
        raise CompileCacheError(f"--root {path} is a file, not a directory: give the cache "
                                "directory (it is created if missing)")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CompileCacheError(f"cannot create the cache directory {path}: "
                                f"{err.strerror or err}") from err
    path = open_root(path)
    if not created and any(path.iterdir()):
        scan_cache(path)  # refuses a directory that is not a compile cache
    return path, created


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: Path) -> dict:
    try:
        manifest = json.load(tar.extractfile(member))
    except (json.JSONDecodeError, UnicodeDecodeError, *READ_ERRORS) as err:
        raise CompileCacheError(f"{archive}: its manifest cannot be read ({err}): the archive "
                                "is damaged; export it again") from err
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != MANIFEST_FORMAT:
        raise CompileCacheError(f"{archive}: manifest format {found!r}, expected "
                                f"{MANIFEST_FORMAT!r}: export it again with this workbook's "
                                "`python -m helpers.cache export`")
    return manifest


def check_against_manifest(manifest: dict, members: list[tarfile.TarInfo]) -> list[str]:
    """How the archive's members contradict its manifest (empty: they agree)."""
    listed: dict[str, int] = {}
    try:
        for e in manifest["entries"]:
            for name, size in e["files"].items():
                listed[name if name == e["key"] else f"{e['key']}/{name}"] = int(size)
        total = int(manifest["total_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return [f"the manifest is malformed ({type(err).__name__}: {err})"]
    found = {m.name.removeprefix("./"): m.size for m in members if m.isreg()}
    problems = [f"{n}: listed, not in the archive" for n in sorted(set(listed) - set(found))]
    problems += [f"{n}: in the archive, not listed" for n in sorted(set(found) - set(listed))]
    problems += [f"{n}: manifest says {listed[n]} bytes, the archive holds {found[n]}"
                 for n in sorted(set(listed) & set(found)) if listed[n] != found[n]]
    if total != sum(found.values()):
        problems.append(f"manifest total {total} bytes, members {sum(found.values())} bytes")
    return problems


def import_cache(archive: str | os.PathLike, root=None, progress: bool = True) -> ImportResult:
    """Merge an exported archive into the cache at root (created if missing).

    Refused before anything is written: unsafe members (absolute paths, '..', links,
    devices), a truncated or corrupt archive, members that contradict the manifest, and more
    data than the root's filesystem has free. Entries merge one by one: a done entry already
    here is never overwritten, nor is a locked one; a failed or incomplete one is replaced by
    a done one from the archive; failed entries in the archive are not imported.
    """
    archive = Path(archive).expanduser()
    if not archive.is_file():
        why = ("it is a directory" if archive.is_dir() else
               "not a regular file" if os.path.lexists(archive) else "no such file")
        raise CompileCacheError(f"no archive at {archive} ({why})")
    root_path, created = _open_target(root)
    try:
        return _import(archive, root_path, progress)
    except BaseException:
        if created and not any(root_path.iterdir()):
            root_path.rmdir()  # a refused import leaves no trace
        raise


def _import(archive: Path, root: Path, progress: bool) -> ImportResult:
    try:
        tar = tarfile.open(archive, "r:*")
        members = tar.getmembers()  # reads the whole archive: a truncated one fails here
    except READ_ERRORS as err:
        raise CompileCacheError(f"{archive} is not a readable tar archive, or is truncated "
                                f"({err}). Nothing was imported: copy or export it again.") from err
    with tar:
        bad = check_archive(tar)
        if bad:
            listed = "; ".join(f"{n} ({why})" for n, why in bad[:10])
            raise UnsafeArchiveError(
                f"refusing {archive}: {len(bad)} member(s) could write outside the cache or "
                f"create links/devices: {listed}. Nothing was extracted. Re-export it with "
                "`python -m helpers.cache export`.")
        result = ImportResult(root)
        wanted = []
        for m in members:
            name = m.name.removeprefix("./")
            if name == MANIFEST_NAME:
                result.manifest = _read_manifest(tar, m, archive)
            elif name.split("/")[0].startswith(("neuronxcc-", "USER_neuroncc-")) or (
                    m.isreg() and XLA_CACHE_FILE.fullmatch(name)):
                wanted.append(m)
            elif name not in ("", "."):
                result.ignored.append((name, "not part of a compile cache layout"))
        if result.manifest is not None:
            problems = check_against_manifest(result.manifest, [m for m in members
                                                                if m.name != MANIFEST_NAME])
            if problems:
                raise CompileCacheError(
                    f"refusing {archive}: its members contradict its manifest "
                    f"({'; '.join(problems[:5])}). Nothing was imported: export it again.")
        total = sum(m.size for m in wanted if m.isreg())
        free = shutil.disk_usage(root).free
        if total + FREE_SPACE_MARGIN > free:
            raise CompileCacheError(
                f"refusing {archive}: it unpacks to {human_bytes(total)}, and {root} has "
                f"{human_bytes(free)} free (keeping {human_bytes(FREE_SPACE_MARGIN)} spare). "
                "Free some space (`prune`) or import elsewhere with --root.")
        staging = Path(tempfile.mkdtemp(prefix=".import-", dir=root))
        try:
            with progress_bar(total, "import", progress) as bar:
                for m in wanted:
                    try:
                        tar.extract(m, staging, filter="data")
                    except READ_ERRORS as err:
                        raise CompileCacheError(
                            f"{archive}: reading {m.name} failed ({err}); the archive is "
                            "damaged. Nothing was imported: copy or export it again.") from err
                    bar.update(m.size if m.isreg() else 0)
            _merge(staging, root, result)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return result


def _merge(staging: Path, root: Path, result: ImportResult) -> None:
    try:
        incoming = scan_cache(staging)
    except CompileCacheError:
        return  # nothing recognisable was extracted
    result.ignored += [(u.key, u.reason) for u in incoming.unknown]
    compilers = compiler_processes()
    for e in incoming.entries:
        try:
            outcome = _merge_entry(e, root / e.key, root, compilers)
        except (CompileCacheError, OSError) as err:
            result.skipped.append((e.key, f"not imported: {err}"))
            continue
        if outcome in ("added", "replaced"):
            getattr(result, outcome).append(e.key)
        else:
            result.skipped.append((e.key, outcome))


def _merge_entry(e: Entry, dest: Path, root: Path, compilers) -> str:
    """Move one extracted entry into place: 'added', 'replaced', or why it was kept out."""
    if e.state != "done":
        return (f"{e.state} in the archive: not imported"
                + (" (a stored failure would block compiling that graph here)"
                   if e.state == "failed" else ""))
    if dest.parent != root and os.path.lexists(dest.parent):
        check_inside(dest.parent, root)  # a version directory that is a symlink: refused
    outcome = "added"
    if os.path.lexists(dest):
        if dest.is_symlink():
            return "a symbolic link is in its place here"
        here = scan_entry(dest, root, e.layout)
        if here.state == "done":
            return "already done here"
        if here.lock_files and not lock_is_stale(here.lock_age_s, LOCK_STALE_AFTER_S, compilers):
            return "being compiled here (fresh lock)"
        remove_inside(dest, root)
        outcome = "replaced"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.parent != root:
        check_inside(dest.parent, root)
    os.rename(e.path, dest)
    return outcome

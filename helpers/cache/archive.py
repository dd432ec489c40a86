"""Share a cache: the archive format, and exporting done entries to a tar.gz with a manifest
(importing one: helpers/cache/archive_import.py).

Failed entries are never exported or imported (a stored failure blocks that graph's compile
wherever it lands); lock files never travel. An import is checked before anything is written:
members that could escape the root or create links/devices, a truncated archive, members
that contradict the manifest, and a total size larger than the free space are all refused.
"""
from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from helpers.cache.entry import Entry, NotRegularFile
from helpers.cache.location import CompileCacheError
from helpers.cache.scan import scan_cache
from helpers.cache.units import human_bytes, iso_time
from mnist_mlp.common.atomic_files import UnwritableDirError, atomic_path

MANIFEST_NAME = "compile-cache-manifest.json"
MANIFEST_FORMAT = "trainium-workbook/compile-cache-export/2"
FREE_SPACE_MARGIN = 64 * 1024**2  # left free after an import, for the compiles that follow
READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


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


def _members(e: Entry) -> list[tuple[Path, str]]:
    """(file, name in the archive) of an entry's regular files, lock files left out."""
    if e.layout == "xla":
        return [(e.path, e.key)]
    return [(e.path / n, f"{e.key}/{n}") for n in e.files if not n.endswith(".lock")]


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
        for path, arcname in _members(e):
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

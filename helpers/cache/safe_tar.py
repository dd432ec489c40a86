"""What makes a tar archive safe to unpack, shared by the compile cache's import
(helpers/cache/archive.py) and the class bundle's (deploy/bundle.py). Standard library only: a
lab unpacks its class bundle before any venv of the workbook exists."""
from __future__ import annotations

import tarfile
import zlib
from pathlib import PurePosixPath

# What reading a damaged or truncated archive raises.
READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


def check_archive(tar: tarfile.TarFile) -> list[tuple[str, str]]:
    """Members that must not be extracted, with why: absolute paths, '..', links, devices."""
    bad = []
    for m in tar.getmembers():
        p = PurePosixPath(m.name)
        if m.name.startswith("/") or p.is_absolute():
            bad.append((m.name, "absolute path"))
        elif ".." in p.parts:
            bad.append((m.name, "'..' in the path"))
        elif m.issym():
            bad.append((m.name, f"symbolic link (to {m.linkname})"))
        elif m.islnk():
            bad.append((m.name, f"hard link (to {m.linkname})"))
        elif m.ischr() or m.isblk() or m.isfifo() or m.isdev():
            bad.append((m.name, "device or fifo"))
        elif not (m.isreg() or m.isdir()):
            bad.append((m.name, f"unsupported member type {m.type!r}"))
    return bad

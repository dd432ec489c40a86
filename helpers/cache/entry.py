"""One cache entry read from disk: its files, state, sizes, flags and stored failure.

Only regular files are ever opened (lstat first, then O_NOFOLLOW|O_NONBLOCK and fstat), and
only a bounded part of each: a FIFO, socket or device in an entry is listed, never read.
What state an entry is in, and how a stored failure is recognised, is
mnist_mlp.common.compile_cache's (the scripts' compile notice reads entries too): `prune --failed`
deletes failed entries, so a program whose header is not known there stays a program.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from helpers.cache.units import iso_time
from mnist_mlp.common.compile_cache import (  # noqa: F401  (the names this package reads them by)
    MODULE_DIR,
    NEFF_HEADER,
    NEFF_HEADER_SIZE,
    STATES,
    VERSION_DIR,
    NotRegularFile,
    entry_state,
    neff_kind,
    read_regular,
)

LOG_TAIL_LINES = 20
LEGACY_VERSION_DIR = re.compile(r"USER_neuroncc-(?P<version>.+)")
LEGACY_MODULE_DIR = re.compile(r"MODULE_(?P<module>\d+)")
XLA_CACHE_FILE = re.compile(r"\d{16,}")
_HLO_NAMES = ("model.hlo_module.pb", "model.hlo.pb")
_FLAGS_NAMES = ("compile_flags.json", "compile_flags.txt")


@dataclass
class Entry:
    """One compiled (or failed, or in-progress) graph in the cache."""
    key: str  # path relative to the root, e.g. "neuronxcc-2.21.0+abc/MODULE_12+34"
    path: Path
    layout: str  # "neuronxcc", "legacy" (USER_neuroncc-, 2022) or "xla" (torch-xla's cache)
    version_dir: str  # the top-level directory, or "torch-xla" for the flat xla cache
    compiler_version: str | None
    module_hash: str
    flags_hash: str | None
    hash_style: str  # "decimal" or "hex"
    state: str  # one of STATES
    neff_bytes: int = 0
    hlo_bytes: int = 0
    size_bytes: int = 0  # apparent
    disk_bytes: int = 0  # allocated
    last_used: float = 0.0  # newest mtime inside (Neuron does not touch files on a cache hit)
    flags: list[str] | None = None
    flags_error: str | None = None
    lock_files: list[str] = field(default_factory=list)
    lock_age_s: float | None = None  # age of the youngest lock
    log_tail: str | None = None
    failure: str | None = None  # the failure text a failed compile stored in its model.neff
    unknown_text: str | None = None  # a model.neff that is text but not a failure: shown, kept
    files: list[str] = field(default_factory=list)  # regular files only
    symlinks: list[str] = field(default_factory=list)  # listed, never followed
    special: list[str] = field(default_factory=list)  # FIFOs, sockets, devices: never opened
    unreadable: list[str] = field(default_factory=list)  # "name: why"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        d["last_used_iso"] = iso_time(self.last_used)
        return d


def _read_flags(path: Path) -> tuple[list[str] | None, str | None]:
    try:
        text = read_regular(path, 1 << 20).decode("utf-8", errors="replace")
    except OSError as err:
        return None, f"{path.name}: {err.strerror or err}"
    if path.suffix == ".txt":
        try:
            return shlex.split(text), None
        except ValueError as err:
            return None, f"{path.name}: {err}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"{path.name} is not valid JSON ({err.msg} at line {err.lineno})"
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        return None, f"{path.name}: expected a JSON list of strings, got {type(data).__name__}"
    return data, None


def _walk(top: Path):
    """(relative name, lstat) of everything but directories under top; links not followed."""
    stack = [top]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for de in it:
                if de.is_dir(follow_symlinks=False):
                    stack.append(Path(de.path))
                else:
                    yield Path(de.path).relative_to(top).as_posix(), de.stat(follow_symlinks=False)


def _new_entry(path: Path, root: Path, layout: str) -> Entry:
    rel = path.relative_to(root)
    version_dir = rel.parts[0] if layout != "xla" else "torch-xla"
    if layout == "neuronxcc":
        m = MODULE_DIR.fullmatch(path.name)
        module, flags_hash = m["module"], m["flags"]
        version = VERSION_DIR.fullmatch(version_dir)["version"]
    elif layout == "legacy":
        module, flags_hash = LEGACY_MODULE_DIR.fullmatch(path.name)["module"], None
        version = LEGACY_VERSION_DIR.fullmatch(version_dir)["version"]
    else:
        module, flags_hash, version = path.name, None, "torch-xla"
    return Entry(key=rel.as_posix(), path=path, layout=layout, version_dir=version_dir,
                 compiler_version=version, module_hash=module, flags_hash=flags_hash,
                 hash_style="decimal" if module.isdigit() else "hex", state="incomplete")


def scan_entry(path: Path, root: Path, layout: str, now: float | None = None) -> Entry:
    """Read one entry directory (or, for the xla layout, one file)."""
    now = time.time() if now is None else now
    entry = _new_entry(path, root, layout)
    if layout == "xla":
        st = path.lstat()
        entry.files, entry.state = [path.name], "done"
        entry.size_bytes, entry.disk_bytes = st.st_size, st.st_blocks * 512
        entry.last_used = st.st_mtime
        return entry

    names: dict[str, os.stat_result] = {}
    for name, st in _walk(path):
        if stat.S_ISLNK(st.st_mode):
            entry.symlinks.append(name)
            continue
        if not stat.S_ISREG(st.st_mode):
            entry.special.append(name)
            continue
        names[name] = st
        entry.size_bytes += st.st_size
        entry.disk_bytes += st.st_blocks * 512
        if not name.endswith(".lock"):  # clearing a lock is not a use
            entry.last_used = max(entry.last_used, st.st_mtime)
    entry.last_used = entry.last_used or path.lstat().st_mtime
    entry.files = sorted(names)
    base = {n: PurePosixPath(n).name for n in names}
    neffs = sorted(n for n in names if n.endswith(".neff"))
    hlos = [n for n in names if base[n] in _HLO_NAMES or n.endswith(".hlo.pb")]
    locks = sorted(n for n in names if n.endswith(".lock"))
    logs = sorted(n for n in names if n.endswith(".log"))
    entry.neff_bytes = sum(names[n].st_size for n in neffs)
    entry.hlo_bytes = sum(names[n].st_size for n in hlos)
    entry.lock_files = locks
    if locks:
        entry.lock_age_s = max(0.0, now - max(names[n].st_mtime for n in locks))
    for fname in _FLAGS_NAMES:
        if fname in names:
            entry.flags, entry.flags_error = _read_flags(path / fname)
            break

    kinds = []
    for n in neffs:
        try:
            kind, text = neff_kind(path / n)
        except OSError as err:
            entry.unreadable.append(f"{n}: {err.strerror or err}")
            continue
        kinds.append(kind)
        if kind == "failed" and entry.failure is None:
            entry.failure = text
        elif kind == "unknown" and entry.unknown_text is None:
            entry.unknown_text = text
    entry.state = entry_state(names, kinds, legacy=layout == "legacy")
    if logs and entry.state != "done":
        try:
            text = read_regular(path / logs[0], 16384, tail=True).decode("utf-8", errors="replace")
            entry.log_tail = "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
        except OSError as err:
            entry.unreadable.append(f"{logs[0]}: {err.strerror or err}")
    return entry


def layout_of(path: Path, root: Path) -> str:
    """The layout of an entry path under root (for re-reading an entry a plan names)."""
    if path.parent == root:
        return "xla"
    return "legacy" if path.relative_to(root).parts[0].startswith("USER_neuroncc-") else "neuronxcc"

"""One cache entry read from disk: its files, state, sizes, flags and stored failure.

Only regular files are ever opened (lstat first, then O_NOFOLLOW|O_NONBLOCK and fstat), and
only a bounded part of each: a FIFO, socket or device in an entry is listed, never read.
A failed neuronx-cc compile is stored as a `model.neff` holding the compiler wrapper's failure
text instead of a NEFF. An entry is called failed only when its model.neff positively reads as
that text (UTF-8, printable, with the wrapper's markers): `prune --failed` deletes failed
entries, so a program whose header this scanner does not know stays a program.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import stat
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from helpers.cache.units import iso_time

STATES = ("done", "failed", "locked", "incomplete", "unknown")  # unknown: no cleanup removes it
LOG_TAIL_LINES = 20
FAILURE_MAX_BYTES = 4096  # of a failed NEFF's text, shown in `show` and the browser
NEFF_HEADER = struct.Struct("<QQQ")  # packaging version (1 or 2), header size (1024), data size
NEFF_HEADER_SIZE = 1024
# What the wrapper's failure text holds (libneuronxla writes "Failed compilation with <argv>: <error>";
# neuronx-cc's own log ends "Compiler status ERROR"; its error codes read [NCC_XXXX000]).
FAILURE_MARKERS = (re.compile(r"\AFailed compilation with "), re.compile(r"Compiler status ERROR"),
                   re.compile(r"\[NCC_[A-Z]{4}\d{3}\]"))
_TEXT_CONTROLS = frozenset(b"\t\n\r")

VERSION_DIR = re.compile(r"neuronxcc-(?P<version>.+)")
LEGACY_VERSION_DIR = re.compile(r"USER_neuroncc-(?P<version>.+)")
MODULE_DIR = re.compile(r"MODULE_(?P<module>[0-9a-fA-F]+)\+(?P<flags>[0-9a-fA-F]+)")
LEGACY_MODULE_DIR = re.compile(r"MODULE_(?P<module>\d+)")
XLA_CACHE_FILE = re.compile(r"\d{16,}")
_HLO_NAMES = ("model.hlo_module.pb", "model.hlo.pb")
_FLAGS_NAMES = ("compile_flags.json", "compile_flags.txt")


class NotRegularFile(OSError):
    """A FIFO, socket, device or symlink where a regular file was expected: not opened."""


def read_regular(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """At most `limit` bytes from the start (or end) of a regular file, never blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path.name}: not a regular file")
        if tail:
            os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def neff_kind(path: Path) -> tuple[str, str | None]:
    """("neff", None) for a compiled program (a NEFF header, or any binary: a newer NEFF version
    is still a program), ("failed", text) for the wrapper's failure text, ("unknown", text) for
    other text, ("empty", None) for a zero-byte file."""
    head = read_regular(path, FAILURE_MAX_BYTES)
    if not head:
        return "empty", None
    if len(head) >= NEFF_HEADER.size:
        version, header_size, _ = NEFF_HEADER.unpack_from(head)
        if version in (1, 2) and header_size == NEFF_HEADER_SIZE:
            return "neff", None
    text = _printable_text(head)
    if text is None:
        return "neff", None  # binary we cannot name: a program, never a failure
    if any(marker.search(text) for marker in FAILURE_MARKERS):
        return "failed", text
    return "unknown", text


def _printable_text(head: bytes) -> str | None:
    """The bytes as text if they are UTF-8 with no control characters but tab and newlines."""
    try:
        # A bounded prefix may end inside a multi-byte character: drop at most 3 bytes of it.
        text = head.decode("utf-8") if len(head) < FAILURE_MAX_BYTES else _decode_prefix(head)
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and ord(c) not in _TEXT_CONTROLS or ord(c) == 127 for c in text):
        return None
    return text


def _decode_prefix(head: bytes) -> str:
    for cut in range(4):
        try:
            return head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError as err:
            last = err
    raise last


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
    if locks:
        entry.state = "locked"
    elif "failed" in kinds or (logs and not neffs):
        entry.state = "failed"
    elif "unknown" in kinds:
        entry.state = "unknown"  # text, but not the wrapper's failure: left alone
    elif "neff" in kinds and (layout == "legacy" or "model.done" in names):
        entry.state = "done"
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

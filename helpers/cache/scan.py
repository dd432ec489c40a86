"""What is in a compile cache: one entry read from disk (its files, state, sizes, flags and stored
failure), and a whole root scanned into entries, with what was not recognised and notes.

Layouts: today's neuronxcc-<version>/MODULE_<hlo hash>+<flags hash>/, the 2022 SDK's
USER_neuroncc-<version>/MODULE_<hash>/..., and torch-xla's own cache (one file per graph, named
by a decimal hash). Anything else is listed as not recognised and left alone. Only regular
files are ever opened (lstat first, then O_NOFOLLOW|O_NONBLOCK and fstat), and only a bounded
part of each: a FIFO, socket or device in an entry is listed, never read. What state an entry
is in is mnist_mlp.common.compile_cache's (the scripts' compile notice reads entries too).
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

from helpers.cache.location import PROC_MOUNTS, CompileCacheError, on_network_filesystem, open_root
from helpers.cache.units import SizeTotals, human_bytes, iso_time
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


LOCK_STALE_AFTER_S = 30 * 60
XLA_CPU_NOTE = ("torch-xla persistent cache files: on the CPU stand-in (PJRT_DEVICE=CPU) torch-xla "
                "writes them but cannot read them back (\"Deserializing serialized executable not "
                "supported\"), so they give no speed-up there; on Trainium the Neuron cache is the "
                "one that saves the compile.")


@dataclass
class Unknown:
    key: str
    reason: str


@dataclass
class VersionSummary:
    entries: int = 0
    size_bytes: int = 0
    disk_bytes: int = 0
    by_state: dict = field(default_factory=lambda: dict.fromkeys(STATES, 0))


@dataclass
class CacheScan(SizeTotals):
    root: Path
    entries: list[Entry]
    unknown: list[Unknown]
    notes: list[str]
    scanned_at: float

    def by_state(self) -> dict[str, int]:
        counts = dict.fromkeys(STATES, 0)
        for e in self.entries:
            counts[e.state] += 1
        return counts

    def by_version(self) -> dict[str, VersionSummary]:
        out: dict[str, VersionSummary] = {}
        for e in self.entries:
            s = out.setdefault(e.version_dir, VersionSummary())
            s.entries += 1
            s.size_bytes += e.size_bytes
            s.disk_bytes += e.disk_bytes
            s.by_state[e.state] += 1
        return dict(sorted(out.items()))

    def _sized(self):
        return self.entries

    def filter(self, states=None, versions=None) -> list[Entry]:
        states = set(states or STATES)
        versions = set(versions or ())
        return [e for e in self.entries if e.state in states
                and (not versions or e.version_dir in versions or e.compiler_version in versions)]

    def without(self, plans) -> "CacheScan":
        """This scan minus the entries the plans remove: what a plan made after them should
        see, so no entry is listed twice and a size budget counts what will be left."""
        gone = {i.key for p in plans for i in p.items if i.kind == "entry"}
        return CacheScan(self.root, [e for e in self.entries if e.key not in gone],
                         self.unknown, self.notes, self.scanned_at)

    def find(self, key: str) -> Entry:
        """An entry by key, by its MODULE_ directory name, or by a unique prefix of its hash."""
        key = key.strip().rstrip("/")
        exact = [e for e in self.entries if e.key == key or e.path.name == key]
        if len(exact) == 1:
            return exact[0]
        bare = key.removeprefix("MODULE_")
        matches = exact or [e for e in self.entries if e.module_hash.startswith(bare)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise CompileCacheError(f"no entry {key!r} in {self.root}: run `ls` to see the keys")
        raise CompileCacheError(f"{key!r} matches {len(matches)} entries: give the full key, e.g. "
                                f"{matches[0].key!r}")

    def summary(self) -> str:
        states = ", ".join(f"{s} {n}" for s, n in self.by_state().items()
                           if n or s != "unknown")  # "unknown" is rare: named only when present
        return (f"{len(self.entries)} entries ({states}); {human_bytes(self.size_bytes)} apparent, "
                f"{human_bytes(self.disk_bytes)} on disk")

    def to_dict(self) -> dict:
        return {
            "root": str(self.root),
            "scanned_at": iso_time(self.scanned_at),
            "summary": {"entries": len(self.entries), "by_state": self.by_state(),
                        "size_bytes": self.size_bytes, "disk_bytes": self.disk_bytes,
                        "by_version": {k: asdict(v) for k, v in self.by_version().items()}},
            "entries": [e.to_dict() for e in self.entries],
            "unknown": [asdict(u) for u in self.unknown],
            "notes": self.notes,
        }


def scan_cache(root=None, now: float | None = None, mounts: Path = PROC_MOUNTS) -> CacheScan:
    """Scan a cache root into entries. Raises CompileCacheError if it is missing, unreadable or
    holds nothing that looks like a compile cache. `mounts`: where to read the filesystem type."""
    root = open_root(root)
    now = time.time() if now is None else now
    entries: list[Entry] = []
    unknown: list[Unknown] = []

    def children(d: Path):
        try:
            with os.scandir(d) as it:
                return sorted(it, key=lambda de: de.name)
        except PermissionError as err:
            unknown.append(Unknown(d.relative_to(root).as_posix(), f"unreadable: {err.strerror}"))
            return []

    for top in children(root):
        p = Path(top.path)
        if top.is_symlink():
            unknown.append(Unknown(top.name, f"symbolic link to {os.readlink(p)} (not followed)"))
        elif top.is_dir(follow_symlinks=False):
            layout = ("neuronxcc" if VERSION_DIR.fullmatch(top.name) else
                      "legacy" if LEGACY_VERSION_DIR.fullmatch(top.name) else None)
            if layout is None:
                reason = ("an import in progress, or left by an interrupted one"
                          if top.name.startswith(".import-") else "not a compiler-version directory")
                unknown.append(Unknown(top.name, reason))
                continue
            pattern = MODULE_DIR if layout == "neuronxcc" else LEGACY_MODULE_DIR
            for child in children(p):
                key = f"{top.name}/{child.name}"
                if child.is_symlink():
                    unknown.append(Unknown(key, f"symbolic link to {os.readlink(child.path)} "
                                                "(not followed)"))
                elif child.is_dir(follow_symlinks=False) and pattern.fullmatch(child.name):
                    try:
                        entries.append(scan_entry(Path(child.path), root, layout, now))
                    except PermissionError as err:
                        unknown.append(Unknown(key, f"unreadable: {err.strerror}"))
                else:
                    unknown.append(Unknown(key, "not a MODULE_<hash> entry"))
        elif top.is_file(follow_symlinks=False) and XLA_CACHE_FILE.fullmatch(top.name):
            entries.append(scan_entry(p, root, "xla", now))
        else:
            unknown.append(Unknown(top.name, "not part of a compile cache layout"))

    if unknown and not entries and not any(u.key.startswith(("neuronxcc-", "USER_neuroncc-"))
                                           for u in unknown):
        hint = ""
        if any(MODULE_DIR.fullmatch(u.key) or LEGACY_MODULE_DIR.fullmatch(u.key) for u in unknown):
            hint = f" It holds MODULE_* directories: did you mean its parent, {root.parent}?"
        raise CompileCacheError(
            f"{root} does not look like a compile cache: none of its {len(unknown)} item(s) is a "
            f"neuronxcc-<version>/ or USER_neuroncc-<version>/ directory or a torch-xla cache "
            f"file.{hint} Pass the directory that holds them with --root.")
    return CacheScan(root, entries, unknown, _notes(root, entries, mounts), now)


def _notes(root: Path, entries: list[Entry], mounts: Path) -> list[str]:
    notes = []
    if any(e.layout == "xla" for e in entries):
        notes.append(XLA_CPU_NOTE)
    if any(e.layout == "legacy" for e in entries):
        notes.append("USER_neuroncc-* directories come from a 2022-era Neuron SDK: today's "
                     "compiler never reads them; `prune --other-versions` removes them.")
    if any(e.state == "failed" for e in entries):
        notes.append("Failed entries block recompiling that graph (\"Got a cached failed neff\"): "
                     "remove them (`prune --failed`) or run once with --retry_failed_compilation "
                     "in NEURON_CC_FLAGS.")
    if any(e.special for e in entries):
        notes.append("Some entries hold FIFOs, sockets or devices: they are listed, never read "
                     "or exported.")
    old_locks = sum(1 for e in entries
                    if e.lock_age_s is not None and e.lock_age_s >= LOCK_STALE_AFTER_S)
    if old_locks:
        notes.append(f"{old_locks} lock(s) older than {LOCK_STALE_AFTER_S // 60} min: if no compile "
                     "is running, a killed compile left them and the next run that needs the graph "
                     "waits on them (\"Another process must be compiling\"): `prune --stale-locks`.")
    fs = on_network_filesystem(root, mounts)
    if fs:
        notes.append(f"The cache is on a network filesystem ({fs}): compiles on other hosts are "
                     "invisible here, so a lock is called stale on its age alone; locks over "
                     "NFS/EFS are a common source of hangs. A local cache per host, shared with "
                     "export/import, avoids both.")
    return notes

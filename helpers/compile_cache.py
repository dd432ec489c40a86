"""Inspect and tidy the Neuron persistent compile cache: a library and a CLI.

    python -m helpers.compile_cache ls|show|prune|export|import [--root DIR] [--dry-run] [--json]

The first compile of a graph on Trainium takes minutes; the persistent cache is what makes the
second run fast. Its layout (current Neuron SDK):

    <root>/neuronxcc-<compiler version>/MODULE_<hlo hash>+<flags hash>/
        model.hlo_module.pb        serialized HLO (always)
        compile_flags.json         JSON list of compiler flags
        model.neff, model.done     compiled program and marker (success only)
        model.log                  compiler log (failure only: a "cached failed neff" blocks
                                   recompiling until NEURON_CC_FLAGS has --retry_failed_compilation)
        model.hlo_module.pb.lock   while a compile runs (or left behind by a crash)

`build_demo_cache(root)` writes a small cache in this layout, every state in it, for notebook 03
and the tests.

Older SDKs (2022) wrote USER_neuroncc-<version>/MODULE_<hash>/<graph>/<uuid>/<graph>.neff; both
hash styles (decimal and hex) are read, and anything not recognised is listed as unknown.
torch-xla's own persistent cache (torch_xla.runtime.initialize_cache) is one file per graph,
named by a decimal hash: it is listed too, but on the CPU stand-in it gives no speed-up (the
CPU client cannot deserialize what it wrote).

Neuron never evicts anything from this cache: the pruning here (failed entries, stale locks,
other compiler versions, least recently used) is this workbook's policy. Every removal is a
plan first (what goes, how many bytes), then applied; nothing outside the root is touched and
symlinks are never followed.

Sizes: `size_bytes` is the apparent size (what `ls -l` and a tar archive see), `disk_bytes`
what is allocated on disk (`du`; smaller for sparse files). The size budget of `prune`
counts disk bytes, since a full disk is what it guards against.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import os
import re
import shlex
import shutil
import stat
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from helpers import neuron_flags

DEFAULT_ROOT = "/var/tmp/neuron-compile-cache"
CACHE_URL_ENV = "NEURON_COMPILE_CACHE_URL"
PROC_MOUNTS = Path("/proc/mounts")
XLA_CACHE_ENV = "XLA_PERSISTENT_CACHE_PATH"  # set by torch_xla.runtime.initialize_cache
STATES = ("done", "failed", "locked", "incomplete")
LOCK_STALE_AFTER_S = 30 * 60
LOG_TAIL_LINES = 20
MANIFEST_NAME = "compile-cache-manifest.json"
MANIFEST_FORMAT = "trainium-workbook/compile-cache-export/1"
# Processes that compile into the cache: while one runs, no lock is called stale.
COMPILER_PROCESS_NAMES = ("neuronx-cc", "neuron_parallel_compile", "neuron_cc_wrapper",
                          "walrus_driver")
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "efs", "lustre", "cifs", "smb3", "ceph", "glusterfs",
                       "9p", "beegfs", "gpfs")

_VERSION_DIR = re.compile(r"neuronxcc-(?P<version>.+)")
_LEGACY_VERSION_DIR = re.compile(r"USER_neuroncc-(?P<version>.+)")
_MODULE_DIR = re.compile(r"MODULE_(?P<module>[0-9a-fA-F]+)\+(?P<flags>[0-9a-fA-F]+)")
_LEGACY_MODULE_DIR = re.compile(r"MODULE_(?P<module>\d+)")
_XLA_CACHE_FILE = re.compile(r"\d{16,}")
_HLO_NAMES = ("model.hlo_module.pb", "model.hlo.pb")
_FLAGS_NAMES = ("compile_flags.json", "compile_flags.txt")

XLA_CPU_NOTE = ("torch-xla persistent cache files: on the CPU stand-in (PJRT_DEVICE=CPU) torch-xla "
                "writes them but cannot read them back (\"Deserializing serialized executable not "
                "supported\"), so they give no speed-up there; on Trainium the Neuron cache is the "
                "one that saves the compile.")


class CompileCacheError(Exception):
    """An operation refused or failed; the message says why and what to do."""


class RemoteCacheError(CompileCacheError):
    """The cache is an s3:// URL: this tool only reads local directories."""


class UnsafeArchiveError(CompileCacheError):
    """An archive to import holds members that could write outside the cache."""


# ---------------------------------------------------------------- locating the cache


@dataclass(frozen=True)
class CacheLocation:
    url: str  # a local directory, or an s3:// URL
    source: str  # where it came from, said to the reader

    @property
    def remote(self) -> bool:
        return "://" in self.url and not self.url.startswith("file://")

    @property
    def path(self) -> Path:
        if self.remote:
            raise RemoteCacheError(
                f"the compile cache is {self.url} (from {self.source}), a remote cache: this tool "
                "reads local directories only and does not scan it. List it with "
                f"`aws s3 ls --recursive {self.url}`, or pass --root <local dir>.")
        return Path(self.url.removeprefix("file://")).expanduser()


def locate_cache(env=None) -> CacheLocation:
    """The cache Neuron would use: --cache_dir in NEURON_CC_FLAGS, else NEURON_COMPILE_CACHE_URL,
    else /var/tmp/neuron-compile-cache (the Neuron docs' order)."""
    env = os.environ if env is None else env
    cache_dir = neuron_flags.get_flag(env.get(neuron_flags.ENV_VAR), "--cache_dir")
    if isinstance(cache_dir, str) and cache_dir:
        return CacheLocation(cache_dir, "--cache_dir in NEURON_CC_FLAGS")
    if env.get(CACHE_URL_ENV):
        return CacheLocation(env[CACHE_URL_ENV], CACHE_URL_ENV)
    return CacheLocation(DEFAULT_ROOT, "the Neuron default")


def xla_cache_location(env=None) -> CacheLocation | None:
    """torch-xla's own persistent cache, if initialize_cache() set it in this environment."""
    env = os.environ if env is None else env
    path = env.get(XLA_CACHE_ENV)
    return CacheLocation(path, XLA_CACHE_ENV) if path else None


def installed_compiler_version() -> str | None:
    """The installed neuronx-cc version (as in the neuronxcc-<version> directory names)."""
    import importlib.metadata  # here: it takes a tenth of a second to import

    try:
        return importlib.metadata.version("neuronx-cc")
    except importlib.metadata.PackageNotFoundError:
        return None


def same_compiler_version(a: str, b: str) -> bool:
    """Versions match, ignoring the +<build> part when one of them lacks it."""
    if a == b:
        return True
    if "+" in a and "+" in b:
        return False
    return a.split("+")[0] == b.split("+")[0]


def open_root(root: str | os.PathLike | CacheLocation | None) -> Path:
    """A cache root as an absolute, resolved directory, or a CompileCacheError saying why not."""
    if root is None:
        root = locate_cache()
    if isinstance(root, CacheLocation):
        where = f" (from {root.source})"
        root = root.path
    else:
        where = ""
        if "://" in str(root):
            return open_root(CacheLocation(str(root), "--root"))
    path = Path(root).expanduser()
    if not path.exists():
        raise CompileCacheError(
            f"no compile cache at {path}{where}: the directory does not exist. Nothing has been "
            "compiled with this cache yet, or the cache is elsewhere: set --root, "
            f"{CACHE_URL_ENV} or --cache_dir in NEURON_CC_FLAGS.")
    if not path.is_dir():
        raise CompileCacheError(f"{path}{where} is not a directory: pass the cache directory "
                                f"(the one holding neuronxcc-<version>/ folders)")
    try:
        with os.scandir(path):
            pass
    except PermissionError as err:
        raise CompileCacheError(
            f"cannot read the compile cache {path}{where}: {err.strerror}. Run as the user who "
            "owns it (compiles often run as root: try sudo), or fix its permissions.") from err
    return path.resolve()


# ---------------------------------------------------------------- scanning


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
    files: list[str] = field(default_factory=list)
    symlinks: list[str] = field(default_factory=list)  # listed, never followed

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        d["last_used_iso"] = _iso(self.last_used)
        return d


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
class CacheScan:
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

    @property
    def size_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries)

    @property
    def disk_bytes(self) -> int:
        return sum(e.disk_bytes for e in self.entries)

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
        states = ", ".join(f"{s} {n}" for s, n in self.by_state().items())
        return (f"{len(self.entries)} entries ({states}); {human_bytes(self.size_bytes)} apparent, "
                f"{human_bytes(self.disk_bytes)} on disk")

    def to_dict(self) -> dict:
        return {
            "root": str(self.root),
            "scanned_at": _iso(self.scanned_at),
            "summary": {"entries": len(self.entries), "by_state": self.by_state(),
                        "size_bytes": self.size_bytes, "disk_bytes": self.disk_bytes,
                        "by_version": {k: asdict(v) for k, v in self.by_version().items()}},
            "entries": [e.to_dict() for e in self.entries],
            "unknown": [asdict(u) for u in self.unknown],
            "notes": self.notes,
        }


def _iso(t: float) -> str | None:
    return _dt.datetime.fromtimestamp(t).isoformat(timespec="seconds") if t else None


def _hash_style(h: str) -> str:
    return "decimal" if h.isdigit() else "hex"


def _tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 16384) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _read_flags(path: Path) -> tuple[list[str] | None, str | None]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        return None, f"{path.name}: {err.strerror}"
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


def _walk_files(top: Path):
    """(relative name, lstat) of every regular file and symlink under top, never following links."""
    stack = [top]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for de in it:
                if de.is_dir(follow_symlinks=False):
                    stack.append(Path(de.path))
                else:
                    yield Path(de.path).relative_to(top).as_posix(), de.stat(follow_symlinks=False)


def scan_entry(path: Path, root: Path, layout: str, now: float | None = None) -> Entry:
    """Read one entry directory (or, for the xla layout, one file)."""
    now = time.time() if now is None else now
    rel = path.relative_to(root)
    version_dir = rel.parts[0] if layout != "xla" else "torch-xla"
    if layout == "neuronxcc":
        m = _MODULE_DIR.fullmatch(path.name)
        module, flags_hash = m["module"], m["flags"]
        version = _VERSION_DIR.fullmatch(version_dir)["version"]
    elif layout == "legacy":
        module, flags_hash = _LEGACY_MODULE_DIR.fullmatch(path.name)["module"], None
        version = _LEGACY_VERSION_DIR.fullmatch(version_dir)["version"]
    else:
        module, flags_hash, version = path.name, None, "torch-xla"
    entry = Entry(key=rel.as_posix(), path=path, layout=layout, version_dir=version_dir,
                  compiler_version=version, module_hash=module, flags_hash=flags_hash,
                  hash_style=_hash_style(module), state="incomplete")
    if layout == "xla":
        st = path.lstat()
        entry.files, entry.state = [path.name], "done"
        entry.size_bytes, entry.disk_bytes = st.st_size, st.st_blocks * 512
        entry.last_used = st.st_mtime
        return entry

    names: dict[str, os.stat_result] = {}
    for name, st in _walk_files(path):
        if stat.S_ISLNK(st.st_mode):
            entry.symlinks.append(name)
            continue
        names[name] = st
        entry.size_bytes += st.st_size
        entry.disk_bytes += st.st_blocks * 512
        if not name.endswith(".lock"):  # clearing a lock is not a use
            entry.last_used = max(entry.last_used, st.st_mtime)
    entry.last_used = entry.last_used or path.lstat().st_mtime
    entry.files = sorted(names)
    base = {n: PurePosixPath(n).name for n in names}
    neffs = [n for n in names if n.endswith(".neff")]
    hlos = [n for n in names if base[n] in _HLO_NAMES or n.endswith(".hlo.pb")]
    locks = [n for n in names if n.endswith(".lock")]
    logs = [n for n in names if n.endswith(".log")]
    entry.neff_bytes = sum(names[n].st_size for n in neffs)
    entry.hlo_bytes = sum(names[n].st_size for n in hlos)
    entry.lock_files = sorted(locks)
    if locks:
        entry.lock_age_s = max(0.0, now - max(names[n].st_mtime for n in locks))
    for fname in _FLAGS_NAMES:
        if fname in names:
            entry.flags, entry.flags_error = _read_flags(path / fname)
            break

    if locks:
        entry.state = "locked"
    elif layout == "legacy":
        entry.state = "done" if neffs else ("failed" if logs else "incomplete")
    elif "model.neff" in names and "model.done" in names:
        entry.state = "done"
    elif "model.log" in names and "model.neff" not in names:
        entry.state = "failed"
    if logs and entry.state != "done":
        entry.log_tail = _tail(path / sorted(logs)[0])
    return entry


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
            layout = ("neuronxcc" if _VERSION_DIR.fullmatch(top.name) else
                      "legacy" if _LEGACY_VERSION_DIR.fullmatch(top.name) else None)
            if layout is None:
                reason = ("an import in progress, or left by an interrupted one"
                          if top.name.startswith(".import-") else "not a compiler-version directory")
                unknown.append(Unknown(top.name, reason))
                continue
            pattern = _MODULE_DIR if layout == "neuronxcc" else _LEGACY_MODULE_DIR
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
        elif top.is_file(follow_symlinks=False) and _XLA_CACHE_FILE.fullmatch(top.name):
            entries.append(scan_entry(p, root, "xla", now))
        else:
            unknown.append(Unknown(top.name, "not part of a compile cache layout"))

    if unknown and not entries and not any(u.key.startswith(("neuronxcc-", "USER_neuroncc-"))
                                           for u in unknown):
        hint = ""
        if any(_MODULE_DIR.fullmatch(u.key) or _LEGACY_MODULE_DIR.fullmatch(u.key) for u in unknown):
            hint = f" It holds MODULE_* directories: did you mean its parent, {root.parent}?"
        raise CompileCacheError(
            f"{root} does not look like a compile cache: none of its {len(unknown)} item(s) is a "
            f"neuronxcc-<version>/ or USER_neuroncc-<version>/ directory or a torch-xla cache "
            f"file.{hint} Pass the directory that holds them with --root.")
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
    old_locks = sum(1 for e in entries
                    if e.lock_age_s is not None and e.lock_age_s >= LOCK_STALE_AFTER_S)
    if old_locks:
        notes.append(f"{old_locks} lock(s) older than {LOCK_STALE_AFTER_S // 60} min: if no compile "
                     "is running, a killed compile left them and the next run that needs the graph "
                     "waits on them (\"Another process must be compiling\"): `prune --stale-locks`.")
    fs = filesystem_type(root, mounts)
    if fs and fs.split(".")[0] in NETWORK_FILESYSTEMS:
        notes.append(f"The cache is on a network filesystem ({fs}): compiles on other hosts are "
                     "invisible here, so a lock is called stale on its age alone; locks over "
                     "NFS/EFS are a common source of hangs. A local cache per host, shared with "
                     "export/import, avoids both.")
    return CacheScan(root, entries, unknown, notes, now)


def filesystem_type(path: Path, mounts: Path = PROC_MOUNTS) -> str | None:
    """The filesystem type of the mount holding path, from /proc/mounts (None if unknown)."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    p = str(path)
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype


# ---------------------------------------------------------------- sizes


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int | float) -> str:
    n = float(n)
    for unit in _UNITS:
        if abs(n) < 1024 or unit == _UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def parse_size(text: str) -> int:
    """'500M', '5G', '5GiB', '1.5 T', '1234' -> bytes (K/M/G/T are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r}: expected e.g. 500M, 5G or 1.5T (powers of 1024)")
    power = " KMGT".index(m[2].upper() or " ")
    return int(float(m[1]) * 1024 ** power)


# ---------------------------------------------------------------- plans


def compiler_processes(proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command line) of running processes that compile into the cache (this host only)."""
    found = []
    me = os.getpid()
    for d in proc.iterdir() if proc.is_dir() else ():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # exited, or not ours to read
        names = [os.path.basename(a.decode(errors="replace")) for a in argv[:2] if a]
        if any(n in COMPILER_PROCESS_NAMES for n in names):
            found.append((int(d.name), " ".join(a.decode(errors="replace") for a in argv if a)))
    return found


@dataclass
class PlanItem:
    key: str  # entry key, or the lock file's path relative to the root
    path: Path
    kind: str  # "entry" or "lock"
    reason: str
    size_bytes: int
    disk_bytes: int
    expect_state: str | None = None  # the entry's state when planned; apply skips it if changed


@dataclass
class Plan:
    action: str
    root: Path
    items: list[PlanItem] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (key, why it stays)
    notes: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(i.size_bytes for i in self.items)

    @property
    def disk_bytes(self) -> int:
        return sum(i.disk_bytes for i in self.items)

    def render(self) -> str:
        head = f"Plan: {self.action} in {self.root}"
        if self.params:
            head += " (" + ", ".join(f"{k}={v}" for k, v in self.params.items()) + ")"
        lines = [head]
        if self.items:
            lines.append(f"  remove {len(self.items)} item(s): {human_bytes(self.size_bytes)} "
                         f"apparent, {human_bytes(self.disk_bytes)} on disk")
            for i in self.items:
                lines.append(f"    - {i.key}  [{i.kind}, {human_bytes(i.size_bytes)}]  {i.reason}")
        else:
            lines.append("  nothing to remove")
        for key, why in self.kept:
            lines.append(f"  keep {key}: {why}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"action": self.action, "root": str(self.root), "params": self.params,
                "size_bytes": self.size_bytes, "disk_bytes": self.disk_bytes,
                "items": [{**asdict(i), "path": str(i.path)} for i in self.items],
                "kept": [{"key": k, "why": w} for k, w in self.kept], "notes": self.notes}


def _entry_item(e: Entry, reason: str) -> PlanItem:
    return PlanItem(e.key, e.path, "entry", reason, e.size_bytes, e.disk_bytes, e.state)


def _lock_is_stale(age_s: float | None, min_age_s: float, compilers) -> bool:
    return age_s is not None and age_s >= min_age_s and not compilers


def _compilers_note(compilers) -> str:
    shown = "; ".join(f"pid {pid}: {cmd[:80]}" for pid, cmd in compilers[:3])
    return f"a compiler is running ({shown}): no lock is stale while it runs"


def plan_remove_failed(scan: CacheScan) -> Plan:
    """Failed entries: each blocks recompiling its graph until removed (or retried)."""
    plan = Plan("remove failed entries", scan.root)
    for e in scan.entries:
        if e.state == "failed":
            plan.items.append(_entry_item(e, "failed compile (its cached failure blocks a retry)"))
    return plan


def plan_clear_stale_locks(scan: CacheScan, min_age_s: float = LOCK_STALE_AFTER_S,
                           compilers=None) -> Plan:
    """Lock files left by a killed compile: only when no compiler runs on this host and the
    lock is at least min_age_s old. The entry stays (its HLO is recompiled next time)."""
    compilers = compiler_processes() if compilers is None else compilers
    plan = Plan("clear stale locks", scan.root,
                params={"min_age": f"{min_age_s / 60:g} min"})
    if compilers:
        plan.notes.append(_compilers_note(compilers))
    for e in scan.entries:
        for name in e.lock_files:
            lock = e.path / name
            try:
                st = lock.lstat()
            except FileNotFoundError:
                continue
            age = scan.scanned_at - st.st_mtime
            key = f"{e.key}/{name}"
            if _lock_is_stale(age, min_age_s, compilers):
                plan.items.append(PlanItem(key, lock, "lock", f"lock {age / 60:.0f} min old, no "
                                           "compiler running", st.st_size, st.st_blocks * 512))
            elif not compilers:
                plan.kept.append((key, f"fresh lock ({age / 60:.1f} min old < {min_age_s / 60:g} "
                                       "min): a compile may be running"))
            else:
                plan.kept.append((key, "a compiler is running"))
    return plan


def plan_remove_other_versions(scan: CacheScan, keep_version: str | None = None,
                               min_lock_age_s: float = LOCK_STALE_AFTER_S, compilers=None) -> Plan:
    """Entries of compiler versions other than keep_version (default: the installed neuronx-cc).
    A new compiler never reads an old version's entries."""
    present = sorted({e.compiler_version for e in scan.entries if e.layout == "neuronxcc"})
    installed = installed_compiler_version()
    if keep_version is None:
        keep_version = installed
        if keep_version is None:
            raise CompileCacheError(
                "neuronx-cc is not installed here, so the current compiler version is unknown: "
                "pass the version to keep (--keep-version / keep_version=), one of: "
                + (", ".join(present) or "(no neuronxcc-* directories)"))
    elif not any(same_compiler_version(v, keep_version) for v in present) and not (
            installed and same_compiler_version(installed, keep_version)):
        raise CompileCacheError(
            f"no entries of compiler version {keep_version!r} in {scan.root}, and it is not the "
            f"installed one: a typo would remove everything. Versions present: "
            + (", ".join(present) or "none"))
    compilers = compiler_processes() if compilers is None else compilers
    plan = Plan("remove other compiler versions", scan.root, params={"keep": keep_version})
    for e in scan.entries:
        if e.layout == "xla":
            continue  # not a neuronx-cc product
        if e.layout == "neuronxcc" and same_compiler_version(e.compiler_version, keep_version):
            continue
        if e.lock_files and not _lock_is_stale(e.lock_age_s, min_lock_age_s, compilers):
            plan.kept.append((e.key, "locked by a compile that may be running"))
            continue
        plan.items.append(_entry_item(e, f"compiler {e.version_dir}, not {keep_version}"))
    return plan


def plan_prune(scan: CacheScan, max_disk_bytes: int | None = None,
               older_than_days: float | None = None) -> Plan:
    """Least recently used first: entries not used for older_than_days, then more until the cache
    fits in max_disk_bytes on disk. Locked entries always stay."""
    if max_disk_bytes is None and older_than_days is None:
        raise CompileCacheError("prune needs a size budget (max_disk_bytes / --max-size 5G) "
                                "and/or an age (older_than_days / --older-than-days 30)")
    params = {}
    if max_disk_bytes is not None:
        params["max_size"] = human_bytes(max_disk_bytes)
    if older_than_days is not None:
        params["older_than_days"] = older_than_days
    plan = Plan("prune least recently used", scan.root, params=params)
    total = scan.disk_bytes
    chosen: set[str] = set()
    candidates = sorted((e for e in scan.entries if e.state != "locked"), key=lambda e: e.last_used)
    for e in scan.entries:
        if e.state == "locked":
            plan.kept.append((e.key, "locked"))
    if older_than_days is not None:
        cutoff = scan.scanned_at - older_than_days * 86400
        for e in candidates:
            if e.last_used < cutoff:
                age = (scan.scanned_at - e.last_used) / 86400
                plan.items.append(_entry_item(e, f"last used {age:.0f} days ago"))
                chosen.add(e.key)
                total -= e.disk_bytes
    if max_disk_bytes is not None:
        for e in candidates:
            if total <= max_disk_bytes:
                break
            if e.key not in chosen:
                plan.items.append(_entry_item(e, f"least recently used ({_iso(e.last_used)})"))
                chosen.add(e.key)
                total -= e.disk_bytes
        if total > max_disk_bytes:
            plan.notes.append(f"the cache stays at {human_bytes(total)} on disk, above the budget: "
                              "what is left is locked")
    return plan


# ---------------------------------------------------------------- applying


@dataclass
class ApplyResult:
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    size_bytes: int = 0
    disk_bytes: int = 0

    def render(self) -> str:
        lines = [f"Removed {len(self.removed)} item(s), freed {human_bytes(self.size_bytes)} "
                 f"apparent, {human_bytes(self.disk_bytes)} on disk"]
        lines += [f"  skipped {k}: {why}" for k, why in self.skipped]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"removed": self.removed, "skipped": [{"key": k, "why": w} for k, w in self.skipped],
                "size_bytes": self.size_bytes, "disk_bytes": self.disk_bytes}


def check_inside(path: Path, root: Path) -> Path:
    """path itself, if it lies strictly inside root with no symlink on the way; else raise."""
    root = root.resolve(strict=True)
    absolute = Path(os.path.abspath(path))
    if absolute.is_symlink():
        raise CompileCacheError(f"refusing {absolute}: it is a symbolic link")
    resolved = absolute.resolve(strict=True)
    if resolved != absolute:
        raise CompileCacheError(f"refusing {absolute}: it goes through a symbolic link "
                                f"(resolves to {resolved})")
    if resolved == root or not resolved.is_relative_to(root):
        raise CompileCacheError(f"refusing {resolved}: it is not inside the cache root {root}")
    return resolved


def _remove(path: Path, root: Path) -> None:
    target = check_inside(path, root)
    if target.is_dir():
        # rmtree unlinks symlinks inside without following them (fd-based on Linux).
        shutil.rmtree(target)
    else:
        target.unlink()


def apply_plan(plan: Plan, min_lock_age_s: float = LOCK_STALE_AFTER_S) -> ApplyResult:
    """Remove what the plan lists, re-checking each item first: it must still be inside the
    root, not a symlink, in the state it was planned in, and not freshly locked."""
    result = ApplyResult()
    root = plan.root
    compilers = compiler_processes()
    for item in plan.items:
        try:
            if not os.path.lexists(item.path):
                result.skipped.append((item.key, "already gone"))
                continue
            if item.kind == "lock":
                age = time.time() - item.path.lstat().st_mtime
                if not _lock_is_stale(age, min_lock_age_s, compilers):
                    why = _compilers_note(compilers) if compilers else "the lock is fresh again"
                    result.skipped.append((item.key, why))
                    continue
            else:
                check_inside(item.path, root)
                layout = ("xla" if item.path.parent == root else
                          "legacy" if item.key.startswith("USER_neuroncc-") else "neuronxcc")
                now = scan_entry(item.path, root, layout)
                if now.lock_files and not _lock_is_stale(now.lock_age_s, min_lock_age_s, compilers):
                    result.skipped.append((item.key, "locked since the plan was made"))
                    continue
                if item.expect_state and now.state != item.expect_state:
                    result.skipped.append((item.key, f"changed since the plan: now {now.state}"))
                    continue
            _remove(item.path, root)
        except (CompileCacheError, OSError) as err:
            result.skipped.append((item.key, str(err)))
            continue
        result.removed.append(item.key)
        result.size_bytes += item.size_bytes
        result.disk_bytes += item.disk_bytes
        if item.kind == "entry" and item.path.parent != root:
            try:  # a compiler-version directory left empty goes too (never the root)
                check_inside(item.path.parent, root).rmdir()
            except (OSError, CompileCacheError):
                pass
    return result


# ---------------------------------------------------------------- export / import


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


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not enabled, file=sys.stderr)


def export_cache(root, archive: str | os.PathLike, versions=None, states=("done",),
                 progress: bool = True) -> ExportResult:
    """Write a tar.gz of the cache (or of the chosen compiler versions) with a manifest.

    Only done entries by default: a failed entry shared with others would block their
    compiles too, and a locked one is still being written. Lock files are never exported.
    """
    scan = scan_cache(root)
    archive = Path(archive).expanduser().absolute()
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
    if not set(states) <= set(STATES) or "locked" in states:
        raise CompileCacheError(f"states to export: any of done, failed, incomplete (got {states})")
    chosen = scan.filter(states=states, versions=versions)
    members = [(e, name) for e in chosen for name in e.files if not name.endswith(".lock")]
    total = sum((e.path / n).lstat().st_size if e.layout != "xla" else e.size_bytes
                for e, n in members)
    manifest = {
        "format": MANIFEST_FORMAT,
        "created": _iso(time.time()),
        "source_root": str(scan.root),
        "compiler_versions": sorted({e.version_dir for e in chosen}),
        "states": list(states),
        "entries": [{"key": e.key, "state": e.state, "size_bytes": e.size_bytes,
                     "files": [n for n in e.files if not n.endswith(".lock")]} for e in chosen],
    }
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".partial")
    from tqdm.utils import CallbackIOWrapper

    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar, _progress(total, "export", progress) as bar:
            data = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
            for e, name in members:
                path = e.path if e.layout == "xla" else e.path / name
                arcname = e.key if e.layout == "xla" else f"{e.key}/{name}"
                with open(path, "rb", opener=_nofollow_opener) as f:
                    info = tar.gettarinfo(arcname=arcname, fileobj=f)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    tar.addfile(info, CallbackIOWrapper(bar.update, f, "read"))
        tmp.replace(archive)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(archive, len(chosen), len(members), total, manifest)


def _nofollow_opener(path, flags):
    return os.open(path, flags | os.O_NOFOLLOW)


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


@dataclass
class ImportResult:
    root: Path
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # archive items not imported
    manifest: dict | None = None

    def render(self) -> str:
        lines = [f"Imported into {self.root}: {len(self.added)} added, {len(self.replaced)} "
                 f"replaced (were failed or incomplete), {len(self.skipped)} kept as they were"]
        lines += [f"  kept {k}: {why}" for k, why in self.skipped]
        lines += [f"  ignored {k}: {why}" for k, why in self.ignored]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"root": str(self.root), "added": self.added, "replaced": self.replaced,
                "skipped": [{"key": k, "why": w} for k, w in self.skipped],
                "ignored": [{"key": k, "why": w} for k, w in self.ignored],
                "manifest": self.manifest}


def import_cache(archive: str | os.PathLike, root=None, progress: bool = True) -> ImportResult:
    """Merge an exported archive into the cache at root (created if missing).

    The whole archive is refused, before anything is written, if any member has an absolute
    path, '..', is a link or a device. Entries merge one by one: a done entry already here is
    never overwritten, nor is a locked one; a failed or incomplete one is replaced by a done
    one from the archive.
    """
    archive = Path(archive).expanduser()
    if not archive.is_file():
        raise CompileCacheError(f"no archive at {archive}")
    if root is None:
        root = locate_cache()
    if isinstance(root, CacheLocation):
        root_path = root.path  # raises the remote-cache message for s3://
    elif "://" in str(root):
        root_path = CacheLocation(str(root), "--root").path
    else:
        root_path = Path(root).expanduser()
    root_path.mkdir(parents=True, exist_ok=True)
    root_path = open_root(root_path)
    if any(root_path.iterdir()):
        scan_cache(root_path)  # refuses a directory that is not a compile cache
    try:
        tar = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as err:
        raise CompileCacheError(f"{archive} is not a readable tar archive: {err}") from err
    with tar:
        bad = check_archive(tar)
        if bad:
            listed = "; ".join(f"{n} ({why})" for n, why in bad[:10])
            raise UnsafeArchiveError(
                f"refusing {archive}: {len(bad)} member(s) could write outside the cache or "
                f"create links/devices: {listed}. Nothing was extracted. Re-export it with "
                "`python -m helpers.compile_cache export`.")
        result = ImportResult(root_path)
        members = []
        for m in tar.getmembers():
            name = m.name.removeprefix("./")
            if name == MANIFEST_NAME:
                try:
                    result.manifest = json.load(tar.extractfile(m))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    result.ignored.append((name, "manifest is not valid JSON"))
            elif name.split("/")[0].startswith(("neuronxcc-", "USER_neuroncc-")) or (
                    m.isreg() and _XLA_CACHE_FILE.fullmatch(name)):
                members.append(m)
            elif name not in ("", "."):
                result.ignored.append((name, "not part of a compile cache layout"))
        staging = Path(tempfile.mkdtemp(prefix=".import-", dir=root_path))
        try:
            total = sum(m.size for m in members if m.isreg())
            with _progress(total, "import", progress) as bar:
                for m in members:
                    tar.extract(m, staging, filter="data")
                    bar.update(m.size if m.isreg() else 0)
            _merge(staging, root_path, result)
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
    if e.state == "locked":
        return "locked in the archive (was being compiled)"
    if dest.parent != root and os.path.lexists(dest.parent):
        check_inside(dest.parent, root)  # a version directory that is a symlink: refused
    outcome = "added"
    if os.path.lexists(dest):
        if dest.is_symlink():
            return "a symbolic link is in its place here"
        here = scan_entry(dest, root, e.layout)
        if here.state == "done":
            return "already done here"
        if here.lock_files and not _lock_is_stale(here.lock_age_s, LOCK_STALE_AFTER_S, compilers):
            return "being compiled here (fresh lock)"
        if e.state != "done":
            return f"archive has it {e.state}, here it is {here.state}"
        _remove(dest, root)
        outcome = "replaced"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.parent != root:
        check_inside(dest.parent, root)
    os.rename(e.path, dest)
    return outcome


# ---------------------------------------------------------------- a demo cache


class DemoEntry(NamedTuple):
    version_dir: str
    module: str
    files: dict  # relative name -> bytes, str, or an int: a sparse file of that many bytes
    age_s: float  # how long ago its files were last written
    lock_age_s: float | None  # age of a model.hlo_module.pb.lock, or None for no lock

    @property
    def key(self) -> str:
        return f"{self.version_dir}/{self.module}"


DEMO_VERSION = "2.21.33363.0+82129205"
DEMO_OLD_VERSION = "2.8.0.25+a3ad0f342"
DEMO_LEGACY_VERSION = "2.4.0.21+b7621be18"
_DAY = 86400
_CUR, _OLD, _LEGACY = (f"neuronxcc-{DEMO_VERSION}", f"neuronxcc-{DEMO_OLD_VERSION}",
                       f"USER_neuroncc-{DEMO_LEGACY_VERSION}")
DEMO_BIG_NEFF = 2 * 1024**3  # sparse: 2 GiB apparent, next to nothing on disk
DEMO_FLAGS = ["--target=trn1", "--model-type=transformer"]
DEMO_FAILED_LOG = "\n".join([f"INFO compiler pass {i}" for i in range(40)]
                            + ["ERROR 103915 [neuronx-cc]: Error class:    KeyError",
                               "Compiler status ERROR"]) + "\n"
_LEGACY_GRAPH = ("MODULE_0_SyncTensorsGraph.305_16554925436865022292_"
                 "ip-172-31-55-249-6c54106d-25758-5f5ddf7b170ab")
_LEGACY_RUN = f"{_LEGACY_GRAPH}/2afbe37c-93ff-4f66-88d0-0e8e5d98e497/{_LEGACY_GRAPH}"
# One entry in each state, in the layouts of today's compiler, an older one and the 2022 SDK.
DEMO_ENTRIES = {
    "done_hex": DemoEntry(_CUR, "MODULE_50a122f44c378e1567a4+ede6753c",
                          {"model.hlo_module.pb": b"h" * 300, "compile_flags.json": json.dumps(DEMO_FLAGS),
                           "model.neff": b"n" * 8000, "model.done": b""}, 2 * _DAY, None),
    "done_big": DemoEntry(_CUR, "MODULE_77f1b8fbe51833738f1c+24129607",
                          {"model.hlo_module.pb": b"h" * 300, "compile_flags.json": json.dumps(DEMO_FLAGS),
                           "model.neff": DEMO_BIG_NEFF, "model.done": b""}, 1 * _DAY, None),
    "failed": DemoEntry(_CUR, "MODULE_17890aeca56402771161+24129607",
                        {"model.hlo_module.pb": b"h" * 300, "compile_flags.json": json.dumps(DEMO_FLAGS),
                         "model.log": DEMO_FAILED_LOG}, 3 * _DAY, None),
    "failed_with_link": DemoEntry(_CUR, "MODULE_0b0ead5e2dfe538e89a4+2c2d707e",
                                  {"model.hlo_module.pb": b"h" * 100, "model.log": "boom\n"},
                                  4 * _DAY, None),
    "locked_fresh": DemoEntry(_CUR, "MODULE_aaaa0000aaaa0000aaaa+ede6753c",
                              {"model.hlo_module.pb": b"h" * 100, "compile_flags.json": "[]"}, 60, 60),
    "locked_stale": DemoEntry(_CUR, "MODULE_bbbb0000bbbb0000bbbb+ede6753c",
                              {"model.hlo_module.pb": b"h" * 100, "compile_flags.json": "[]"},
                              2 * 3600, 2 * 3600),
    "incomplete": DemoEntry(_CUR, "MODULE_cccc0000cccc0000cccc+ede6753c",
                            {"model.hlo_module.pb": b"h" * 100}, 5 * _DAY, None),
    "bad_flags": DemoEntry(_CUR, "MODULE_dddd0000dddd0000dddd+ede6753c",
                           {"model.hlo_module.pb": b"h" * 100, "compile_flags.json": "{not json",
                            "model.neff": b"n" * 500, "model.done": b""}, 6 * _DAY, None),
    "old_done": DemoEntry(_OLD, "MODULE_198775565831884870+d41d8cd9",
                          {"model.hlo_module.pb": b"h" * 200, "compile_flags.json": '["--target=trn1"]',
                           "model.neff": b"n" * 3000, "model.done": b""}, 100 * _DAY, None),
    "old_failed": DemoEntry(_OLD, "MODULE_12486829708343293975+d41d8cd9",
                            {"model.hlo_module.pb": b"h" * 200, "model.log": "failed long ago\n"},
                            90 * _DAY, None),
    "old_locked_fresh": DemoEntry(_OLD, "MODULE_3024185903572207584+e30acd3a",
                                  {"model.hlo_module.pb": b"h" * 200}, 30, 30),
    "legacy": DemoEntry(_LEGACY, "MODULE_16554925436865022292",
                        {f"{_LEGACY_RUN}.neff": b"n" * 700, f"{_LEGACY_RUN}.hlo.pb": b"h" * 50},
                        400 * _DAY, None),
}


def _set_mtime(path: Path, t: float) -> None:
    os.utime(path, (t, t), follow_symlinks=False)


def build_demo_cache(root: str | os.PathLike, labels=None, *, now: float | None = None) -> Path:
    """Write a small compile cache in the real layout under root (which must be new or empty):
    the DEMO_ENTRIES named by labels (default all), done, failed, locked and incomplete.

    now: the time the entries' ages count back from (default: the clock; pass a fixed one for
    the same listing every run). Lock ages always count from the clock, since a lock is stale
    or not against the time it is judged at. Returns root.
    """
    root = Path(root).expanduser()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise CompileCacheError(f"{root} exists and is not an empty directory: build the demo "
                                "cache in a new directory (it would mix with what is there)")
    labels = list(DEMO_ENTRIES if labels is None else labels)
    unknown = [label for label in labels if label not in DEMO_ENTRIES]
    if unknown:
        raise ValueError(f"unknown demo entries {unknown}: choose from {', '.join(DEMO_ENTRIES)}")
    clock = time.time()
    now = clock if now is None else now
    root.mkdir(parents=True, exist_ok=True)
    for label in labels:
        spec = DEMO_ENTRIES[label]
        entry = root / spec.key
        for name, content in spec.files.items():
            path = entry / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, int):
                with open(path, "wb") as f:
                    f.truncate(content)
            else:
                path.write_bytes(content if isinstance(content, bytes) else content.encode())
            _set_mtime(path, now - spec.age_s)
        if spec.lock_age_s is not None:
            lock = entry / "model.hlo_module.pb.lock"
            lock.write_bytes(b"")
            _set_mtime(lock, clock - spec.lock_age_s)
    return root


# ---------------------------------------------------------------- CLI


def _table(rows: list[list[str]], header: list[str], right: set[int] = frozenset()) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    def fmt(r):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([fmt(header), *map(fmt, rows)])


def short_time(t: float) -> str:
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t else "-"


def _flags_text(e: Entry, width: int = 40) -> str:
    if e.flags_error:
        text = "(unreadable flags)"
    elif e.flags is None:
        text = "-"
    else:
        text = " ".join(e.flags) or "(none)"
    return text if len(text) <= width else text[: width - 1] + "…"


def render_scan(scan: CacheScan, location: str = "", entries: list[Entry] | None = None) -> str:
    entries = scan.entries if entries is None else entries
    lines = [f"Compile cache: {scan.root}{location}", f"  {scan.summary()}"]
    try:
        usage = shutil.disk_usage(scan.root)
        lines.append(f"  filesystem: {filesystem_type(scan.root) or '?'}, "
                     f"{human_bytes(usage.free)} free of {human_bytes(usage.total)}")
    except OSError:
        pass
    versions = scan.by_version()
    if versions:
        lines += ["", _table([[v, s.entries, *(s.by_state[st] for st in STATES),
                               human_bytes(s.size_bytes), human_bytes(s.disk_bytes)]
                              for v, s in versions.items()],
                             ["VERSION", "ENTRIES", *(st.upper() for st in STATES), "SIZE",
                              "ON DISK"], right=set(range(1, 8)))]
    if entries:
        lines += ["", _table([[e.state, human_bytes(e.size_bytes), human_bytes(e.neff_bytes),
                               short_time(e.last_used), _flags_text(e), e.key] for e in entries],
                             ["STATE", "SIZE", "NEFF", "LAST USED", "FLAGS", "ENTRY"],
                             right={1, 2})]
    if scan.unknown:
        lines += ["", f"Not recognised ({len(scan.unknown)}), left alone:"]
        lines += [f"  {u.key}: {u.reason}" for u in scan.unknown]
    if scan.notes:
        lines += [""] + [f"Note: {n}" for n in scan.notes]
    return "\n".join(lines)


def render_entry(e: Entry) -> str:
    lines = [f"Entry {e.key}", f"  path:      {e.path}", f"  state:     {e.state}",
             f"  layout:    {e.layout} (compiler {e.compiler_version})",
             f"  hashes:    module {e.module_hash} ({e.hash_style})"
             + (f", flags {e.flags_hash}" if e.flags_hash else ""),
             f"  sizes:     total {human_bytes(e.size_bytes)} apparent, "
             f"{human_bytes(e.disk_bytes)} on disk; neff {human_bytes(e.neff_bytes)}, "
             f"HLO {human_bytes(e.hlo_bytes)}",
             f"  last used: {short_time(e.last_used)} (newest file mtime)"]
    if e.flags_error:
        lines.append(f"  flags:     unreadable: {e.flags_error}")
    elif e.flags is not None:
        lines.append(f"  flags:     {' '.join(e.flags) or '(none)'}")
    if e.lock_files:
        lines.append(f"  locks:     {', '.join(e.lock_files)} (youngest {e.lock_age_s / 60:.1f} min old)")
    lines.append(f"  files:     {', '.join(e.files) or '(none)'}")
    if e.symlinks:
        lines.append(f"  symlinks (not followed): {', '.join(e.symlinks)}")
    if e.log_tail:
        lines += ["  log tail:"] + [f"    {ln}" for ln in e.log_tail.splitlines()]
    return "\n".join(lines)


def _location_text(args) -> tuple[object, str]:
    if args.root:
        return args.root, " (--root)"
    loc = locate_cache()
    return loc, f" (from {loc.source})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.compile_cache",
        description="Inspect and tidy the Neuron persistent compile cache. Removals always print "
                    "their plan first; --dry-run stops there.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", help="cache directory (default: --cache_dir in NEURON_CC_FLAGS, "
                        f"else {CACHE_URL_ENV}, else {DEFAULT_ROOT})")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ls", parents=[common], help="list entries and summaries")
    p.add_argument("--state", action="append", choices=STATES, help="only this state (repeatable)")
    p.add_argument("--version", action="append", help="only this compiler version (repeatable)")
    p = sub.add_parser("show", parents=[common], help="details of one entry")
    p.add_argument("entry", help="entry key, MODULE_ name or a unique hash prefix")
    p = sub.add_parser("prune", parents=[common], help="remove failed entries, stale locks, "
                       "other compiler versions or least recently used entries")
    p.add_argument("--failed", action="store_true", help="remove failed entries")
    p.add_argument("--stale-locks", action="store_true", help="clear locks left by killed compiles")
    p.add_argument("--lock-age-minutes", type=float, default=LOCK_STALE_AFTER_S / 60,
                   help="a lock younger than this is never stale (default %(default)g)")
    p.add_argument("--other-versions", action="store_true",
                   help="remove entries of compiler versions other than the installed one")
    p.add_argument("--keep-version", help="the compiler version to keep with --other-versions")
    p.add_argument("--max-size", type=parse_size, help="prune LRU entries until the cache fits, "
                   "e.g. 20G (on-disk bytes, powers of 1024)")
    p.add_argument("--older-than-days", type=float, help="remove entries unused for this long")
    p.add_argument("--dry-run", action="store_true", help="print the plan, remove nothing")
    p = sub.add_parser("export", parents=[common], help="write a tar.gz of the cache with a manifest")
    p.add_argument("archive", help="output .tar.gz (outside the cache)")
    p.add_argument("--version", action="append", help="only this compiler version (repeatable)")
    p.add_argument("--include-failed", action="store_true",
                   help="also export failed entries (they block compiles wherever imported)")
    p.add_argument("--no-progress", action="store_true")
    p = sub.add_parser("import", parents=[common], help="merge an exported tar.gz into the cache")
    p.add_argument("archive")
    p.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    def out(text, data):
        print(json.dumps(data, indent=1, default=str) if args.json else text)

    try:
        root, where = _location_text(args)
        if args.command == "ls":
            scan = scan_cache(root)
            shown = scan.filter(args.state, args.version)
            data = scan.to_dict()
            data["entries"] = [e.to_dict() for e in shown]
            out(render_scan(scan, where, shown), data)
        elif args.command == "show":
            e = scan_cache(root).find(args.entry)
            out(render_entry(e), e.to_dict())
        elif args.command == "prune":
            if not (args.failed or args.stale_locks or args.other_versions
                    or args.max_size is not None or args.older_than_days is not None):
                parser.error("prune: say what to remove: --failed, --stale-locks, "
                             "--other-versions, --max-size and/or --older-than-days")
            lock_age = args.lock_age_minutes * 60
            scan = scan_cache(root)
            compilers = compiler_processes()
            # Each plan sees what the earlier ones leave: an entry is listed once, and the size
            # budget is measured after the failed and other-version entries are gone.
            plans = []
            if args.stale_locks:
                plans.append(plan_clear_stale_locks(scan, lock_age, compilers))
            if args.failed:
                plans.append(plan_remove_failed(scan.without(plans)))
            if args.other_versions:
                plans.append(plan_remove_other_versions(scan.without(plans), args.keep_version,
                                                        lock_age, compilers))
            if args.max_size is not None or args.older_than_days is not None:
                plans.append(plan_prune(scan.without(plans), args.max_size, args.older_than_days))
            results = []
            if not args.json:
                for plan in plans:
                    print(plan.render())
                print("(dry run: nothing removed)" if args.dry_run else "Applying…", flush=True)
            if not args.dry_run:
                results = [apply_plan(plan, lock_age) for plan in plans]
                if not args.json:
                    for r in results:
                        print(r.render())
            if args.json:
                out("", {"dry_run": args.dry_run, "plans": [p.to_dict() for p in plans],
                         "results": [r.to_dict() for r in results]})
        elif args.command == "export":
            states = ("done", "failed") if args.include_failed else ("done",)
            r = export_cache(root, args.archive, args.version, states,
                             progress=not (args.no_progress or args.json))
            out(r.render(), {"archive": str(r.archive), "entries": r.entries, "files": r.files,
                             "size_bytes": r.size_bytes, "manifest": r.manifest})
        elif args.command == "import":
            target = args.root or locate_cache().path
            r = import_cache(args.archive, target, progress=not (args.no_progress or args.json))
            out(r.render(), r.to_dict())
    except CompileCacheError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... ls | head` ends quietly
    sys.exit(main())

"""A whole cache root scanned into entries, with what was not recognised and notes for the reader.

Layouts: today's neuronxcc-<version>/MODULE_<hlo hash>+<flags hash>/, the 2022 SDK's
USER_neuroncc-<version>/MODULE_<hash>/..., and torch-xla's own cache (one file per graph, named
by a decimal hash). Anything else is listed as not recognised and left alone.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.cache.entry import (
    LEGACY_MODULE_DIR,
    LEGACY_VERSION_DIR,
    MODULE_DIR,
    STATES,
    VERSION_DIR,
    XLA_CACHE_FILE,
    Entry,
    scan_entry,
)
from helpers.cache.location import PROC_MOUNTS, CompileCacheError, on_network_filesystem, open_root
from helpers.cache.units import SizeTotals, human_bytes, iso_time

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

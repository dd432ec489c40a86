"""Cleanup as plans, then removal: what goes and why is computed first; applied only on request,
each item checked again just before it goes (still inside the root, no symlink on the way, in
the state it was planned in, not freshly locked) and skipped if it changed. check_inside and
remove_inside are the workbook's one guard for deleting inside a root (`make reset` uses it too).

Rules: failed entries, stale locks (only while no compiler runs on this host), other compiler
versions, and least recently used entries beyond an age or a size budget (on-disk bytes).
An entry in state "unknown" is never planned for removal: nothing here can tell what it is.
"""
from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.cache.location import CompileCacheError, installed_compiler_version, same_compiler_version
from helpers.cache.render import reason_dicts, report
from helpers.cache.scan import LOCK_STALE_AFTER_S, CacheScan, Entry, layout_of, scan_entry
from helpers.cache.units import SizeTotals, human_bytes, iso_time
from helpers.launch.procfs import PROC_DIR, process_cmdline, process_environ
from mnist_mlp.common.platform_paths import PLATFORM_ROOT_ENV

# Processes that compile into the cache: while one runs, no lock is called stale.
COMPILER_PROCESS_NAMES = ("neuronx-cc", "neuron_parallel_compile", "neuron_cc_wrapper",
                          "walrus_driver")
DONE_MARKER = "model.done"


def check_amount(value, what: str, *, positive: bool = False) -> float:
    """value as a finite number >= 0 (> 0 with positive=True), else a CompileCacheError."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        need = "more than 0" if positive else "0 or more"
        raise CompileCacheError(f"{what} must be a number {need}, got {value!r}")
    return number


def compiler_processes(proc: Path = PROC_DIR) -> list[tuple[int, str]]:
    """(pid, command line) of running processes that compile into the cache (this host only).
    One whose WORKBOOK_PLATFORM_ROOT differs from ours runs on another platform, so another
    machine (mnist_mlp/common/platform_paths.py), and does not count; one whose environment
    cannot be read counts (it may be compiling here). Where nobody sets it, all count."""
    found = []
    me = os.getpid()
    here = os.environ.get(PLATFORM_ROOT_ENV)
    for d in proc.iterdir() if proc.is_dir() else ():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        argv = process_cmdline(d)
        if not argv or not any(os.path.basename(a) in COMPILER_PROCESS_NAMES for a in argv[:2]):
            continue
        environ = process_environ(d)
        if environ is None or environ.get(PLATFORM_ROOT_ENV) == here:
            found.append((int(d.name), " ".join(argv)))
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
class Plan(SizeTotals):
    action: str
    root: Path
    items: list[PlanItem] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (key, why it stays)
    notes: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)

    def _sized(self):
        return self.items

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
        notes = [f"  note: {n}" for n in self.notes]
        return "\n".join([report("\n".join(lines), keep=self.kept), *notes])

    def to_dict(self) -> dict:
        return {"action": self.action, "root": str(self.root), "params": self.params,
                "size_bytes": self.size_bytes, "disk_bytes": self.disk_bytes,
                "items": [{**asdict(i), "path": str(i.path)} for i in self.items],
                "kept": reason_dicts(self.kept), "notes": self.notes}


def _entry_item(e: Entry, reason: str) -> PlanItem:
    return PlanItem(e.key, e.path, "entry", reason, e.size_bytes, e.disk_bytes, e.state)


def lock_is_stale(age_s: float | None, min_age_s: float, compilers) -> bool:
    return age_s is not None and age_s >= min_age_s and not compilers


def compilers_note(compilers) -> str:
    shown = "; ".join(f"pid {pid}: {cmd[:80]}" for pid, cmd in compilers[:3])
    return f"a compiler is running ({shown}): no lock is stale while it runs"


UNKNOWN_KEPT = "state unknown (model.neff is neither a program nor a compile failure): look at it"


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
    min_age_s = check_amount(min_age_s, "the lock age")
    compilers = compiler_processes() if compilers is None else compilers
    plan = Plan("clear stale locks", scan.root, params={"min_age": f"{min_age_s / 60:g} min"})
    if compilers:
        plan.notes.append(compilers_note(compilers))
    for e in scan.entries:
        for name in e.lock_files:
            lock = e.path / name
            try:
                st = lock.lstat()
            except FileNotFoundError:
                continue
            age = scan.scanned_at - st.st_mtime
            key = f"{e.key}/{name}"
            if lock_is_stale(age, min_age_s, compilers):
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
    min_lock_age_s = check_amount(min_lock_age_s, "the lock age")
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
        if e.state == "unknown":
            plan.kept.append((e.key, UNKNOWN_KEPT))
            continue
        if e.lock_files and not lock_is_stale(e.lock_age_s, min_lock_age_s, compilers):
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
        max_disk_bytes = int(check_amount(max_disk_bytes, "the size budget", positive=True))
        params["max_size"] = human_bytes(max_disk_bytes)
    if older_than_days is not None:
        older_than_days = check_amount(older_than_days, "--older-than-days")
        params["older_than_days"] = older_than_days
    plan = Plan("prune least recently used", scan.root, params=params)
    total = scan.disk_bytes
    chosen: set[str] = set()
    candidates = sorted((e for e in scan.entries if e.state not in ("locked", "unknown")),
                        key=lambda e: e.last_used)
    plan.kept += [(e.key, "locked") for e in scan.entries if e.state == "locked"]
    plan.kept += [(e.key, UNKNOWN_KEPT) for e in scan.entries if e.state == "unknown"]
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
                plan.items.append(_entry_item(e, f"least recently used ({iso_time(e.last_used)})"))
                chosen.add(e.key)
                total -= e.disk_bytes
        if total > max_disk_bytes:
            plan.notes.append(f"the cache stays at {human_bytes(total)} on disk, above the budget: "
                              "what is left is locked")
    return plan


@dataclass
class ApplyResult:
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # left alone on purpose
    failed: list[tuple[str, str]] = field(default_factory=list)  # removal tried and failed
    size_bytes: int = 0
    disk_bytes: int = 0

    def render(self) -> str:
        return report(f"Removed {len(self.removed)} item(s), freed {human_bytes(self.size_bytes)} "
                      f"apparent, {human_bytes(self.disk_bytes)} on disk",
                      skipped=self.skipped, FAILED=self.failed)

    def to_dict(self) -> dict:
        return {"removed": self.removed, "skipped": reason_dicts(self.skipped),
                "failed": reason_dicts(self.failed),
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


def remove_inside(path: Path, root: Path) -> None:
    """Remove a file or an entry directory inside root. An entry's done marker goes first, so
    an entry that cannot be removed completely is never left looking compiled."""
    target = check_inside(path, root)
    if not target.is_dir():
        try:
            target.unlink()
        except OSError as err:
            raise OSError(err.errno, f"cannot remove it: {err.strerror}") from err
        return
    marker = target / DONE_MARKER
    if marker.is_file() and not marker.is_symlink():
        marker.unlink()
    try:
        shutil.rmtree(target)  # unlinks symlinks inside without following them
    except OSError as err:
        left = sum(len(files) for _, _, files in os.walk(target)) if target.exists() else 0
        where = f" ({err.filename})" if err.filename else ""
        raise OSError(err.errno, f"removal failed part way: {err.strerror}{where}; {left} "
                      "file(s) left in place, no longer marked done") from err


def apply_plan(plan: Plan, min_lock_age_s: float = LOCK_STALE_AFTER_S) -> ApplyResult:
    """Remove what the plan lists, each item re-checked first (the module docstring says how)."""
    min_lock_age_s = check_amount(min_lock_age_s, "the lock age")
    result = ApplyResult()
    root = plan.root
    compilers = compiler_processes()
    for item in plan.items:
        try:
            if not os.path.lexists(item.path):
                result.skipped.append((item.key, "already gone"))
                continue
            check_inside(item.path, root)
            if item.kind == "lock":
                age = time.time() - item.path.lstat().st_mtime
                if not lock_is_stale(age, min_lock_age_s, compilers):
                    why = compilers_note(compilers) if compilers else "the lock is fresh again"
                    result.skipped.append((item.key, why))
                    continue
            else:
                now = scan_entry(item.path, root, layout_of(item.path, root))
                if now.lock_files and not lock_is_stale(now.lock_age_s, min_lock_age_s, compilers):
                    result.skipped.append((item.key, "locked since the plan was made"))
                    continue
                if item.expect_state and now.state != item.expect_state:
                    result.skipped.append((item.key, f"changed since the plan: now {now.state}"))
                    continue
        except CompileCacheError as err:
            result.skipped.append((item.key, str(err)))
            continue
        except OSError as err:
            result.failed.append((item.key, f"cannot check it: {err}"))
            continue
        try:
            remove_inside(item.path, root)
        except CompileCacheError as err:
            result.skipped.append((item.key, str(err)))
            continue
        except OSError as err:
            result.failed.append((item.key, err.strerror or str(err)))
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

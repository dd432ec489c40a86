"""Applying a cleanup plan (helpers/cache/plans.py makes them): each item checked again just before it
goes (still inside the root, no symlink on the way, in the state it was planned in, not freshly
locked) and skipped if it changed."""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.cache.entry import layout_of, scan_entry
from helpers.cache.location import CompileCacheError
from helpers.cache.plans import DONE_MARKER, Plan, check_amount, compiler_processes, compilers_note, lock_is_stale
from helpers.cache.scan import LOCK_STALE_AFTER_S
from helpers.cache.units import human_bytes, reason_dicts, report


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
    """Remove what the plan lists, re-checking each item first: it must still be inside the
    root, not a symlink, in the state it was planned in, and not freshly locked."""
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

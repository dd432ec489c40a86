"""Atomic, durable writes: a reader (or a crashed run) never sees half a checkpoint or results
file, a power cut never leaves an empty one, and temp files left by a killed writer are removed
by the next write. Plus `check_writable_dir`, to fail before training instead of after it."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

# A temp file untouched this long is stale even if its pid is alive again (pids get reused).
STALE_TEMP_AGE_S = 3600

CHECKPOINT_DIR_HINT = "Pass --checkpoint-dir (or set CHECKPOINT_DIR) to a writable directory, or fix this one."


class UnwritableDirError(RuntimeError):
    """A directory we must write into is a file, cannot be created, or is read-only; says what to do."""


def _file_in_the_way(path: Path) -> Path | None:
    """`path` or the nearest ancestor of it that exists and is not a directory, if any."""
    for candidate in (path, *path.parents):
        try:
            mode = os.stat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:  # cannot look (permissions): creating or probing it will say why
            return None
        return None if stat.S_ISDIR(mode) else candidate
    return None


def writable_dir_problem(path) -> str | None:
    """What stops us writing files into directory `path` (creating it if missing), or None.

    Tried for real (a probe file is created and removed): permission bits say nothing about
    root, `chattr +i`, or a read-only mount.
    """
    path = Path(path)
    blocker = _file_in_the_way(path)
    if blocker == path:
        return f"{path} is a file, not a directory"
    if blocker is not None:
        return f"{path} cannot be created: {blocker} is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"{path} cannot be created ({error.strerror or error})"
    probe = path / f".write-test.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        return f"{path} is not writable ({error.strerror or error})"
    probe.unlink()
    return None


def check_writable_dir(path, *, hint: str = CHECKPOINT_DIR_HINT) -> Path:
    """Create directory `path` if missing and check files can be written in it; returns it.
    Else raises UnwritableDirError with two lines: writable_dir_problem's, and `hint`."""
    problem = writable_dir_problem(path)
    if problem is not None:
        raise UnwritableDirError(f"{problem}.\n{hint}")
    return Path(path)


def temp_name_pattern(target_name: str) -> re.Pattern:
    """Our temp files for `target_name`: `.<target name>.<writer pid>.<8 hex>.tmp`. The pid tells
    a later write whether the writer is gone; only files named after the target we are about
    to write are ever matched, so nothing else in a shared directory is touched."""
    return re.compile(rf"\.{re.escape(target_name)}\.(?P<pid>\d+)\.[0-9a-f]{{8}}\.tmp")


def remove_stale_temps(directory, pattern: re.Pattern) -> list[Path]:
    """Remove the entries of `directory` whose name fully matches `pattern` (which has a `pid`
    group) and whose writer is gone: its pid is dead, or nothing touched it for STALE_TEMP_AGE_S.

    Only direct children of `directory` are considered; each is named on stdout before it is
    removed. Returns what was removed. Errors (a race with another cleaner) are ignored.
    """
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        pid = int(match["pid"])
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        alive = psutil.pid_exists(pid)  # a pid of another user's process exists too
        if alive and age < STALE_TEMP_AGE_S:
            continue
        why = f"untouched for {age / 3600:.1f} h" if alive else f"its writer, pid {pid}, is gone"
        path = Path(entry.path)
        print(f"Removing {path}: left by an interrupted write ({why})")
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path, *, hint: str = CHECKPOINT_DIR_HINT):
    """Yield a temp path beside `path` to write; on success make it `path`, else remove it.

    The temp file is fsync'd before the rename and the directory after it, so after a crash
    `path` is either the old file or the complete new one. Stale temp files for the same
    target (left by a writer that was killed) are removed first. A directory that cannot be
    written, or a directory where `path` should be, raises UnwritableDirError (with `hint`).
    """
    path = Path(path)
    check_writable_dir(path.parent, hint=hint)
    if path.is_dir():
        raise UnwritableDirError(f"{path} is a directory, not a file: not writing over it.\n{hint}")
    remove_stale_temps(path.parent, temp_name_pattern(path.name))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    # O_EXCL: never reuse a name; mode 0o666 & umask, the mode a plain open() would give.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)  # atomic on POSIX within one file system
        try:
            _fsync(path.parent, os.O_RDONLY | os.O_DIRECTORY)  # makes the rename itself durable
        except OSError:  # some network file systems cannot fsync a directory: the rename stands
            pass
    finally:
        tmp.unlink(missing_ok=True)


def atomic_save(obj, path, *, xla: bool = False) -> Path:
    """torch.save, or xm.save for XLA tensors (moves them to the CPU first), atomically."""
    with atomic_path(path) as tmp:
        if xla:
            import torch_xla.core.xla_model as xm

            # master_only=False: the caller already decided this process writes (rank 0).
            xm.save(obj, str(tmp), master_only=False)
        else:
            import torch

            torch.save(obj, tmp)
    return Path(path)


def atomic_write_bytes(data: bytes, path, *, hint: str = CHECKPOINT_DIR_HINT) -> Path:
    with atomic_path(path, hint=hint) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_json(data, path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return Path(path)

"""Reading other processes from /proc (this host only)."""
from __future__ import annotations

from pathlib import Path

PROC_DIR = Path("/proc")


def process_cmdline(proc_dir: Path) -> list[str] | None:
    """A process's argv from /proc/<pid>/cmdline; None when it exited or is not ours to read."""
    try:
        raw = (proc_dir / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def process_environ(proc_dir: Path) -> dict[str, str] | None:
    """The environment a process started with, from /proc/<pid>/environ (NUL-separated
    NAME=value); None when it exited or is not ours to read."""
    try:
        raw = (proc_dir / "environ").read_bytes()
    except OSError:
        return None
    found = {}
    for item in raw.split(b"\0"):
        if item:
            name, _, value = item.decode(errors="replace").partition("=")
            found[name] = value
    return found

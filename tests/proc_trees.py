"""Fake /proc trees laid out as the Linux kernel lays them out: <proc>/<pid>/cmdline (NUL-separated
argv), environ (NUL-separated NAME=value) and fd/<n> symlinks to what the process has open."""
from __future__ import annotations

from pathlib import Path

KERNEL_CMDLINE = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f",
                  "/root/.local/share/jupyter/runtime/kernel-1a2b3c.json"]


def fake_process(proc: Path, pid: int, cmdline: list[str], fd_targets: dict[int, Path],
                 environ: dict[str, str] | None = None) -> None:
    """<proc>/<pid>/cmdline, environ and fd/<n> -> target links, as the kernel lays them out."""
    fd_dir = proc / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    if environ is not None:
        (proc / str(pid) / "environ").write_bytes(
            b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items()))
    for fd, target in fd_targets.items():
        (fd_dir / str(fd)).symlink_to(target)

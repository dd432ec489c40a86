"""Who holds the NeuronCores: processes with /dev/neuron* open, monitors told apart from runtimes.

The Neuron runtime reserves its NeuronCores at start-up (nrt_init), exclusively, until the
process exits ("Once a NeuronCore is reserved for a process, it cannot be used by another process
at all": Neuron Runtime configuration guide). Opening /dev/neuron* is not holding a core: the
tools neuron-ls, neuron-top and neuron-monitor open the device to read it (`neuron-ls
--show-all-procs` lists them with runtime version NA). So a monitor never counts, and for a
process that may hold cores the NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES it started with
(/proc/<pid>/environ) say which, when this user may read them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from helpers.procfs import PROC_DIR, process_cmdline

NEURON_DEVICE = re.compile(r"neuron\d+")
# How a Jupyter kernel's command line looks (JupyterLab, Notebook, VS Code all start this module).
JUPYTER_KERNEL = re.compile(r"ipykernel_launcher|ipykernel\b|\bkernel-[\w-]+\.json")
# aws-neuronx-tools that open the device without starting a runtime (no core reserved).
MONITORS = frozenset({"neuron-ls", "neuron-top", "neuron-monitor", "neuron-profile",
                      "neuron-explorer"})
CORE_VARIABLES = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")


@dataclass(frozen=True)
class DeviceHolder:
    pid: int
    cmdline: str
    devices: tuple[str, ...]  # e.g. ("/dev/neuron0",)
    is_jupyter_kernel: bool
    is_this_process: bool
    is_monitor: bool = False  # a Neuron tool reading the device: holds no NeuronCore
    core_env: tuple[tuple[str, str], ...] | None = None  # CORE_VARIABLES it set; None: unreadable

    @property
    def cores(self) -> str:
        """Which NeuronCores it asked for, as far as its environment says."""
        if self.is_monitor:
            return "none (a monitor)"
        if self.core_env is None:
            return "unknown (its environment is not readable by this user)"
        if not self.core_env:
            return ("not pinned (no NEURON_RT_VISIBLE_CORES: torch-neuronx takes one free core, "
                    "other runtimes all of them)")
        return ", ".join(f"{name}={value}" for name, value in self.core_env)

    def describe(self) -> str:
        what = "a Jupyter kernel" if self.is_jupyter_kernel else "a process"
        if self.is_this_process:
            what = "this notebook's own kernel" if self.is_jupyter_kernel else "this process"
        if self.is_monitor:
            return f"pid {self.pid}, a monitor, reads {', '.join(self.devices)}: {self.cmdline}"
        return (f"pid {self.pid}, {what}, holds {', '.join(self.devices)} (cores: {self.cores}): "
                f"{self.cmdline}")


@dataclass(frozen=True)
class HolderScan:
    holders: list[DeviceHolder]  # every process with a device open, monitors included
    unreadable_pids: list[int]  # processes whose open files we may not read (another user's)

    @property
    def core_holders(self) -> list[DeviceHolder]:
        return [h for h in self.holders if not h.is_monitor]

    @property
    def monitors(self) -> list[DeviceHolder]:
        return [h for h in self.holders if h.is_monitor]

    @property
    def others(self) -> list[DeviceHolder]:
        """Processes other than this one that may hold NeuronCores (monitors left out)."""
        return [h for h in self.core_holders if not h.is_this_process]


def is_monitor(argv: list[str]) -> bool:
    """argv[0]'s name is one of the Neuron monitors (a Python one is argv[1]'s)."""
    names = [os.path.basename(a) for a in argv[:2]]
    return bool(names) and (names[0] in MONITORS or (
        names[0].startswith("python") and len(names) > 1 and names[1] in MONITORS))


def core_environment(proc_dir: Path) -> tuple[tuple[str, str], ...] | None:
    """CORE_VARIABLES from /proc/<pid>/environ (as the process started); None when unreadable."""
    try:
        raw = (proc_dir / "environ").read_bytes()
    except OSError:
        return None
    found = {}
    for item in raw.split(b"\0"):
        name, _, value = item.decode(errors="replace").partition("=")
        if name in CORE_VARIABLES:
            found[name] = value
    return tuple((name, found[name]) for name in CORE_VARIABLES if name in found)


def neuron_device_holders(proc_root: Path = PROC_DIR, dev_root: Path = Path("/dev"),
                          self_pid: int | None = None) -> HolderScan:
    """Every process with a /dev/neuron<N> open: pid, command line, devices, monitor or not,
    and the core variables it started with.

    Reads <proc_root>/<pid>/fd/* links. Processes of other users cannot be read without
    root: they are counted in unreadable_pids (then `sudo neuron-ls` shows them all).
    """
    self_pid = os.getpid() if self_pid is None else self_pid
    dev_root = os.path.normpath(os.fspath(dev_root))
    holders, unreadable = [], []
    try:
        pid_dirs = [p for p in Path(proc_root).iterdir() if p.name.isdigit()]
    except OSError:
        return HolderScan([], [])  # no /proc (not Linux): nothing to report
    for proc_dir in sorted(pid_dirs, key=lambda p: int(p.name)):
        pid = int(proc_dir.name)
        try:
            fds = list(os.scandir(proc_dir / "fd"))
        except PermissionError:
            unreadable.append(pid)
            continue
        except OSError:
            continue  # exited while we looked
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(fd.path)
            except OSError:
                continue
            head, name = os.path.split(target)
            if os.path.normpath(head) == dev_root and NEURON_DEVICE.fullmatch(name):
                devices.add(f"/dev/{name}")
        if devices:
            argv = process_cmdline(proc_dir) or []
            cmdline = " ".join(argv) or "?"
            monitor = is_monitor(argv)
            holders.append(DeviceHolder(pid, cmdline, tuple(sorted(devices)),
                                        bool(JUPYTER_KERNEL.search(cmdline)), pid == self_pid,
                                        monitor, None if monitor else core_environment(proc_dir)))
    return HolderScan(holders, unreadable)

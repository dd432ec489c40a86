"""Is this machine ready for the workbook? Setup checks for notebook 00, each one a plain function.

Every check returns a CheckResult: ok or not, what it found, and the fix when it is not ok.
helpers.checklist renders a list of them (notebook 00 ends with it).

The classic Trainium surprise is here too: a NeuronCore belongs to the first process that opens
it until that process exits, and the usual holder is the kernel of another notebook.
`neuron_device_holders()` finds who holds /dev/neuron* by reading /proc/<pid>/fd.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from packaging.requirements import InvalidRequirement, Requirement

from mnist_mlp.backend import (DEV_DIR, SUPPORTED_WORKER_COUNTS, Backend, instance_type,
                             visible_neuron_cores)
from helpers.procfs import process_cmdline
from mnist_mlp.paths import REPO_ROOT

PROC_DIR = Path("/proc")
REQUIREMENTS = REPO_ROOT / "requirements.txt"
NEURON_REQUIREMENTS = REPO_ROOT / "requirements-neuron.txt"
# The pins that must hold exactly: a torch that torch-xla was not built against breaks its import.
PINNED_PACKAGES = ("torch", "torch-xla", "torchvision", "torch-neuronx")
NEURON_DEVICE = re.compile(r"neuron\d+")
# How a Jupyter kernel's command line looks (JupyterLab, Notebook, VS Code all start this module).
JUPYTER_KERNEL = re.compile(r"ipykernel_launcher|ipykernel\b|\bkernel-[\w-]+\.json")


class CheckResult(NamedTuple):
    item: str  # what was checked, e.g. "NeuronCores free"
    ok: bool
    message: str  # what the check found
    fix: str  # what to do when not ok ("" when ok)


def shown_path(path: str | os.PathLike) -> str:
    """A path as the reader should see it: relative to the repo when inside it."""
    path = Path(os.path.abspath(path))  # not resolve(): a venv's python is a symlink out of it
    try:
        return path.relative_to(REPO_ROOT).as_posix() or "."
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- who holds the NeuronCores


@dataclass(frozen=True)
class DeviceHolder:
    pid: int
    cmdline: str
    devices: tuple[str, ...]  # e.g. ("/dev/neuron0",)
    is_jupyter_kernel: bool
    is_this_process: bool

    def describe(self) -> str:
        what = "a Jupyter kernel" if self.is_jupyter_kernel else "a process"
        if self.is_this_process:
            what = "this notebook's own kernel" if self.is_jupyter_kernel else "this process"
        return f"pid {self.pid}, {what}, holds {', '.join(self.devices)}: {self.cmdline}"


@dataclass(frozen=True)
class HolderScan:
    holders: list[DeviceHolder]
    unreadable_pids: list[int]  # processes whose open files we may not read (another user's)

    @property
    def others(self) -> list[DeviceHolder]:
        return [h for h in self.holders if not h.is_this_process]


def _cmdline(proc_dir: Path) -> str:
    return " ".join(process_cmdline(proc_dir) or []) or "?"


def neuron_device_holders(proc_root: Path = PROC_DIR, dev_root: Path = DEV_DIR,
                          self_pid: int | None = None) -> HolderScan:
    """Every process with a /dev/neuron<N> open: its pid, command line, and which devices.

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
            cmdline = _cmdline(proc_dir)
            holders.append(DeviceHolder(pid, cmdline, tuple(sorted(devices)),
                                        bool(JUPYTER_KERNEL.search(cmdline)), pid == self_pid))
    return HolderScan(holders, unreadable)


FREE_CORES_FIX = (
    "A NeuronCore belongs to the process that opened it until that process exits. "
    "If it is another notebook's kernel: in JupyterLab open 'Running Terminals and Kernels' "
    "(left sidebar) and shut that kernel down, or `kill <pid>`. To run two programs at once, "
    "give each its own cores before torch_xla starts, e.g. NEURON_RT_VISIBLE_CORES=0 for one "
    "and NEURON_RT_VISIBLE_CORES=1 for the other. `neuron-ls` and `neuron-top` list the "
    "processes using each core.")


SELF_HOLDS_FIX = (
    "This process opened the NeuronCores itself, so processes it starts (torchrun workers) "
    "cannot get them: restart the kernel and run the cells in order; this notebook's kernel "
    "must not touch the XLA device (backend.device, torch_xla.device()) before launching.")


def check_neuron_cores_free(proc_root: Path = PROC_DIR, dev_root: Path = DEV_DIR,
                            self_pid: int | None = None, *, allow_self: bool = True) -> CheckResult:
    """No other process holds a /dev/neuron* device. allow_self=False: nor this one (before
    launching workers that need every core)."""
    scan = neuron_device_holders(proc_root, dev_root, self_pid)
    item = "NeuronCores free"
    if scan.others:
        listing = "; ".join(h.describe() for h in scan.others)
        return CheckResult(item, False, f"held by another process: {listing}", FREE_CORES_FIX)
    if not allow_self and scan.holders:
        return CheckResult(item, False, f"held by {scan.holders[0].describe()}", SELF_HOLDS_FIX)
    found = "no other process holds a Neuron device"
    if any(h.is_this_process for h in scan.holders):
        found += " (this process has them open itself)"
    if not any(NEURON_DEVICE.fullmatch(p.name) for p in _safe_iterdir(Path(dev_root))):
        found += " (there are no Neuron devices on this machine)"
    elif scan.unreadable_pids:
        found += (f"; {len(scan.unreadable_pids)} processes of other users could not be "
                  "inspected: `sudo neuron-ls` shows them")
    return CheckResult(item, True, found, "")


def _safe_iterdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


# ---------------------------------------------------------------- the other checks


def check_backend(backend: Backend) -> CheckResult:
    item = "Backend"
    forced_cpu = "PJRT_DEVICE=CPU" in backend.reason
    if backend.name == "neuron":
        return CheckResult(item, True, f"Neuron: {backend.reason}", "")
    if backend.name == "xla-cpu" and (backend.torch_neuronx_version is None or forced_cpu):
        return CheckResult(item, True, f"XLA on CPU, the stand-in: {backend.reason}", "")
    if backend.name == "xla-cpu":
        return CheckResult(
            item, False, f"XLA on CPU although {backend.reason}",
            "torch-neuronx is installed but sees no NeuronCore: run `neuron-ls`; if it lists "
            "none, the Neuron driver is not loaded (install aws-neuronx-dkms, reboot); if "
            "NEURON_RT_VISIBLE_CORES is set it must name cores that exist (0-1 on a trn1.2xlarge).")
    return CheckResult(item, False, f"plain PyTorch on CPU: {backend.reason}",
                       "the XLA stages need torch-xla: `make venv` (or "
                       "`pip install -r requirements.txt`), then restart the kernel")


def _pins(files) -> dict[str, tuple[Requirement, Path]]:
    pins = {}
    for path in files:
        path = Path(path)
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue  # comments and pip options (--extra-index-url ...)
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            pins[req.name.lower()] = (req, path)
    return pins


def check_pins(requirement_files=(REQUIREMENTS, NEURON_REQUIREMENTS),
               packages=PINNED_PACKAGES) -> CheckResult:
    """The installed torch, torch-xla, torchvision (and torch-neuronx where installed) match
    the pins of the requirement files."""
    item = "Version pins"
    pins = _pins(requirement_files)
    found, wrong = [], []
    for name in packages:
        if name not in pins:
            continue
        req, path = pins[name]
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if path.name != NEURON_REQUIREMENTS.name:  # the Neuron extras exist on Trainium only
                wrong.append(f"{name} is not installed ({req.specifier} in {path.name})")
            continue
        if req.specifier.contains(installed, prereleases=True):
            found.append(f"{name} {installed}")
        else:
            wrong.append(f"{name} {installed} installed, {path.name} pins {req.specifier}")
    if wrong:
        files = " -r ".join(sorted({shown_path(p) for _, p in pins.values()}))
        return CheckResult(item, False, "; ".join(wrong),
                           f"install the pinned versions: `pip install -r {files}` in the "
                           "workbook's venv (`make venv` does it), then restart the kernel")
    return CheckResult(item, True, ", ".join(found) + " (as pinned)", "")


def check_neuron_cores_visible(visible: int | None = None, instance: str | None = None,
                               torch_neuronx_installed: bool | None = None) -> CheckResult:
    item = "NeuronCores visible"
    visible = visible_neuron_cores() if visible is None else visible
    instance = instance_type() if instance is None else instance
    if torch_neuronx_installed is None:
        torch_neuronx_installed = importlib.util.find_spec("torch_neuronx") is not None
    on = f" on {instance}" if instance else ""
    if visible > 0:
        counts = SUPPORTED_WORKER_COUNTS.get(instance or "")
        workers = f" (torchrun worker counts: {', '.join(map(str, counts))})" if counts else ""
        return CheckResult(item, True, f"{visible} NeuronCore(s){on}{workers}", "")
    if not torch_neuronx_installed:
        return CheckResult(item, True, "none: no Trainium here, and the CPU stand-in needs none", "")
    return CheckResult(
        item, False, f"torch-neuronx is installed but no NeuronCore is visible{on}",
        "`neuron-ls` should list the devices; if it lists none the driver is missing "
        "(aws-neuronx-dkms); if NEURON_RT_VISIBLE_CORES is set, it must name cores that exist.")


def check_mnist(root: str | os.PathLike | None = None) -> CheckResult:
    from mnist_mlp.download import mnist_file_problems, raw_dir

    item = "MNIST data"
    problems = mnist_file_problems(root)
    where = shown_path(raw_dir(root))
    if problems:
        listing = "; ".join(f"{name}: {problem}" for name, problem in problems.items())
        return CheckResult(item, False, f"in {where}: {listing}",
                           "run `make data` (or `from mnist_mlp.download import ensure_mnist; "
                           "ensure_mnist()`); set MNIST_DATA_DIR to use a copy elsewhere")
    return CheckResult(item, True, f"the four IDX files in {where}, md5s verified", "")


def nearest_existing(path: Path) -> Path:
    """path itself, or its closest ancestor that exists (where a mkdir -p would start)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_compile_cache(env=None, stand_in: bool | None = None) -> CheckResult:
    """The Neuron compile cache (helpers.compile_cache decides where) can be written."""
    from helpers.compile_cache import locate_cache

    item = "Compile cache"
    location = locate_cache(env)
    note = ""
    if stand_in is None:
        stand_in = importlib.util.find_spec("torch_neuronx") is None
    if stand_in:
        note = " (the CPU stand-in compiles with XLA's own CPU compiler and does not use it)"
    if location.remote:
        return CheckResult(item, True, f"{location.url} (from {location.source}), a remote "
                           f"cache: not checked from here{note}", "")
    path = location.path
    existing = nearest_existing(path)
    writable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    if writable:
        return CheckResult(item, True, f"{path} (from {location.source}), writable{note}", "")
    why = "is not a directory" if not existing.is_dir() else "is not writable by you"
    return CheckResult(
        item, False, f"{path} (from {location.source}): {existing} {why}",
        f"point the cache at a directory you can write: `export NEURON_COMPILE_CACHE_URL=$HOME/"
        f"neuron-compile-cache`, or take over the default one: `sudo chown -R $USER {path}` "
        f"(compiles run as root leave it root-owned)")


def check_torchrun(python: str = sys.executable) -> CheckResult:
    item = "torchrun"
    if importlib.util.find_spec("torch.distributed.run") is None:
        return CheckResult(item, False, "torch.distributed.run is missing from this torch",
                           "reinstall torch from requirements.txt: `make venv`")
    ours = Path(python).parent / "torchrun"
    on_path = shutil.which("torchrun")
    message = (f"torch.distributed.run is in {shown_path(sys.prefix)} (the notebooks launch "
               "it as `python -m torch.distributed.run`)")
    if on_path and Path(on_path).resolve() != ours.resolve():
        return CheckResult(item, False, message + f", but `torchrun` in a shell is {on_path}, "
                           "another environment's",
                           f"in a terminal, activate the workbook's venv first (`source "
                           f"{shown_path(Path(python).parent / 'activate')}`) or call "
                           f"{shown_path(ours)} by its path")
    return CheckResult(item, True, message, "")


def run_checks(backend: Backend) -> list[CheckResult]:
    """Every setup check, in the order notebook 00 explains them."""
    return [
        check_backend(backend),
        check_pins(),
        check_neuron_cores_visible(backend.neuron_cores),
        check_neuron_cores_free(),
        check_mnist(),
        check_compile_cache(stand_in=backend.name != "neuron"),
        check_torchrun(),
    ]

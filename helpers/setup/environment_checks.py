"""Is this machine ready for the workbook? notebook 00's checks, each a plain function that returns
a CheckResult (ok or not, what it found, the fix when not; helpers.setup.checklist renders them):
the platform (the OS, the Python, torch-neuronx's line) and the pinned packages, the backend and
its NeuronCores (who holds them: helpers.setup.core_holders), MNIST, the compile cache, the
tools on PATH.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from helpers.launch.procfs import PROC_DIR
from helpers.setup.checklist import CheckResult
from helpers.setup.core_holders import busy_core_messages_text, neuron_device_holders
from mnist_mlp.common.backend import (
    INFERRED_WORKER_COUNTS,
    SUPPORTED_WORKER_COUNTS,
    Backend,
    instance_type,
    neuron_device_nodes,
    visible_neuron_cores,
)
from mnist_mlp.common.neuron_cc_flags import ENV_VAR, FlagsError
from mnist_mlp.common.paths import REPO_ROOT
from mnist_mlp.common.paths import repo_relative as shown_path
from mnist_mlp.common.platform_paths import os_release_path

REQUIREMENTS = REPO_ROOT / "requirements.txt"
NEURON_REQUIREMENTS = REPO_ROOT / "requirements-neuron.txt"
# The pins that must hold exactly: a torch that torch-xla was not built against breaks its import.
PINNED_PACKAGES = ("torch", "torch-xla", "torchvision", "torch-neuronx", "neuronx-cc")
# Neuron 2.31 is the last release with PyTorch/XLA training (torch-neuronx 2.9, pinned in
# requirements-neuron.txt). Its package list gives Python 3.11-3.13 for torch-neuronx
# 2.9.0.2.15.32035; its setup guide ("Install PyTorch via manual installation") covers Ubuntu 24.04
# and 22.04, and says "PyTorch 2.9 is not available on Amazon Linux 2023". From Neuron 2.30
# "Ubuntu 22.04-based DLCs and DLAMIs are no longer published", while "Neuron continues to support
# Ubuntu 22.04 at the platform level" (announce-dlc-dlami-ubuntu-24-04, docs/sources.md).
# torch-neuronx 2.13 and later is TorchNeuron, native PyTorch for trn2/trn3.
NEURON_PYTHONS = ((3, 11), (3, 12), (3, 13))
NEURON_OS = {("ubuntu", "24.04"): "", ("ubuntu", "22.04"): " (Neuron still supports Ubuntu 22.04 "
             "itself, but publishes no 22.04 DLAMIs or containers since 2.30; Ubuntu 24.04 is the "
             "one to start from)"}
XLA_TORCH_NEURONX = (2, 9)
START_FROM = ("start from Ubuntu 24.04: the Neuron 2.31 'Deep Learning AMI Neuron PyTorch 2.9 "
              "(Ubuntu 24.04)', or Ubuntu Server 24.04 with the Neuron 2.31 driver and runtime "
              "(README)")


def read_os_release(path: Path | None = None) -> dict[str, str]:
    """/etc/os-release as a dict (KEY=value lines, shell quoting); {} when it cannot be read."""
    fields = {}
    try:
        text = Path(os_release_path() if path is None else path).read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            try:
                fields[key.strip()] = " ".join(shlex.split(value))
            except ValueError:  # unbalanced quotes: keep the raw text
                fields[key.strip()] = value.strip()
    return fields


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


_INSTALLED = object()  # check_platform's default: look up the installed torch-neuronx


def check_platform(os_release: Path | None = None, python: tuple[int, int] = sys.version_info[:2],
                   torch_neuronx=_INSTALLED, neuron_host: bool | None = None,
                   dev_root: Path | None = None) -> CheckResult:
    """On a Trainium host: an OS, Python and torch-neuronx that Neuron 2.31's PyTorch/XLA supports.

    torch_neuronx: its version string (None: not installed). neuron_host: Neuron devices or
    torch-neuronx present (found out when None); elsewhere, on the CPU stand-in, it passes
    without judging.
    """
    item = "Platform"
    if torch_neuronx is _INSTALLED:
        torch_neuronx = _installed_version("torch-neuronx")
    if neuron_host is None:
        neuron_host = torch_neuronx is not None or has_neuron_device(dev_root)
    release = read_os_release(os_release)
    os_key = (release.get("ID", "").lower(), release.get("VERSION_ID", ""))
    os_name = release.get("PRETTY_NAME") or " ".join(os_key).strip() or f"unknown OS ({os_release or os_release_path()})"
    py = "{}.{}".format(*python)
    found = f"{os_name}, Python {py}, torch-neuronx {torch_neuronx or 'not installed'}"
    if not neuron_host:
        return CheckResult(item, True, "not a Trainium host (no Neuron device, no torch-neuronx): "
                           "OS, Python and torch-neuronx are judged on Trainium only", "")
    problems, fixes = [], []
    if os_key == ("amzn", "2023"):
        problems.append("PyTorch 2.9 (torch-neuronx) is not available on Amazon Linux 2023")
        fixes.append(START_FROM)
    elif os_key not in NEURON_OS:
        problems.append(f"{os_name} is not an OS that Neuron 2.31's PyTorch 2.9 supports")
        fixes.append(START_FROM)
    if tuple(python) not in NEURON_PYTHONS:
        problems.append(f"torch-neuronx 2.9 supports Python 3.11-3.13, not {py}")
        fixes.append("re-create the venv with a supported Python, e.g. Ubuntu 24.04's: "
                     "`make clean-venv && make venv PYTHON=python3.12`")
    if torch_neuronx is None:
        problems.append("torch-neuronx is not installed")
    else:
        try:
            line = Version(torch_neuronx).release[:2]
        except InvalidVersion:
            line = None
        if line != XLA_TORCH_NEURONX:
            what = ("TorchNeuron (native PyTorch, device='neuron', trn2/trn3 only), not PyTorch/XLA"
                    if line and line > XLA_TORCH_NEURONX else "not the PyTorch 2.9 (XLA) line")
            problems.append(f"torch-neuronx {torch_neuronx} is {what}")
    if torch_neuronx is None or any(p.startswith("torch-neuronx ") for p in problems):
        fixes.append("install Neuron 2.31's PyTorch/XLA packages into this venv: "
                     f"`{shown_path(Path(sys.executable))} -m pip install -r requirements.txt "
                     "-r requirements-neuron.txt`, then restart the kernel")
    if problems:
        return CheckResult(item, False, f"{found}: " + "; ".join(problems), " ".join(fixes))
    return CheckResult(item, True, found + NEURON_OS[os_key], "")


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
        installed = _installed_version(name)
        if installed is None:
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


def has_neuron_device(dev_root: Path | None = None) -> bool:
    """Whether dev_root (default: this machine's /dev) holds a Neuron device node (neuron0, ...):
    mnist_mlp's reader, the one the backend's core count falls back on."""
    return bool(neuron_device_nodes(dev_root))


# Tools looked up by name: torch-neuronx runs `neuronx-cc` to compile each graph, the workbook
# `torchrun` and `neuron_parallel_compile`. In the venv's bin/, found only when it is on PATH.
VENV_TOOLS = ("neuronx-cc", "neuron_parallel_compile", "torchrun")
NEEDED_BY_NAME = ("neuronx-cc",)  # run by this very process (the kernel) when it compiles


# ---------------------------------------------------------------- who holds the NeuronCores


FREE_CORES_FIX = (
    "A NeuronCore belongs to the process that opened it until that process exits. "
    "If it is another notebook's kernel: in JupyterLab open 'Running Terminals and Kernels' "
    "(left sidebar) and shut that kernel down, or `kill <pid>`. To run two programs at once, "
    "give each its own cores before torch_xla starts, e.g. NEURON_RT_VISIBLE_CORES=0 for one "
    "and NEURON_RT_VISIBLE_CORES=1 for the other. Otherwise "
    f"{busy_core_messages_text()}. neuron-top counts (the Neuron troubleshooting guide says to "
    "terminate its sessions); neuron-ls and neuron-monitor, which read the device, do not; a "
    "profiler's `capture` does.")


SELF_HOLDS_FIX = (
    "This process opened the NeuronCores itself, so processes it starts (torchrun workers) "
    "cannot get them: restart the kernel and run the cells in order; this notebook's kernel "
    "must not touch the XLA device (backend.device, torch_xla.device()) before launching.")


def check_neuron_cores_free(proc_root: Path = PROC_DIR, dev_root: Path | None = None,
                            self_pid: int | None = None, *, allow_self: bool = True) -> CheckResult:
    """No other process holds NeuronCores (monitors such as neuron-top do not count).
    allow_self=False: nor this one (before launching workers that need every core)."""
    scan = neuron_device_holders(proc_root, dev_root, self_pid)
    item = "NeuronCores free"
    if scan.others:
        listing = "; ".join(h.describe() for h in scan.others)
        return CheckResult(item, False, f"NeuronCores are held by another process: {listing}",
                           FREE_CORES_FIX)
    if not allow_self and scan.core_holders:
        return CheckResult(item, False, f"held by {scan.core_holders[0].describe()}",
                           SELF_HOLDS_FIX)
    found = "no other process holds NeuronCores"
    if any(h.is_this_process for h in scan.core_holders):
        found += " (this process has them open itself)"
    if scan.monitors:
        found += "; monitors reading the device, holding no core: " + ", ".join(
            f"pid {h.pid} {h.cmdline.split()[0].rsplit('/', 1)[-1]}" for h in scan.monitors)
    if not has_neuron_device(dev_root):
        found += " (there are no Neuron devices on this machine)"
    elif scan.unreadable_pids:
        found += (f"; {len(scan.unreadable_pids)} processes of other users could not be "
                  "inspected: `sudo neuron-ls` shows them")
    return CheckResult(item, True, found, "")


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
        inferred = ("; inferred: the AWS MLP tutorial does not list this instance"
                    if instance in INFERRED_WORKER_COUNTS else "")
        workers = (f" (torchrun worker counts: {', '.join(map(str, counts))}{inferred})"
                   if counts else "")
        return CheckResult(item, True, f"{visible} NeuronCore(s){on}{workers}", "")
    if not torch_neuronx_installed:
        return CheckResult(item, True, "none: no Trainium here, and the CPU stand-in needs none", "")
    return CheckResult(
        item, False, f"torch-neuronx is installed but no NeuronCore is visible{on}",
        "`neuron-ls` should list the devices; if it lists none the driver is missing "
        "(aws-neuronx-dkms); if NEURON_RT_VISIBLE_CORES is set, it must name cores that exist.")


def check_mnist(root: str | os.PathLike | None = None) -> CheckResult:
    from mnist_mlp.common.download import mnist_file_problems, raw_dir

    item = "MNIST data"
    problems = mnist_file_problems(root)
    where = shown_path(raw_dir(root))
    if problems:
        listing = "; ".join(f"{name}: {problem}" for name, problem in problems.items())
        return CheckResult(item, False, f"in {where}: {listing}",
                           "run `make data` (or `from mnist_mlp.common.download import ensure_mnist; "
                           "ensure_mnist()`); set MNIST_DATA_DIR to use a copy elsewhere")
    return CheckResult(item, True, f"the four IDX files in {where}, md5s verified", "")


def check_compile_cache(env=None, stand_in: bool | None = None) -> CheckResult:
    """The Neuron compile cache (helpers.cache.location decides where) can be written."""
    from helpers.cache.location import locate_cache

    item = "Compile cache"
    try:
        location = locate_cache(env)
    except FlagsError as err:
        return CheckResult(item, False, str(err), f"fix {ENV_VAR}, or unset it, and check again")
    note = ""
    if stand_in is None:
        stand_in = importlib.util.find_spec("torch_neuronx") is None
    if stand_in:
        note = " (the CPU stand-in compiles with XLA's own CPU compiler and does not use it)"
    if location.remote:
        return CheckResult(item, True, f"{location.url} (from {location.source}), a remote "
                           f"cache: not checked from here{note}", "")
    path = existing = location.path
    while not existing.exists() and existing != existing.parent:  # where a mkdir -p starts
        existing = existing.parent
    writable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    if writable:
        return CheckResult(item, True, f"{path} (from {location.source}), writable{note}", "")
    why = "is not a directory" if not existing.is_dir() else "is not writable by you"
    return CheckResult(
        item, False, f"{path} (from {location.source}): {existing} {why}",
        f"point the cache at a directory you can write: `export NEURON_COMPILE_CACHE_URL=$HOME/"
        f"neuron-compile-cache`, or take over the default one: `sudo chown -R $USER {path}` "
        f"(compiles run as root leave it root-owned)")


def check_torchrun() -> CheckResult:
    item = "torchrun"
    if importlib.util.find_spec("torch.distributed.run") is None:
        return CheckResult(item, False, "torch.distributed.run is missing from this torch",
                           "reinstall torch from requirements.txt: `make venv`")
    return CheckResult(item, True, f"torch.distributed.run is in {shown_path(sys.prefix)} (the "
                       "notebooks launch it as `python -m torch.distributed.run`)", "")


def check_tools_on_path(python: str = sys.executable, path: str | None = None) -> CheckResult:
    """The venv's tools are what their names find on PATH: not another environment's, and
    neuronx-cc, which this process itself runs, found at all."""
    item = "Tools on PATH"
    bin_dir = Path(os.path.abspath(python)).parent  # not resolved: a venv's python is a symlink
    path = os.environ.get("PATH", "") if path is None else path
    venv_bin = shown_path(bin_dir)
    ours = [tool for tool in VENV_TOOLS if (bin_dir / tool).is_file()]
    good, started_by_us, wrong = [], [], []
    for tool in ours:
        found = shutil.which(tool, path=path)
        if found is None and tool not in NEEDED_BY_NAME:
            started_by_us.append(tool)  # helpers.launch.processes puts the venv's bin/ first for these
        elif found is None or Path(found).resolve() != (bin_dir / tool).resolve():
            wrong.append(f"`{tool}` is {found or 'not found'}")
        else:
            good.append(tool)
    if wrong:
        activate = shown_path(bin_dir / "activate")
        return CheckResult(item, False,
                           f"{'; '.join(wrong)} on this process's PATH, not {venv_bin}'s",
                           f"start JupyterLab with `make lab` (it puts {venv_bin} first on PATH) "
                           f"or, in a terminal, `source {activate}` first; then restart the kernel")
    parts = [f"{', '.join(good)}: {venv_bin}'s"] if good else []
    if started_by_us:
        parts.append(f"{', '.join(started_by_us)}: not on this PATH, but the workbook starts "
                     f"commands with {venv_bin} first")
    missing = [tool for tool in VENV_TOOLS if tool not in ours]
    if missing:
        parts.append(f"{', '.join(missing)}: not installed (the CPU stand-in needs none)")
    return CheckResult(item, True, "; ".join(parts), "")


NEURON_TOOLS_DIR = Path("/opt/aws/neuron/bin")  # aws-neuronx-tools installs here, off PATH
NEURON_TOOLS = ("neuron-ls", "neuron-top", "neuron-monitor")


def check_neuron_tools(on_neuron: bool, path: str | None = None,
                       tools_dir: Path = NEURON_TOOLS_DIR) -> CheckResult:
    """neuron-ls, neuron-top and neuron-monitor found by name (Trainium only)."""
    item = "Neuron tools"
    if not on_neuron:
        return CheckResult(item, True, "not a Trainium host: the CPU stand-in needs no Neuron tools", "")
    path = os.environ.get("PATH", "") if path is None else path
    missing = [tool for tool in NEURON_TOOLS if shutil.which(tool, path=path) is None]
    if not missing:
        return CheckResult(item, True, f"{', '.join(NEURON_TOOLS)} on PATH", "")
    where = (f"they are in {tools_dir}, which is not on PATH" if (tools_dir / missing[0]).is_file()
             else f"not in {tools_dir} either: install aws-neuronx-tools (Neuron apt repository)")
    return CheckResult(item, False, f"{', '.join(missing)} not found: {where}",
                       f"export PATH={tools_dir}:$PATH (add it to ~/.bashrc), then restart JupyterLab")


def run_checks(backend: Backend) -> list[CheckResult]:
    """Every setup check, in the order notebook 00 explains them."""
    return [
        check_backend(backend),
        check_platform(torch_neuronx=backend.torch_neuronx_version),
        check_pins(),
        check_neuron_cores_visible(backend.neuron_cores),
        check_neuron_cores_free(),
        check_mnist(),
        check_compile_cache(stand_in=backend.name != "neuron"),
        check_torchrun(),
        check_tools_on_path(),
        check_neuron_tools(backend.name == "neuron"),
    ]

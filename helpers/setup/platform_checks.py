"""Is this the platform the workbook's stack runs on? notebook 00's checks of the OS, the Python
and the pinned packages (torch, torch-xla, torchvision; torch-neuronx and neuronx-cc on Trainium)."""
from __future__ import annotations

import importlib.metadata
import shlex
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from helpers.setup.checklist import CheckResult
from helpers.setup.core_holders import NEURON_DEVICE
from mnist_mlp.common.paths import REPO_ROOT
from mnist_mlp.common.paths import repo_relative as shown_path
from mnist_mlp.common.platform_paths import dev_dir, os_release_path

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
        neuron_host = torch_neuronx is not None or any(
            NEURON_DEVICE.fullmatch(p.name) for p in _entries(Path(dev_root or dev_dir())))
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


def has_neuron_device(dev_root: Path | None = None) -> bool:
    """Whether dev_root (default: this machine's /dev) holds a Neuron device node (neuron0, ...)."""
    dev_root = dev_dir() if dev_root is None else dev_root
    return any(NEURON_DEVICE.fullmatch(p.name) for p in _entries(Path(dev_root)))


def _entries(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []

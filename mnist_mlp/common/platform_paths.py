"""The Neuron platform's fixed paths, read in one place: the one seam a test double plugs into.

On every real machine these are the absolute paths the Neuron driver, runtime and compiler use
(`/dev/neuron*`, `/sys/devices/virtual/neuron_device`, the DMI product name, `/etc/os-release`,
the default compile cache `/var/tmp/neuron-compile-cache`). WORKBOOK_PLATFORM_ROOT, when set,
names a directory that stands for `/` for these paths only. Nothing sets it but the tests: the
trn1 double builds a trn1.2xlarge's tree there. It is read at each call, so a process sees the
platform its environment names; a process whose root differs from ours runs on another machine.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

PLATFORM_ROOT_ENV = "WORKBOOK_PLATFORM_ROOT"


def platform_path(path: str, env=None) -> Path:
    """`path` (absolute) on this machine's Neuron platform: itself, or under WORKBOOK_PLATFORM_ROOT."""
    root = (os.environ if env is None else env).get(PLATFORM_ROOT_ENV)
    return Path(root, path.lstrip("/")) if root else Path(path)


def dev_dir() -> Path:
    return platform_path("/dev")


def neuron_sysfs() -> Path:
    return platform_path("/sys/devices/virtual/neuron_device")


def dmi_product_name() -> Path:
    return platform_path("/sys/devices/virtual/dmi/id/product_name")


def os_release_path() -> Path:
    return platform_path("/etc/os-release")


def default_compile_cache(env=None) -> Path:
    """Where neuronx-cc caches compiled graphs unless told otherwise (Neuron persistent cache)."""
    return platform_path("/var/tmp/neuron-compile-cache", env)


def undecidable_checks(env=None) -> dict[str, str]:
    """The notebook checks the platform under WORKBOOK_PLATFORM_ROOT cannot decide, by label,
    with why ({} on every real machine: nothing is read unless a test double's tree is named).
    A test double lists them in etc/workbook/undecidable-checks.json of its tree."""
    root = (os.environ if env is None else env).get(PLATFORM_ROOT_ENV)
    path = Path(root, "etc/workbook/undecidable-checks.json") if root else None
    return json.loads(path.read_text()) if path and path.is_file() else {}

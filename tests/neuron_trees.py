"""A Trainium host's Neuron files, laid out under a directory as the Neuron driver lays them out
(/sys/devices/virtual/neuron_device/neuron<N>/core_count, /dev/neuron<N>, the DMI product name),
and a torch_neuronx package to put on the path. mnist_mlp.common.backend reads such a tree when
WORKBOOK_PLATFORM_ROOT names it (mnist_mlp/common/platform_paths.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from mnist_mlp.common.platform_paths import PLATFORM_ROOT_ENV, dev_dir

NEURON_SYSFS = Path("/sys/devices/virtual/neuron_device")
DEV_DIR = Path("/dev")
DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")

TRN1_2XLARGE = ("trn1.2xlarge", [2])  # one Trainium chip, two NeuronCores
TRN1_32XLARGE = ("trn1.32xlarge", [2] * 16)


def neuron_host(root: Path, instance: str, cores_per_device: list[int]) -> Path:
    """sys/ and dev/ under root as on `instance`: one neuron<N> device per entry of
    cores_per_device, with that core_count. Returns root."""
    sysfs, dev = (root / p.relative_to("/") for p in (NEURON_SYSFS, DEV_DIR))
    for i, cores in enumerate(cores_per_device):
        (sysfs / f"neuron{i}").mkdir(parents=True)
        (sysfs / f"neuron{i}" / "core_count").write_text(f"{cores}\n")
        dev.mkdir(parents=True, exist_ok=True)
        (dev / f"neuron{i}").touch()
    dmi = root / DMI_PRODUCT_NAME.relative_to("/")
    dmi.parent.mkdir(parents=True)
    dmi.write_text(f"{instance}\n")
    return root


def torch_neuronx_package(directory: Path) -> Path:
    """A directory holding an (empty) torch_neuronx package, to put first on sys.path."""
    package = directory / "site" / "torch_neuronx"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("IMPORTED = True\n")
    return package.parent


def on_neuron_host(monkeypatch, root: Path, instance: str = TRN1_2XLARGE[0],
                   cores_per_device=TRN1_2XLARGE[1]) -> Path:
    """This process as a fresh one on `instance`: its Neuron files under root (read through
    WORKBOOK_PLATFORM_ROOT), torch_neuronx importable, no PJRT_DEVICE set. Undone afterwards
    (os.environ, sys.path and sys.modules as they were). Returns root/dev."""
    neuron_host(root, instance, cores_per_device)
    monkeypatch.setenv(PLATFORM_ROOT_ENV, str(root))
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # recorded: removed again afterwards
    del sys.modules["torch_neuronx"]  # not imported yet: looked for on the path
    monkeypatch.syspath_prepend(str(torch_neuronx_package(root)))
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    return dev_dir()

"""Pick the backend a notebook or script runs on, and say which one in one line.

Order: Neuron (torch-neuronx installed and NeuronCores visible), else PyTorch/XLA on
the CPU (the stand-in CI uses), else plain PyTorch on the CPU. The same training code
runs on all three; only this choice differs.

The choice is made from what the machine shows (its Neuron devices) and what is installed,
never by importing torch_xla or torch_neuronx: on a Neuron host, importing torch_xla hands
start-up to torch-neuronx, which configures the Neuron runtime from the environment as it is
then (docs/sources.md, "On a Neuron host, importing torch_xla runs torch-neuronx's set-up"), so
a notebook kernel's NeuronCores are set after this choice and before that import
(helpers.setup.notebook_kernel.setup).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mnist_mlp.common.platform_paths import dev_dir as platform_dev_dir
from mnist_mlp.common.platform_paths import dmi_product_name as platform_dmi_product_name
from mnist_mlp.common.platform_paths import neuron_sysfs as platform_neuron_sysfs

# Worker counts (logical NeuronCores used by one torchrun job) each instance type supports, from
# the AWS "Multi-Layer Perceptron Training Tutorial": trn1.2xlarge 1, 2; trn1.32xlarge 1, 2, 8, 32;
# trn2.48xlarge 1, 4, 16, 64 (LNC=2). trn1n.32xlarge has trn1.32xlarge's chips. trn2.3xlarge has one
# Trainium2 chip (aws.amazon.com/ec2/instance-types/trn2), 4 logical cores at LNC=2; the tutorial
# does not list it, so it gets trn2.48xlarge's pattern: one core, or the whole chip.
SUPPORTED_WORKER_COUNTS = {
    "trn1.2xlarge": (1, 2),
    "trn1.32xlarge": (1, 2, 8, 32),
    "trn1n.32xlarge": (1, 2, 8, 32),
    "trn2.3xlarge": (1, 4),
    "trn2.48xlarge": (1, 4, 16, 64),
}
# The rows above the tutorial does not list: inferred as said there, to be printed as such.
INFERRED_WORKER_COUNTS = frozenset({"trn1n.32xlarge", "trn2.3xlarge"})
# A Trainium2/Trainium3 device has 8 physical NeuronCores (the driver's core_count); the runtime
# groups them into logical ones, 2 each by default (NEURON_LOGICAL_NC_CONFIG=1 or 2: Neuron docs,
# "Logical NeuronCore configuration"). NEURON_RT_VISIBLE_CORES, neuron-ls and torchrun count
# logical cores. Trainium (trn1) devices have 2 NeuronCores and no such grouping.
LNC_DEVICE_CORES = 8
DEFAULT_LNC = 2


@dataclass(frozen=True)
class Backend:
    name: str  # "neuron", "xla-cpu" or "cpu"
    reason: str  # why this one: shown to the reader
    torch_version: str
    torch_xla_version: str | None
    torch_neuronx_version: str | None
    neuron_cores: int  # NeuronCores this process may use (NEURON_RT_VISIBLE_CORES applied)

    @property
    def uses_xla(self) -> bool:
        return self.name in ("neuron", "xla-cpu")

    @property
    def device(self):
        """The torch device to train on (initialises the XLA runtime on first use)."""
        import torch

        if self.uses_xla:
            import torch_xla

            return torch_xla.device()
        return torch.device("cpu")

    def summary(self) -> str:
        versions = f"torch {self.torch_version}"
        versions += f", torch-xla {self.torch_xla_version or 'not installed'}"
        versions += f", torch-neuronx {self.torch_neuronx_version or 'not installed'}"
        label = {
            "neuron": "Neuron (Trainium NeuronCore through PyTorch/XLA)",
            "xla-cpu": "XLA on CPU (PJRT_DEVICE=CPU stand-in; no NeuronCore)",
            "cpu": "plain PyTorch on CPU",
        }[self.name]
        return (f"Backend: {label} | {versions} | NeuronCores visible: {self.neuron_cores}"
                f" | why: {self.reason}")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_core_list(spec: str) -> list[int]:
    """'1', '0-1' or '0,1' -> core indices. The runtime developer guide: "a list of NeuronCores,
    ... a range of NeuronCores, ... or a combination of both", contiguous and increasing (the
    configuration guide names one index or one range only; docs/sources.md has both)."""
    cores: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r}: the Neuron runtime takes core "
                             "indices, ranges or both, e.g. '1', '0-1' or '0,1'")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r}: the range runs backwards; "
                             f"write '{hi}-{lo}'")
        cores.extend(range(lo, hi + 1))
    if cores != list(range(cores[0], cores[0] + len(cores))):
        raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r}: the cores must be contiguous and "
                         "increasing, e.g. '0-1' (not '0,2')")
    return cores


def logical_nc_config(env=None) -> int:
    """Physical NeuronCores per logical one on Trainium2/3: NEURON_LOGICAL_NC_CONFIG, default 2."""
    env = os.environ if env is None else env
    raw = env.get("NEURON_LOGICAL_NC_CONFIG", "").strip()
    if not raw:
        return DEFAULT_LNC
    if raw not in ("1", "2"):
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG={raw!r}: the Neuron runtime accepts 1 or 2 "
                         f"(default {DEFAULT_LNC})")
    return int(raw)


def device_core_counts(sysfs: Path | None = None, dev_dir: Path | None = None) -> list[int]:
    """Physical NeuronCores of each Neuron device: the driver's per-device core_count.

    Without the sysfs tree (old driver) each /dev/neuronN device counts 2 cores, which is
    right for trn1 and inf2. Defaults: this machine's (mnist_mlp.common.platform_paths).
    """
    sysfs = platform_neuron_sysfs() if sysfs is None else sysfs
    dev_dir = platform_dev_dir() if dev_dir is None else dev_dir
    counts = []
    if sysfs.is_dir():
        for dev in sorted(sysfs.glob("neuron[0-9]*")):
            try:
                counts.append(int((dev / "core_count").read_text().strip()))
            except (OSError, ValueError):
                continue
    if counts:
        return counts
    return [2] * len(neuron_device_nodes(dev_dir))


def neuron_device_nodes(dev_dir: Path | None = None) -> list[Path]:
    """The Neuron device nodes (/dev/neuron0, neuron1, ...) of `dev_dir` (default: this
    machine's /dev), sorted; none when the directory cannot be read. The one reader of "is there
    a Neuron device": helpers.setup.environment_checks.has_neuron_device asks it too."""
    dev_dir = platform_dev_dir() if dev_dir is None else Path(dev_dir)
    try:
        return sorted(p for p in dev_dir.iterdir() if re.fullmatch(r"neuron\d+", p.name))
    except OSError:
        return []


def logical_neuron_cores(env=None, sysfs: Path | None = None, dev_dir: Path | None = None) -> int:
    """NeuronCores as the runtime counts them: Trainium2/3 devices grouped by the LNC setting."""
    counts = device_core_counts(sysfs, dev_dir)
    if LNC_DEVICE_CORES not in counts:
        return sum(counts)
    lnc = logical_nc_config(env)
    return sum(n // lnc if n == LNC_DEVICE_CORES else n for n in counts)


def visible_neuron_cores(env=None, sysfs: Path | None = None, dev_dir: Path | None = None) -> int:
    """Logical NeuronCores this process's runtime reserves, as the runtime's variables give them:
    one for a torchrun worker (not under SPMD: the set-up at `import torch_xla` gives it its
    LOCAL_RANK's core, or that core of an inherited list: docs/sources.md, "How torch-neuronx
    2.9 sets up a process's cores"), else NEURON_RT_VISIBLE_CORES (the cores named, of the
    machine's), else NEURON_RT_NUM_CORES (that many, 0 meaning all), else the machine's (the
    runtime's default)."""
    env = os.environ if env is None else env
    total = logical_neuron_cores(env, sysfs, dev_dir)
    spec = env.get("NEURON_RT_VISIBLE_CORES")
    if total == 0:
        return total
    # torchrun's worker (torch.distributed.is_torchelastic_launched)
    if env.get("TORCHELASTIC_RUN_ID") and env.get("XLA_USE_SPMD", "0") != "1":
        return 1
    if spec:
        return len([c for c in parse_core_list(spec) if c < total])
    count = env.get("NEURON_RT_NUM_CORES", "").strip()
    if count.isdigit() and int(count) > 0:
        return min(int(count), total)
    return total


def instance_type(dmi_product_name: Path | None = None) -> str | None:
    """The EC2 instance type (e.g. 'trn1.2xlarge') from DMI, or None off EC2."""
    try:
        name = (dmi_product_name or platform_dmi_product_name()).read_text().strip()
    except OSError:
        return None
    return name or None


def check_worker_count(workers: int, instance: str | None) -> None:
    """Raise a clear error when `workers` is not a worker count `instance` supports."""
    if workers < 1:
        raise ValueError(f"--nproc_per_node must be at least 1, got {workers}")
    supported = SUPPORTED_WORKER_COUNTS.get(instance or "")
    if supported is None:
        return  # unknown instance: the Neuron runtime will judge
    if workers not in supported:
        counts = ", ".join(map(str, supported))
        raise ValueError(
            f"{instance} supports {counts} worker(s) per node, not {workers}: "
            f"run torchrun --nproc_per_node=N with N in {{{counts}}}.")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # sys.modules[module] = None: the documented way to block an import
        return False


def select_backend(xla: bool = True, *, sysfs: Path | None = None,
                   dev_dir: Path | None = None) -> Backend:
    """Choose and prepare the backend. Call before anything touches an XLA device.

    xla=False is the CPU lesson's choice: plain PyTorch whatever the machine has.
    PJRT_DEVICE=CPU in the environment forces the XLA-on-CPU stand-in, even on Trainium.
    """
    import torch

    versions = dict(torch_version=torch.__version__.split("+")[0],
                    torch_xla_version=_version("torch-xla"),
                    torch_neuronx_version=_version("torch-neuronx"))
    cores = visible_neuron_cores(sysfs=sysfs, dev_dir=dev_dir)
    if not xla:
        return Backend("cpu", "this stage trains with plain PyTorch on the CPU",
                       neuron_cores=cores, **versions)
    forced_cpu = os.environ.get("PJRT_DEVICE", "").upper() == "CPU"
    has_neuronx = _installed("torch_neuronx")
    has_xla = _installed("torch_xla")
    if has_neuronx and cores > 0 and not forced_cpu:
        # Nothing imported: torch_xla's own import runs torch-neuronx's set-up (the module's
        # docstring), with the cores the caller has set by then.
        os.environ.setdefault("PJRT_DEVICE", "NEURON")
        # No count in the reason: setup() narrows the cores after this, and the summary's
        # "NeuronCores visible" is the one count a reader sees.
        return Backend("neuron", "torch-neuronx is installed and NeuronCores are visible",
                       neuron_cores=cores, **versions)
    if has_xla:
        # The reason that decided: PJRT_DEVICE=CPU only matters where Neuron could have run.
        if not has_neuronx:
            reason = "torch-neuronx is not installed (no Trainium here)"
        elif cores == 0:
            reason = "torch-neuronx is installed but no NeuronCore is visible"
        else:
            reason = "PJRT_DEVICE=CPU was set (forces the stand-in)"
        # Must be set before torch_xla initialises its runtime, or it would pick another device.
        if "torch_xla" in sys.modules and os.environ.get("PJRT_DEVICE", "CPU").upper() != "CPU":
            raise RuntimeError("torch_xla was imported with PJRT_DEVICE="
                               f"{os.environ['PJRT_DEVICE']}; restart the kernel and call "
                               "select_backend() first")
        os.environ["PJRT_DEVICE"] = "CPU"
        return Backend("xla-cpu", reason, neuron_cores=cores, **versions)
    return Backend("cpu", "torch-xla is not installed", neuron_cores=cores, **versions)


def select_xla_backend() -> Backend:
    """select_backend() for the XLA stages (train.py, train_torchrun.py, train_bf16.py): they run
    on an XLA device, a NeuronCore or the CPU stand-in. Without torch_xla: a one-line error."""
    backend = select_backend()
    if not backend.uses_xla:
        raise SystemExit("error: this stage runs on an XLA device (a NeuronCore, or PyTorch/XLA's "
                         "CPU stand-in) and torch-xla is not installed: run `make venv` (or pip "
                         "install -r requirements.txt), or train on the CPU with train_cpu.py.")
    return backend

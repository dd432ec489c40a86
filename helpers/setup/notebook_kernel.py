"""What the first cell of every notebook does, so that cell stays three lines long."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from helpers.launch.processes import KERNEL_ONLY, venv_bin_first
from helpers.launch.procfs import PROC_DIR
from helpers.setup.cell_compile_notice import watch_compiles_in_cells
from helpers.setup.core_holders import CORE_RULE, DeviceHolder, holders_message, neuron_device_holders
from mnist_mlp.common.backend import Backend, parse_core_list, select_backend, visible_neuron_cores
from mnist_mlp.common.platform_paths import dev_dir
from mnist_mlp.common.startup import freeze_startup_objects

CORES_VARIABLE = "NEURON_RT_VISIBLE_CORES"


class NeuronCoresHeld(RuntimeError):
    """Another process holds the Neuron device: this notebook would fail, or wait, on it."""


class CoresChosenTooLate(RuntimeError):
    """torch_xla was imported in this kernel before setup() chose its NeuronCores."""


TOO_LATE = ("NeuronCores: torch_xla was imported in this kernel before setup() chose its cores. "
            "On a Neuron host that import runs torch-neuronx's set-up, which configures the Neuron "
            "runtime from the environment as it was then (without {variable}={cores}), so this "
            "kernel would not take the core the notebook says. Restart the kernel (Kernel > "
            "Restart Kernel) and run this cell first, before any cell that imports torch_xla.")


def _cores(spec: str | None) -> set[int] | None:
    """The core indices a NEURON_RT_VISIBLE_CORES value names; None: unknown, or every core."""
    try:
        return set(parse_core_list(spec)) if spec else None
    except ValueError:
        return None


def conflicts(holder: DeviceHolder, cores: str | None) -> bool:
    """Whether `holder` may hold cores this kernel (taking `cores`) needs. Only two declared,
    disjoint sets of cores are known not to: a holder whose environment is unreadable or sets no
    NEURON_RT_VISIBLE_CORES reserved every core it could see, and a kernel taking None (its
    torchrun workers take the cores) needs them all."""
    theirs = _cores(dict(holder.core_env or ()).get(CORES_VARIABLE))
    ours = _cores(cores)
    return theirs is None or ours is None or bool(theirs & ours)


def refuse_other_holders(proc_root: Path | None = None, dev_root: Path | None = None,
                         self_pid: int | None = None, cores: str | None = None) -> None:
    """The one core-holder rule: no OTHER process holds /dev/neuron* cores this kernel may need
    (`cores`: the NEURON_RT_VISIBLE_CORES it takes; monitors such as neuron-top aside). Raises
    NeuronCoresHeld naming each holder and how to free it."""
    scan = neuron_device_holders(PROC_DIR if proc_root is None else proc_root,
                                 dev_dir() if dev_root is None else dev_root, self_pid)
    held = [h for h in scan.others if conflicts(h, cores)]
    if held:
        raise NeuronCoresHeld(holders_message(held))


def remaining_cores(taken: str, total: int) -> str | None:
    """The cores of `total` that `taken` leaves, as NEURON_RT_VISIBLE_CORES names them (one index
    or one range); None when none are left or they are not one range."""
    rest = sorted(set(range(total)) - set(parse_core_list(taken)))
    if not rest or rest != list(range(rest[0], rest[-1] + 1)):
        return None
    return str(rest[0]) if len(rest) == 1 else f"{rest[0]}-{rest[-1]}"


def take_neuron_cores(backend: Backend, neuron_cores: str | None, env=None,
                      recheck=refuse_other_holders) -> str:
    """Give this kernel its NeuronCores before torch_xla is imported; return the line to print.

    On Neuron, NEURON_RT_VISIBLE_CORES becomes `neuron_cores` unless the environment already
    sets it (then that wins, and the line says so). neuron_cores=None: this kernel takes no
    NeuronCore (its torchrun workers take them), so nothing is set. Raises CoresChosenTooLate
    when torch_xla is already imported and no value is set: on a Neuron host that import ran
    torch-neuronx's set-up, which read the runtime's variables then (docs/sources.md).
    On Neuron it first re-checks who holds the cores (`recheck`, the core-holder rule): a kernel
    that takes them after its first cell (notebook 06) may meet a neuron-top or a worker started
    since.
    """
    env = os.environ if env is None else env
    if backend.name != "neuron":
        return "NeuronCores: none here, and the stand-in needs none"
    if neuron_cores is None:
        return ("NeuronCores: this kernel takes none (it must not touch the XLA device); the "
                "processes it starts take them")
    parse_core_list(neuron_cores)  # what the runtime takes, else ValueError
    already = env.get(CORES_VARIABLE)
    if env is os.environ and "torch_xla" in sys.modules and not already:
        # Too late to choose: torch-neuronx read the runtime's variables at that import.
        raise CoresChosenTooLate(TOO_LATE.format(variable=CORES_VARIABLE, cores=neuron_cores))
    if already:
        parse_core_list(already)
    recheck(cores=already or neuron_cores)  # raises NeuronCoresHeld, naming each holder
    if already:
        return (f"NeuronCores: this kernel takes {already} ({CORES_VARIABLE}={already} was already "
                f"set in its environment, so it is kept instead of {neuron_cores})")
    env[CORES_VARIABLE] = neuron_cores
    if env is os.environ:  # this kernel's own choice: commands it starts get the cores it left
        KERNEL_ONLY[CORES_VARIABLE] = remaining_cores(neuron_cores, backend.neuron_cores)
    return f"NeuronCores: this kernel takes {neuron_cores} ({CORES_VARIABLE}={neuron_cores})"


def setup(xla: bool = True, data: bool = True, neuron_cores: str | None = "0") -> Backend:
    """Pick the backend and print which one runs; refuse to start while another process holds
    the Neuron device; give this kernel its NeuronCores (`neuron_cores`, "0" by default; None:
    none, for a kernel whose torchrun workers take them); have each cell say a long compile while
    it runs (helpers.setup.cell_compile_notice); make sure MNIST is on disk and verified.

    Why explicit, and first: by default the Neuron runtime reserves every NeuronCore it can see
    for the process that starts it, and what torch-neuronx's set-up (run by `import torch_xla` on
    a Neuron host) narrows is not documented (helpers.setup.core_holders.CORE_RULE, cited in
    docs/sources.md).
    """
    # The kernel's own PATH too: torch-neuronx runs `neuronx-cc` by name when it compiles, and a
    # kernel started outside `make lab` may not have the venv's bin/ on PATH.
    os.environ["PATH"] = venv_bin_first(os.environ.get("PATH"))
    # Decides from the machine's devices, importing neither torch_xla nor torch_neuronx: the
    # cores are set below, before anything imports torch_xla (whose import, on a Neuron host,
    # runs torch-neuronx's set-up of the runtime: mnist_mlp.common.backend).
    backend = select_backend(xla=xla)
    freeze_startup_objects()  # torch has loaded, torch_xla (on the stand-in) not yet: mnist_mlp/common/startup.py
    if backend.name == "neuron":  # the stand-in and plain PyTorch take no NeuronCore to fight over
        # The cores this kernel will take: what its environment already names, else neuron_cores.
        refuse_other_holders(cores=os.environ.get(CORES_VARIABLE) or neuron_cores)
    cores_line = take_neuron_cores(backend, neuron_cores)
    if backend.name == "neuron":
        backend = dataclasses.replace(backend, neuron_cores=visible_neuron_cores())
    print(backend.summary())
    if backend.name == "neuron":  # elsewhere the summary line already says "no NeuronCore"
        print(cores_line)
    if xla:
        watch_compiles_in_cells()  # a cell that compiles for more than a few seconds says so
    if data:
        from mnist_mlp.common.download import ensure_mnist

        ensure_mnist(progress=True)
    return backend


__all__ = ["CORE_RULE", "CoresChosenTooLate", "NeuronCoresHeld", "conflicts", "refuse_other_holders", "setup",
           "take_neuron_cores"]

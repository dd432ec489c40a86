"""Who holds the NeuronCores: processes with /dev/neuron* open, monitors told apart from holders.

How many cores a process takes (the one statement the workbook makes, CORE_RULE below): by default
the Neuron runtime "initializes all the cores present in the system and reserves them for the
current process", and "Once a NeuronCore is reserved for a process, it cannot be used by another
process at all, until the process reserving that NeuronCore is terminated" (Neuron Runtime
configuration guide, 2.31). On a Neuron host `import torch_xla` hands start-up to torch-neuronx
(torch-xla 2.9's `_aws_ec2_inf_trn_init`), which at 2.9 narrows a torchrun worker to its local
rank's core, as torch-xla's own torch_xla/_internal/neuron.py does, and a plain process not at
all (docs/sources.md, "How torch-neuronx 2.9 sets up a process's cores"). A kernel is a plain
process: the workbook sets its NEURON_RT_VISIBLE_CORES itself, before that import
(helpers.setup.notebook_kernel.setup).

Opening /dev/neuron* is not always holding a core, but the sources single out neuron-top: the
torch-neuronx troubleshooting entry for "NeuronCore(s) not available" says to "terminate any
neuron-top sessions that are running" (2.31), so a running neuron-top is counted like any holder.
neuron-ls and neuron-monitor open the device to read it (`neuron-ls --show-all-procs` lists such
readers with runtime version NA); no 2.31 source names them among what blocks a core, so they are
shown as readers, not counted. A
profiler's `capture` subcommand (`neuron-profile capture -n file.neff`, `neuron-explorer
capture`) is different: it runs the NEFF on the device for "standalone NEFF profiling" (Neuron
Explorer migration FAQ, 2.31), so it holds cores while it runs. For a process that may hold cores,
the NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES it started with (/proc/<pid>/environ) say which,
when this user may read them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from helpers.launch.procfs import PROC_DIR, process_cmdline, process_environ
from mnist_mlp.common.platform_paths import dev_dir

NEURON_DEVICE = re.compile(r"neuron\d+")
# How a Jupyter kernel's command line looks (JupyterLab, Notebook, VS Code all start this module).
JUPYTER_KERNEL = re.compile(r"ipykernel_launcher|ipykernel\b|\bkernel-[\w-]+\.json")
# aws-neuronx-tools that open the device to read it and that no source names among what blocks a
# core. neuron-top is not one: the troubleshooting entry for "NeuronCore(s) not available" says to
# terminate its sessions (docs/sources.md), so it counts as a holder.
MONITORS = frozenset({"neuron-ls", "neuron-monitor"})
NEURON_TOP_ADVICE = ("the Neuron troubleshooting guide says to \"terminate any neuron-top sessions "
                     "that are running\" when NeuronCores are not available")
# Profilers: their `capture` subcommand executes a NEFF on the device (a holder while it runs);
# their other subcommands (view, inspect's own process) read files or start a workload that is a
# process of its own.
PROFILERS = frozenset({"neuron-profile", "neuron-explorer"})
HOLDING_SUBCOMMANDS = frozenset({"capture"})

DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/"
RUNTIME_CONFIGURATION = DOCS + "neuron-runtime/guides/configuration-guide.html"
TRAINING_TROUBLESHOOTING = DOCS + "frameworks/torch/torch-neuronx/training-troubleshooting.html"
RUNTIME_TROUBLESHOOTING = DOCS + "neuron-runtime/nrt-troubleshoot.html"
TORCH_XLA_NEURON = ("https://github.com/pytorch/xla/blob/v2.9.0/torch_xla/__init__.py"
                    "#L119-L142")

# The one statement of how many NeuronCores a process takes (sources in the module docstring
# and docs/sources.md).
CORE_RULE = (
    "By default the Neuron runtime reserves every NeuronCore it can see for the process that "
    "starts it, until that process exits; what torch-neuronx's set-up at `import torch_xla` "
    "narrows is not documented, so the workbook gives each notebook kernel its cores "
    "explicitly, before that import.")
CORE_RULE_SOURCES = (RUNTIME_CONFIGURATION, TORCH_XLA_NEURON)


@dataclass(frozen=True)
class BusyCoreMessage:
    text: str  # what the runtime prints, as the source quotes it
    where: str  # on which hardware / runtime
    source: str  # URL of the quote


# What a process prints when the NeuronCores it asks for are held by another process.
BUSY_CORE_MESSAGES = (
    BusyCoreMessage("NeuronCore(s) not available - Requested:1 Available:0",
                    "trn1 (torch-neuronx training troubleshooting, the heading of its entry)",
                    TRAINING_TROUBLESHOOTING),
    BusyCoreMessage("ERROR NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - "
                    "Requested:nc1-nc1 Available:0",
                    "the runtime's log line (Neuron Runtime troubleshooting, "
                    "'Neuron Core is in use')", RUNTIME_TROUBLESHOOTING),
    BusyCoreMessage("Logical Neuron Core(s) not available - Requested:… Available:…",
                    "recent runtimes and trn2 (logical NeuronCores): seen in users' logs, "
                    "not quoted by the Neuron 2.31 documentation", ""),
)


def busy_core_messages_text() -> str:
    """The busy-core messages in one sentence, for error texts and fixes."""
    quoted = [f"'{m.text}'" for m in BUSY_CORE_MESSAGES]
    return "a busy core fails at start-up with " + " or ".join((quoted[0], quoted[2]))
CORE_VARIABLES = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")


@dataclass(frozen=True)
class DeviceHolder:
    pid: int
    cmdline: str
    devices: tuple[str, ...]  # e.g. ("/dev/neuron0",)
    is_jupyter_kernel: bool
    is_this_process: bool
    is_monitor: bool = False  # a Neuron tool reading the device, not counted (MONITORS)
    core_env: tuple[tuple[str, str], ...] | None = None  # CORE_VARIABLES it set; None: unreadable

    @property
    def cores(self) -> str:
        """Which NeuronCores it asked for, as far as its environment says."""
        if self.is_monitor:
            return "none known (a reader: neuron-ls or neuron-monitor)"
        if self.core_env is None:
            return "unknown (its environment is not readable by this user)"
        if not self.core_env and self.is_jupyter_kernel:
            # A notebook's setup() pins its kernel after the kernel started: /proc/<pid>/environ
            # keeps the environment the process started with, so it cannot show that choice.
            return ("not readable: a notebook kernel chooses its cores after it starts (setup() "
                    "sets NEURON_RT_VISIBLE_CORES inside it, core 0 unless its first cell says "
                    "otherwise), which its start-up environment does not show; a kernel that used "
                    "the device without setup() may hold every core")
        if not self.core_env:
            return ("not pinned (no NEURON_RT_VISIBLE_CORES when it started: it may hold every "
                    "core it could see)")
        return ", ".join(f"{name}={value}" for name, value in self.core_env)

    def describe(self) -> str:
        what = "a Jupyter kernel" if self.is_jupyter_kernel else "a process"
        if self.is_this_process:
            what = "this notebook's own kernel" if self.is_jupyter_kernel else "this process"
        if self.is_monitor:
            return f"pid {self.pid}, a monitor, reads {', '.join(self.devices)}: {self.cmdline}"
        if _tool_name(self.cmdline.split()) == "neuron-top":
            return (f"pid {self.pid}, neuron-top, has {', '.join(self.devices)} open ({NEURON_TOP_ADVICE}): "
                    f"{self.cmdline}")
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


def _tool(argv: list[str]) -> tuple[int, str]:
    """Where the tool's name is in argv, and the name: argv[0]'s, or a Python script's (argv[1])
    when argv[0] is python."""
    start = 1 if os.path.basename(argv[0]).startswith("python") and len(argv) > 1 else 0
    return start, os.path.basename(argv[start])


def _tool_name(argv: list[str]) -> str:
    return _tool(argv)[1] if argv else ""


def is_monitor(argv: list[str]) -> bool:
    """A Neuron tool that reads the device and is not counted: a MONITORS name (a Python
    script's is argv[1]'s), or a profiler whose subcommand is not `capture`."""
    if not argv:
        return False
    start, name = _tool(argv)
    if name in MONITORS:
        return True
    if name in PROFILERS:
        subcommand = next((a for a in argv[start + 1:] if not a.startswith("-")), None)
        return subcommand not in HOLDING_SUBCOMMANDS
    return False


def core_environment(proc_dir: Path) -> tuple[tuple[str, str], ...] | None:
    """CORE_VARIABLES from /proc/<pid>/environ (as the process started); None when unreadable."""
    found = process_environ(proc_dir)
    if found is None:
        return None
    return tuple((name, found[name]) for name in CORE_VARIABLES if name in found)


def neuron_device_holders(proc_root: Path = PROC_DIR, dev_root: Path | None = None,
                          self_pid: int | None = None) -> HolderScan:
    """Every process with a /dev/neuron<N> open: pid, command line, devices, monitor or not,
    and the core variables it started with.

    Reads <proc_root>/<pid>/fd/* links. Processes of other users cannot be read without
    root: they are counted in unreadable_pids (then `sudo neuron-ls` shows them all).
    """
    self_pid = os.getpid() if self_pid is None else self_pid
    dev_root = os.path.normpath(os.fspath(dev_dir() if dev_root is None else dev_root))
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


def holders_message(holders: list[DeviceHolder]) -> str:
    """Why a notebook refuses to start while other processes hold the device, and how to free it."""
    listing = "; ".join(h.describe() for h in holders)
    pids = " ".join(str(h.pid) for h in holders)
    return (f"Another process holds the Neuron device: {listing}. {CORE_RULE} Two processes do "
            f"not share a core: {busy_core_messages_text()}. To free it: if it is another "
            "notebook's kernel, shut it down in JupyterLab ('Running Terminals and Kernels' in the "
            f"left sidebar); otherwise end it (`kill {pids}`) or wait for it to finish. Then run "
            "this cell again.")

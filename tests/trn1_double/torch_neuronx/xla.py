"""torch-neuronx's start-up hook, as torch-xla 2.9 calls it at import on a Neuron host.

docs/sources.md, "On a Neuron host, importing torch_xla runs torch-neuronx's set-up": torch-xla
v2.9.0's `_aws_ec2_inf_trn_init` calls `xla.init()` during `import torch_xla` when torch-neuronx
is installed, and runs its own `_internal/neuron.py` set-up only without it.

What `init()` does to the cores at torch-neuronx 2.9: docs/sources.md, "How torch-neuronx 2.9
sets up a process's cores". torch-neuronx's own code at that release is not public. The double
follows torch-xla 2.9's `_internal/neuron.py` (`configure_pjrt_environment` and
`neuron_utils.remap_visible_cores`), the Neuron set-up torch-xla took in 2024 (pytorch/xla#7952),
after which torch-xla stopped running it beside torch-neuronx's because it set the same
environment again (pytorch/xla#8041). The only public copy of torch-neuronx's `xla.py`, which sets
`NEURON_RT_NUM_CORES=1`, is older: it writes `NEURON_PJRT_PROCESSES_NUM_DEVICES`, the variable
2.9 replaced with `NEURON_PJRT_WORLD_SIZE`. So:
- a torchrun worker (not under SPMD) gets `NEURON_RT_VISIBLE_CORES=<LOCAL_RANK>`, or, when it
  inherited a list or range, that list's LOCAL_RANK-th core (a warning line says the remap; a
  list whose length is not LOCAL_WORLD_SIZE stops the import with torch-xla's ValueError);
- a plain process (no torchrun) gets no core variable: its runtime reserves every core it can
  see, the runtime's default.

When the Neuron runtime reads NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES: at `nrt_init` (the
runtime developer guide); when torch-neuronx calls `nrt_init` is not in the sources. The double
reads them here, at the earliest point a source allows, the framework extension's set-up at
import, and its runtime reserves those cores at the first device use whatever the environment
says by then (torch_neuronx/runtime.py).
"""
import logging
import os

import libneuronxla

# What the remap's warning goes through: torch-xla's is its module's logger; torch-neuronx's
# logger name at 2.9 is not in the sources (its public copy's is "torch_neuron"). Without a
# handler, logging prints the bare message on stderr.
logger = logging.getLogger("torch_neuron")


def visible_cores_list(spec: str) -> list[int]:
    """torch-xla 2.9's neuron_utils.get_visible_cores_list: a list of indices and ranges."""
    cores: list[int] = []
    for part in spec.split(","):
        bounds = [int(b) for b in part.split("-")]
        if len(bounds) > 2 or (len(bounds) == 2 and bounds[0] > bounds[1]):
            raise ValueError("ERROR: Range specs in NEURON_RT_VISIBLE_CORES should be of the form "
                             f"<int> or <lower int>-<upper int> (got {part})")
        new = list(range(bounds[0], bounds[-1] + 1))
        if set(cores) & set(new):
            raise ValueError("ERROR: Please ensure the ranges in NEURON_RT_VISIBLE_CORES are "
                             "mutually exclusive.")
        cores.extend(new)
    return cores


def remap_visible_cores(local_rank: int, local_world_size: int) -> None:
    """torch-xla 2.9's neuron_utils.remap_visible_cores: an inherited list, one core per worker."""
    cores = visible_cores_list(os.environ["NEURON_RT_VISIBLE_CORES"])
    count = len(cores)
    if count <= 1 and local_world_size == 1:
        return  # one worker given its one core
    if local_world_size != count:
        raise ValueError(f"LOCAL_WORLD_SIZE (torchrun) or PJRT_LOCAL_PROCESS_COUNT (xmp.spawn) value of "
                         f"{local_world_size} is not equal to count {count} from NEURON_RT_VISIBLE_CORES {cores}")
    if local_rank >= count:
        raise ValueError(f"LOCAL_RANK (torchrun) or PJRT_LOCAL_PROCESS_RANK (xmp.spawn) value of "
                         f"{local_rank} is higher than count {count} from NEURON_RT_VISIBLE_CORES {cores}")
    remapped = cores[local_rank]
    logger.warning(f"Remapping NEURON_RT_VISIBLE_CORES {cores} to NEURON_RT_VISIBLE_CORES[LOCAL_RANK]={remapped}")
    os.environ["NEURON_RT_VISIBLE_CORES"] = str(remapped)


def configure_pjrt_environment() -> None:
    """torch-xla 2.9's `configure_pjrt_environment`, for the variables this double reads (what
    the Neuron PJRT plugin makes of the rest is not in the sources; the double's runtime reads
    NEURON_RT_* and WORLD_SIZE only)."""
    os.environ.setdefault("NEURON_RT_ROOT_COMM_ID", "{}:{}".format(os.environ.get("MASTER_ADDR", "localhost"),
                                                                   "62182"))
    # torch.distributed.is_torchelastic_launched(): torchrun sets TORCHELASTIC_RUN_ID
    if os.environ.get("XLA_USE_SPMD", "0") == "1" or not os.environ.get("TORCHELASTIC_RUN_ID"):
        return
    if "NEURON_PJRT_PROCESSES_NUM_DEVICES" not in os.environ and "NEURON_PJRT_WORLD_SIZE" not in os.environ:
        os.environ["NEURON_PJRT_WORLD_SIZE"] = os.environ.get("WORLD_SIZE", "1")
        os.environ["PJRT_LOCAL_PROCESS_COUNT"] = os.environ.get("LOCAL_WORLD_SIZE", "1")
    if not os.environ.get("NEURON_RT_VISIBLE_CORES"):
        os.environ["NEURON_RT_VISIBLE_CORES"] = os.environ.get("LOCAL_RANK", "0")
    else:
        remap_visible_cores(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    os.environ["NEURON_PJRT_PROCESS_INDEX"] = os.environ.get("RANK", "0")
    os.environ["PJRT_LOCAL_PROCESS_RANK"] = os.environ.get("LOCAL_RANK", "0")


def init() -> None:
    libneuronxla.configure_environment()
    from torch_neuronx import runtime

    before = {name: os.environ.get(name) for name in runtime.CORE_VARIABLES}
    configure_pjrt_environment()
    if os.environ.get("PJRT_DEVICE", "NEURON") != "NEURON":
        return  # PJRT_DEVICE=CPU (or another device): no Neuron runtime starts in this process
    runtime.install(set_up_set=[name for name, value in before.items() if os.environ.get(name) != value])

"""torch-neuronx's start-up hook, as torch-xla 2.9 calls it at import on a Neuron host.

docs/sources.md, "On a Neuron host, importing torch_xla runs torch-neuronx's set-up": torch-xla
v2.9.0's `_aws_ec2_inf_trn_init` calls `xla.init()` during `import torch_xla`; a public copy of
torch-neuronx's `torch_neuronx/xla.py` (the code search holds it without naming its repository
or release: its version is not known) shows what `init()` does: `libneuronxla.configure_environment()`,
then `configure_pjrt_environment()`, which for a PJRT_DEVICE=NEURON process not under SPMD sets
the job's layout from torchrun's variables and, for every such process,
`os.environ["NEURON_RT_NUM_CORES"] = "1"` ("Env variables that need to be set once per process").

When the Neuron runtime reads NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES is not in the sources
(the configuration guide: "controlled through environment variables at the process level";
"Neuron framework extensions take care of Neuron Runtime configuration"): the double reads them
here, at the earliest point a source allows, the framework extension's set-up at import, and
its runtime reserves those cores at the first device use whatever the environment says by then
(torch_neuronx/runtime.py).
"""
import logging
import os

import libneuronxla

logger = logging.getLogger("torch_neuron")


def configure_pjrt_environment() -> None:
    """The public copy's, for this double's variables (what the Neuron PJRT plugin makes of them
    is not in the sources; the double's runtime reads NEURON_RT_* and WORLD_SIZE only)."""
    if os.environ.get("XLA_USE_SPMD") == "1" or os.environ.get("PJRT_DEVICE") != "NEURON":
        return
    if "NEURON_PJRT_PROCESSES_NUM_DEVICES" not in os.environ:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        os.environ["NEURON_PJRT_PROCESSES_NUM_DEVICES"] = ",".join("1" * world_size)
        os.environ["PJRT_LOCAL_PROCESS_COUNT"] = os.environ.get("LOCAL_WORLD_SIZE", "1")
    os.environ["NEURON_RT_NUM_CORES"] = "1"
    os.environ["NEURON_PJRT_PROCESS_INDEX"] = os.environ.get("RANK", "0")
    os.environ["NEURON_RT_ROOT_COMM_ID"] = "{}:{}".format(os.environ.get("MASTER_ADDR", "localhost"),
                                                          "62182")


def init() -> None:
    libneuronxla.configure_environment()
    from torch_neuronx import runtime

    before = {name: os.environ.get(name) for name in runtime.CORE_VARIABLES}
    configure_pjrt_environment()
    if os.environ.get("PJRT_DEVICE", "NEURON") != "NEURON":
        return  # PJRT_DEVICE=CPU (or another device): no Neuron runtime starts in this process
    runtime.install(set_up_set=[name for name, value in before.items() if os.environ.get(name) != value])

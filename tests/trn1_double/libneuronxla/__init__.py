"""libneuronxla as the trn1 double has it: only what torch-xla 2.9 asks of it at import.

torch-xla's `_aws_ec2_inf_trn_init` (torch_xla/__init__.py, v2.9.0) imports
`libneuronxla.libneuronpjrt_path` to tell a Neuron host; finding it, it hands start-up to
torch-neuronx (`from torch_neuronx import xla` then `xla.init()`), whose public copy calls
`libneuronxla.configure_environment()` first. What that does is not in the sources (libneuronxla's
code is not public): nothing here.
"""


def configure_environment() -> None:
    """Not in the sources: the double configures nothing here."""

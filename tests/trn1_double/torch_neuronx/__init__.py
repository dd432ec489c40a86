"""torch-neuronx as the trn1.2xlarge test double provides it (tests only; see tests/trn1_double).

Importing it, as mnist_mlp.common.backend does on a Neuron host, starts the double's Neuron runtime
rules in this process: NeuronCores reserved at the first device use, the compile cache written
and read per graph. Compute stays PyTorch/XLA on the CPU.
"""
from torch_neuronx import runtime as _runtime

_runtime.install()

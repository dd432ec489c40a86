"""torch-neuronx as the trn1.2xlarge test double provides it (tests only; see tests/trn1_double).

On a Neuron host torch-xla's own import starts torch-neuronx (`from torch_neuronx import xla`,
then `xla.init()`: torch_xla/__init__.py, v2.9.0, `_aws_ec2_inf_trn_init`), because
libneuronxla is installed (the double's is in its site directory). Importing this package first
imports torch_xla, which does the same. Compute stays PyTorch/XLA on the CPU.
"""
import torch_xla  # noqa: F401  (its import runs torch_neuronx.xla.init())

"""The workbook's runtime: the model and the four stage scripts a learner reads, and, beneath
them, what they share (`mnist_mlp.common`). Importing it changes no global state: what a process
must do at its start is mnist_mlp.common.startup.freeze_startup_objects(). The XLA stage scripts
choose the backend when imported, before torch_xla loads (docs/architecture.md says why); nothing
here imports them.

Modules: model (the MLP every stage trains), train_cpu, train, train_torchrun and train_bf16
(the four stage scripts), common/ (what they share).

Imports: none of helpers (torch, torchvision, torch-xla, torch-neuronx, numpy and the standard
library only).
"""

"""The workbook's runtime: the stage scripts and what they share. Importing it changes no global
state: what a process must do at its start is mnist_mlp.startup.freeze_startup_objects(). The
XLA stage scripts choose the backend when imported, before torch_xla loads
(docs/architecture.md says why); nothing here imports them.

Modules: model (the MLP every stage trains), train_cpu, train, train_torchrun and train_bf16
(the four stage scripts), cli (their command line), results (the end of a run), tracking and
observe (step counting, what a run records), evaluation (test accuracy), data (the loaders),
download, mnist_files, mnist_sources and nielsen_idx (MNIST fetched and verified), backend
(which device, said in one line), distributed (the data-parallel pieces), precision (BF16),
xla_metrics (PyTorch/XLA's compile counters), atomic_files (atomic, durable writes),
child_process (the one way a process that runs beside us starts), startup (what a process does
once at its start), paths (where the workbook keeps what it makes), platform_paths (the Neuron
platform's fixed paths, the one seam a test double plugs into), errors (errors the layers share).

Imports: none of helpers (torch, torchvision, torch-xla, torch-neuronx, numpy and the standard
library only).
"""

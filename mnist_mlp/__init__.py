"""The workbook's runtime: the model and the four stage scripts a learner reads, and, beneath
them, what they share (`mnist_mlp.common`). Importing it changes no global state: what a process
must do at its start is mnist_mlp.common.startup.freeze_startup_objects(). The XLA stage scripts
choose the backend when imported, before torch_xla loads (docs/architecture.md says why); nothing
here imports them.
"""

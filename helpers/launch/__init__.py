"""Starting processes from a notebook (notebooks 02-07), each child through
mnist_mlp.common.child_process, so that it stops with its kernel.

Modules: processes (one runner that streams a command's output with a deadline and stops its
process group with it, even when the kernel is killed), torchrun (torchrun on top of it), nodes
(multi-node runs), procfs (who has a file open).

Imports: mnist_mlp.
"""

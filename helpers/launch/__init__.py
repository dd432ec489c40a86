"""Starting processes from a notebook (notebooks 02-07), each child through
mnist_mlp.common.child_process, so that it stops with its kernel.

Modules: processes (one runner that streams a command's output with a deadline and stops its
process group with it, even when the kernel is killed), torchrun (torchrun on top of it), nodes
(multi-node runs), slurm (what each node of a Slurm job runs, and a failed job's node named:
deploy/slurm/), procfs (who has a file open).

Imports: mnist_mlp.
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'processes': ['run_streaming', 'CommandFailed', 'summary_only', 'without_reload_errors'],
    'torchrun': ['run_torchrun', 'torchrun_command_line'],
    'nodes': ['run_nodes'],
})

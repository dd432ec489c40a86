"""Running commands from a notebook with their output streamed: a script, torchrun, several
nodes, a Slurm job's nodes; each child through mnist_mlp.common.child_process, so that it stops
with its kernel."""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'processes': ['run_streaming', 'CommandFailed', 'summary_only', 'without_reload_errors'],
    'torchrun': ['run_torchrun', 'torchrun_command_line'],
    'nodes': ['run_nodes'],
})

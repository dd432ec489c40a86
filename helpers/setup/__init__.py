"""Every notebook's first cell, notebook 00, and `make venv`.

Modules: notebook_kernel (`setup()`: picks the backend, checks the machine, gives the kernel its
NeuronCores and refuses to start while another process holds them), cell_compile_notice (a
compile in a notebook's own cells said while it runs), core_holders (who holds the
NeuronCores), environment_checks and platform_checks (notebook 00's checks), checklist (notebook
00's checklist), venv_plan (what `make venv` runs, with the standard library only).

Imports: mnist_mlp, helpers.cache and helpers.launch.

`from helpers.setup import setup` loads notebook_kernel when first asked for, so that
`python3 -m helpers.setup.venv_plan` runs before torch is installed.
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'notebook_kernel': ['setup', 'take_neuron_cores'],
    'platform_checks': ['check_pins'],
    'core_holders': ['neuron_device_holders'],
    'environment_checks': ['check_compile_cache', 'check_mnist', 'run_checks'],
    'checklist': ['Checklist'],
})

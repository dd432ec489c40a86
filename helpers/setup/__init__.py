"""Every notebook's first cell, notebook 00, and `make venv`.

`from helpers.setup import setup` loads notebook_kernel when first asked for, so that
`python3 -m helpers.setup.venv_plan` runs before torch is installed.
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'notebook_kernel': ['setup', 'take_neuron_cores'],
    'core_holders': ['neuron_device_holders'],
    'environment_checks': ['check_compile_cache', 'check_mnist', 'check_pins', 'run_checks'],
    'checklist': ['Checklist'],
})

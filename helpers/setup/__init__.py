"""Every notebook's first cell, notebook 00, and `make venv`.

Modules: notebook_kernel (`setup()`: picks the backend, checks the machine, gives the kernel its
NeuronCores and refuses to start while another process holds them), core_holders (who holds the
NeuronCores), environment_checks and platform_checks (notebook 00's checks), checklist (notebook
00's checklist), venv_plan (what `make venv` runs, with the standard library only).

Imports: mnist_mlp, helpers.cache and helpers.launch.

`from helpers.setup import setup` loads notebook_kernel when first asked for, so that
`python3 -m helpers.setup.venv_plan` runs before torch is installed.
"""


def __getattr__(name):
    if name in ("setup", "take_neuron_cores"):
        from helpers.setup import notebook_kernel

        return getattr(notebook_kernel, name)
    raise AttributeError(f"module 'helpers.setup' has no attribute {name!r}")

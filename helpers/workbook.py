"""What the first cell of every notebook does, so that cell stays three lines long."""
import os

from helpers.processes import venv_bin_first
from mnist_mlp.backend import Backend, select_backend


def setup(xla: bool = True, data: bool = True) -> Backend:
    """Pick the backend and print which one runs; make sure MNIST is on disk and verified."""
    # The kernel's own PATH too: torch-neuronx runs `neuronx-cc` by name when it compiles, and a
    # kernel started outside `make lab` may not have the venv's bin/ on PATH.
    os.environ["PATH"] = venv_bin_first(os.environ.get("PATH"))
    backend = select_backend(xla=xla)
    print(backend.summary())
    if data:
        from mnist_mlp.download import ensure_mnist

        ensure_mnist(progress=True)
    return backend

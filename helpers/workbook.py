"""What the first cell of every notebook does, so that cell stays three lines long."""
from mnist_mlp.backend import Backend, select_backend


def setup(xla: bool = True, data: bool = True) -> Backend:
    """Pick the backend and print which one runs; make sure MNIST is on disk and verified."""
    backend = select_backend(xla=xla)
    print(backend.summary())
    if data:
        from mnist_mlp.download import ensure_mnist

        ensure_mnist(progress=True)
    return backend

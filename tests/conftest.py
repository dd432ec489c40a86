import os
import sys
from pathlib import Path

import pytest

# Tests that touch torch_xla in-process run it on the CPU stand-in; must be set before it loads.
os.environ.setdefault("PJRT_DEVICE", "CPU")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def mnist_root():
    """The verified MNIST root (`make data` has normally built it already)."""
    from mnist_mlp.download import ensure_mnist

    return ensure_mnist(progress=False)


@pytest.fixture
def script_env():
    """Environment for running the scripts as a user would: no PJRT_DEVICE preset, warnings on."""
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CHECKPOINT_DIR")}
    env["PYTHONWARNINGS"] = "default"  # a DeprecationWarning would show in the output
    return env


PYTHON = sys.executable

import os
import sys

import pytest

# Tests that touch torch_xla in-process run it on the CPU stand-in; must be set before it loads.
os.environ.setdefault("PJRT_DEVICE", "CPU")

from mnist_mlp.paths import REPO_ROOT  # noqa: E402,F401  (the tests import it from here too)


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


@pytest.fixture
def tree(tmp_path):
    """A compile-cache tree in every layout (tests/cache_trees.py); afterwards, whatever the
    test did, the symlink targets outside the root are all there, unchanged."""
    from tests.cache_trees import build_cache_tree, outside_snapshot

    t = build_cache_tree(tmp_path)
    before = outside_snapshot(t)
    yield t
    assert outside_snapshot(t) == before
    assert (t.root / "escape").is_symlink()


@pytest.fixture
def immutable():
    """Mark paths immutable (chattr +i: even root cannot remove them or write into such a
    directory), undone afterwards; skipped where the filesystem cannot set the flag."""
    import shutil
    import subprocess

    marked = []

    def mark(path):
        if shutil.which("chattr") is None:
            pytest.skip("no chattr here")
        r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"chattr +i not possible here: {r.stderr.strip()}")
        marked.append(path)

    yield mark
    for path in reversed(marked):
        subprocess.run(["chattr", "-i", str(path)], check=True)

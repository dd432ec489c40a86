"""Paths the tests share: the repository root and what the tests read under it."""
from mnist_mlp.common.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"

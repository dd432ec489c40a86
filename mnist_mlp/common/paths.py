"""Where the workbook keeps what it makes: all inside the repo, all git-ignored."""
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_checkpoint_dir() -> Path:
    """Checkpoints and results JSON files: $CHECKPOINT_DIR, else <repo>/checkpoints."""
    return Path(os.environ.get("CHECKPOINT_DIR") or REPO_ROOT / "checkpoints")


def repo_relative(path) -> str:
    """A path as the reader should see it: relative to the repo when inside it (the same on
    every machine), else absolute."""
    path = Path(os.path.abspath(path))  # not resolve(): a venv's python is a symlink out of it
    try:
        return path.relative_to(REPO_ROOT).as_posix() or "."
    except ValueError:
        return str(path)

"""Where the workbook keeps what it makes: all inside the repo, all git-ignored."""
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def default_checkpoint_dir() -> Path:
    """Checkpoints and results JSON files: $CHECKPOINT_DIR, else <repo>/checkpoints."""
    return Path(os.environ.get("CHECKPOINT_DIR") or REPO_ROOT / "checkpoints")

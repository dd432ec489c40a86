"""Atomic writes: a reader (or a crashed run) never sees half a checkpoint or results file."""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path):
    """Yield a temp path beside `path`; on success rename it over `path`, else remove it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)  # atomic on POSIX within one file system
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_save(obj, path, *, xla: bool = False) -> Path:
    """torch.save, or xm.save for XLA tensors (moves them to the CPU first), atomically."""
    with atomic_path(path) as tmp:
        if xla:
            import torch_xla.core.xla_model as xm

            # master_only=False: the caller already decided this process writes (rank 0).
            xm.save(obj, str(tmp), master_only=False)
        else:
            import torch

            torch.save(obj, tmp)
    return Path(path)


def atomic_write_json(data, path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return Path(path)

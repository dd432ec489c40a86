"""A directory that a test session builds once, whichever xdist worker asks for it first.

Under `make test` (two xdist workers, one test at a time handed to whichever is free) the tests
of one module often run on both workers, and a module-scoped fixture would then do its work
twice. A fixture that only reads what a slow setup (a training run, a pair of XLA processes)
wrote into a directory builds it with built_once() instead: the first worker builds it under a
lock, the other waits for the lock and then reads the same directory. A build that fails leaves
no record, so the next one to ask builds it again (and fails the same way, in its own test).
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable


def session_dir(tmp_path_factory) -> Path:
    """The directory of this test session that every xdist worker sees (a worker's own base
    directory, popen-gwN, is inside it); without xdist, the session's own base directory."""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # (also inherited by a pytest run in a test)
    return base.parent if worker and base.name == f"popen-{worker}" else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """<session>/built-once/<name>, made by build(directory) the first time any worker asks."""
    parent = session_dir(tmp_path_factory) / "built-once"
    parent.mkdir(exist_ok=True)
    directory, done = parent / name, parent / f"{name}.done"
    with open(parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on an error
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            done.touch()
    return directory

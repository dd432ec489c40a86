"""The cache tool's root: the cache the compiler wrapper uses (mnist_mlp.common.compile_cache
cache_url decides which), opened with an error that says what to do, the compiler versions in
it, and the filesystem it sits on. An s3:// cache is named but never scanned here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from helpers.launch.procfs import PROC_DIR
from mnist_mlp.common.compile_cache import CACHE_URL_ENV, cache_url, local_dir
from mnist_mlp.common.neuron_cc_flags import CACHE_DIR, ENV_VAR, set_flag

XLA_CACHE_ENV = "XLA_PERSISTENT_CACHE_PATH"  # set by torch_xla.runtime.initialize_cache
PROC_MOUNTS = PROC_DIR / "mounts"
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "efs", "lustre", "cifs", "smb3", "ceph", "glusterfs",
                       "9p", "beegfs", "gpfs")


class CompileCacheError(Exception):
    """An operation refused or failed; the message says why and what to do."""


class RemoteCacheError(CompileCacheError):
    """The cache is an s3:// URL: this tool only reads local directories."""


@dataclass(frozen=True)
class CacheLocation:
    url: str  # a local directory, or an s3:// URL
    source: str  # where it came from, said to the reader

    @property
    def remote(self) -> bool:
        return local_dir(self.url) is None

    @property
    def path(self) -> Path:
        path = local_dir(self.url)
        if path is None:
            raise RemoteCacheError(
                f"the compile cache is {self.url} (from {self.source}), a remote cache: this tool "
                "reads local directories only and does not scan it. List it with "
                f"`aws s3 ls --recursive {self.url}`, or pass --root <local dir>.")
        return path


def locate_cache(env=None) -> CacheLocation:
    """The cache Neuron would use, and where that came from (compile_cache.cache_url: raises
    FlagsError for NEURON_CC_FLAGS that cannot be read)."""
    return CacheLocation(*cache_url(env))


def installed_compiler_version() -> str | None:
    """The installed neuronx-cc version (as in the neuronxcc-<version> directory names)."""
    import importlib.metadata  # here: it takes a tenth of a second to import

    try:
        return importlib.metadata.version("neuronx-cc")
    except importlib.metadata.PackageNotFoundError:
        return None


def same_compiler_version(a: str, b: str) -> bool:
    """Versions match, ignoring the +<build> part when one of them lacks it."""
    if a == b:
        return True
    if "+" in a and "+" in b:
        return False
    return a.split("+")[0] == b.split("+")[0]


def version_order(version: str) -> tuple:
    """'2.21.33363.0+82129205' -> (2, 21, 33363, 0): compiler versions in release order."""
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("+")[0].split("."))


def local_path(root) -> Path:
    """A --root / root= argument (path, URL or CacheLocation) as a local path; None: locate_cache()."""
    if root is None:
        root = locate_cache()
    if isinstance(root, CacheLocation):
        return root.path  # raises the remote-cache message for s3://
    if "://" in str(root):
        return CacheLocation(str(root), "--root").path
    return Path(root).expanduser()


def open_root(root: str | os.PathLike | CacheLocation | None) -> Path:
    """A cache root as an absolute, resolved directory, or a CompileCacheError saying why not."""
    where = f" (from {root.source})" if isinstance(root, CacheLocation) else ""
    path = local_path(root)
    if not path.exists():
        raise CompileCacheError(
            f"no compile cache at {path}{where}: the directory does not exist. Nothing has been "
            "compiled with this cache yet, or the cache is elsewhere: set --root, "
            f"{CACHE_URL_ENV} or --cache_dir in NEURON_CC_FLAGS.")
    if not path.is_dir():
        raise CompileCacheError(f"{path}{where} is not a directory: pass the cache directory "
                                f"(the one holding neuronxcc-<version>/ folders)")
    try:
        with os.scandir(path):
            pass
    except PermissionError as err:
        raise CompileCacheError(
            f"cannot read the compile cache {path}{where}: {err.strerror}. Run as the user who "
            "owns it (compiles often run as root: try sudo), or fix its permissions.") from err
    return path.resolve()


def filesystem_type(path: Path, mounts: Path = PROC_MOUNTS) -> str | None:
    """The filesystem type of the mount holding path, from /proc/mounts (None if unknown)."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    p = str(path)
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype


def on_network_filesystem(path: Path, mounts: Path = PROC_MOUNTS) -> str | None:
    """The filesystem type if path is on NFS/EFS/Lustre/…, else None."""
    fs = filesystem_type(path, mounts)
    return fs if fs and fs.split(".")[0] in NETWORK_FILESYSTEMS else None


def fresh_cache(backend_name: str, directory: str | os.PathLike) -> tuple[Path, dict[str, str]]:
    """An empty persistent cache of its own under `directory`, and the variables that send a
    run there. On Neuron: --cache_dir in NEURON_CC_FLAGS (kept with the flags already there), so
    a first run compiles whatever the shared cache holds; on the stand-in: torch-xla's own cache."""
    if backend_name == "neuron":
        root = Path(directory) / "neuron-cache"
        return root, {ENV_VAR: set_flag(os.environ.get(ENV_VAR), CACHE_DIR, str(root))}
    root = Path(directory) / "xla-cache"
    return root, {XLA_CACHE_ENV: str(root)}

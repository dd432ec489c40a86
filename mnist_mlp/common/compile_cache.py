"""The Neuron persistent compile cache as a run meets it: where it is, and what state one entry
is in (done, failed, locked, incomplete, unknown). The one home of that logic: the scripts'
compile notice (compile_notice) reads it while a run compiles, helpers.cache reads whole caches.

Only regular files are ever opened (O_NOFOLLOW|O_NONBLOCK, then fstat), and only a bounded part
of each. A failed neuronx-cc compile leaves the compiler wrapper's failure text in its entry: a
public cache stores it as `model.log` with no NEFF (docs/sources.md, "What a cache entry holds"),
and a `model.neff` holding that text is read the same way. An entry is called failed when a log
sits there without a NEFF, or when its model.neff positively reads as that text (UTF-8,
printable, with the wrapper's markers): a program whose format is not known here (a NEFF's is in
no source) stays a program.
"""
from __future__ import annotations

import os
import re
import stat
import struct
from pathlib import Path

from mnist_mlp.common.neuron_cc_flags import CACHE_DIR, ENV_VAR, FlagsError, compiler_flag
from mnist_mlp.common.platform_paths import default_compile_cache

STATES = ("done", "failed", "locked", "incomplete", "unknown")  # unknown: no cleanup removes it
CACHE_URL_ENV = "NEURON_COMPILE_CACHE_URL"
FAILURE_MAX_BYTES = 4096  # of a failed NEFF's text, read and shown
NEFF_HEADER = struct.Struct("<QQQ")  # packaging version (1 or 2), header size (1024), data size
NEFF_HEADER_SIZE = 1024
# What the wrapper's failure text holds (libneuronxla writes "Failed compilation with <argv>: <error>",
# and a 2.15 log prints it back after a space; neuronx-cc's own log ends "Compiler status ERROR";
# its error codes read [NCC_XXXX000] in the docs and [NLA001], [LUR015] in users' logs:
# tests/platform_output/corpus.yaml).
FAILURE_MARKERS = (re.compile(r"\A\s*Failed compilation with "), re.compile(r"Compiler status ERROR"),
                   re.compile(r"\[(?:NCC_[A-Z]{4}|[A-Z]{3})\d{3}\]"))
VERSION_DIR = re.compile(r"neuronxcc-(?P<version>.+)")
MODULE_DIR = re.compile(r"MODULE_(?P<module>[0-9a-fA-F]+)\+(?P<flags>[0-9a-fA-F]+)")
_TEXT_CONTROLS = frozenset(b"\t\n\r")


class NotRegularFile(OSError):
    """A FIFO, socket, device or symlink where a regular file was expected: not opened."""


def read_regular(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """At most `limit` bytes from the start (or end) of a regular file, never blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path.name}: not a regular file")
        if tail:
            os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def neff_kind(path: Path) -> tuple[str, str | None]:
    """("neff", None) for a compiled program (a NEFF header, or any binary: a newer NEFF version
    is still a program), ("failed", text) for the wrapper's failure text, ("unknown", text) for
    other text, ("empty", None) for a zero-byte file."""
    head = read_regular(path, FAILURE_MAX_BYTES)
    if not head:
        return "empty", None
    if len(head) >= NEFF_HEADER.size:
        version, header_size, _ = NEFF_HEADER.unpack_from(head)
        if version in (1, 2) and header_size == NEFF_HEADER_SIZE:
            return "neff", None
    text = _printable_text(head)
    if text is None:
        return "neff", None  # binary we cannot name: a program, never a failure
    if any(marker.search(text) for marker in FAILURE_MARKERS):
        return "failed", text
    return "unknown", text


def _printable_text(head: bytes) -> str | None:
    """The bytes as text if they are UTF-8 with no control characters but tab and newlines."""
    try:
        # A bounded prefix may end inside a multi-byte character: drop at most 3 bytes of it.
        text = head.decode("utf-8") if len(head) < FAILURE_MAX_BYTES else _decode_prefix(head)
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and ord(c) not in _TEXT_CONTROLS or ord(c) == 127 for c in text):
        return None
    return text


def _decode_prefix(head: bytes) -> str:
    for cut in range(4):
        try:
            return head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError as err:
            last = err
    raise last


def entry_state(names, neff_kinds, *, legacy: bool = False) -> str:
    """The state of an entry holding the regular files `names` (relative names), whose NEFFs
    read as `neff_kinds` (neff_kind's first values): a lock wins (a compile runs, or a killed one
    left it), then a failure (a failed NEFF, or a compiler log and no NEFF), then text that is
    no failure (unknown), then a program with model.done (the 2022 layout has no model.done)."""
    names = set(names)
    neffs = any(n.endswith(".neff") for n in names)
    if any(n.endswith(".lock") for n in names):
        return "locked"
    if "failed" in neff_kinds or (any(n.endswith(".log") for n in names) and not neffs):
        return "failed"
    if "unknown" in neff_kinds:
        return "unknown"
    if "neff" in neff_kinds and (legacy or "model.done" in names):
        return "done"
    return "incomplete"


def module_state(entry: Path) -> str:
    """entry_state of one neuronxcc-<version>/MODULE_<hash>+<flags>/ directory (its own files;
    an unreadable NEFF counts as no program)."""
    try:
        names = [de.name for de in os.scandir(entry) if de.is_file(follow_symlinks=False)]
    except OSError:
        return "incomplete"
    kinds = []
    for name in names:
        if name.endswith(".neff"):
            try:
                kinds.append(neff_kind(entry / name)[0])
            except OSError:
                continue
    return entry_state(names, kinds)


def module_entries(root: Path) -> dict[str, Path]:
    """Every neuronxcc-<version>/MODULE_<hash>+<flags> directory under root, by its key."""
    found = {}
    try:
        versions = [d for d in os.scandir(root) if d.is_dir(follow_symlinks=False)
                    and VERSION_DIR.fullmatch(d.name)]
        for version in versions:
            for module in os.scandir(version.path):
                if module.is_dir(follow_symlinks=False) and MODULE_DIR.fullmatch(module.name):
                    found[f"{version.name}/{module.name}"] = Path(module.path)
    except OSError:
        pass  # no cache yet, or one being removed: nothing to read
    return found


def cache_url(env=None) -> tuple[str, str]:
    """(the cache the compiler wrapper uses, where that came from): --cache_dir in
    NEURON_CC_FLAGS (the last one given), else NEURON_COMPILE_CACHE_URL, else the Neuron default
    (/var/tmp/neuron-compile-cache, under platform_paths' root). Raises FlagsError for
    NEURON_CC_FLAGS that cannot be split, or that hold --cache_dir with no value (a mistake, not
    a request for the default)."""
    env = os.environ if env is None else env
    cache_dir = compiler_flag(CACHE_DIR, env)
    if cache_dir is True or cache_dir == "":
        raise FlagsError(f"{ENV_VAR} has --cache_dir with no value: give it a directory "
                         "(--cache_dir=/path) or remove it to use the default cache")
    if cache_dir:
        return cache_dir, f"{CACHE_DIR} in {ENV_VAR}"
    if env.get(CACHE_URL_ENV):
        return env[CACHE_URL_ENV], CACHE_URL_ENV
    return str(default_compile_cache(env)), "the Neuron default"


def local_dir(url: str) -> Path | None:
    """A cache URL as a local directory; None for a remote (s3://) cache."""
    if "://" in url and not url.startswith("file://"):
        return None
    return Path(url.removeprefix("file://")).expanduser()


def local_cache_dir(env=None) -> Path | None:
    """cache_url() as a local directory; None for a remote (s3://) cache."""
    return local_dir(cache_url(env)[0])

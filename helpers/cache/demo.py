"""A small compile cache in the real layout, every state in it: notebook 03's demo and the
tests' trees. Not part of the library: nothing else imports it.

Compiled programs are NEFF-shaped (the 1024-byte header, then payload); failed compiles store
their failure text in model.neff, as the Neuron compiler wrapper does.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import NamedTuple

from helpers.cache.location import CompileCacheError
from helpers.cache.scan import NEFF_HEADER, NEFF_HEADER_SIZE


class Neff(NamedTuple):
    """A NEFF-shaped file of `size` bytes; sparse (a hole after the header) above 64 KiB."""
    size: int


def neff_bytes(size: int = 2048, written: int | None = None) -> bytes:
    """The first `written` bytes (default all) of a NEFF-shaped program of `size` bytes: the
    1024-byte header, then a zero payload. Also for test scripts that fake a compile."""
    if size < NEFF_HEADER_SIZE:
        raise ValueError(f"a NEFF is at least {NEFF_HEADER_SIZE} bytes (its header), not {size}")
    header = NEFF_HEADER.pack(1, NEFF_HEADER_SIZE, size - NEFF_HEADER_SIZE)
    return header.ljust(size if written is None else written, b"\0")


class DemoEntry(NamedTuple):
    version_dir: str
    module: str
    files: dict  # relative name -> bytes, str or Neff
    age_s: float  # how long ago its files were last written
    lock_age_s: float | None  # age of a model.hlo_module.pb.lock, or None for no lock

    @property
    def key(self) -> str:
        return f"{self.version_dir}/{self.module}"


DEMO_VERSION = "2.21.33363.0+82129205"
DEMO_OLD_VERSION = "2.8.0.25+a3ad0f342"
DEMO_LEGACY_VERSION = "2.4.0.21+b7621be18"
_DAY = 86400
_CUR, _OLD, _LEGACY = (f"neuronxcc-{DEMO_VERSION}", f"neuronxcc-{DEMO_OLD_VERSION}",
                       f"USER_neuroncc-{DEMO_LEGACY_VERSION}")
DEMO_BIG_NEFF = 2 * 1024**3  # sparse: 2 GiB apparent, next to nothing on disk
DEMO_FLAGS = ["--target=trn1", "--model-type=transformer"]
DEMO_FAILED_LOG = "\n".join([f"INFO compiler pass {i}" for i in range(40)]
                            + ["ERROR 103915 [neuronx-cc]: Error class:    KeyError",
                               "Compiler status ERROR"]) + "\n"


def failed_neff(module: str, error: str) -> str:
    """What the compiler wrapper stores in model.neff when neuronx-cc fails (its format)."""
    work = f"/tmp/ubuntu/neuroncc_compile_workdir/0d1e2f3a/model.{module.removeprefix('MODULE_')}"
    argv = ["neuronx-cc", "compile", "--framework=XLA", f"{work}.hlo_module.pb", "--output",
            f"{work}.neff", *DEMO_FLAGS, "--verbose=35"]
    return f"Failed compilation with {argv!r}: {error}\n"


_FAILED = "MODULE_17890aeca56402771161+24129607"
_OLD_FAILED = "MODULE_12486829708343293975+d41d8cd9"
_LEGACY_GRAPH = ("MODULE_0_SyncTensorsGraph.305_16554925436865022292_"
                 "ip-172-31-55-249-6c54106d-25758-5f5ddf7b170ab")
_LEGACY_RUN = f"{_LEGACY_GRAPH}/2afbe37c-93ff-4f66-88d0-0e8e5d98e497/{_LEGACY_GRAPH}"
_HLO, _FLAGS = "model.hlo_module.pb", "compile_flags.json"
# One entry in each state, in the layouts of today's compiler, an older one and the 2022 SDK.
DEMO_ENTRIES = {
    "done_hex": DemoEntry(_CUR, "MODULE_50a122f44c378e1567a4+ede6753c",
                          {_HLO: b"h" * 300, _FLAGS: json.dumps(DEMO_FLAGS),
                           "model.neff": Neff(8000), "model.done": b""}, 2 * _DAY, None),
    "done_big": DemoEntry(_CUR, "MODULE_77f1b8fbe51833738f1c+24129607",
                          {_HLO: b"h" * 300, _FLAGS: json.dumps(DEMO_FLAGS),
                           "model.neff": Neff(DEMO_BIG_NEFF), "model.done": b""}, 1 * _DAY, None),
    "failed": DemoEntry(_CUR, _FAILED,
                        {_HLO: b"h" * 300, _FLAGS: json.dumps(DEMO_FLAGS),
                         "model.neff": failed_neff(_FAILED, "2026-05-29T12:00:00Z [NCC_EVRF009] "
                                                   "Error class: KeyError: 'transpose.17'"),
                         "model.done": b"", "model.log": DEMO_FAILED_LOG}, 3 * _DAY, None),
    "failed_with_link": DemoEntry(_CUR, "MODULE_0b0ead5e2dfe538e89a4+2c2d707e",
                                  {_HLO: b"h" * 100, "model.log": "boom\n"}, 4 * _DAY, None),
    "locked_fresh": DemoEntry(_CUR, "MODULE_aaaa0000aaaa0000aaaa+ede6753c",
                              {_HLO: b"h" * 100, _FLAGS: "[]"}, 60, 60),
    "locked_stale": DemoEntry(_CUR, "MODULE_bbbb0000bbbb0000bbbb+ede6753c",
                              {_HLO: b"h" * 100, _FLAGS: "[]"}, 2 * 3600, 2 * 3600),
    "incomplete": DemoEntry(_CUR, "MODULE_cccc0000cccc0000cccc+ede6753c",
                            {_HLO: b"h" * 100}, 5 * _DAY, None),
    "bad_flags": DemoEntry(_CUR, "MODULE_dddd0000dddd0000dddd+ede6753c",
                           {_HLO: b"h" * 100, _FLAGS: "{not json",
                            "model.neff": Neff(1500), "model.done": b""}, 6 * _DAY, None),
    "old_done": DemoEntry(_OLD, "MODULE_198775565831884870+d41d8cd9",
                          {_HLO: b"h" * 200, _FLAGS: '["--target=trn1"]',
                           "model.neff": Neff(3000), "model.done": b""}, 100 * _DAY, None),
    "old_failed": DemoEntry(_OLD, _OLD_FAILED,
                            {_HLO: b"h" * 200,
                             "model.neff": failed_neff(_OLD_FAILED, "interrupted (SIGINT)"),
                             "model.done": b""}, 90 * _DAY, None),
    "old_locked_fresh": DemoEntry(_OLD, "MODULE_3024185903572207584+e30acd3a",
                                  {_HLO: b"h" * 200}, 30, 30),
    "legacy": DemoEntry(_LEGACY, "MODULE_16554925436865022292",
                        {f"{_LEGACY_RUN}.neff": Neff(1700), f"{_LEGACY_RUN}.hlo.pb": b"h" * 50},
                        400 * _DAY, None),
}


def _set_mtime(path: Path, t: float) -> None:
    os.utime(path, (t, t), follow_symlinks=False)


def build_demo_cache(root: str | os.PathLike, labels=None, *, now: float | None = None) -> Path:
    """Write a small compile cache in the real layout under root (which must be new or empty):
    the DEMO_ENTRIES named by labels (default all), done, failed, locked and incomplete.

    now: the time the entries' ages count back from (default: the clock; pass a fixed one for
    the same listing every run). Lock ages always count from the clock, since a lock is stale
    or not against the time it is judged at. Returns root.
    """
    root = Path(root).expanduser()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise CompileCacheError(f"{root} exists and is not an empty directory: build the demo "
                                "cache in a new directory (it would mix with what is there)")
    labels = list(DEMO_ENTRIES if labels is None else labels)
    unknown = [label for label in labels if label not in DEMO_ENTRIES]
    if unknown:
        raise ValueError(f"unknown demo entries {unknown}: choose from {', '.join(DEMO_ENTRIES)}")
    clock = time.time()
    now = clock if now is None else now
    root.mkdir(parents=True, exist_ok=True)
    for label in labels:
        spec = DEMO_ENTRIES[label]
        entry = root / spec.key
        for name, content in spec.files.items():
            path = entry / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Neff):
                with open(path, "wb") as f:
                    big = content.size > 1 << 16
                    f.write(neff_bytes(content.size, written=NEFF_HEADER_SIZE if big else None))
                    f.truncate(content.size)  # a large one is a hole after its header: no disk used
            else:
                path.write_bytes(content if isinstance(content, bytes) else content.encode())
            _set_mtime(path, now - spec.age_s)
        if spec.lock_age_s is not None:
            lock = entry / "model.hlo_module.pb.lock"
            lock.write_bytes(b"")
            _set_mtime(lock, clock - spec.lock_age_s)
    return root

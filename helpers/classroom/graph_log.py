"""Which XLA graphs a run compiled, named by a fingerprint of their HLO.

XLA writes the HLO module of every graph it compiles to a dump directory when XLA_FLAGS asks
(`--xla_dump_to`); the flags are inherited, so one directory collects the graphs of a kernel, the
scripts it starts and their torchrun workers. A graph's fingerprint is a hash of that module's
text before optimization, its name normalized: the same on every machine (another CPU ISA, cwd
or checkpoint dir gives the same text), unlike torch_xla's "Graph Hash", which mixes in an
environment hash. The HLO module is also what the Neuron compile cache is keyed by.

    env.update(hlo_dump_env(directory, env))   # before starting a kernel (or JupyterLab)
    read_fingerprints(directory)               # -> {fingerprint, ...}

Limits: XLA prints constants of more than 10 elements as `{...}` (torch_xla's own env hash
counts `--xla_dump_large_constants`, so it is not set), so two graphs differing only in such a
constant's values share a fingerprint. Cost on the CPU stand-in: XLA also dumps the LLVM IR and
MLIR of each module, about 115 files, 1.3 MB and 0.3 s of CPU per compiled graph;
GraphDumps.collect deletes them as it reads.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Iterable, Mapping

# torch_xla leaves these out of its env hash: they change no graph hash and no torch_xla cache key.
DUMP_FLAGS = ("--xla_dump_hlo_as_text", "--xla_dump_disable_metadata", "--xla_dump_include_timestamp")
HLO_SUFFIX = ".before_optimizations.txt"
_MODULE_LINE = re.compile(r"HloModule\s+([^\s,]+)")


def hlo_dump_env(directory: str | os.PathLike, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """XLA_FLAGS that dump every compiled graph's HLO into directory, after env's own flags."""
    env = os.environ if env is None else env
    own = env.get("XLA_FLAGS", "").strip()
    dump = f"--xla_dump_to={Path(directory).resolve()} {' '.join(DUMP_FLAGS)}"
    return {"XLA_FLAGS": f"{own} {dump}".strip()}


def hlo_fingerprint(text: str) -> str:
    """16 hex digits of the module's text with its name (SyncTensorsGraph.<n>) replaced."""
    found = _MODULE_LINE.match(text)
    if not found:
        raise ValueError(f"not an HLO module dump: {text[:80]!r}")
    name = re.compile(r"(?<![\w.])" + re.escape(found.group(1)) + r"(?![\w.])")
    return hashlib.sha256(name.sub("MODULE", text).encode()).hexdigest()[:16]


def read_fingerprints(directory: str | os.PathLike) -> set[str]:
    """The fingerprint of every graph dumped in directory; none if it does not exist."""
    directory = Path(directory)
    return fingerprints_of(directory.glob(f"*{HLO_SUFFIX}")) if directory.is_dir() else set()


def fingerprints_of(paths: Iterable[Path]) -> set[str]:
    return {hlo_fingerprint(p.read_text(errors="replace")) for p in paths if p.name.endswith(HLO_SUFFIX)}


class GraphDumps:
    """One dump directory filled by the processes started with env(); collect(label) files what
    is there under label and empties it. Runs that follow each other get one label each."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.by_label: dict[str, set[str]] = {}

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return hlo_dump_env(self.directory, env)

    def collect(self, label: str) -> set[str]:
        files = [p for p in self.directory.iterdir() if p.is_file()]  # what is written after
        found = fingerprints_of(files)                                  # this waits for the next
        for path in files:
            path.unlink(missing_ok=True)
        self.by_label.setdefault(label, set()).update(found)
        return found

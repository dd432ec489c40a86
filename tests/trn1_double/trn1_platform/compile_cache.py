"""The double's compile cache: one Neuron persistent cache per instance, in the real layout.

Each graph this process compiles (XLA on the CPU) is looked up by its key under
<cache>/neuronxcc-<version>/MODULE_<graph hash>+<flags hash>/ (docs/sources.md, "A cache hit,
and the cache key"): a done entry is read ("Using a cached neff"), a failed one stops the run
unless --retry_failed_compilation, a missing one is compiled and written. Under
NEURON_EXTRACT_GRAPHS_ONLY (neuron_parallel_compile's trial) only the HLO is written, for the
wrapper to compile afterwards. The double never makes a compile fail: no source says which
graphs of this MLP would.
"""
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from trn1_platform import rules

NEFF_HEADER = (1).to_bytes(8, "little") + (1024).to_bytes(8, "little")


def neff_bytes(hlo: bytes) -> bytes:
    """A NEFF-shaped program: the 1024-byte header (version 1, header size), then a payload."""
    payload = hashlib.sha256(hlo).digest() * 32
    return (NEFF_HEADER + len(payload).to_bytes(8, "little")).ljust(1024, b"\0") + payload


def entry_dir(graph_hash: str, env=None) -> Path | None:
    """This graph's entry under the cache the environment selects; None for a remote cache."""
    root = rules.cache_root(env)
    if "://" in root and not root.startswith("file://"):
        return None
    flags = " ".join(rules.compiler_flags(env))
    flags_hash = hashlib.md5(flags.encode()).hexdigest()[:8]
    return (Path(root.removeprefix("file://")) / f"neuronxcc-{rules.NEURONX_CC_VERSION}"
            / f"MODULE_{graph_hash}+{flags_hash}")


def journal(event: str, **fields) -> None:
    """One line per runtime event in <platform root>/var/log/trn1-double.jsonl (the tests read it)."""
    log = rules.platform_root() / "var/log/trn1-double.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    record = {"event": event, "pid": os.getpid(), "time": time.time(),
              "argv0": os.path.basename(sys.argv[0] if sys.argv else ""), **fields}
    with open(log, "a") as f:
        f.write(json.dumps(record) + "\n")


def is_failed(neff: Path) -> bool:
    head = neff.read_bytes()[:64]
    return head.startswith(b"Failed compilation with")


def write_done(entry: Path, hlo: bytes) -> None:
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "model.hlo_module.pb").write_bytes(hlo)
    (entry / "compile_flags.json").write_text(json.dumps(rules.compiler_flags()))
    (entry / "model.neff").write_bytes(neff_bytes(hlo))
    (entry / "model.done").touch()


def on_graph(graph_hash: str, hlo: bytes, say=print) -> None:
    """What the compiler wrapper does for one graph this process compiled."""
    entry = entry_dir(graph_hash)
    key = None if entry is None else f"{entry.parent.name}/{entry.name}"
    if entry is None or rules.cache_flag("--no_cache"):
        say(rules.COMPILED_LINES[0])
        journal("compiled", key=key, cached=False)
        return
    neff = entry / "model.neff"
    if os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1":
        if not neff.exists():
            entry.mkdir(parents=True, exist_ok=True)
            (entry / "model.hlo_module.pb").write_bytes(hlo)
            (entry / "compile_flags.json").write_text(json.dumps(rules.compiler_flags()))
        journal("extracted", key=key)
        return
    if neff.exists() and is_failed(neff) and not rules.cache_flag("--retry_failed_compilation"):
        say(rules.CACHED_FAILURE_LINE.format(neff=neff))
        journal("cached-failure", key=key)
        raise RuntimeError(rules.CACHED_FAILURE_LINE.format(neff=neff))
    if neff.exists() and (entry / "model.done").exists() and not is_failed(neff):
        say(rules.CACHED_NEFF_LINE.format(neff=neff))
        journal("cached", key=key)
        return
    write_done(entry, hlo)
    for line in rules.COMPILED_LINES:
        say(line)
    journal("compiled", key=key, cached=True)


def compile_pending(root: Path, say=print) -> tuple[int, int]:
    """neuron_parallel_compile's second phase: compile every entry holding only its HLO.
    Returns (graphs, compiled)."""
    pending = [d for d in root.glob("neuronxcc-*/MODULE_*")
               if (d / "model.hlo_module.pb").exists() and not (d / "model.neff").exists()]
    for entry in pending:
        write_done(entry, (entry / "model.hlo_module.pb").read_bytes())
        journal("compiled", key=f"{entry.parent.name}/{entry.name}", cached=True, parallel=True)
    return len(pending), len(pending)

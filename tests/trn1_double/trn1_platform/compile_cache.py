"""The double's compile cache: one Neuron persistent cache per instance, in the real layout.

Each graph this process compiles (XLA on the CPU) is looked up by its key under
<cache>/neuronxcc-<version>+<build>/MODULE_<graph hash>+<flags hash>/ (docs/sources.md, "A cache
hit, and the cache key"): a done entry is read ("Using a cached neff"), a failed one stops the
run unless --retry_failed_compilation, a locked one is waited for, a missing one is compiled
under a lock and written. Under NEURON_EXTRACT_GRAPHS_ONLY (neuron_parallel_compile's trial)
every graph the trial meets is named in its output, a new one written as HLO only, for the tool
to compile (whether the wrapper names a graph the cache already holds is not in the sources: the
tool's own comment, "compile only new graphs (those without corresponding neffs)", reads as if
it may, and the tool skips a done one either way).

What an entry holds (docs/sources.md, "What a cache entry holds"): model.hlo_module.pb, then
model.neff and model.done when the compile succeeded; a failed compile leaves model.log holding
"Failed compilation with <argv>: <error>" (the shape of a public cache's stored failure) and no
NEFF. A NEFF's own format is not in the sources: the double's is opaque bytes, no header any
reader could rely on.

Faults and delays on demand (no source says which graphs of this MLP would fail, or how long
one takes; a test names them):
- TRN1_DOUBLE_COMPILE_SECONDS=<s>: each compile takes s seconds (default 0), its entry holding
  the HLO and a `model.hlo_module.pb.lock` meanwhile; with TRN1_DOUBLE_COMPILE_UNTIL=<path> it
  goes on after them until that file exists;
- TRN1_DOUBLE_FAIL_COMPILE=<which>: a matching compile fails (its model.neff holds the failure
  text, so the next run meets the cached failure) and the run stops;
- TRN1_DOUBLE_KILL_COMPILE=<which>: the process is killed (SIGKILL) halfway through a matching
  compile, leaving the HLO and the lock, no NEFF.
<which> is a comma-separated list of: `*` (every compile), `#N` (this process's Nth compile,
from 1), a compiler flag such as `--model-type=transformer` (compiles while NEURON_CC_FLAGS
holds it), or the start of a graph hash. A ctrl-C (SIGINT) during a compile marks the graph
failed, as the caching page says.
"""
import hashlib
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from trn1_platform import rules

NEFF_STAND_IN = b"\x00trn1 double: a NEFF's format is not in the sources\x00"
LOCK_NAME = "model.hlo_module.pb.lock"
FAILURE_LOG = "model.log"
DEBUG_MARK = b"debug-metadata"  # in the double's NEFF payload: compiled under DEBUG_VARIABLES
WAIT_POLL_S = 0.2  # not in the sources: how often a waiting compile looks again
# A compile's time is slept in slices: a real neuronx-cc is a child process in the terminal's (or
# the kernel's) process group, so a ctrl-C ends it at once. In one sleep, a SIGINT that the kernel
# hands to another of the process's threads (XLA's pool) would be acted on only when it ends.
SLEEP_SLICE_S = 0.05
_compiles = {"count": 0}


def compile_time(seconds: float) -> None:
    """Spend a compile's `seconds`, a SIGINT acting within one slice of it; then, under
    TRN1_DOUBLE_COMPILE_UNTIL=<path>, go on until that file exists: a test ends the compile on an
    event it saw (a line the run printed), not after a time a loaded machine can miss."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, SLEEP_SLICE_S))
    release = os.environ.get("TRN1_DOUBLE_COMPILE_UNTIL")
    while release and not os.path.exists(release):
        time.sleep(SLEEP_SLICE_S)


def neff_bytes(hlo: bytes, debug: bool = False) -> bytes:
    """The double's program for a graph: opaque bytes (see the module's docstring)."""
    return NEFF_STAND_IN + hashlib.sha256(hlo).digest() * 32 + (DEBUG_MARK if debug else b"")


def entry_dir(graph_hash: str, env=None) -> Path:
    """This graph's entry under the cache the environment selects (an s3:// cache included:
    rules.cache_directory). The flags hash: md5 of the compiler flags, as public logs' empty-flags
    entries (+d41d8cd9, md5 of nothing) suggest; the algorithm is not in the sources."""
    flags = " ".join(rules.compiler_flags(env))
    flags_hash = hashlib.md5(flags.encode()).hexdigest()[:8]
    return rules.cache_directory(env) / rules.VERSION_DIR / f"MODULE_{graph_hash}+{flags_hash}"


def shown(path: Path) -> str:
    """A cache path as the wrapper prints it: under an s3:// cache, the S3 URL. A public log
    (docs/sources.md, "The S3 cache's layout") shows an S3 cache laid out as a local one,
    `s3://<bucket>/<prefix>/neuronxcc-<version>+<build>/MODULE_<hash>+<flags>/model.neff`."""
    root = rules.cache_root()
    if root.startswith("s3://"):
        return root.rstrip("/") + "/" + str(path.relative_to(rules.cache_directory()))
    return str(path)


def journal(event: str, **fields) -> None:
    """One line per runtime event in <platform root>/var/log/trn1-double.jsonl (the tests read it)."""
    log = rules.platform_root() / "var/log/trn1-double.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    record = {"event": event, "pid": os.getpid(), "time": time.time(),
              "argv0": os.path.basename(sys.argv[0] if sys.argv else ""), **fields}
    with open(log, "a") as f:
        f.write(json.dumps(record) + "\n")


def is_failed(entry: Path) -> bool:
    """A failed entry: its log holds the wrapper's failure and no NEFF was written."""
    log = entry / FAILURE_LOG
    return (not (entry / "model.neff").exists() and log.exists()
            and log.read_bytes().startswith(b"Failed compilation with"))


def debug_requested() -> bool:
    """Whether this process was started with XLA_IR_DEBUG/XLA_HLO_DEBUG (runtime.install keeps
    them from torch-xla's hash and records them here)."""
    return os.environ.get("TRN1_DOUBLE_DEBUG_METADATA") == "1"


def matches(variable: str, graph_hash: str, env=None) -> bool:
    """Whether this compile is one the test names in `variable` (see the module's docstring)."""
    env = os.environ if env is None else env
    for token in filter(None, (t.strip() for t in env.get(variable, "").split(","))):
        if token == "*" or graph_hash.startswith(token):
            return True
        if token.startswith("#") and token[1:].isdigit() and int(token[1:]) == _compiles["count"]:
            return True
        if token.startswith("-") and token in rules.compiler_flags(env):
            return True
    return False


def work_directory() -> str:
    """The wrapper's work directory for one compile, as public logs show it
    (/tmp/<user>/neuroncc_compile_workdir/<uuid>)."""
    return f"/tmp/{os.environ.get('USER', 'no-user')}/neuroncc_compile_workdir/{uuid.uuid4()}"


def failure_text(entry: Path, error: str) -> bytes:
    """The wrapper's stored failure, in the shape of a public cache's model.log (docs/sources.md,
    "A failed compile's stored text") and of the text a 2.15 log prints back from a failed entry
    (tests/platform_output/corpus.yaml, sdk-1023): the compiler's argv in that log's order, on
    files in the wrapper's work directory."""
    work = work_directory()
    argv = ["neuronx-cc", "compile", "--target=trn1", "--framework=XLA",
            f"{work}/model.{entry.name}.hlo_module.pb", "--output", f"{work}/model.{entry.name}.neff",
            *rules.compiler_flags()]
    return f"Failed compilation with {argv}: {error}\n".encode()


def compile_graph(entry: Path, graph_hash: str, hlo: bytes) -> None:
    """One neuronx-cc run for this graph while this process holds the entry's lock, with the
    test's delay and faults; the lock goes when it ends, unless the process is killed."""
    _compiles["count"] += 1
    key = f"{entry.parent.name}/{entry.name}"
    seconds = float(os.environ.get("TRN1_DOUBLE_COMPILE_SECONDS") or 0)
    try:
        journal("compiling", key=key, seconds=seconds)  # inside: an interrupt from here on marks it
        (entry / "model.hlo_module.pb").write_bytes(hlo)
        (entry / "compile_flags.json").write_text(json.dumps(rules.compiler_flags()))
        if matches("TRN1_DOUBLE_KILL_COMPILE", graph_hash):
            compile_time(seconds / 2)
            journal("killed", key=key)
            os.kill(os.getpid(), signal.SIGKILL)
        compile_time(seconds)
        if matches("TRN1_DOUBLE_FAIL_COMPILE", graph_hash):
            failure = failure_text(entry, "[NCC_DOUBLE001] failed on demand (trn1 double)")
            (entry / "model.neff").unlink(missing_ok=True)
            (entry / FAILURE_LOG).write_bytes(failure)
            journal("failed", key=key)
            raise RuntimeError(failure.decode().strip())
        (entry / "model.neff").write_bytes(neff_bytes(hlo, debug_requested()))
        (entry / FAILURE_LOG).unlink(missing_ok=True)  # a retried failure: not in the sources
        (entry / "model.done").touch()
    except KeyboardInterrupt:  # "interrupted by ctrl-C ... The graph would be marked as failed"
        (entry / FAILURE_LOG).write_bytes(failure_text(entry, "interrupted (KeyboardInterrupt)"))
        journal("failed", key=key, interrupted=True)
        raise
    finally:
        (entry / LOCK_NAME).unlink(missing_ok=True)


def take_lock(entry: Path) -> bool:
    entry.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(entry / LOCK_NAME, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def on_graph(graph_hash: str, hlo: bytes, say=print) -> None:
    """What the compiler wrapper does for one graph this process compiled."""
    entry = entry_dir(graph_hash)
    key = f"{entry.parent.name}/{entry.name}"
    if rules.cache_flag("--no_cache"):
        _compiles["count"] += 1
        compile_time(float(os.environ.get("TRN1_DOUBLE_COMPILE_SECONDS") or 0))
        say(rules.COMPILED_LINES[0])
        journal("compiled", key=key, cached=False)
        return
    neff = entry / "model.neff"
    if os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1":
        known = neff.exists() or is_failed(entry)
        if not known:
            entry.mkdir(parents=True, exist_ok=True)
            (entry / "model.hlo_module.pb").write_bytes(hlo)
            (entry / "compile_flags.json").write_text(json.dumps(rules.compiler_flags()))
        say(rules.EXTRACTING_LINE.format(path=entry / "model.hlo_module.pb"))
        journal("extracted", key=key, **({"in_cache": True} if known else {}))
        return
    waiting_since = None
    while True:
        if is_failed(entry) and not rules.cache_flag("--retry_failed_compilation"):
            failure = (entry / FAILURE_LOG).read_text(errors="replace").strip()
            line = rules.stamped(rules.CACHED_FAILURE_LINE.format(neff=shown(neff), failure=failure))
            say(line)
            journal("cached-failure", key=key)
            raise RuntimeError(line)
        if neff.exists() and (entry / "model.done").exists():
            say(rules.stamped(rules.CACHED_NEFF_LINE.format(neff=shown(neff))))
            journal("cached", key=key, **_metadata(neff))
            return
        if take_lock(entry):
            break
        now = time.time()
        if waiting_since is None:
            waiting_since, said = now, -1
            journal("waiting", key=key)
        if int((now - waiting_since) // 60) > said:  # once a minute, as the reports show it
            said = int((now - waiting_since) // 60)
            say(rules.stamped(rules.WAITING_LINE.format(key=entry.name, minutes=(now - waiting_since) / 60)))
        time.sleep(WAIT_POLL_S)
    try:
        compile_with_retries(entry, graph_hash, hlo, key)
    except RuntimeError as error:  # the wrapper's ERROR line, then the failure reaches the caller
        say(rules.stamped(rules.COMPILE_FAILED_LINE.format(failure=error)))
        raise
    for line in rules.COMPILED_LINES:
        say(line)
    say(rules.stamped(rules.COMPLETED_LINE.format(module=entry.name)))
    journal("compiled", key=key, cached=True, **({"debug": True} if debug_requested() else {}))


def compile_with_retries(entry: Path, graph_hash: str, hlo: bytes, key: str) -> None:
    """A graph new to the persistent cache, compiled under its lock and tried
    NEURON_PARALLEL_COMPILE_MAX_RETRIES more times when it fails: the env-vars page sets "the
    maximum number of retries when using Neuron Persistent Cache or neuron_parallel_compile"
    (docs/sources.md). The last failure stands (cached as failed); ctrl-C is not retried."""
    retries = int(os.environ.get("NEURON_PARALLEL_COMPILE_MAX_RETRIES") or 0)
    for attempt in range(retries + 1):
        if attempt:
            take_lock(entry)
            (entry / FAILURE_LOG).unlink(missing_ok=True)
            journal("retry", key=key, attempt=attempt)
        try:
            compile_graph(entry, graph_hash, hlo)
            return
        except RuntimeError:
            if attempt == retries:
                raise


def _metadata(neff: Path) -> dict:
    """For the journal: a cached NEFF read by a process that asked for debug metadata, and
    whether that NEFF has it (the Explorer page: "Previously-cached NEFFs don't have this")."""
    if not debug_requested():
        return {}
    return {"debug": True, "neff_has_metadata": neff.read_bytes().endswith(DEBUG_MARK)}


def compile_named(paths: list[str], say=print) -> dict[str, bool]:
    """neuron_parallel_compile's second phase on the graphs its trial named: each one not done
    (a failed one counts as done: the tool's `scan` help, "failed hlos will be included in done")
    and not locked is compiled under its lock, tried NEURON_PARALLEL_COMPILE_MAX_RETRIES more
    times when it fails (docs/sources.md, "On a trn1.2xlarge precompile with one retry": "will try
    compilation N more time(s)"; default 0); returns {path: succeeded} for those it compiled."""
    status = {}
    retries = int(os.environ.get("NEURON_PARALLEL_COMPILE_MAX_RETRIES") or 0)
    for path in sorted(set(paths)):
        entry = Path(path).parent
        if (entry / "model.neff").exists() or is_failed(entry) or not take_lock(entry):
            continue  # done, or another worker's
        graph_hash = entry.name.removeprefix("MODULE_").split("+")[0]
        key = f"{entry.parent.name}/{entry.name}"
        try:
            compile_with_retries(entry, graph_hash, (entry / "model.hlo_module.pb").read_bytes(), key)
        except RuntimeError as error:  # the wrapper's two lines for a failed compile
            status[path] = False
            say(rules.stamped(rules.COMPILE_FAILED_LINE.format(failure=error)))
            say(rules.stamped(rules.RETRIES_SPENT_LINE.format(path=path, retries=retries)))
            continue
        journal("compiled", key=key, cached=True, parallel=True)
        status[path] = True
    return status

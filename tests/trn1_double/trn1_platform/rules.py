"""The Neuron rules the double implements, each with the docs/sources.md row it follows.

Only what the cited sources state; where they are silent the double says so here and does the
simplest thing, never a guess presented as Neuron's behaviour.
"""
import datetime
import os
import re
import shlex
from pathlib import Path

PLATFORM_ROOT_ENV = "WORKBOOK_PLATFORM_ROOT"
NEURONX_CC_VERSION = "2.26.6360.0"  # docs/sources.md: "Neuron 2.31's packages"
# docs/sources.md, "A cache hit, and the cache key": every documented and publicly logged cache
# path names the compiler as neuronxcc-<version>+<build hash> (neuronxcc-2.12.54.0+f631c2365);
# the build hash of 2.26.6360.0 is not in the sources: the double writes one of its own, 8 hex
# digits as in the newest logs (neuronxcc-2.15.128.0+56dc5a86, neuronxcc-2.15.141.0+d3cfc8ca).
NEURONX_CC_BUILD = "d0ab1e26"
VERSION_DIR = f"neuronxcc-{NEURONX_CC_VERSION}+{NEURONX_CC_BUILD}"

# docs/sources.md, "By default a process's Neuron runtime reserves every NeuronCore present,
# until the process exits".
RESERVES_EVERY_VISIBLE_CORE_UNTIL_EXIT = True
# docs/sources.md, "The runtime's log line when a core is in use" (nrt-troubleshoot.html).
# The doc quotes one example (Requested:nc1-nc1 Available:0); the double fills in the cores
# asked for and how many of them were free (how the runtime counts Available is not stated).
BUSY_CORE_LINE = ("ERROR NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - "
                  "Requested:nc{first}-nc{last} Available:{available}")
# The compiler wrapper's lines in the newest form public logs show (tests/platform_output/corpus.yaml;
# docs/sources.md, "The compiler wrapper's lines: the docs' 2023 form, 2024's and Neuron 2.29's"),
# each after "<date> <time>:  <pid>  ". From Neuron 2.29 (logs from 2026-03 on; 2.31 is later) the
# wrapper prints "[INFO]: " with no tag, and a compile shows no start line: dots, "Compiler status
# PASS", then "[INFO]: Compilation Successfully Completed for model.MODULE_….hlo_module.pb" (the
# NKI quickstart's logs at the v2.29.0 and v2.31.0 tags). A cache hit's "[INFO]: Using a cached
# neff" is quoted by a trn1 script (trnsci/trnblas, neuronxcc 2.24.5133); the rest of that line is
# not in the sources: the double keeps the words of the 2024 logs.
CACHED_NEFF_LINE = "[INFO]: Using a cached neff at {neff}. Exiting with a successfully compiled graph."
# What closes a compile: neuronx-cc's own "Compiler status PASS" (every log from 2023 on; the 2022
# tutorial's "Exiting with a successfully compiled graph" after it is in no later log), then the
# wrapper's line (stamped).
COMPILED_LINES = ("Compiler status PASS",)
COMPLETED_LINE = "[INFO]: Compilation Successfully Completed for model.{module}.hlo_module.pb"
# Failures: no public log of Neuron 2.29 on shows one; the newest (2024, neuronxcc 2.15) say ERROR
# ||NEURON_CC_WRAPPER||, which the double keeps. 2.15: the message, ": ", then on the next line the
# failure text the entry stored.
CACHED_FAILURE_LINE = ("ERROR ||NEURON_CC_WRAPPER||: Got a cached failed neff at {neff}. Will skip "
                       "compilation, please set --retry_failed_compilation for recompilation: \n {failure}")
COMPILE_FAILED_LINE = "ERROR ||NEURON_CC_WRAPPER||: {failure}"
# Then the retries spent: the words of a 2023 log (INFO ||NCC_WRAPPER||, docs/sources.md, "A compile
# that fails after its retries"); a 2024 log's line starts "ERROR ||NEURON_CC_WRAPPER||: Compilation
# failed for /tmp/…" (optimum-neuron issue 698), its end not shown.
RETRIES_SPENT_LINE = "ERROR ||NEURON_CC_WRAPPER||: Compilation failed for {path} after {retries} retries."
# Not in the Neuron docs: a 2024 trn1 log (aws-k8s-tester pull request 466) prints it as
# "INFO ||NEURON_CC_WRAPPER||: Another process must be compiling <cache>/…/model.hlo_module.pb, been…";
# learners' reports of a lock left by a killed compile (docs/sources.md, "A lock left by a killed
# compile makes the next compile of that graph wait"), the newest (2026-08), in the "[INFO]: " form.
WAITING_LINE = ("[INFO]: Another process must be compiling {key}, been waiting "
                "for: {minutes:.1f} minutes")


# A test sets the clock the wrapper's lines print, e.g. "2026-12-02 01:15:15.000015", so that its
# assertions meet a timestamp whose fields hold the numbers they look for.
CLOCK_ENV = "TRN1_DOUBLE_CLOCK"
CLOCK_FORM = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}")


def clock() -> str:
    """The time a wrapper line starts with: TRN1_DOUBLE_CLOCK as given, else now."""
    fixed = os.environ.get(CLOCK_ENV)
    if fixed is not None:
        if not CLOCK_FORM.fullmatch(fixed):
            raise RuntimeError(f"{CLOCK_ENV}={fixed!r}: give a time as the wrapper prints it, "
                               "e.g. 2026-12-02 01:15:15.000015")
        return fixed
    now = datetime.datetime.now()
    return f"{now:%Y-%m-%d %H:%M:%S}.{now.microsecond // 1000:06d}"


def stamped(line: str, pid: int | None = None) -> str:
    """A wrapper line as it prints it: "2024-01-04 14:33:59.000492:  4197  INFO ||…||: …"."""
    return f"{clock()}:  {os.getpid() if pid is None else pid}  {line}"


# docs/sources.md, "neuron_parallel_compile as its source runs": the trial's line that names a
# graph, as the docs show it (the tool parses "Extracting graphs (<path>)").
EXTRACTING_LINE = ("INFO ||NEURON_CC_WRAPPER||: Extracting graphs ({path}) for ahead-of-time "
                   "parallel compilation. No compilation was done.")
NPC_PREFIX = "INFO ||NEURON_PARALLEL_COMPILE||: "  # the docs' summary lines



def platform_root() -> Path:
    return Path(os.environ[PLATFORM_ROOT_ENV])


def machine_cores() -> int:
    """The driver's core_count of each device under the double's sysfs (a trn1.2xlarge: 2)."""
    sysfs = platform_root() / "sys/devices/virtual/neuron_device"
    return sum(int((d / "core_count").read_text()) for d in sysfs.glob("neuron[0-9]*"))


def requested_cores(env=None) -> list[int] | int:
    """The cores this process's runtime reserves.

    NEURON_RT_VISIBLE_CORES, read as the runtime developer guide writes it (docs/sources.md,
    "NEURON_RT_VISIBLE_CORES: a list, a range or both"): "a list of NeuronCores ... a range ...
    or a combination of both", the result "contiguous" and "in consecutive increasing order".
    The configuration guide says "a single NeuronCore index or an inclusive range value": every
    value it allows, the developer guide allows too, so only a list tells them apart (not in the
    sources: which one the 2.31 runtime enforces). Else NEURON_RT_NUM_CORES, a count of free
    cores (returned as an int; "0, which is interpreted as 'all'"), else every core."""
    env = os.environ if env is None else env
    total = machine_cores()
    spec = env.get("NEURON_RT_VISIBLE_CORES", "").strip()
    if not spec:
        count = env.get("NEURON_RT_NUM_CORES", "").strip()
        if count:
            if not count.isdigit() or int(count) > total:
                raise RuntimeError(f"NEURON_RT_NUM_CORES={count!r}: a number from 0 (all) to {total}")
            return int(count) or list(range(total))
        return list(range(total))
    cores = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m or int(m[2] or m[1]) < int(m[1]):
            raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={spec!r}: indices, ranges or both")
        cores.extend(range(int(m[1]), int(m[2] or m[1]) + 1))
    if cores != list(range(cores[0], cores[0] + len(cores))):
        raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={spec!r}: the cores must be contiguous, "
                           "in increasing order")
    if cores[-1] >= total:
        raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={spec!r}: this instance has cores 0-{total - 1}")
    return cores


OWN_FLAGS = ("--cache_dir", "--no_cache", "--retry_failed_compilation")  # the cache's, not the compiler's
VALUED = ("--cache_dir",)


def _tokens(env) -> list[str]:
    """NEURON_CC_FLAGS split as a shell would (an unsplittable value: split on spaces)."""
    raw = env.get("NEURON_CC_FLAGS", "")
    try:
        return shlex.split(raw)
    except ValueError:
        return raw.split()


def cache_root(env=None) -> str:
    """docs/sources.md, "NEURON_CC_FLAGS, the cache URL": --cache_dir in NEURON_CC_FLAGS wins
    over NEURON_COMPILE_CACHE_URL; else the default /var/tmp/neuron-compile-cache. The flag in
    both spellings, the last one given winning: docs/sources.md, "neuron_parallel_compile reads
    --cache_dir with libneuronxla's argument parser" (`ncc_args.cache_dir` from `setup_args()`;
    that parser's code is not public: an argparse reading is inferred, under which the last of
    repeated flags wins and `--cache_dir X` equals `--cache_dir=X`)."""
    env = os.environ if env is None else env
    tokens, found = _tokens(env), None
    for i, token in enumerate(tokens):
        if token.startswith("--cache_dir="):
            found = token.split("=", 1)[1]
        elif token == "--cache_dir" and i + 1 < len(tokens):
            found = tokens[i + 1]
    if found:
        return found
    if env.get("NEURON_COMPILE_CACHE_URL"):
        return env["NEURON_COMPILE_CACHE_URL"]
    return str(platform_root() / "var/tmp/neuron-compile-cache")


def cache_directory(env=None) -> Path:
    """Where the double keeps the cache cache_root() names. docs/sources.md, "A remote (s3://)
    cache is a cache location": "If starts with s3://, it will use AWS S3 as cache backend" (the
    environment-variables page). The double has no S3: a bucket's cache lives in a directory of
    the instance standing in for it, <root>/s3/<bucket>/<prefix>, in the local layout, which a
    public log shows an S3 cache has too (docs/sources.md, "The S3 cache's layout")."""
    root = cache_root(env)
    if root.startswith("s3://"):
        return platform_root() / "s3" / root.removeprefix("s3://").strip("/")
    return Path(root.removeprefix("file://"))


def compiler_flags(env=None) -> list[str]:
    """The compiler flags of NEURON_CC_FLAGS (the cache's own three, with a value given apart,
    are not compiler flags)."""
    env = os.environ if env is None else env
    tokens, flags, skip = _tokens(env), [], False
    for token in tokens:
        if skip:
            skip = False
        elif token in VALUED:
            skip = True
        elif not token.startswith(OWN_FLAGS):
            flags.append(token)
    return flags


def cache_flag(name: str, env=None) -> bool:
    env = os.environ if env is None else env
    return name in _tokens(env)

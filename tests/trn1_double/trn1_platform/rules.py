"""The Neuron rules the double implements, each with the docs/sources.md row it follows.

Only what the cited sources state; where they are silent the double says so here and does the
simplest thing, never a guess presented as Neuron's behaviour.
"""
import os
import re
from pathlib import Path

PLATFORM_ROOT_ENV = "WORKBOOK_PLATFORM_ROOT"
NEURONX_CC_VERSION = "2.26.6360.0"  # docs/sources.md: "Neuron 2.31's packages"

# docs/sources.md, "By default a process's Neuron runtime reserves every NeuronCore present,
# until the process exits".
RESERVES_EVERY_VISIBLE_CORE_UNTIL_EXIT = True
# docs/sources.md, "The runtime's log line when a core is in use" (nrt-troubleshoot.html).
# The doc quotes one example (Requested:nc1-nc1 Available:0); the double fills in the cores
# asked for and how many of them were free (how the runtime counts Available is not stated).
BUSY_CORE_LINE = ("ERROR NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - "
                  "Requested:nc{first}-nc{last} Available:{available}")
# docs/sources.md, "A cache hit, and the cache key" (neuron-caching.html).
CACHED_NEFF_LINE = ("INFO ||NCC_WRAPPER||: Using a cached neff at {neff}. Exiting with a "
                    "successfully compiled graph.")
CACHED_FAILURE_LINE = ("INFO ||NCC_WRAPPER||: Got a cached failed neff at {neff}. Will skip "
                       "compilation, please set --retry_failed_compilation for recompilation.")
# docs/sources.md, "train.py's first run compiles two graphs in about 3 minutes (2022 log)":
# the lines that close one compile in the tutorial's log.
COMPILED_LINES = ("Compiler status PASS",
                  "INFO ||NCC_WRAPPER||: Exiting with a successfully compiled graph")
# Not in the Neuron docs: learners' reports of a lock left by a killed compile (docs/sources.md,
# "A lock left by a killed compile makes the next compile of that graph wait").
WAITING_LINE = "INFO ||NCC_WRAPPER||: Another process must be compiling {key}, been waiting for: {minutes:.1f} minutes"
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


def cache_root(env=None) -> str:
    """docs/sources.md, "NEURON_CC_FLAGS, the cache URL": --cache_dir in NEURON_CC_FLAGS wins
    over NEURON_COMPILE_CACHE_URL; else the default /var/tmp/neuron-compile-cache."""
    env = os.environ if env is None else env
    for flag in env.get("NEURON_CC_FLAGS", "").split():
        if flag.startswith("--cache_dir="):
            return flag.split("=", 1)[1]
    if env.get("NEURON_COMPILE_CACHE_URL"):
        return env["NEURON_COMPILE_CACHE_URL"]
    return str(platform_root() / "var/tmp/neuron-compile-cache")


def compiler_flags(env=None) -> list[str]:
    """The compiler flags of NEURON_CC_FLAGS (the cache's own three are not compiler flags)."""
    env = os.environ if env is None else env
    own = ("--cache_dir", "--no_cache", "--retry_failed_compilation")
    return [f for f in env.get("NEURON_CC_FLAGS", "").split() if not f.startswith(own)]


def cache_flag(name: str, env=None) -> bool:
    env = os.environ if env is None else env
    return name in env.get("NEURON_CC_FLAGS", "").split()

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
# until the process exits" and "NEURON_RT_VISIBLE_CORES takes one index or one range".
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


def platform_root() -> Path:
    return Path(os.environ[PLATFORM_ROOT_ENV])


def machine_cores() -> int:
    """The driver's core_count of each device under the double's sysfs (a trn1.2xlarge: 2)."""
    sysfs = platform_root() / "sys/devices/virtual/neuron_device"
    return sum(int((d / "core_count").read_text()) for d in sysfs.glob("neuron[0-9]*"))


def requested_cores(env=None) -> list[int] | int:
    """The cores this process's runtime reserves: NEURON_RT_VISIBLE_CORES (one index or one
    inclusive range, "Any value or range between 0 to Max NeuronCore in the system"), else a
    count of free ones, NEURON_RT_NUM_CORES ("will attempt to automatically reserve the number of
    free NeuronCores specified"; returned as an int), else every core of the machine."""
    env = os.environ if env is None else env
    total = machine_cores()
    spec = env.get("NEURON_RT_VISIBLE_CORES", "").strip()
    if not spec:
        count = env.get("NEURON_RT_NUM_CORES", "").strip()
        if count:
            if not count.isdigit() or not 1 <= int(count) <= total:
                raise RuntimeError(f"NEURON_RT_NUM_CORES={count!r}: a number from 1 to {total}")
            return int(count)
        return list(range(total))
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", spec)
    if not m:
        raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={spec!r}: one index or one range")
    lo, hi = int(m[1]), int(m[2] or m[1])
    if hi >= total or hi < lo:
        raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={spec!r}: this instance has cores 0-{total - 1}")
    return list(range(lo, hi + 1))


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

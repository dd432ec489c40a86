"""A test double of one trn1.2xlarge: the Neuron platform's cited rules, with XLA on the CPU.

`build_instance(root)` lays out the instance under `root` and returns the environment that
puts a process on it: WORKBOOK_PLATFORM_ROOT (the product's one seam,
mnist_mlp/common/platform_paths.py), PYTHONPATH (this folder's `torch_neuronx`, with torch-neuronx's
and neuronx-cc's pinned metadata, and a `libneuronxla` that lets torch-xla's own import hand
start-up to that torch_neuronx, as on a Neuron host) and PATH (the Neuron tools a notebook runs). Each rule names
its row in docs/sources.md:

| rule | docs/sources.md row | where |
|---|---|---|
| 2 NeuronCores on one device | "A trn1 Trainium chip has two NeuronCores" | `build_instance` (sysfs core_count) |
| a process's runtime reserves every core it can see, until it exits | "By default a process's Neuron runtime reserves every NeuronCore present, until the process exits" | `torch_neuronx/runtime.py` |
| NEURON_RT_VISIBLE_CORES: indices, ranges or both, contiguous; it wins over NEURON_RT_NUM_CORES | "`NEURON_RT_VISIBLE_CORES`: a list, a range or both" (the developer guide; the configuration guide's "one index or one range" row allows a subset: the double takes the wider reading, under which every notebook's value, one index or torchrun's rank, means the same) | `trn1_platform/rules.py` |
| NEURON_RT_NUM_CORES: that many free cores (taken one by one, so two processes starting together get different ones), too few free fails; 0 is all | "`NEURON_RT_NUM_CORES`: a count of free cores, 0 (the default) meaning all" (the line a count refused prints: not in the sources; the double names cores 0 to count-1) | `rules.requested_cores`, `runtime.reserve_cores` |
| `import torch_xla` runs torch-neuronx's set-up (libneuronxla present), which at 2.9 does what torch-xla 2.9's `_internal/neuron.py` does: a torchrun worker gets `NEURON_RT_VISIBLE_CORES=<LOCAL_RANK>`, or its LOCAL_RANK-th core of an inherited list (saying so; a list not one core per worker stops the import), a plain process no core variable (every core); the core variables are read there, at import, and a value set later is not seen (journal: `set_after_read`) | "On a Neuron host, importing torch_xla runs torch-neuronx's set-up", "How torch-neuronx 2.9 sets up a process's cores" (torch-neuronx's own code is not public; the runtime reads the variables at `nrt_init`, and when torch-neuronx calls it is not in the sources: the double takes the earliest point, the set-up) | `libneuronxla/`, `torch_neuronx/xla.py`, `runtime.read_core_variables` |
| a held core: the start fails with the runtime's line | "The runtime's log line when a core is in use" (the Available count: not in the sources) | `runtime.reserve_cores` |
| one persistent cache, default path, `--cache_dir` over `NEURON_COMPILE_CACHE_URL`; `--cache_dir=X` and `--cache_dir X`, the last one winning | "`NEURON_CC_FLAGS`, the cache URL, stochastic rounding variables", "`neuron_parallel_compile` reads `--cache_dir` with libneuronxla's argument parser" (its parser is not public: argparse's reading inferred) | `rules.cache_root` |
| an `s3://` cache is a cache: kept in `<root>/s3/<bucket>/<prefix>`, standing in for the bucket, in the local layout, its NEFFs named by their S3 URL | "A remote (s3://) cache is a cache location", "The S3 cache's layout" (a public log) | `rules.cache_directory`, `compile_cache.shown` |
| the compiler wrapper's lines in the newest public form (after `<date> <time>:  <pid>`; from Neuron 2.29 `[INFO]:`, no tag and no start line, a compile closed by "Compiler status PASS" and "[INFO]: Compilation Successfully Completed for model.MODULE_….hlo_module.pb"; failures at ERROR tagged NEURON_CC_WRAPPER, as 2024's logs, the newest that show one) | "The compiler wrapper's lines: the docs' 2023 form, 2024's and Neuron 2.29's" (tests/platform_output/corpus.yaml) | `rules.py`, `compile_cache.on_graph` |
| a cached graph is read ("Using a cached neff"), a new one written as `neuronxcc-<version>+<build>/MODULE_<hash>+<flags>/` (`model.hlo_module.pb`, `model.neff`, `model.done`), a cached failure stops the run unless `--retry_failed_compilation` | "A cache hit, and the cache key", "What a cache entry holds" (the hashes' algorithms, the build hash of 2.26.6360.0 and a NEFF's format: not in the sources; the double's NEFF is opaque bytes) | `trn1_platform/compile_cache.py` |
| a compile that fails, or is interrupted by ctrl-C, is cached as failed: `model.log` holding "Failed compilation with <argv>: <error>", no NEFF | "A compile interrupted (ctrl-C) is cached as failed", "A failed compile's stored text", "What a cache entry holds" (not in the Neuron docs: a public cache and users' logs) | `compile_cache.compile_graph` |
| a training run's failed compile is tried `NEURON_PARALLEL_COMPILE_MAX_RETRIES` more times, as `neuron_parallel_compile`'s are | "`NEURON_PARALLEL_COMPILE_MAX_RETRIES` applies to a training run's own compiles too" | `compile_cache.compile_with_retries` |
| a compile holds `model.hlo_module.pb.lock`; a killed one leaves it, and the next compile of that graph waits, saying so once a minute | "A lock left by a killed compile makes the next compile of that graph wait" (not in the Neuron docs: learners' reports; how often the wait looks again: not in the sources) | `compile_cache.on_graph` |
| XLA_IR_DEBUG/XLA_HLO_DEBUG do not change the Neuron cache key: a NEFF cached without their metadata is read again | "The debug variables … and cached NEFFs" (how libneuronxla hashes a graph: not in the sources; the page implies the key stays) | `sitecustomize.py`, `compile_cache._metadata` |
| neuronx-cc runs inside torch-xla's compile: `UncachedCompile` has counted the graph, `CompileTime` not yet, until the NEFF is in hand (a wait on a lock included) | not in the sources (torch-xla 2.9 counts `UncachedCompile` before the PJRT client's compile and samples `CompileTime` after it: xla_graph_executor.cpp, pjrt_computation_client.cpp; the plugin's wrapper runs in between); the double compiles after the step, so meanwhile `UncachedCompile` reads one more | `runtime.counting_the_neuron_compile` |
| under torchrun, `xr.world_size()` is the job's WORLD_SIZE | "Under torchrun, torch-xla 2.9 hands the job's size to the Neuron PJRT plugin" (`NEURON_PJRT_WORLD_SIZE` from WORLD_SIZE; how the plugin reports it: not in the sources) | `runtime.install` |
| `xm.optimizer_step` all-reduces over the workers, inside the step's graph | "`xm.optimizer_step` all-reduces the gradients across workers", "On Neuron the gradient all-reduce … is in the step's graph": the CPU client holds no all-reduce across processes, so the double averages outside the graph and the pass reports those processes' compile counts as undecided | `runtime.reduce_gradients` |
| `neuron_parallel_compile`: the trial in graph-extraction mode, its outputs zeros; the graphs its log names compiled unless done (a failed one counts as done), each tried `NEURON_PARALLEL_COMPILE_MAX_RETRIES` more times; "No todo hlos found" when the trial names none; status 1 on a failed trial unless NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE; exit status = failed compilations | "`neuron_parallel_compile` as its source runs", "Under `neuron_parallel_compile` the trial's outputs are zeros", "On a trn1.2xlarge precompile with one retry", "A compile that fails after its retries" (its log prefix for errors, and whether the trial names a graph the cache holds: not in the sources; the double names it, and the tool skips it) | `tools/neuron_parallel_compile.py`, `compile_cache.compile_named` |

Faults on demand, for tests (no source says which graphs of this MLP would fail or how long one
takes): TRN1_DOUBLE_COMPILE_SECONDS, TRN1_DOUBLE_FAIL_COMPILE, TRN1_DOUBLE_KILL_COMPILE
(`trn1_platform/compile_cache.py`); and the clock the compiler wrapper's lines print,
TRN1_DOUBLE_CLOCK (`trn1_platform/rules.py`). Where the sources are silent the double says so:
neuron-monitor reports each holder's cores at 0 % utilization (no figure
for this model is published); neuron-explorer prints no summary (its summary's shape is not
documented at this release). The checks it cannot decide are in UNDECIDABLE_CHECKS. The tools a
notebook does not run (neuron-ls, neuron-top) are present only as names for notebook 00's
checklist.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TOOLS = {"neuron_parallel_compile": "neuron_parallel_compile.py", "neuron-monitor": "neuron_monitor.py",
         "neuron-explorer": "neuron_explorer.py", "neuronx-cc": "neuronx_cc.py",
         "neuron-ls": "named_only.py", "neuron-top": "named_only.py"}
# The checks this double cannot decide (read by the product's check() through its platform seam,
# never on a real machine), by label, with why. The NeuronCore's stochastic rounding
# (NEURON_RT_STOCHASTIC_ROUNDING_EN, docs/sources.md) is hardware the double lacks: its XLA on the
# CPU rounds to nearest, so the BF16 recipe that relies on it stalls here as on any such device.
UNDECIDABLE_CHECKS = {
    "test-accuracy gap of stochastic rounding to FP32":
        "stochastic rounding is NeuronCore hardware; the double's CPU rounds to nearest",
}
UBUNTU_24_04 = 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n'


def neuron_pins(requirements: Path = REPO / "requirements-neuron.txt") -> dict[str, str]:
    """torch-neuronx's and neuronx-cc's pinned versions (what the DLAMI's venv holds)."""
    return dict(re.findall(r"^([\w-]+)==(\S+)", requirements.read_text(), re.M))


def _dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def build_instance(root: Path) -> dict[str, str]:
    """Lay out a trn1.2xlarge under `root`; return the environment variables that select it."""
    root = Path(root)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "dev/neuron0").touch()
    device = root / "sys/devices/virtual/neuron_device/neuron0"
    device.mkdir(parents=True, exist_ok=True)
    (device / "core_count").write_text("2\n")
    dmi = root / "sys/devices/virtual/dmi/id"
    dmi.mkdir(parents=True, exist_ok=True)
    (dmi / "product_name").write_text("trn1.2xlarge\n")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text(UBUNTU_24_04)
    (root / "etc/workbook").mkdir(exist_ok=True)
    (root / "etc/workbook/undecidable-checks.json").write_text(json.dumps(UNDECIDABLE_CHECKS))
    (root / "var/tmp/neuron-compile-cache").mkdir(parents=True, exist_ok=True)
    site = root / "site"
    site.mkdir(exist_ok=True)
    for package in ("torch_neuronx", "libneuronxla", "trn1_platform", "sitecustomize.py"):
        if not (site / package).exists():
            (site / package).symlink_to(HERE / package)
    for name, version in neuron_pins().items():
        _dist_info(site, name, version)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, script in TOOLS.items():
        tool = bin_dir / name
        tool.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.path.insert(0, {str(site)!r})\n"
                        f"runpy.run_path({str(HERE / 'tools' / script)!r}, run_name='__main__')\n")
        tool.chmod(0o755)
    return {"WORKBOOK_PLATFORM_ROOT": str(root),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}


# The clock the wrapper's lines print in every test on the instance (TRN1_DOUBLE_CLOCK,
# trn1_platform/rules.py): its fields hold the numbers tests look for in that output (15.0, 0.0,
# 1, 2, 5), so an assertion that reads a whole log instead of its own lines fails on every run,
# not only in the second whose seconds happen to match.
COLLIDING_CLOCK = "2026-12-02 01:15:15.000015"


def instance_env(root: Path, **extra: str) -> dict[str, str]:
    """This process's environment on the instance under `root` (laid out there): PJRT_DEVICE
    dropped, as a trn1's shell has none, the wrapper's clock fixed at COLLIDING_CLOCK, then `extra`
    (knobs such as TRN1_DOUBLE_COMPILE_SECONDS)."""
    return {**{k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}, **build_instance(root),
            "TRN1_DOUBLE_CLOCK": COLLIDING_CLOCK, **extra}


def journal(root: Path) -> list[dict]:
    """The runtime events every process on the instance recorded (reserved, refused, compiling,
    compiled, failed, killed, waiting, cached, cached-failure, extracted, trial,
    reduced-outside-graph), in order."""
    log = Path(root) / "var/log/trn1-double.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# "<date> <time>:  <pid>  " before a wrapper or neuron_parallel_compile line (rules.stamped), then
# "<LEVEL> ||<TAG>||: "; a test reads what follows, never the clock's or the pid's digits.
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: +\d+ +")
TAG = re.compile(r"^(?:[A-Z]+ \|\|[A-Z_]+\|\|: |\[[A-Z]+\]: )")  # 2024's "INFO ||…||: ", 2026's "[INFO]: "


def messages(output: str) -> list[str]:
    """Each line of `output`, the stamp and the level-and-tag cut off where a line has them."""
    return [TAG.sub("", STAMP.sub("", line)) for line in output.splitlines()]


def printed_numbers(output: str) -> list[float]:
    """The lines of `output` that are one number alone, as a script's print(x.item()) writes them."""
    numbers = []
    for line in output.splitlines():
        try:
            numbers.append(float(line))
        except ValueError:
            pass
    return numbers

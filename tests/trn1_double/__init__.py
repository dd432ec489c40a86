"""A test double of one trn1.2xlarge: the Neuron platform's cited rules, with XLA on the CPU.

`build_instance(root)` lays out the instance under `root` and returns the environment that
puts a process on it: WORKBOOK_PLATFORM_ROOT (the product's one seam,
mnist_mlp/common/platform_paths.py), PYTHONPATH (this folder's `torch_neuronx`, with torch-neuronx's
and neuronx-cc's pinned metadata) and PATH (the Neuron tools a notebook runs). Each rule names
its row in docs/sources.md:

| rule | docs/sources.md row | where |
|---|---|---|
| 2 NeuronCores on one device | "A trn1 Trainium chip has two NeuronCores" | `build_instance` (sysfs core_count) |
| a process's runtime reserves every core it can see, until it exits | "By default a process's Neuron runtime reserves every NeuronCore present, until the process exits" | `torch_neuronx/runtime.py` |
| NEURON_RT_VISIBLE_CORES narrows it: one index or one range | "`NEURON_RT_VISIBLE_CORES` takes one index or one range" | `trn1_platform/rules.py` |
| a torchrun worker gets its LOCAL_RANK | "torch-xla 2.9 sets `NEURON_RT_VISIBLE_CORES` only for processes torchrun … starts" | torch-xla's own `configure_pjrt_environment`, called by `runtime.install` |
| a held core: the start fails with the runtime's line | "The runtime's log line when a core is in use" | `runtime.reserve_cores` |
| one persistent cache, default path, `--cache_dir` over `NEURON_COMPILE_CACHE_URL` | "`NEURON_CC_FLAGS`, the cache URL, stochastic rounding variables" | `rules.cache_root` |
| a cached graph is read ("Using a cached neff"), a new one written as `MODULE_<hash>+<flags>/`, a cached failure stops the run | "A cache hit, and the cache key" | `trn1_platform/compile_cache.py` |
| `xm.optimizer_step` all-reduces over the workers | "`xm.optimizer_step` all-reduces the gradients across workers" | `runtime.reduce_gradients` |
| `neuron_parallel_compile`: a trial in graph-extraction mode, then every graph compiled | "`neuron_parallel_compile` commands", "Skip data-dependent code during graph extraction" | `tools/neuron_parallel_compile.py` |

Where the sources are silent the double does the plainest thing and says so: no compile ever
fails (no source says which would); neuron-monitor reports each holder's cores at 0 %
utilization (no figure for this model is published); neuron-explorer prints no summary (its
summary's shape is not documented at this release). The tools a notebook does not run
(neuron-ls, neuron-top) are present only as names for notebook 00's checklist.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TOOLS = {"neuron_parallel_compile": "neuron_parallel_compile.py", "neuron-monitor": "neuron_monitor.py",
         "neuron-explorer": "neuron_explorer.py", "neuronx-cc": "neuronx_cc.py",
         "neuron-ls": "named_only.py", "neuron-top": "named_only.py"}
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
    (root / "var/tmp/neuron-compile-cache").mkdir(parents=True, exist_ok=True)
    site = root / "site"
    site.mkdir(exist_ok=True)
    for package in ("torch_neuronx", "trn1_platform"):
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


def journal(root: Path) -> list[dict]:
    """The runtime events every process on the instance recorded (reserved, refused, compiled,
    cached, extracted), in order."""
    import json

    log = Path(root) / "var/log/trn1-double.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

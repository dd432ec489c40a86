"""The environment: requirements.txt and environment.yml agree and the venv has what they say; the
Neuron pins are Neuron 2.31's; commands the workbook starts find the venv's tools by name; two-node
command lines carry the EFA variables."""
import importlib.metadata
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.launch.processes import run_streaming, venv_bin_first
from helpers.launch.torchrun import efa_env, torchrun_command_line
from tests.paths import REPO_ROOT

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)$")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_pins():
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            m = PIN.match(line)
            assert m, f"requirements.txt: {line!r} is not pinned exactly (name==version)"
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def conda_pins():
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]
    return {normalize(m.group(1)): m.group(2) for m in map(PIN.match, pip_section)}


def test_the_stack_is_pinned_exactly():
    pins = requirement_pins()
    assert pins["torch"] == "2.9.0" and pins["torch-xla"] == "2.9.0"
    assert pins["torchvision"] == "0.24.0"
    for tool in ("jupyterlab", "ipywidgets", "matplotlib", "tqdm", "numpy", "pytest", "nbval"):
        assert tool in pins


def test_environment_yml_names_the_same_pins():
    assert conda_pins() == requirement_pins()


def test_installed_versions_match_the_pins():
    for name, version in requirement_pins().items():
        installed = importlib.metadata.version(name)
        assert installed.split("+")[0] == version, f"{name}: installed {installed}, pinned {version}"


def test_neuron_extras_are_neuron_2_31_exactly():
    text = (REPO_ROOT / "requirements-neuron.txt").read_text()
    assert "--extra-index-url https://pip.repos.neuron.amazonaws.com" in text
    pins = {normalize(m.group(1)): m.group(2)
            for m in map(PIN.match, (line.split("#")[0].strip() for line in text.splitlines())) if m}
    # The last torch-neuronx for PyTorch/XLA and its compiler, as the Neuron 2.31 package list has them.
    assert pins == {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.26.6360.0"}
    assert "Neuron 2.31" in text


# ---- tools on PATH: what the workbook starts finds the venv's torchrun / neuronx-cc by name

VENV_BIN = Path(sys.executable).parent  # not resolved: the venv's python is a symlink out of it
BARE_PATH = "/usr/bin:/bin"  # a PATH like JupyterLab's when the venv was never activated


def test_a_bare_path_does_not_find_the_venvs_torchrun():
    # The failure mode itself, so the next test shows something: without help, no torchrun.
    assert not any(str(VENV_BIN) == p for p in BARE_PATH.split(":"))
    found = subprocess.run(["sh", "-c", "command -v torchrun"], env={"PATH": BARE_PATH},
                           capture_output=True, text=True)
    assert found.returncode != 0 and found.stdout == ""


def test_run_streaming_puts_the_venv_first_for_what_it_starts():
    result = run_streaming(["sh", "-c", "command -v torchrun; echo \"$PATH\""], timeout=30,
                           env={"PATH": BARE_PATH}, on_line=lambda _: None)
    torchrun, path = result.lines
    assert torchrun == str(VENV_BIN / "torchrun")
    assert path == f"{VENV_BIN}:{BARE_PATH}"


def test_venv_bin_first_keeps_the_rest_in_order_once():
    other = "/opt/aws/neuron/bin"
    assert venv_bin_first(f"{other}:{VENV_BIN}:/usr/bin") == f"{VENV_BIN}:{other}:/usr/bin"
    assert venv_bin_first(None) == str(VENV_BIN)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_starts_jupyter_with_the_venv_first_on_path():
    plan = subprocess.run(["make", "-n", "--no-print-directory", "lab"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout.splitlines()
    jupyter = next(line for line in plan if "jupyter lab" in line)
    assert jupyter.startswith(f"PATH={REPO_ROOT / '.venv' / 'bin'}:$PATH ")


# ---- two nodes over EFA: the environment the Neuron multi-node guide sets, on the command line

TWO_NODES = dict(nproc_per_node=32, nnodes=2, master_addr="10.0.0.1", master_port=29500)


@pytest.mark.parametrize("kernel, fork_safe", [
    ("6.8.0-1015-aws", False),                   # Ubuntu 24.04
    ("5.15.0-1063-aws", False),                  # Ubuntu 22.04
    ("5.10.217-205.860.amzn2.x86_64", True),     # Amazon Linux 2: libfabric needs FI_EFA_FORK_SAFE
])
def test_two_node_command_lines_carry_the_efa_variables(kernel, fork_safe):
    lines = [torchrun_command_line("mnist_mlp/train_torchrun.py", ["--epochs", "4"], node_rank=rank,
                                   kernel_release=kernel, **TWO_NODES) for rank in (0, 1)]
    efa = "FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1 " + ("FI_EFA_FORK_SAFE=1 " if fork_safe else "")
    for rank, line in enumerate(lines):
        assert line == (f"{efa}torchrun --nproc_per_node=32 --nnodes=2 --node_rank={rank} "
                        "--master_addr=10.0.0.1 --master_port=29500 mnist_mlp/train_torchrun.py "
                        "--epochs 4")
        # and a shell runs it as such: the variables reach torchrun's environment
        words = shlex.split(line)
        assert words[words.index("torchrun") - 1].startswith("FI_")
    assert efa_env(kernel) == dict(word.split("=") for word in efa.split())


def test_one_node_command_line_has_no_efa_variables_and_bad_kernels_are_refused():
    assert torchrun_command_line("x.py", nproc_per_node=2) == "torchrun --nproc_per_node=2 x.py"
    with pytest.raises(ValueError, match="expected `uname -r` output"):
        efa_env("unknown")

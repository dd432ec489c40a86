"""A precompile trial (--steps-this-run N) must trace exactly the graphs of the real run: on
Trainium every graph the trial missed is a neuronx-cc compile in the middle of training.
PT_XLA_DEBUG_LEVEL=1 makes torch_xla print a Graph Hash per compile; the sets must match."""
import subprocess
import sys

import pytest

from helpers.xla_metrics import graph_hashes
from tests.conftest import REPO_ROOT

SHORT, LONG = 5, 120  # LONG reads the loss history at steps 1, 50 and 100; SHORT at step 1 only


def hashes(argv, env, tmp_path):
    env = {**env, "PT_XLA_DEBUG_LEVEL": "1"}
    proc = subprocess.run([*argv, "--checkpoint-dir", str(tmp_path)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    found = graph_hashes(output)
    assert found, "PT_XLA_DEBUG_LEVEL=1 printed no Graph Hash: " + output[-2000:]
    return found


def test_graph_hashes_parses_torch_xla_compilation_analysis():
    text = ("Compilation Analysis: Graph Info: \nCompilation Analysis:   Graph Hash: ad6b87932388\n"
            "Compilation Analysis:   Number of Graph Inputs: 9\n")
    assert graph_hashes(text) == ["ad6b87932388"]
    assert graph_hashes(text.splitlines()) == ["ad6b87932388"]


SCRIPTS = {
    "train.py": [sys.executable, "mnist_mlp/train.py"],
    "train.py --device-loader": [sys.executable, "mnist_mlp/train.py", "--device-loader"],
    "train_torchrun.py x2": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc_per_node=2", "mnist_mlp/train_torchrun.py"],
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_short_trial_compiles_the_graphs_of_a_longer_run(script, script_env, mnist_root, tmp_path):
    argv = SCRIPTS[script]
    trial = hashes([*argv, "--steps-this-run", str(SHORT)], script_env, tmp_path / "short")
    real = hashes([*argv, "--steps-this-run", str(LONG)], script_env, tmp_path / "long")
    assert set(trial) == set(real), (
        f"{script}: the trial compiled {sorted(set(trial))}, the longer run {sorted(set(real))}: "
        f"some graph depends on the run length")

"""A precompile trial (--steps-this-run N) must trace exactly the graphs of the real run: on
Trainium every graph the trial missed is a neuronx-cc compile in the middle of training.
PT_XLA_DEBUG_LEVEL=1 makes torch_xla print a Graph Hash per compile; the sets must match.
The runs are shared (tests/script_runs.py): the long ones also serve test_scripts.py."""
import pytest

from helpers.inside.lazy_metrics import graph_hashes
from mnist_mlp.common.tracking import LOSS_EVERY


def test_graph_hashes_parses_torch_xla_compilation_analysis():
    text = ("Compilation Analysis: Graph Info: \nCompilation Analysis:   Graph Hash: ad6b87932388\n"
            "Compilation Analysis:   Number of Graph Inputs: 9\n")
    assert graph_hashes(text) == ["ad6b87932388"]
    assert graph_hashes(text.splitlines()) == ["ad6b87932388"]


def hashes(run):
    found = graph_hashes(run.output)
    assert found, f"{run.name}: PT_XLA_DEBUG_LEVEL=1 printed no Graph Hash: {run.output[-2000:]}"
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["xla", "xla device-loader", "torchrun x2"])
def test_a_short_trial_compiles_the_graphs_of_a_longer_run(script, script_runs):
    trial = hashes(script_runs[f"{script} trial"])
    long = script_runs[f"{script} long"]
    # past a loss read the trial never made: reads go through a step closure, never a graph
    assert f"step {LOSS_EVERY}/" in long.output, long.output[-2000:]
    real = hashes(long)
    assert set(trial) == set(real), (
        f"{script}: the trial compiled {sorted(set(trial))}, the longer run {sorted(set(real))}: "
        f"some graph depends on the run length")

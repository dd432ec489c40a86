"""Two torchrun "nodes" on the loopback address (helpers.launch.nodes.run_nodes): the real
train_torchrun.py, one worker per node, against two workers on one node (the session's
"torchrun x2 trial" run, tests/script_runs.py); and a node whose partner never comes stops in
bounded time, naming the missing node."""
import time

import pytest

from helpers.launch.nodes import missing_node_message, run_nodes, side_by_side
from helpers.launch.processes import CommandFailed
from helpers.launch.torchrun import torchrun_argv
from tests.paths import REPO_ROOT
from tests.script_runs import TRIAL_STEPS, assert_trained_as

SCRIPT = "mnist_mlp/train_torchrun.py"
# The steps of the one-node run it is compared with ("torchrun x2 trial"): five all-reduced
# steps, enough for replicas that were not reduced across the nodes to differ.
STEPS = ["--steps-this-run", str(TRIAL_STEPS)]
# The smallest rendezvous timeout that is still a real wait (node 1 alone waits it twice).
RDZV_TIMEOUT = 2
# Measured on the shared 2-core machine: node 0 alone stops about 7 s after the rendezvous
# timeout, node 1 alone 3-9 s after two timeouts (torchrun's start and its traceback are most
# of that). The bounds leave 5x room for load; a hang would reach run_nodes' 300 s timeout.
NODE0_ALONE_BOUND_S = RDZV_TIMEOUT + 45
NODE1_ALONE_BOUND_S = 2 * RDZV_TIMEOUT + 65
# Node 1's head start when it is started first: long enough for several refused connections.
HEAD_START_S = 5


@pytest.mark.e2e  # two torchrun launches, and the session's two-worker run
def test_two_nodes_train_the_same_model_as_two_workers_on_one_node(tmp_path, script_env, script_runs):
    """The harder start order: node 1 first waits (retrying its connection to node 0's store)
    for node 0, started HEAD_START_S later, well within the rendezvous timeout. (Node 0 first,
    the default, is notebook 04's run: its committed output, compared in every session.)"""
    shown = []
    started = time.monotonic()
    nodes = run_nodes(SCRIPT, [*STEPS, "--checkpoint-dir", str(tmp_path / "two-nodes")],
                      timeout=600, rdzv_timeout=120, env=script_env, cwd=REPO_ROOT,
                      on_line=shown.append, first=1, head_start=HEAD_START_S)
    assert {rank: r.returncode for rank, r in nodes.items()} == {0: 0, 1: 0}
    assert shown[1].startswith("node 1 started first")
    assert time.monotonic() - started > HEAD_START_S, "node 0 really started later"
    assert set(nodes[0].lines_by_rank()) == {0} and set(nodes[1].lines_by_rank()) == {1}
    assert any(line.startswith("Replicas equal") for line in nodes[0].lines_by_rank()[0])
    assert shown[0].startswith("node 0") and "│ node 1" in shown[0]
    assert any(line.startswith(" " * 10) and "[rank1]" in line for line in shown), "node 1 right"

    two = assert_trained_as(tmp_path / "two-nodes", script_runs["torchrun x2 trial"])  # STEPS too
    assert (two["world_size"], two["steps"]) == (2, TRIAL_STEPS)


@pytest.mark.e2e
@pytest.mark.parametrize("present, missing, bound", [(0, "node 1 never joined", NODE0_ALONE_BOUND_S),
                                                     (1, "node 0, which hosts the rendezvous",
                                                      NODE1_ALONE_BOUND_S)])
def test_a_node_alone_stops_in_bounded_time_naming_the_missing_node(tmp_path, script_env,
                                                                    present, missing, bound):
    started = time.monotonic()
    with pytest.raises(CommandFailed) as failed:
        run_nodes(SCRIPT, [*STEPS, "--checkpoint-dir", str(tmp_path)], node_ranks=(present,),
                  timeout=300, rdzv_timeout=RDZV_TIMEOUT, env=script_env, cwd=REPO_ROOT,
                  on_line=lambda line: None)
    elapsed = time.monotonic() - started
    assert elapsed < bound, f"node {present} alone took {elapsed:.0f} s to stop"
    assert failed.value.summary.startswith(f"Node {present} stopped") and missing in failed.value.summary
    assert "Start" in failed.value.summary, "says what to do"
    assert not list(tmp_path.glob("*.json")), "nothing written"


def test_node_command_lines_carry_the_rendezvous_and_its_timeout():
    argv = torchrun_argv(SCRIPT, ["--epochs", "1"], nproc_per_node=1, nnodes=2, node_rank=1,
                         master_addr="127.0.0.1", master_port=29611, rdzv_timeout=30, python="py")
    assert argv == ["py", "-m", "torch.distributed.run", "--nproc_per_node=1", "--nnodes=2",
                    "--node_rank=1", "--master_addr=127.0.0.1", "--master_port=29611",
                    "--rdzv_conf=timeout=30", "--tee=3", SCRIPT, "--epochs", "1"]
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="rdzv_timeout"):
            torchrun_argv(SCRIPT, nproc_per_node=1, nnodes=2, node_rank=0, master_addr="h",
                          rdzv_timeout=bad)
    with pytest.raises(ValueError, match="node_ranks"):
        run_nodes(SCRIPT, node_ranks=(0, 0), timeout=10)
    with pytest.raises(ValueError, match="first"):
        run_nodes(SCRIPT, node_ranks=(0,), first=1, timeout=10)


def test_missing_node_messages_read_torchrun_own_errors():
    # torchrun 2.9's static rendezvous, as printed by the runs above
    node0 = ["torch.distributed.DistStoreError: Timed out after 16 seconds waiting for clients. "
             "1/2 clients joined."]
    assert "node 1 never joined" in missing_node_message(node0, 0, 2)
    node1 = ["torch.distributed.DistNetworkError: The client socket has timed out after 15000ms "
             "while trying to connect to (10.0.0.1, 29500)."]
    message = missing_node_message(node1, 1, 2)
    assert "node 0" in message and "10.0.0.1:29500" in message and "security group" in message
    assert missing_node_message(["Traceback ...", "ValueError: bad"], 0, 2) is None
    # Wrapped between words, never inside one (a word wider than the column overflows it).
    assert side_by_side(1, "ab cd efgh", width=5).splitlines() == ["      │ ab cd", "      │ efgh"]
    assert side_by_side(0, "x" * 10 + " y", width=4).splitlines() == ["xxxxxxxxxx │", "y    │"]


def test_each_loopback_node_takes_its_own_neuroncores():
    """On one trn1 every node's worker 0 would otherwise ask for core 0, and the runtime refuses
    the second (the trn1 double's pass ran into it)."""
    from helpers.launch.nodes import node_cores

    assert [node_cores(r, 1) for r in (0, 1)] == [{"NEURON_RT_VISIBLE_CORES": "0"},
                                                  {"NEURON_RT_VISIBLE_CORES": "1"}]
    assert node_cores(1, 2) == {"NEURON_RT_VISIBLE_CORES": "2-3"}

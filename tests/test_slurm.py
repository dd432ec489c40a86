"""train_torchrun.py as a Slurm job (deploy/slurm/train_torchrun.sbatch) on a real Slurm: a
controller and two slurmd nodes on this machine (tests/slurm_cluster.py). The job trains on
the CPU stand-in across the two nodes, one worker each, and gives the model two workers on one
node give, weight for weight (as tests/test_two_nodes.py checks nodes started by hand). A job
whose node dies, or whose rendezvous times out, ends FAILED in Slurm's own words, with the
workbook's sentence naming the node, and leaves nothing running; a job that loses a node
(its slurmd and everything under it) ends NODE_FAIL, Slurm naming that node. Where Slurm cannot be
installed or started the e2e tests are skipped saying why (under CI=true they fail, but for
a runner that is not root, as GitHub's hosted one: slurmd must run as root)."""
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers.launch.slurm import failure_report, node_plan
from tests.neuron_trees import TRN1_2XLARGE, TRN1_32XLARGE, neuron_host
from tests.paths import REPO_ROOT
from tests.script_runs import TRIAL_STEPS, assert_trained_as, script_environment
from tests.slurm_cluster import NODES, ClusterUnavailable, NotRoot, local_cluster, processes_of

SCRIPT = "deploy/slurm/train_torchrun.sbatch"
JOB_TIMEOUT_S = 240  # a hang would show here; the jobs take 5-50 s on the shared 2-core machine
PROCESS_TIMEOUT_S = 60

pytestmark = pytest.mark.xdist_group("slurm")  # one cluster, on one xdist worker


@pytest.fixture(scope="module")
def cluster():
    try:
        with local_cluster() as started:
            yield started
        assert not processes_of(started.conf), "the local cluster left processes running"
    except ClusterUnavailable as problem:
        if os.environ.get("CI") == "true" and not isinstance(problem, NotRoot):
            pytest.fail(f"the Slurm test cannot run (CI=true): {problem}", pytrace=False)
        pytest.skip(f"no local Slurm cluster: {problem}")


def submit(cluster, tmp_path, args, **env):
    job_env = {**script_environment(), "CHECKPOINT_DIR": str(tmp_path), "PYTHON": sys.executable,
               **env}
    return cluster.sbatch(SCRIPT, args, job_env, cwd=REPO_ROOT)


def wait_for(find, what, timeout=PROCESS_TIMEOUT_S, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(interval)
    raise AssertionError(f"no {what} after {timeout} s")


def assert_nothing_left(cluster, job_id):
    """No process of the job is left (its scripts, srun, torchrun, workers): Slurm's stepd may
    take a moment to reap them after the job's end."""
    deadline = time.monotonic() + 60  # a guard: the loop ends once they are gone
    while (left := cluster.job_processes(job_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left running: {[p.pid for p in left]}"


@pytest.mark.e2e
def test_a_two_node_job_trains_the_model_two_workers_on_one_node_train(cluster, tmp_path,
                                                                        script_runs, mnist_root):
    job_id = submit(cluster, tmp_path, ["--steps-this-run", str(TRIAL_STEPS)])
    job = cluster.wait(job_id, JOB_TIMEOUT_S)
    out = cluster.output(job_id)
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), out
    # The rendezvous at node 0's NodeAddr, on the port the script derives from the job id.
    assert f"rendezvous at {NODES['n0']}:{20000 + job_id % 20000}, results in " in out
    assert "0: node 0 (n0): 1 worker(s)" in out and "1: node 1 (n1): 1 worker(s)" in out
    # Global rank 1 ran on node 1 (srun's label), rank 0 on node 0; the reduce was gloo's.
    assert "1: [rank1]: ----------End Training" in out and "0: [rank0]: Test accuracy" in out
    labels = set(re.findall(r"^\s*(\d+): \[rank(\d+)\]", out, re.M))  # (srun's task, the rank)
    assert labels == {("0", "0"), ("1", "1")}, labels
    assert "0: [rank0]: Gradient all-reduce: over gloo" in out
    assert "0: [rank0]: Replicas equal" in out
    # Rank 0 alone wrote, once, into the shared directory (and the script its nodes' log).
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_torchrun_w2.pt", "nodes.log",
                                            "results_torchrun_w2.json"]
    assert_nothing_left(cluster, job_id)

    two = assert_trained_as(tmp_path, script_runs["torchrun x2 trial"])
    assert (two["world_size"], two["steps"], two["gradient_reduce"]) == (2, TRIAL_STEPS, "gloo")


def workers_of(cluster, job_id, node):
    return [p for p in cluster.job_processes(job_id, node) if "LOCAL_RANK" in p.environ()]


@pytest.mark.e2e
def test_a_job_whose_node_dies_fails_naming_that_node(cluster, tmp_path, mnist_root):
    job_id = submit(cluster, tmp_path, ["--epochs", "1"])
    # Node 1 dies as the job sees it: its torchrun and its worker, killed at once, once
    # training has started on both nodes.
    wait_for(lambda: workers_of(cluster, job_id, 1) and workers_of(cluster, job_id, 0),
             "worker on both nodes", interval=0.2)
    doomed = cluster.job_processes(job_id, 1)
    for proc in doomed:
        proc.send_signal(signal.SIGKILL)
    job = cluster.wait(job_id, JOB_TIMEOUT_S)
    out = cluster.output(job_id)
    assert job["JobState"] == "FAILED" and job["ExitCode"] != "0:0", out
    assert "srun: error: n1: task 1: Killed" in out
    assert "error: Node 1 (n1) stopped first: its torchrun was stopped (Killed)" in out
    assert not (tmp_path / "results_torchrun_w2.json").exists()
    assert_nothing_left(cluster, job_id)


@pytest.mark.e2e
def test_a_job_that_loses_a_node_ends_node_fail_naming_it(cluster, tmp_path, mnist_root):
    """Node 1 is lost while the job trains, as an instance is lost: its slurmd, its slurmstepd
    and the job's tasks on it stop at once (killing slurmd alone would leave the others
    running). The controller marks it down (SlurmdTimeout in the test's slurm.conf), the job
    ends NODE_FAIL, Slurm names the node, and nothing of the job is left on node 0. Node 1 then
    comes back, for the tests after this one."""
    job_id = submit(cluster, tmp_path, ["--epochs", "1"])
    wait_for(lambda: workers_of(cluster, job_id, 1) and workers_of(cluster, job_id, 0),
             "worker on both nodes", interval=0.2)
    tasks = {p.pid for p in cluster.job_processes(job_id, 1)}  # torchrun, its worker
    try:
        lost = cluster.lose_node("n1")
        assert {"slurmd", "slurmstepd"} <= set(lost.values()) and tasks <= set(lost), lost
        job = cluster.wait(job_id, JOB_TIMEOUT_S)
        out = cluster.output(job_id)
        assert (job["JobState"], job["Reason"]) == ("NODE_FAIL", "NodeDown"), out
        assert job["NodeList"] == "n[0-1]" and job["BatchHost"] == "n0"
        node = cluster.node("n1")
        assert node["State"].startswith("DOWN") and node["Reason"].startswith("Not responding"), node
        assert "srun: error: Node failure on n1" in out
        assert f"JOB {job_id} ON n0 CANCELLED AT" in out and "DUE TO NODE FAILURE" in out
        assert not (tmp_path / "results_torchrun_w2.json").exists()
        assert_nothing_left(cluster, job_id)
        # Node 0 keeps its slurmd alone: no slurmstepd, no task of ours.
        wait_for(lambda: [p.name() for p in cluster.node_processes("n0")] == ["slurmd"],
                 "node 0 back to its slurmd alone", timeout=60, interval=0.2)  # a guard
    finally:  # whatever failed above: no job left holding the nodes, node 1 back
        cluster.run(["scancel", str(job_id)], check=False)
        cluster.restore_node("n1")


@pytest.mark.e2e
def test_a_job_whose_rendezvous_times_out_fails_naming_the_missing_node(cluster, tmp_path,
                                                                        mnist_root):
    job_id = submit(cluster, tmp_path, ["--steps-this-run", str(TRIAL_STEPS)], RDZV_TIMEOUT="3")
    # Node 1 hangs before it reaches the rendezvous: its task is stopped (SIGSTOP) the moment
    # it appears, before it can start torchrun.
    hung = wait_for(lambda: cluster.job_processes(job_id, 1), "process on node 1")
    for proc in hung:
        proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: all(not p.is_running() or p.status() == psutil.STATUS_STOPPED
                         for p in hung), "stopped node 1", timeout=5)
    job = cluster.wait(job_id, JOB_TIMEOUT_S)
    out = cluster.output(job_id)
    assert job["JobState"] == "FAILED" and job["ExitCode"] != "0:0", out
    # torchrun's words (it counts the timeout's last second up), then the workbook's.
    waited = re.search(r"^0: .*DistStoreError: Timed out after (\d+) seconds waiting for "
                       r"clients\. 1/2 clients joined", out, re.M)
    assert waited and int(waited.group(1)) >= 3, out
    assert (f"error: The job stopped at the rendezvous: node 0 (n0) waited {waited.group(1)} s "
            f"and node 1 (n1) never joined (1 of 2 nodes came)") in out
    assert_nothing_left(cluster, job_id)


@pytest.mark.e2e
def test_a_job_submitted_outside_a_clone_every_node_sees_stops_before_training(cluster, tmp_path):
    """Submitted from a directory without the repository (as from a clone on one node's own
    disk): the check before training fails on the nodes and says what to do."""
    elsewhere = tmp_path / "not-a-clone"
    elsewhere.mkdir()
    job_env = {**script_environment(), "CHECKPOINT_DIR": str(tmp_path / "out"),
               "PYTHON": sys.executable}
    job_id = cluster.sbatch(str(REPO_ROOT / SCRIPT), [], job_env, cwd=elsewhere)
    job = cluster.wait(job_id, JOB_TIMEOUT_S)
    out = cluster.output(job_id)
    assert (job["JobState"], job["ExitCode"]) == ("FAILED", "1:0"), out
    assert f"error: {elsewhere} or {tmp_path / 'out'} is missing on a node: clone the " \
           "repository on the cluster's shared file system and submit from there" in out
    assert "rendezvous at" not in out, "no torchrun started"
    assert not list((tmp_path / "out").iterdir()), "its check leaves nothing behind"
    assert_nothing_left(cluster, job_id)


# -- what each node runs, and the failure sentence, without a cluster ------------------------

def node_env(tmp_path, instance, cores, **env):
    """`python -m helpers.launch.slurm node-env` as torchrun_node.sh runs it, on a host laid out
    as `instance` (tests/neuron_trees.py)."""
    root = neuron_host(tmp_path / instance, instance, cores)
    run_env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "WORKERS_PER_NODE")}
    run_env.update(WORKBOOK_PLATFORM_ROOT=str(root), **env)
    done = subprocess.run([sys.executable, "-m", "helpers.launch.slurm", "node-env"], env=run_env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_a_trn1_32xlarge_node_runs_32_workers_with_the_efa_variables(tmp_path):
    code, lines, _ = node_env(tmp_path, *TRN1_32XLARGE)
    assert code == 0
    assert lines[:2] == ["workers=32", "neuron_cores=32"]
    assert "export FI_PROVIDER=efa" in lines and "export FI_EFA_USE_DEVICE_RDMA=1" in lines
    assert node_plan({}, "5.10.0-1.amzn2", *_tree(tmp_path, TRN1_32XLARGE)).env[
        "FI_EFA_FORK_SAFE"] == "1"
    assert "FI_EFA_FORK_SAFE" not in node_plan({}, "6.8.0-1015-aws",
                                               *_tree(tmp_path, TRN1_32XLARGE)).env
    assert node_plan({"WORKERS_PER_NODE": "8"}, "6.8.0", *_tree(tmp_path, TRN1_32XLARGE)).workers == 8


def _tree(tmp_path, instance):
    root = tmp_path / f"tree-{instance[0]}"
    if not root.exists():
        neuron_host(root, *instance)
    return root / "sys/devices/virtual/neuron_device", root / "dev"


def test_a_node_without_neuroncores_runs_the_stand_in_one_worker_without_efa(tmp_path):
    code, lines, _ = node_env(tmp_path, "c5.xlarge", [])
    assert (code, lines) == (0, ["workers=1", "neuron_cores=0"])
    # PJRT_DEVICE=CPU on a trn1 forces the stand-in: no EFA, one worker.
    forced = node_plan({"PJRT_DEVICE": "CPU"}, "6.8.0", *_tree(tmp_path, TRN1_2XLARGE))
    assert (forced.workers, forced.neuron_cores, forced.env) == (1, 2, {})
    code, lines, err = node_env(tmp_path, "m5.large", [], WORKERS_PER_NODE="two")
    assert code == 1 and not lines and "WORKERS_PER_NODE='two'" in err


# As the jobs above print them (srun 22.05, torchrun 2.9), with `srun --label`.
NODE_KILLED = ["0: [rank0]: ----------Training ---------------",
               "srun: error: n1: task 1: Killed",
               "srun: launch/slurm: _step_signal: Terminating StepId=3.0",
               "0: slurmstepd-n0: error: *** STEP 3.0 ON n0 CANCELLED AT 2026-11-26T18:59:45 ***",
               "srun: error: n0: task 0: Terminated"]
NODE0_ALONE = ["0: [rank0]: torch.distributed.DistStoreError: Timed out after 3 seconds waiting "
               "for clients. 1/2 clients joined.",
               "srun: error: n0: task 0: Exited with exit code 1",
               "srun: error: n1: task 1: Killed"]


def test_the_failure_sentence_names_the_node_that_stopped_the_job():
    assert failure_report(NODE_KILLED, ["n0", "n1"]).startswith(
        "Node 1 (n1) stopped first: its torchrun was stopped (Killed)")
    rendezvous = failure_report(NODE0_ALONE, ["n0", "n1"])
    assert "node 0 (n0) waited 3 s and node 1 (n1) never joined (1 of 2 nodes came)" in rendezvous
    assert "scontrol show node n1" in rendezvous
    four = failure_report([NODE0_ALONE[0].replace("1/2", "2/4")], ["a", "b", "c", "d"])
    assert "2 of nodes 1-3 (b, c, d) never joined" in four
    client = failure_report(["1: [rank1]: DistNetworkError: The client socket has timed out after "
                             "3000ms while trying to connect to (10.0.0.5, 23001)."], ["a", "b"])
    assert "node 1 (b) never reached node 0 (a), which hosts it at 10.0.0.5:23001" in client
    assert "security group" in client
    failed = failure_report(["srun: error: b: task 1: Exited with exit code 1"], ["a", "b"])
    assert failed.startswith("Node 1 (b) stopped first: its torchrun failed (exited with exit code 1)")
    lost = failure_report(["srun: error: Node failure on b"], ["a", "b"])
    assert lost.startswith("Slurm lost node 1 (b) while the job ran")
    assert failure_report([], ["a"]).startswith("The job failed before any node's torchrun")

"""End-to-end: the three training scripts run as a user runs them, on the CPU stand-in."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT

SAMPLE_LINES = [
    "----------Training ---------------",
    "Train throughput (iter/sec): ",
    "Final loss is ",
    "----------End Training ---------------",
    "Test accuracy: ",
]


def run(args, env, timeout=600):
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return output


def torchrun(nproc, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}", "mnist_mlp/train_torchrun.py", *args]


def assert_sample_lines_in_order(output):
    positions = [output.find(line) for line in SAMPLE_LINES]
    assert -1 not in positions, output
    assert positions == sorted(positions), output


def assert_no_deprecation_warning(output):
    assert "DeprecationWarning" not in output, output
    assert "Warning" not in output.replace("UserWarning: Setting OMP_NUM_THREADS", ""), output


def load_results(directory, stage):
    return json.loads((Path(directory) / f"results_{stage}.json").read_text())


def test_train_cpu_short_run(tmp_path, script_env, mnist_root):
    out = run([sys.executable, "mnist_mlp/train_cpu.py", "--steps-this-run", "60",
               "--checkpoint-dir", str(tmp_path)], script_env)
    assert out.startswith("Backend: plain PyTorch on CPU")
    assert_sample_lines_in_order(out)
    assert_no_deprecation_warning(out)
    results = load_results(tmp_path, "cpu")
    assert results["steps"] == 60 and results["backend"] == "cpu" and results["world_size"] == 1
    assert results["loss_history"][0][0] == 1 and results["loss_history"][-1][0] == 50
    assert results["final_loss"] < results["loss_history"][0][1]
    state = torch.load(tmp_path / "checkpoint_cpu.pt")["state_dict"]
    assert state["fc1.weight"].shape == (120, 784)


def test_train_cpu_torchvision_loader(tmp_path, script_env, mnist_root):
    out = run([sys.executable, "mnist_mlp/train_cpu.py", "--steps-this-run", "20", "--loader",
               "torchvision", "--checkpoint-dir", str(tmp_path)], script_env)
    assert_sample_lines_in_order(out)
    assert load_results(tmp_path, "cpu")["loader"] == "torchvision"


@pytest.mark.parametrize("device_loader", [False, True])
def test_train_xla_short_run(tmp_path, script_env, mnist_root, device_loader):
    args = [sys.executable, "mnist_mlp/train.py", "--steps-this-run", "40",
            "--checkpoint-dir", str(tmp_path)] + (["--device-loader"] if device_loader else [])
    out = run(args, script_env)
    assert out.startswith("Backend: XLA on CPU")
    assert_sample_lines_in_order(out)
    assert_no_deprecation_warning(out)
    assert "Graphs compiled: " in out
    results = load_results(tmp_path, "xla")
    assert results["backend"] == "xla-cpu" and results["steps"] == 40
    assert results["device_loader"] is device_loader
    assert results["graphs_compiled"] >= 1
    # xm.save moved everything to the CPU: a plain torch.load reads it
    state = torch.load(tmp_path / "checkpoint_xla.pt")["state_dict"]
    assert state["fc3.weight"].device.type == "cpu"


def test_cpu_and_xla_agree_on_the_first_steps(tmp_path, script_env, mnist_root):
    """Same seed, same data, same loop: the stand-in computes what the CPU computes."""
    for script in ("train_cpu.py", "train.py"):
        run([sys.executable, f"mnist_mlp/{script}", "--steps-this-run", "3", "--checkpoint-dir",
             str(tmp_path)], script_env)
    cpu = torch.load(tmp_path / "checkpoint_cpu.pt")["state_dict"]
    xla = torch.load(tmp_path / "checkpoint_xla.pt")["state_dict"]
    for name in cpu:
        torch.testing.assert_close(cpu[name], xla[name], rtol=1e-4, atol=1e-5)


def test_torchrun_two_workers(tmp_path, script_env, mnist_root):
    out = run(torchrun(2, "--steps-this-run", "30", "--checkpoint-dir", str(tmp_path)), script_env)
    assert_sample_lines_in_order(out)
    assert "DeprecationWarning" not in out
    assert "Gradient all-reduce: over gloo" in out and "world size 1 in each process" in out
    assert "Replicas equal: max parameter-checksum difference 0" in out
    assert out.count("Train throughput (iter/sec)") == 2  # every worker reports, as the sample
    assert out.count("Test accuracy: ") == 1  # replicas are equal: rank 0 evaluates for all
    results = load_results(tmp_path, "torchrun_w2")
    assert results["world_size"] == 2 and results["gradient_reduce"] == "gloo"
    assert results["lr"] == 0.01  # the flag; the optimizer used lr x world size
    # disjoint data: each rank trains on its own half of the set (whole batches of it) ...
    assert results["samples_per_epoch_by_rank"] == [60000 // 2 // 32 * 32] * 2
    # ... so their first losses differ, while the replicas ended equal
    first = {r: h[0][1] for r, h in results["loss_history_by_rank"].items()}
    assert first["0"] != first["1"]
    assert (tmp_path / "checkpoint_torchrun_w2.pt").exists()


def test_torchrun_one_worker_uses_xla_reduce(tmp_path, script_env, mnist_root):
    out = run(torchrun(1, "--steps-this-run", "10", "--checkpoint-dir", str(tmp_path)), script_env)
    assert "Gradient all-reduce: xm.optimizer_step over 1 XLA worker(s)" in out
    assert load_results(tmp_path, "torchrun_w1")["gradient_reduce"] == "xla"


def worker_pids(marker):
    """pid -> LOCAL_RANK of the processes whose environment carries `marker`."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in env:
            for item in env:
                if item.startswith(b"LOCAL_RANK="):
                    found[int(proc.name)] = int(item.split(b"=")[1])
    return found


def test_dead_worker_ends_the_run_with_its_error(tmp_path, script_env, mnist_root):
    marker = f"WORKBOOK_TEST_RUN={uuid.uuid4().hex}"
    env = dict(script_env, WORKBOOK_TEST_RUN=marker.split("=")[1])
    proc = subprocess.Popen(torchrun(2, "--epochs", "50", "--checkpoint-dir", str(tmp_path)),
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 180
        while sum("----------Training" in line for line in lines) < 2:
            assert time.time() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        victims = [pid for pid, rank in worker_pids(marker).items() if rank == 1]
        assert len(victims) == 1, worker_pids(marker)
        os.kill(victims[0], signal.SIGKILL)
        returncode = proc.wait(timeout=120)  # never a hang
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=10)
    output = "".join(lines)
    assert returncode != 0
    assert "local_rank: 1" in output and "Signal 9 (SIGKILL)" in output, output
    assert not worker_pids(marker), "a worker outlived the run"
    assert not (tmp_path / "results_torchrun_w2.json").exists()


@pytest.mark.slow
def test_full_default_cpu_run_reaches_92_percent(tmp_path, script_env, mnist_root):
    out = run([sys.executable, "mnist_mlp/train_cpu.py", "--checkpoint-dir", str(tmp_path)],
              script_env)
    assert_sample_lines_in_order(out)
    results = load_results(tmp_path, "cpu")
    assert results["epochs"] == 4 and results["steps"] == 4 * 1875
    assert results["test_accuracy"] >= 0.92, out


def test_bad_flags_are_clear_errors(script_env):
    proc = subprocess.run([sys.executable, "mnist_mlp/train_cpu.py", "--epochs", "0"], cwd=REPO_ROOT,
                          env=script_env, capture_output=True, text=True)
    assert proc.returncode == 2 and "--epochs: must be a positive integer" in proc.stderr

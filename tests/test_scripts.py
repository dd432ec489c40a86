"""End-to-end: the stage scripts run as a user runs them, on the CPU stand-in. Runs that several
tests read are made once per session (tests/script_runs.py)."""
import contextlib
import gzip
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from tests.paths import REPO_ROOT
from tests.script_runs import LONG_STEPS, TORCHRUN_LONG_STEPS, torchrun_argv

# train.py's and train_bf16.py's main() run in this process up to a refusal: on the shared
# stand-in device, started at collection (tests/xla_stand_in.py says why).
from tests.xla_stand_in import stand_in_device

stand_in_device()

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


torchrun = torchrun_argv


def assert_sample_lines_in_order(output):
    positions = [output.find(line) for line in SAMPLE_LINES]
    assert -1 not in positions, output
    assert positions == sorted(positions), output


def assert_no_deprecation_warning(output):
    assert "DeprecationWarning" not in output, output
    assert "Warning" not in output.replace("UserWarning: Setting OMP_NUM_THREADS", ""), output


def load_results(directory, stage):
    return json.loads((Path(directory) / f"results_{stage}.json").read_text())


@pytest.mark.e2e
def test_train_cpu_short_run(script_runs):
    run = script_runs["cpu"]
    assert run.output.startswith("Backend: plain PyTorch on CPU")
    assert_sample_lines_in_order(run.output)
    assert_no_deprecation_warning(run.output)
    results = run.results("cpu")
    assert results["steps"] == LONG_STEPS and results["backend"] == "cpu"
    assert results["world_size"] == 1
    assert [step for step, _ in results["loss_history"]] == [1, 50, 100]
    assert results["final_loss"] < results["loss_history"][0][1]
    assert "new_graphs" in results and results["new_graphs"] is None  # no XLA here
    assert run.state_dict("cpu")["fc1.weight"].shape == (120, 784)


@pytest.mark.e2e
def test_train_cpu_torchvision_loader(script_runs):
    run = script_runs["cpu torchvision"]
    assert_sample_lines_in_order(run.output)
    assert run.results("cpu")["loader"] == "torchvision"


@pytest.mark.e2e
@pytest.mark.parametrize("run_name, device_loader", [("xla long", False),
                                                     ("xla device-loader long", True)])
def test_train_xla_run(script_runs, run_name, device_loader):
    run = script_runs[run_name]
    assert run.output.startswith("Backend: XLA on CPU")
    assert_sample_lines_in_order(run.output)
    assert_no_deprecation_warning(run.output)
    results = run.results("xla")
    assert results["backend"] == "xla-cpu" and results["steps"] == 120
    assert results["device_loader"] is device_loader
    new_graphs = f"New graphs before evaluation: {results['new_graphs']} (compiled or loaded from the cache in "
    assert new_graphs in run.output and results["new_graphs"] >= 1
    assert results["new_graphs_time_s"] > 0
    # xm.save moved everything to the CPU: a plain torch.load reads it
    assert run.state_dict("xla")["fc3.weight"].device.type == "cpu"


@pytest.mark.e2e
def test_cpu_and_xla_agree(script_runs):
    """Same seed, same data, same loop: the stand-in computes what the CPU computes."""
    cpu, xla = script_runs["cpu"].state_dict("cpu"), script_runs["xla long"].state_dict("xla")
    for name in cpu:
        torch.testing.assert_close(cpu[name], xla[name], rtol=1e-4, atol=1e-5)


@pytest.mark.e2e
def test_torchrun_two_workers(script_runs):
    run = script_runs["torchrun x2 long"]
    out = run.output
    assert_sample_lines_in_order(out)
    assert "DeprecationWarning" not in out
    assert "Gradient all-reduce: over gloo" in out and "world size 1 in each process" in out
    assert "Replicas equal: max parameter-checksum difference 0 across " in out  # 0, not 0.0003
    assert out.count("Train throughput (iter/sec)") == 2  # every worker reports, as the sample
    assert out.count("New graphs before evaluation: ") == 2  # every worker's own count
    assert out.count("Test accuracy: ") == 1  # replicas are equal: rank 0 evaluates for all
    results = run.results("torchrun_w2")
    assert results["world_size"] == 2 and results["gradient_reduce"] == "gloo"
    assert results["steps"] == TORCHRUN_LONG_STEPS
    assert results["lr"] == 0.01  # the flag; the optimizer used lr x world size
    # disjoint data: each rank trains on its own half of the set (whole batches of it) ...
    assert results["samples_per_epoch_by_rank"] == [60000 // 2 // 32 * 32] * 2
    # ... so their first losses differ, while the replicas ended equal
    first = {r: h[0][1] for r, h in results["loss_history_by_rank"].items()}
    assert first["0"] != first["1"]
    assert (run.directory / "checkpoint_torchrun_w2.pt").exists()
    # --tensorboard: rank 0 alone writes
    assert len(list((run.directory / "tb").glob("events.out.tfevents.*"))) == 1


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


@pytest.mark.e2e
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


@pytest.mark.e2e
@pytest.mark.slow
def test_full_default_cpu_run_reaches_92_percent(script_runs):
    # train_cpu.py's defaults, run by the figures' run (tests/cpu_kinds.py) after the XLA stages.
    figures = script_runs["figures avx2"]
    assert_sample_lines_in_order(figures.output[figures.output.index("Backend: plain PyTorch"):])
    results = load_results(figures.directory, "cpu")
    assert results["epochs"] == 4 and results["steps"] == 4 * 1875
    assert results["test_accuracy"] >= 0.92, figures.output[-3000:]


# --------------------------------------------------------------------------- bad input, faults


def run_failing(args, env, timeout=600):
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def assert_one_error_line(stderr, *fragments):
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    for fragment in fragments:
        assert fragment in stderr, stderr


def stage_main(stage, argv, capsys):
    """stage.main(argv) (a stage script's module) in this process, for failures found before
    any training: (exit code, what main() printed to stdout, to stderr)."""
    capsys.readouterr()  # not what importing the stage printed
    with pytest.raises(SystemExit) as exit_:
        stage.main(argv)
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def cpu_stage_main(argv, capsys):
    """train_cpu.main(argv) in this process: see stage_main."""
    from mnist_mlp import train_cpu

    return stage_main(train_cpu, argv, capsys)


def test_bad_flags_are_clear_errors(capsys):
    code, _, err = cpu_stage_main(["--epochs", "0"], capsys)
    assert code == 2 and "--epochs: must be a positive integer" in err


def test_lr_must_be_positive(capsys):
    for value in ("-1", "0", "nan"):
        code, _, err = cpu_stage_main(["--lr", value], capsys)
        assert code == 2 and "--lr: must be a positive number" in err, err


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_an_unwritable_checkpoint_dir_is_found_before_training(tmp_path, capsys, kind):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    target = blocker if kind == "a file" else blocker / "checkpoints"
    code, out, err = cpu_stage_main(["--checkpoint-dir", str(target)], capsys)
    assert code == 1
    assert_one_error_line(err, "--checkpoint-dir")
    assert "----------Training" not in out  # found before any training, nothing lost
    assert blocker.read_text() == "a file, not a directory"


def test_a_profile_window_longer_than_the_run_is_refused(tmp_path):
    from mnist_mlp.common.cli import UsageError, parse_args

    with pytest.raises(UsageError, match=r"--profile traces steps 3-22.*--steps-this-run 22 or more"):
        parse_args("", ["--steps-this-run", "10", "--profile", str(tmp_path / "p"),
                        "--checkpoint-dir", str(tmp_path)], profile=True)
    assert parse_args("", ["--steps-this-run", "22", "--profile", str(tmp_path / "p"),
                           "--checkpoint-dir", str(tmp_path)], profile=True).profile_steps == 20
    assert not (tmp_path / "p").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["train_cpu.py", "train.py"])
def test_a_diverged_run_fails_and_keeps_the_good_checkpoint(tmp_path, script_env, mnist_root, script):
    stage = "cpu" if script == "train_cpu.py" else "xla"
    good_checkpoint, good_results = b"the last good checkpoint", b'{"stage": "kept"}'
    (tmp_path / f"checkpoint_{stage}.pt").write_bytes(good_checkpoint)
    (tmp_path / f"results_{stage}.json").write_bytes(good_results)
    code, out, err = run_failing([sys.executable, f"mnist_mlp/{script}", "--lr", "1e6",
                                  "--steps-this-run", "60", "--checkpoint-dir", str(tmp_path)],
                                 script_env)
    assert code == 1, out + err
    assert_one_error_line(err, "training diverged", "the loss at step 50", "Lower --lr")
    assert "----------End Training" not in out  # stopped at the first loss it read, not at the end
    assert (tmp_path / f"checkpoint_{stage}.pt").read_bytes() == good_checkpoint
    assert (tmp_path / f"results_{stage}.json").read_bytes() == good_results
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"checkpoint_{stage}.pt",
                                                          f"results_{stage}.json"]


@contextlib.contextmanager
def torch_xla_not_installed():
    """This process as one without torch_xla: its import fails (sys.modules['torch_xla'] = None,
    the documented way to block an import), and the mnist_mlp modules are imported afresh under
    that, as a new process would; everything is put back afterwards."""
    def ours():
        return [name for name in sys.modules if name.split(".")[0] in ("mnist_mlp", "torch_xla")]

    saved = {name: sys.modules.pop(name) for name in ours()}  # torch_xla's submodules too
    sys.modules["torch_xla"] = None
    try:
        yield
    finally:
        for name in ours():
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.mark.parametrize("script", ["train.py", "train_torchrun.py", "train_bf16.py"])
def test_an_xla_stage_without_torch_xla_is_one_clear_error(script, monkeypatch, capfd):
    """The XLA stages run on an XLA device (a NeuronCore or the stand-in), never silently on
    plain PyTorch: without torch_xla they stop at once and say what to install. The script runs
    as `python mnist_mlp/<script>` would, in this process (no torch_xla to load, nothing to
    start)."""
    monkeypatch.setattr(sys, "argv", [script])
    with torch_xla_not_installed(), pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(REPO_ROOT / "mnist_mlp" / script), run_name="__main__")
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # nothing before the exit, not even a warning
    # SystemExit(message): Python prints the message to stderr and exits with code 1
    assert isinstance(exit_.value.code, str), exit_.value.code
    assert_one_error_line(exit_.value.code, "torch-xla is not installed", "make venv")


def forbidden(what):
    """A stand-in for a step of a script's main() that a refusal must come before."""
    def fail(*args, **kwargs):
        raise AssertionError(f"{what}: the refusal came too late")
    return fail


def test_flags_that_train_zero_steps_are_refused_before_any_work(tmp_path, capsys, mnist_root,
                                                                 monkeypatch):
    """train.py's main() in this process, on its stand-in device: the refusal comes before a
    model is built or a step is taken, and nothing is written."""
    from mnist_mlp import train

    monkeypatch.setattr(train, "MLP", forbidden("a model was built"))
    monkeypatch.setattr(train, "train", forbidden("training started"))
    code, out, err = stage_main(train, ["--batch-size", "70000", "--checkpoint-dir",
                                        str(tmp_path)], capsys)
    assert code == 1
    assert_one_error_line(err, "would train 0 steps", "smaller --batch-size")
    assert "----------Training" not in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_unequal_steps_across_workers_are_refused_not_a_hang(tmp_path, script_env, mnist_root):
    """60,000 images over 7 workers in batches of 2143: 4 steps on some ranks, 3 on others. The
    rank with the extra step would wait in the all-reduce forever: refused before training."""
    started = time.time()
    code, out, err = run_failing(torchrun(7, "--batch-size", "2143", "--checkpoint-dir",
                                          str(tmp_path)), script_env, timeout=300)
    assert code != 0
    output = out + err
    assert "give 3 or 4 steps per epoch" in output and "--batch-size 2142 or 2144" in output
    assert "batches per rank" not in output  # the loader's warning says it again: silenced
    assert "----------Training" not in output
    assert time.time() - started < 240
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_progress_lines_come_from_the_loss_reads(script_runs):
    run = script_runs["xla long"]
    progress = [line for line in run.output.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in progress] == ["step 1/120", "step 50/120",
                                                         "step 100/120"]
    assert "the first step's new graphs: compiled or loaded from the cache" in progress[0]
    history = run.results("xla")["loss_history"]
    assert [f"step {s}/120: loss {v:.4f}" for s, v in history] == [p.split(" (")[0] for p in progress]


# --------------------------------------------------------------------------- --tensorboard, --profile


@pytest.mark.e2e
def test_profile_traces_the_steps_asked_for_and_no_extra_graph(script_runs):
    """--profile DIR --profile-steps 5: torch_xla's profiler trace of steps 3-7, each one
    StepTrace, where TensorBoard's Profile tab looks (DIR/plugins/profile/<run>/). That it adds
    no graph, test_graph_parity shows: the unprofiled trial traced the same graphs."""
    from mnist_mlp.common.observe import PROFILE_START_STEP, STEP_TRACE_NAME

    run = script_runs["xla long"]
    assert "Profile: steps 3-7 traced into " in run.output
    [trace_dir] = sorted((run.directory / "profile" / "plugins" / "profile").glob("*"))
    [xplane] = trace_dir.glob("*.xplane.pb")
    assert STEP_TRACE_NAME.encode() in xplane.read_bytes()  # protobuf: names are stored as strings
    [trace] = trace_dir.glob("*.trace.json.gz")
    events = json.loads(gzip.open(trace).read())["traceEvents"]
    steps = [int(e["args"]["step_num"]) for e in events if e.get("name") == STEP_TRACE_NAME]
    assert steps == list(range(PROFILE_START_STEP, PROFILE_START_STEP + 5))
    assert len({e["tid"] for e in events if e.get("name") == STEP_TRACE_NAME}) == 1  # one thread
    assert run.results("xla")["new_graphs"] == \
        script_runs["xla trial"].results("xla")["new_graphs"]  # as many as unprofiled


@pytest.mark.e2e
def test_tensorboard_scalars_per_step(script_runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mnist_mlp.common.observe import GRAPHS_TAG, LOSS_TAG, THROUGHPUT_TAG

    run = script_runs["xla long"]
    [events] = (run.directory / "tb").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert set(accumulator.Tags()["scalars"]) == {LOSS_TAG, THROUGHPUT_TAG, GRAPHS_TAG}
    history = run.results("xla")["loss_history"]
    assert [[e.step, e.value] for e in accumulator.Scalars(LOSS_TAG)] == \
        [[s, pytest.approx(v)] for s, v in history]
    steps = list(range(1, LONG_STEPS + 1))
    assert [e.step for e in accumulator.Scalars(THROUGHPUT_TAG)] == steps
    assert all(e.value > 0 for e in accumulator.Scalars(THROUGHPUT_TAG))
    graphs = run.results("xla")["new_graphs"]
    assert [e.value for e in accumulator.Scalars(GRAPHS_TAG)] == [graphs] * LONG_STEPS

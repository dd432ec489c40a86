"""The launcher against real processes: tiny worker scripts written here, a real torchrun (2 ranks)."""
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from helpers.launch.processes import CommandFailed, CommandTimedOut, lines_by_rank, run_streaming
from helpers.launch.torchrun import run_torchrun, torchrun_argv, torchrun_command_line
from tests.paths import REPO_ROOT


def write_script(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


# A worker blocks in wait_for(go_file) until the test creates go_file, which the test only
# does once it has received the worker's first line: that line must have been streamed, not
# collected when the worker exited.
WAIT_FOR = """
import os, sys, time

def wait_for(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit("go file never appeared: the output was not streamed")
        time.sleep(0.05)
"""


def is_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_run_streaming_delivers_lines_while_the_process_runs(tmp_path):
    go_file = tmp_path / "go"
    script = write_script(tmp_path / "one.py", WAIT_FOR + f"""
print("first line", flush=True)
wait_for({str(go_file)!r})
print("after go")
""")
    received = []

    def on_line(line):
        received.append(line)
        if line == "first line":
            go_file.touch()

    result = run_streaming([sys.executable, str(script)], timeout=30, on_line=on_line)
    assert result.returncode == 0
    assert received == ["first line", "after go"] == result.lines


def test_run_streaming_skips_progress_bar_redraws(tmp_path):
    script = write_script(tmp_path / "bar.py", r"""
        import sys
        sys.stderr.write("step 1\rstep 2\rstep 3 done\n")
        print("end")
    """)
    result = run_streaming([sys.executable, str(script)], timeout=30, on_line=lambda _: None)
    assert result.lines == ["step 3 done", "end"]


def test_run_streaming_failure_carries_the_last_lines(tmp_path):
    script = write_script(tmp_path / "fail.py", """
        print("working")
        raise SystemExit("disk full on purpose")
    """)
    with pytest.raises(CommandFailed) as failure:
        run_streaming([sys.executable, str(script)], timeout=30, on_line=lambda _: None)
    assert failure.value.returncode == 1
    assert "disk full on purpose" in failure.value.summary
    assert "disk full on purpose" in str(failure.value)
    assert failure.value.lines[0] == "working"


def test_run_streaming_timeout_stops_the_child_and_its_children(tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    cmd = ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo started; wait"]
    with pytest.raises(CommandTimedOut) as timeout:
        run_streaming(cmd, timeout=2, on_line=lambda _: None)
    assert "stopped the whole process tree" in str(timeout.value)
    assert timeout.value.lines == ["started"]
    assert not is_alive(int(pid_file.read_text()))


def test_the_output_reader_hands_over_whole_lines_and_closes_the_pipe_at_its_end():
    """Left open, the pipe is closed by the garbage collector, whose ResourceWarning then lands in
    whichever later test it runs during."""
    import io
    import queue

    from helpers.launch.processes import _pump_lines

    stream = io.TextIOWrapper(io.BytesIO(b"10%\r100%\ndone\n"), encoding="utf-8", newline="")
    sink = queue.Queue()
    _pump_lines(stream, sink, tag=1)
    assert [sink.get_nowait() for _ in range(3)] == [(1, "100%"), (1, "done"), (1, None)]
    assert stream.closed


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """One real torchrun of two workers, read by two tests: each rank prints a blank line and
    "ready <rank>", then waits for a go file, which on_line creates once it has both ready lines
    (so they were streamed, not collected at exit); then "done <rank>" on stderr. run.log keeps
    every line. -> (RunResult, the lines on_line was shown, the log's lines)"""
    tmp_path = tmp_path_factory.mktemp("two-rank-run")
    go_file = tmp_path / "go"
    script = write_script(tmp_path / "worker.py", WAIT_FOR + f"""
rank = os.environ["RANK"]
print("", flush=True)
print(f"ready {{rank}}", flush=True)
wait_for({str(go_file)!r})
print(f"done {{rank}}", file=sys.stderr)
""")
    ready, shown, log = set(), [], tmp_path / "run.log"

    def on_line(line):
        shown.append(line)
        for rank in ("0", "1"):
            if line == f"[rank{rank}]: ready {rank}":
                ready.add(rank)
        if ready == {"0", "1"}:
            go_file.touch()

    result = run_torchrun(script, nproc_per_node=2, timeout=600, on_line=on_line, log_path=log)
    return result, shown, log.read_text().splitlines()


@pytest.mark.e2e  # a real torchrun, two workers
def test_torchrun_streams_every_rank_prefixed_before_the_workers_exit(two_rank_run):
    result, _, _ = two_rank_run
    assert result.returncode == 0
    assert result.lines_by_rank() == {0: ["", "ready 0", "done 0"], 1: ["", "ready 1", "done 1"]}


@pytest.mark.e2e  # a real torchrun, two workers
def test_torchrun_failing_rank_error_is_in_the_exception(tmp_path):
    script = write_script(tmp_path / "fails.py", """
        import os
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            if os.environ["RANK"] == "1":
                raise RuntimeError("rank one exploded")

        main()
    """)
    with pytest.raises(CommandFailed) as failure:
        run_torchrun(script, nproc_per_node=2, timeout=600, on_line=lambda _: None)
    summary = failure.value.summary
    assert summary.startswith("Rank 1 failed (exit code 1)")
    assert "Root Cause (first observed failure)" in summary
    assert "RuntimeError: rank one exploded" in summary
    assert "RuntimeError: rank one exploded" in str(failure.value)


@pytest.mark.e2e  # a real torchrun, two workers
def test_torchrun_failure_without_record_shows_that_ranks_own_output(tmp_path):
    script = write_script(tmp_path / "fails_plain.py", """
        import os
        print("rank", os.environ["RANK"], "starting", flush=True)
        if os.environ["RANK"] == "0":
            raise ValueError("bad shard on rank zero")
    """)
    with pytest.raises(CommandFailed) as failure:
        run_torchrun(script, nproc_per_node=2, timeout=600, on_line=lambda _: None)
    summary = failure.value.summary
    assert summary.startswith("Rank 0 failed (exit code 1)")
    own_part = summary.split("Last lines of rank 0:")[1]
    assert "ValueError: bad shard on rank zero" in own_part
    assert "rank 1 starting" not in own_part


# The run's timeouts, tried in turn until both workers had started within one.
HANG_TIMEOUTS_S = (12, 40, 120)


@pytest.mark.e2e  # a real torchrun, two workers
def test_torchrun_hang_times_out_and_no_worker_survives(tmp_path):
    script = write_script(tmp_path / "hangs.py", f"""
        import os, signal, time
        rank = os.environ["RANK"]
        if rank == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends this one
        open(os.path.join({str(tmp_path)!r}, f"worker{{rank}}.pid"), "w").write(str(os.getpid()))
        print("hanging", flush=True)
        time.sleep(600)
    """)
    # torchrun starts its workers about 4 s after launch here (importing torch), more under
    # load: if they had not both started when the timeout struck, again with a longer one.
    for timeout_s in HANG_TIMEOUTS_S:
        for stale in tmp_path.glob("worker*.pid"):
            stale.unlink()
        with pytest.raises(CommandTimedOut) as timeout:
            run_torchrun(script, nproc_per_node=2, timeout=timeout_s, on_line=lambda _: None)
        assert "stopped the whole process tree" in str(timeout.value)
        pid_files = sorted(tmp_path.glob("worker*.pid"))
        survivors = [int(p.read_text()) for p in pid_files if is_alive(int(p.read_text()))]
        assert survivors == []
        if len(pid_files) == 2:
            break
    assert [p.name for p in pid_files] == ["worker0.pid", "worker1.pid"], \
        f"the workers did not start within {timeout_s} s: raise HANG_TIMEOUTS_S"


@pytest.mark.parametrize("workers", [0, -1, 1.5, "2", True])
def test_bad_worker_count_is_refused_before_launching(tmp_path, workers):
    marker = tmp_path / "ran"
    script = write_script(tmp_path / "never.py", f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(ValueError, match="nproc_per_node"):
        run_torchrun(script, nproc_per_node=workers, timeout=30)
    assert not marker.exists()


def test_two_node_commands():
    rank0 = torchrun_command_line("mnist_mlp/train_torchrun.py", ["--epochs", "1"],
                                  nproc_per_node=2, nnodes=2, node_rank=0,
                                  master_addr="10.0.0.1", kernel_release="6.8.0-1015-aws")
    assert rank0 == ("FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1 "  # multi-node: EFA (test_environment)
                     "torchrun --nproc_per_node=2 --nnodes=2 --node_rank=0 "
                     "--master_addr=10.0.0.1 --master_port=29500 "
                     "mnist_mlp/train_torchrun.py --epochs 1")
    argv = torchrun_argv("train.py", nproc_per_node=32, nnodes=2, node_rank=1,
                         master_addr="10.0.0.1", master_port=1234, python="py")
    assert argv == ["py", "-m", "torch.distributed.run", "--nproc_per_node=32", "--nnodes=2",
                    "--node_rank=1", "--master_addr=10.0.0.1", "--master_port=1234", "--tee=3",
                    "train.py"]
    with pytest.raises(ValueError, match="master_addr"):
        torchrun_argv("train.py", nproc_per_node=2, nnodes=2, node_rank=1)
    with pytest.raises(ValueError, match="node_rank"):
        torchrun_argv("train.py", nproc_per_node=2, nnodes=2, node_rank=2, master_addr="h")


def test_lines_by_rank_drops_torchrun_own_lines():
    lines = ["W1121 torchrun says", "[rank0]: a", "[rank1]: b", "[rank0]: c", "[rank10]: d"]
    assert lines_by_rank(lines) == {0: ["a", "c"], 1: ["b"], 10: ["d"]}


@pytest.mark.e2e  # a real torchrun, two workers
def test_torchrun_set_up_chatter_goes_to_the_log_not_the_cell(two_rank_run):
    """torchrun's OMP_NUM_THREADS banner (printed for 2+ workers) and blank lines are not shown;
    the log keeps every line."""
    result, shown, logged = two_rank_run
    assert any("OMP_NUM_THREADS" in line for line in logged), logged
    assert logged == result.lines
    assert any(line.strip() == "[rank0]:" for line in logged), "each rank's blank line is logged"
    assert not any("OMP_NUM_THREADS" in line or line.strip("*").strip() == "" for line in shown), shown
    assert not any(line.strip() in ("[rank0]:", "[rank1]:") for line in shown), shown
    assert sorted(line for line in shown if "ready" in line) == ["[rank0]: ready 0",
                                                                 "[rank1]: ready 1"]


def test_a_killed_kernel_takes_its_running_command_with_it(tmp_path):
    """A notebook kernel killed outright (SIGKILL: out of memory, a forced restart) while
    run_streaming waits: the command it started gets SIGTERM from the OS (mnist_mlp/common/child_process.py)
    instead of running on, holding NeuronCores on a trn1."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", "from helpers.launch.processes import run_streaming\n"
         "run_streaming(['sh', '-c', 'echo $$; exec sleep 300'], timeout=600,"
         " on_line=lambda line: print(line, flush=True))"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    child = int(kernel.stdout.readline())
    assert psutil.pid_exists(child)
    kernel.kill()
    kernel.wait()

    def gone():
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    deadline = time.monotonic() + 60  # a guard: the loop ends once it is gone
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(), "the command outlived the kernel that started it"

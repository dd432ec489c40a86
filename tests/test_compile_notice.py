"""The compile notice (mnist_mlp/common/compile_notice.py): a compile longer than QUIET_S is said
while it runs, with why, then how long it took; a short one is silent. The cache entries are
real directories in the Neuron layout (docs/cache-tool.md); the counters are a pair the test
advances, as torch-xla's UncachedCompile and CompileTime move."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest

from helpers.cache.demo import neff_bytes
from mnist_mlp.common import compile_notice
from mnist_mlp.common.compile_cache import cache_url, local_cache_dir, module_state
from mnist_mlp.common.compile_notice import CompileNotice, duration, watch_compiles
from mnist_mlp.common.neuron_cc_flags import compiler_flag
from tests.paths import REPO_ROOT
from tests.trn1_double import instance_env, journal

VERSION = "neuronxcc-2.26.6360.0"
FAILURE_TEXT = "Failed compilation with ['neuronx-cc', 'compile']: [NCC_EVRF009] error"


def wait_until(happened, what, guard_s=60.0):
    """Wait on an event (a thread has spoken), with only a generous guard against a hang."""
    deadline = time.monotonic() + guard_s
    while not happened():
        assert time.monotonic() < deadline, f"{what} within {guard_s:.0f} s"
        time.sleep(0.02)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Counters:
    def __init__(self):
        self.started = self.finished = 0

    def __call__(self):
        return self.started, self.finished


def make_entry(root, module, state):
    entry = root / VERSION / module
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "model.hlo_module.pb").write_bytes(b"hlo")
    if state == "locked":
        (entry / "model.hlo_module.pb.lock").touch()
    elif state == "done":
        (entry / "model.hlo_module.pb.lock").unlink(missing_ok=True)
        (entry / "model.neff").write_bytes(neff_bytes())
        (entry / "model.done").touch()
    elif state == "failed":
        (entry / "model.hlo_module.pb.lock").unlink(missing_ok=True)
        (entry / "model.neff").write_text(FAILURE_TEXT)
    assert module_state(entry) == state
    return f"{VERSION}/{module}"


def notice(lines, clock, **kwargs):
    return CompileNotice(say=lines.append, clock=clock, quiet_s=5, every_s=15, **kwargs)


def test_a_long_compile_is_said_while_it_runs_then_timed():
    lines, clock, counters = [], Clock(), Counters()
    watch = notice(lines, clock, counters=counters)
    watch._base = counters()
    counters.started = 1  # torch-xla missed its in-memory cache: the compile starts
    for _ in range(4):
        watch.poll()
        clock.now += 1
    assert lines == []  # 3 s: still quiet
    clock.now += 2
    watch.poll()  # 6 s
    assert lines == ["Compiling a graph: 6 s so far (a graph new to this process: XLA compiles "
                     "each new graph once)"]
    clock.now += 15
    watch.poll()
    assert lines[-1] == "Compiling a graph: 21 s so far"
    clock.now += 164
    counters.finished = 1
    watch.poll()
    assert lines[-1] == "Compiled a graph in 3 min 5 s"
    assert len(lines) == 3


def test_a_short_compile_and_a_cache_hit_say_nothing():
    lines, clock, counters = [], Clock(), Counters()
    watch = notice(lines, clock, counters=counters)
    for _ in range(3):
        counters.started += 1
        watch.poll()
        clock.now += 4
        counters.finished += 1
        watch.poll()
    clock.now += 60  # a long step that compiles nothing (the counters agree) is no compile
    watch.poll()
    assert lines == []


def test_counters_that_disagree_before_the_watch_do_not_count():
    lines, clock, counters = [], Clock(), Counters()
    counters.finished = 3  # e.g. compiles no graph lookup counted
    watch = notice(lines, clock, counters=counters)
    watch.poll()
    counters.started = 1
    counters.finished = 4
    clock.now += 30
    watch.poll()
    assert lines == []


def test_on_neuron_the_entry_being_written_is_named(tmp_path):
    lines, clock, counters = [], Clock(), Counters()
    make_entry(tmp_path, "MODULE_aa+01", "done")
    old_lock = make_entry(tmp_path, "MODULE_bb+01", "locked")  # left by a killed compile
    watch = notice(lines, clock, counters=counters, cache_dir=tmp_path).start()
    try:
        clock.now += 60
        watch.poll()
        assert lines == []  # an old lock is no compile of this run
        key = make_entry(tmp_path, "MODULE_cc+01", "locked")
        watch.poll()
        clock.now += 5
        watch.poll()
        assert lines == [f"Compiling a graph: 5 s so far ({key} is not in the compile cache "
                         f"{tmp_path}; {compile_notice.NEURON_HINT})"]
        clock.now += 2
        make_entry(tmp_path, "MODULE_cc+01", "done")
        watch.poll()
        assert lines[-1] == f"Compiled a graph in 7 s ({key})"
        assert old_lock not in "".join(lines)
    finally:
        watch.stop()


def test_a_compile_that_waits_on_a_lock_from_before_the_run_names_it(tmp_path):
    lines, clock, counters = [], Clock(), Counters()
    old_lock = make_entry(tmp_path, "MODULE_bb+01", "locked")  # left by a killed compile
    watch = notice(lines, clock, counters=counters, cache_dir=tmp_path).start()
    try:
        counters.started = 1  # the wrapper waits on that lock: no new entry, the compile runs on
        watch.poll()
        clock.now += 5
        watch.poll()
        assert lines == [f"Waiting for a compile: 5 s so far (on {old_lock}, locked before this "
                         "run began: another process is compiling it, or a killed compile left its "
                         f"lock; if no other run uses this cache: {compile_notice.PRUNE_STALE_LOCKS} "
                         "--dry-run, then without --dry-run)"]
        clock.now += 15
        watch.poll()
        assert lines[-1] == "Waiting for a compile: 20 s so far"
    finally:
        watch.stop()


def test_a_compile_that_fails_says_what_the_next_run_meets(tmp_path):
    lines, clock = [], Clock()
    watch = notice(lines, clock, cache_dir=tmp_path)
    key = make_entry(tmp_path, "MODULE_dd+01", "locked")
    watch.poll()
    clock.now += 12
    watch.poll()
    make_entry(tmp_path, "MODULE_dd+01", "failed")
    watch.poll()
    assert lines[-1] == (f"Compile failed after 12 s: {key} now holds a failed entry; a run that "
                         "meets it stops unless NEURON_CC_FLAGS has --retry_failed_compilation")


def test_an_entry_that_failed_before_and_is_compiled_again(tmp_path):
    lines, clock = [], Clock()
    key = make_entry(tmp_path, "MODULE_ee+01", "failed")
    watch = notice(lines, clock, cache_dir=tmp_path, retry_failed=True)
    watch.states_at_start = {key: "failed"}
    clock.now += 30
    watch.poll()
    assert lines == []  # a failed entry nobody compiles is no compile
    (tmp_path / key / "model.hlo_module.pb.lock").touch()  # --retry_failed_compilation: again
    watch.poll()
    clock.now += 6
    watch.poll()
    assert lines == [f"Compiling a graph: 6 s so far ({key} failed before; "
                     f"--retry_failed_compilation compiles it again; {compile_notice.NEURON_HINT})"]


def test_the_thread_speaks_and_stops_with_the_run():
    lines, counters = [], Counters()
    watch = CompileNotice(counters=counters, say=lines.append, quiet_s=0.2, every_s=10, poll_s=0.05)
    with watch:
        counters.started = 1
        wait_until(lambda: lines, "the notice said the compile")
        counters.finished = 1
    assert re.match(r"Compiling a graph: \d+ s so far", lines[0]), lines
    assert re.fullmatch(r"Compiled a graph in \d+ s", lines[-1]), lines
    assert not any(t.name == "compile-notice" for t in threading.enumerate())


def test_watch_compiles_only_where_torch_xla_runs_and_on_rank_0(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    with watch_compiles(env={}) as watch:
        assert watch is None  # train_cpu.py: no XLA, nothing to watch
    monkeypatch.setitem(sys.modules, "torch_xla", object())
    with watch_compiles(env={"RANK": "1"}) as watch:
        assert watch is None  # another torchrun worker: rank 0 speaks


def test_an_entry_seen_done_is_not_read_again(tmp_path, monkeypatch):
    lines, clock, counters = [], Clock(), Counters()
    watch = notice(lines, clock, counters=counters, cache_dir=tmp_path, poll_s=3600).start()  # polled here only
    try:
        make_entry(tmp_path, "MODULE_dd+01", "done")  # compiled by this run
        reads = []
        real = compile_notice.module_state
        monkeypatch.setattr(compile_notice, "module_state", lambda path: reads.append(path) or real(path))
        for _ in range(3):
            watch.poll()
        assert len(reads) == 1
    finally:
        watch.stop()


def test_a_failed_run_names_the_entries_that_failed_before(tmp_path, monkeypatch):
    make_entry(tmp_path, "MODULE_ff+01", "failed")
    monkeypatch.setattr(compile_notice, "_say", lambda line: None)
    lines = []
    env = {"PJRT_DEVICE": "NEURON", "NEURON_CC_FLAGS": f"--cache_dir={tmp_path}"}
    monkeypatch.setitem(sys.modules, "torch_xla", object())
    monkeypatch.setattr("mnist_mlp.common.xla_metrics.compiles_started_and_finished", lambda: (0, 0))
    with pytest.raises(RuntimeError), watch_compiles(env=env, say=lines.append):
        raise RuntimeError("Got a cached failed neff")
    assert lines == [f"The compile cache {tmp_path} holds entries whose compile failed before "
                     f"({VERSION}/MODULE_ff+01): the compiler wrapper skips such a graph and the "
                     "run stops; fix the cause, then add --retry_failed_compilation to NEURON_CC_FLAGS"]


@pytest.mark.parametrize("flags, url, expected", [
    ("--cache_dir=/c1 -O1", None, ("/c1", "--cache_dir in NEURON_CC_FLAGS")),
    ("--cache_dir /c2", "/u", ("/c2", "--cache_dir in NEURON_CC_FLAGS")),
    ("--cache_dir=/c1 --cache_dir /c3", None, ("/c3", "--cache_dir in NEURON_CC_FLAGS")),  # the last wins
    ("", "/u", ("/u", "NEURON_COMPILE_CACHE_URL")),
])
def test_the_cache_the_wrapper_uses(flags, url, expected):
    env = {"NEURON_CC_FLAGS": flags, **({"NEURON_COMPILE_CACHE_URL": url} if url else {})}
    assert cache_url(env) == expected
    assert local_cache_dir({"NEURON_COMPILE_CACHE_URL": "s3://bucket/cache"}) is None
    assert compiler_flag("--retry_failed_compilation", {"NEURON_CC_FLAGS": "--retry_failed_compilation"})


def test_durations_read_as_the_tutorial_log_does():
    assert (duration(7), duration(185), duration(59.6)) == ("7 s", "3 min 5 s", "1 min 0 s")


def test_a_notebook_cell_that_compiles_long_says_so_under_itself(monkeypatch):
    from IPython.core.events import EventManager, available_events

    from helpers.setup.cell_compile_notice import CellCompileNotice, watch_compiles_in_cells

    class Shell:
        events = EventManager(None, available_events)

    shell, lines, counters = Shell(), [], Counters()
    assert watch_compiles_in_cells(shell) and watch_compiles_in_cells(shell)
    hooks = [h.__self__ for h in shell.events.callbacks["pre_run_cell"]]
    assert len(hooks) == 1 and isinstance(hooks[0], CellCompileNotice)  # registered once
    hooks[0].make_notice = lambda: CompileNotice(counters=counters, say=lines.append,
                                                 quiet_s=0.2, poll_s=0.05)
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    shell.events.trigger("pre_run_cell", None)
    assert hooks[0].notice is None  # before torch_xla loads: nothing to read
    shell.events.trigger("post_run_cell", None)
    monkeypatch.setitem(sys.modules, "torch_xla", object())
    shell.events.trigger("pre_run_cell", None)
    counters.started = 1  # the cell's torch_xla.sync() compiles for a while
    wait_until(lambda: lines, "the cell's notice said the compile")
    counters.finished = 1
    shell.events.trigger("post_run_cell", None)
    assert hooks[0].notice is None
    assert re.match(r"Compiling a graph: \d+ s so far \(a graph new to this process", lines[0]), lines
    assert re.fullmatch(r"Compiled a graph in \d+ s", lines[-1]), lines


# On the trn1 double (tests/trn1_double): each compile of a graph not in the cache holds its
# entry's lock, as neuronx-cc's wrapper writes it, until the test has read the notice that the
# compile is running (TRN1_DOUBLE_COMPILE_UNTIL): an event, however loaded the machine.
QUIET_S = compile_notice.QUIET_S_BY_BACKEND["neuron"]
NOTICE = re.compile(r"Compiling a graph: (\d+) s so far \((neuronxcc-[^/]+/MODULE_\w+\+\w+) (.*?); "
                    + re.escape(compile_notice.NEURON_HINT) + r"\)")
GUARD_S = 600  # only a hung run meets it


def train_on_the_double(env, tmp_path, **extra):
    """train.py for one step; a compile it starts ends once its notice is printed."""
    release = tmp_path / f"release-{len(list(tmp_path.glob('release-*')))}"
    argv = [sys.executable, "mnist_mlp/train.py", "--steps-this-run", "1", "--checkpoint-dir",
            str(tmp_path / "checkpoints")]
    run = subprocess.Popen(argv, env={**env, **extra, "TRN1_DOUBLE_COMPILE_UNTIL": str(release)},
                           cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = [], []

    def read_stdout():
        for line in run.stdout:
            out.append(line)
            if NOTICE.search(line):
                release.touch()

    readers = [threading.Thread(target=read_stdout),
               threading.Thread(target=lambda: err.extend(run.stderr))]
    for reader in readers:
        reader.start()
    try:
        run.wait(timeout=GUARD_S)
    finally:
        run.kill()
        for reader in readers:
            reader.join()
    return subprocess.CompletedProcess(argv, run.returncode, "".join(out), "".join(err))


@pytest.mark.e2e
def test_on_the_trn1_double_a_compile_is_said_while_it_runs_and_a_failure_named(tmp_path):
    env = instance_env(tmp_path / "trn1")
    cache = tmp_path / "trn1/var/tmp/neuron-compile-cache"
    # 1. The step's graph is new, and its compile fails (as a compile can: the double on demand).
    first = train_on_the_double(env, tmp_path, TRN1_DOUBLE_FAIL_COMPILE="#1")
    assert first.returncode != 0
    said = NOTICE.search(first.stdout)
    assert said, first.stdout + first.stderr
    seconds, key, why = said.groups()
    assert int(seconds) >= QUIET_S and why == f"is not in the compile cache {cache}"
    failed = re.search(r"Compile failed after (\d+) s: (\S+) now holds a failed entry; a run that "
                       r"meets it stops unless NEURON_CC_FLAGS has --retry_failed_compilation",
                       first.stdout)
    assert failed and int(failed[1]) >= int(seconds) and failed[2] == key, first.stdout
    assert "Failed compilation with" in first.stderr and "failed on demand" in first.stderr
    # The cache tool lists the entry as failed.
    listed = subprocess.run([sys.executable, "-m", "helpers.cache", "ls", "--root", str(cache), "--state",
                             "failed"], env=env, cwd=REPO_ROOT, text=True, capture_output=True, timeout=120)
    assert listed.returncode == 0 and [line.split()[0] for line in listed.stdout.splitlines()
                                       if line.split()[-1:] == [key]] == ["failed"], listed  # its row
    # 2. The next run meets the failed entry: the wrapper skips it, the run stops, and says why.
    second = train_on_the_double(env, tmp_path)
    assert second.returncode != 0 and "Got a cached failed neff" in second.stderr
    assert "--retry_failed_compilation" in second.stderr  # the wrapper's own line says what to do
    assert f"holds entries whose compile failed before ({key})" in second.stdout
    assert "Compiling a graph" not in second.stdout
    # 3. --retry_failed_compilation: compiled again, and said so.
    third = train_on_the_double(env, tmp_path, NEURON_CC_FLAGS="--retry_failed_compilation")
    assert third.returncode == 0, third.stderr
    retried = NOTICE.search(third.stdout)
    assert retried and retried.group(2) == key, third.stdout
    assert retried.group(3) == "failed before; --retry_failed_compilation compiles it again"
    compiled = re.search(r"Compiled a graph in (\d+) s \((\S+)\)", third.stdout)
    assert compiled and int(compiled[1]) >= int(retried.group(1)) and compiled[2] == key, third.stdout
    lines = third.stdout.splitlines()  # said before the step's own line, which comes after it
    assert lines.index(retried.group(0)) < next(i for i, x in enumerate(lines) if x.startswith("step 1"))
    # The instance's journal: the graph failed, was met cached as failed, then compiled again; each
    # compile lasted until its notice was said, and left no lock.
    events = [e for e in journal(tmp_path / "trn1") if e["event"] != "reserved"]
    assert [e["event"] for e in events if e["event"] in ("failed", "cached-failure")] == [
        "failed", "cached-failure"]
    assert [e["event"] for e in events][:5] == ["compiling", "failed", "cached-failure", "compiling", "compiled"]
    assert [e["event"] for e in events if e.get("key") == key] == [
        "compiling", "failed", "cached-failure", "compiling", "compiled"]
    start, done = events[3:5]
    assert done["time"] - start["time"] >= QUIET_S
    assert not list(cache.glob("*/*/*.lock"))


def test_two_compiles_back_to_back_are_two_compiles():
    lines, clock, counters = [], Clock(), Counters()
    watch = notice(lines, clock, counters=counters)
    counters.started = 1
    watch.poll()
    clock.now += 6
    watch.poll()  # the first, 6 s in: said
    counters.finished, counters.started = 1, 2  # it ended and the next began between two looks
    clock.now += 1
    watch.poll()
    clock.now += 3
    counters.finished = 2
    watch.poll()  # the second took 3 s: not said
    assert lines == ["Compiling a graph: 6 s so far (a graph new to this process: XLA compiles "
                     "each new graph once)", "Compiled a graph in 7 s"]


def test_the_stand_in_waits_longer_before_it_speaks(monkeypatch):
    monkeypatch.setattr("mnist_mlp.common.xla_metrics.compiles_started_and_finished", lambda: (0, 0))
    assert compile_notice.notice_for_this_process({}).quiet_s == 30
    assert compile_notice.notice_for_this_process({"PJRT_DEVICE": "NEURON"}).quiet_s == 5


def test_flags_the_wrapper_cannot_split_are_said_not_swapped_for_another_cache(tmp_path):
    env = {"PJRT_DEVICE": "NEURON", "NEURON_CC_FLAGS": f"--cache_dir='{tmp_path}",
           "NEURON_COMPILE_CACHE_URL": str(tmp_path / "other")}
    lines = []
    notice = compile_notice.notice_for_this_process(env, say=lines.append)
    assert notice.cache_dir is None and not notice.retry_failed
    assert len(lines) == 1 and lines[0].startswith("Compile notice: watching no compile cache: "
                                                   "NEURON_CC_FLAGS=") and "check its quotes" in lines[0]

"""The trn1 double's own rules, each against a real process (tests/trn1_double)."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from helpers.launch.processes import SUMMARY_LINE
from tests.paths import REPO_ROOT
from tests.trn1_double import build_instance, instance_env, journal, messages, printed_numbers

HOLD = ("from mnist_mlp.common.backend import select_backend\n"
        "b = select_backend(); d = b.device; import sys, time\n"
        "print(b.name, flush=True); sys.stdin.read()")


def python(code, env, **kw):
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            **kw)


LATE = ("import os, sys, torch, torch_xla\n"  # imported first: torch-neuronx's set-up reads now
        "from mnist_mlp.common.backend import select_backend\n"
        "b = select_backend()\n"
        "os.environ['NEURON_RT_VISIBLE_CORES'] = '1'\n"  # too late to be read
        "d = b.device; print(b.name, flush=True); sys.stdin.read()")


PLAIN = ("from mnist_mlp.common.backend import select_backend\n"
         "b = select_backend(); print(b.summary(), flush=True); d = b.device")


@pytest.mark.e2e
def test_a_held_core_refuses_the_next_process_with_the_runtime_line(tmp_path):
    """The runtime's variables are read at torch-neuronx's set-up, during `import torch_xla`
    (the earliest point a source allows): a process that imported torch_xla before choosing its
    cores asks for every core, is refused the held one with the runtime's line, and the journal
    shows the value set too late. A plain script naming no cores gets no core variable from the
    set-up (torch-xla 2.9's `_internal/neuron.py`, which the double follows for torch-neuronx
    2.9: docs/sources.md): it sees both cores, asks for both, and is refused with the same line."""
    env = instance_env(tmp_path)
    holder = python(HOLD, {**env, "NEURON_RT_VISIBLE_CORES": "0"})
    try:
        assert holder.stdout.readline().strip() == "neuron"
        late = python(LATE, env)
        _, err = late.communicate("", timeout=GUARD_S)
        assert late.returncode != 0
        refused = ("ERROR NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - "
                   "Requested:nc0-nc1 Available:1")
        assert refused in err
        plain = python(PLAIN, env)
        out, err = plain.communicate("", timeout=GUARD_S)
        assert "| NeuronCores visible: 2 |" in out and plain.returncode != 0 and refused in err, out + err
    finally:
        holder.communicate("", timeout=GUARD_S)
    events = [(e["event"], e.get("cores"), e["read"], e.get("set_after_read"), e.get("set_up_set"))
              for e in journal(tmp_path)]
    assert events == [
        ("reserved", [0], {"NEURON_RT_VISIBLE_CORES": "0"}, None, None),
        ("refused", [0, 1], {}, {"NEURON_RT_VISIBLE_CORES": "1"}, None),
        ("refused", [0, 1], {}, None, None)]


TORCHRUN_WORKER = ("import os\n"
                   "from mnist_mlp.common.backend import select_backend\n"
                   "b = select_backend(); d = b.device\n"
                   "print(os.environ['LOCAL_RANK'], os.environ['NEURON_RT_VISIBLE_CORES'], b.summary(), flush=True)\n")


@pytest.mark.e2e
def test_torchrun_workers_under_an_inherited_range_each_take_their_local_ranks_core(tmp_path):
    """torchrun --nproc_per_node=2 started where NEURON_RT_VISIBLE_CORES=0-1 is set (a shell
    that exported it, or a kernel that took both): torch-neuronx 2.9's set-up, as torch-xla 2.9's
    `_internal/neuron.py` does it, remaps the range to each worker's LOCAL_RANK-th core and warns
    so; each worker sees one core and reserves its own, and neither is refused."""
    script = tmp_path / "worker.py"
    script.write_text(TORCHRUN_WORKER)
    env = {**instance_env(tmp_path), "NEURON_RT_VISIBLE_CORES": "0-1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          "--master_port=0", str(script)], env=env, cwd=REPO_ROOT, text=True,
                         capture_output=True, timeout=GUARD_S)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    for rank in (0, 1):
        assert (f"Remapping NEURON_RT_VISIBLE_CORES [0, 1] to "
                f"NEURON_RT_VISIBLE_CORES[LOCAL_RANK]={rank}") in run.stderr
    seen = sorted(line.split(" ", 2) for line in run.stdout.splitlines() if line[:2] in ("0 ", "1 "))
    assert [(rank, cores) for rank, cores, _ in seen] == [("0", "0"), ("1", "1")], run.stdout
    assert all("| NeuronCores visible: 1 |" in summary for _, _, summary in seen), seen
    reserved = sorted((e["cores"], e["read"], e.get("set_up_set")) for e in journal(tmp_path)
                      if e["event"] in ("reserved", "refused"))
    assert reserved == [([0], {"NEURON_RT_VISIBLE_CORES": "0"}, ["NEURON_RT_VISIBLE_CORES"]),
                        ([1], {"NEURON_RT_VISIBLE_CORES": "1"}, ["NEURON_RT_VISIBLE_CORES"])]


@pytest.fixture
def rules(tmp_path, monkeypatch):
    """The double's rules module, reading a trn1.2xlarge built under tmp_path."""
    build_instance(tmp_path)
    monkeypatch.setenv("WORKBOOK_PLATFORM_ROOT", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from trn1_platform import rules

    return rules


@pytest.mark.parametrize("env, cores", [
    ({}, [0, 1]),  # every core of the machine
    ({"NEURON_RT_VISIBLE_CORES": "1"}, [1]),
    ({"NEURON_RT_VISIBLE_CORES": "0-1"}, [0, 1]),
    ({"NEURON_RT_VISIBLE_CORES": "0,1"}, [0, 1]),  # a list, as the developer guide allows
    ({"NEURON_RT_VISIBLE_CORES": "0-0,1"}, [0, 1]),  # a range and a list
    ({"NEURON_RT_NUM_CORES": "1"}, 1),  # a count: the runtime picks free ones
    ({"NEURON_RT_NUM_CORES": "0"}, [0, 1]),  # "0, which is interpreted as 'all'"
    ({"NEURON_RT_VISIBLE_CORES": "1", "NEURON_RT_NUM_CORES": "2"}, [1]),  # VISIBLE wins
])
def test_the_cores_a_process_asks_for(rules, env, cores):
    assert rules.requested_cores(env) == cores


@pytest.mark.parametrize("env", [{"NEURON_RT_VISIBLE_CORES": "2"}, {"NEURON_RT_VISIBLE_CORES": "1,0"},
                                 {"NEURON_RT_VISIBLE_CORES": "1-0"}, {"NEURON_RT_NUM_CORES": "3"},
                                 {"NEURON_RT_NUM_CORES": "-1"}])
def test_cores_the_instance_does_not_have_are_refused(rules, env):
    with pytest.raises(RuntimeError):
        rules.requested_cores(env)


def test_the_cache_the_environment_selects(rules, tmp_path):
    default = str(tmp_path / "var/tmp/neuron-compile-cache")
    assert rules.cache_root({}) == default
    assert rules.cache_root({"NEURON_COMPILE_CACHE_URL": "/u"}) == "/u"
    both = {"NEURON_COMPILE_CACHE_URL": "/u", "NEURON_CC_FLAGS": "-O1 --cache_dir=/d"}
    assert rules.cache_root(both) == "/d"  # --cache_dir wins, as the env-vars page says
    assert rules.compiler_flags(both) == ["-O1"]
    # Both spellings, the last one winning (the tool reads it with libneuronxla's parser)
    twice = {"NEURON_CC_FLAGS": "--cache_dir=/a -O1 --cache_dir '/b c' --retry_failed_compilation"}
    assert rules.cache_root(twice) == "/b c" and rules.compiler_flags(twice) == ["-O1"]
    # An s3:// cache is a cache location ("it will use AWS S3 as cache backend"): the double
    # keeps it in a directory standing in for the bucket
    assert rules.cache_directory({"NEURON_COMPILE_CACHE_URL": "s3://bucket/p/"}) == tmp_path / "s3/bucket/p"
    assert rules.VERSION_DIR.startswith("neuronxcc-2.26.6360.0+")  # the documented +<build>


def test_the_wrapper_lines_clock_is_set_by_a_test_and_read_past(rules, monkeypatch):
    """TRN1_DOUBLE_CLOCK fixes the time a wrapper line prints (its fields can then collide with
    the numbers a test looks for); a test reads the line past its stamp and pid."""
    line = rules.COMPILED_LINES[0]
    monkeypatch.setenv("TRN1_DOUBLE_CLOCK", "2026-12-02 01:15:15.000015")
    assert rules.stamped(f"INFO ||NEURON_CC_WRAPPER||: {line}", pid=15) == (
        f"2026-12-02 01:15:15.000015:  15  INFO ||NEURON_CC_WRAPPER||: {line}")
    assert messages(rules.stamped(f"INFO ||NEURON_CC_WRAPPER||: {line}", pid=15) + "\n15.0") == [line, "15.0"]
    assert messages(rules.stamped(f"[INFO]: {line}", pid=15)) == [line], "the newer form too"
    monkeypatch.setenv("TRN1_DOUBLE_CLOCK", "01:15:15")
    with pytest.raises(RuntimeError, match="TRN1_DOUBLE_CLOCK='01:15:15'"):
        rules.stamped(line)
    monkeypatch.delenv("TRN1_DOUBLE_CLOCK")
    stamp, pid, said = rules.stamped(line).split("  ", 2)
    assert rules.CLOCK_FORM.fullmatch(stamp[:-1]) and pid == str(os.getpid()) and said == line


COMPILE_ONE = ("from mnist_mlp.common.backend import select_backend\n"
               "d = select_backend().device\n"
               "import torch, torch_xla\n"
               "x = torch.ones(3, device=d) * 5\n"
               "torch_xla.sync(); print(x.cpu().sum().item(), flush=True)")


GUARD_S = 600  # a deadline that only a hung process meets; every wait below ends on an event


def wait_for_event(root, event, process, poll_s=0.1):
    """Until the instance's journal records `event`; fails if the process ends first or hangs."""
    import time

    deadline = time.monotonic() + GUARD_S
    while not any(e["event"] == event for e in journal(root)):
        assert process.poll() is None, f"the process ended ({process.returncode}) before {event!r}"
        assert time.monotonic() < deadline, f"no {event!r} in the journal after {GUARD_S} s"
        time.sleep(poll_s)


def run_double(code, env, timeout=GUARD_S):
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, text=True,
                          capture_output=True, timeout=timeout)


@pytest.fixture
def instance(tmp_path):

    return instance_env(tmp_path)


@pytest.mark.e2e
def test_a_graph_asked_for_with_debug_metadata_is_read_from_a_cache_warmed_without_it(instance, tmp_path):
    """The Explorer page: "Previously-cached NEFFs don't have this metadata"; notebook 06's
    capture (helpers.inside.neuron_explorer.capture_env) therefore compiles into a new cache."""
    from helpers.inside.neuron_explorer import COMPILE_DEBUG_ENV, capture_env

    assert run_double(COMPILE_ONE, instance).returncode == 0
    warm = run_double(COMPILE_ONE, {**instance, **COMPILE_DEBUG_ENV})
    assert warm.returncode == 0 and "Using a cached neff" in warm.stderr, warm.stderr[-2000:]
    # notebook 03's second run shows its log through the summary filter: the hit must survive it
    assert [line for line in warm.stderr.splitlines() if "Using a cached neff" in line
            and SUMMARY_LINE.search(line)], warm.stderr[-2000:]
    assert [(e["event"], e.get("neff_has_metadata")) for e in journal(tmp_path)
            if e["event"] in ("compiled", "cached")] == [("compiled", None), ("cached", False)]
    capture = run_double(COMPILE_ONE, {**instance, **capture_env(tmp_path / "capture", cc_flags="")})
    assert capture.returncode == 0
    assert journal(tmp_path)[-1]["event"] == "compiled" and journal(tmp_path)[-1]["debug"]
    assert list((tmp_path / "capture/compile-cache").glob("neuronxcc-*/MODULE_*/model.done"))


def parallel_compile(code, env):
    return subprocess.run(["neuron_parallel_compile", sys.executable, "-c", code], env=env,
                          cwd=REPO_ROOT, text=True, capture_output=True, timeout=GUARD_S)


@pytest.mark.e2e
def test_neuron_parallel_compile_compiles_the_graphs_its_trial_names_then_finds_none(instance, tmp_path):
    cold = parallel_compile(COMPILE_ONE, instance)
    assert cold.returncode == 0, cold.stdout[-2000:]
    said = messages(cold.stdout)
    assert any(line.startswith("Extracting graphs (") for line in said) and "Total graphs: 1" in said
    # "execute empty stubs with zero outputs" (NEURON_EXTRACT_GRAPHS_ONLY): the trial's one
    # printed value is 0.0, not the 15.0 it computes on a device
    assert printed_numbers(cold.stdout) == [0.0], cold.stdout[-2000:]
    assert [e["event"] for e in journal(tmp_path) if e["event"] not in ("reserved", "compiling")] == [
        "extracted", "trial", "compiled"]
    seen = len(journal(tmp_path))
    warm = parallel_compile(COMPILE_ONE, instance)
    # What the tool prints over a warm cache is not in the sources: only that nothing compiles
    assert warm.returncode == 0, warm.stdout[-2000:]
    assert [(e["event"], e.get("in_cache")) for e in journal(tmp_path)[seen:]
            if e["event"] not in ("reserved", "trial")] == [("extracted", True)]


@pytest.mark.e2e
def test_neuron_parallel_compile_stops_on_a_failed_trial_and_exits_with_the_failed_count(instance, tmp_path):
    crash = "import sys; sys.exit(3)"
    stopped = parallel_compile(crash, instance)
    said = messages(stopped.stdout)
    assert stopped.returncode == 1 and "There was an error in the training script." in said
    assert not [line for line in said if line.startswith(("Total graphs", "No todo"))], said
    ignored = parallel_compile(crash, {**instance, "NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE": "1"})
    assert ignored.returncode == 0 and any(line.startswith("No todo hlos found")
                                           for line in messages(ignored.stdout)), ignored.stdout
    # NEURON_PARALLEL_COMPILE_MAX_RETRIES=1: "will try compilation 1 more time"; the cache named
    # by the last of two --cache_dir flags, in the second spelling
    failing = parallel_compile(COMPILE_ONE, {
        **instance, "TRN1_DOUBLE_FAIL_COMPILE": "*", "NEURON_PARALLEL_COMPILE_MAX_RETRIES": "1",
        "NEURON_CC_FLAGS": f"--cache_dir={tmp_path}/first --cache_dir {tmp_path}/second"})
    assert failing.returncode == 1 and "Total failed compilations: 1" in messages(failing.stdout)
    assert any(line.endswith(" after 1 retries.") for line in messages(failing.stdout)), failing.stdout
    assert list((tmp_path / "second").glob("neuronxcc-*+*/MODULE_*/model.log"))
    assert not (tmp_path / "first").exists()
    assert [e["event"] for e in journal(tmp_path)].count("retry") == 1


@pytest.mark.e2e
def test_a_compile_interrupted_by_ctrl_c_is_cached_as_failed(instance, tmp_path):
    """The caching page: "compilation is interrupted by ctrl-C ... The graph would be marked as failed".
    The ctrl-C goes to the process group, as a terminal and Jupyter send it; the test waits on the
    journal's event and on the exit, each with a guard deadline only (the compile alone is an hour)."""
    import os
    import signal

    # Ctrl-C as a terminal delivers it, even where this pytest was started with SIGINT ignored
    # (a background job of a shell): a child inherits an ignored SIGINT and would never see it.
    slow = python(COMPILE_ONE, {**instance, "TRN1_DOUBLE_COMPILE_SECONDS": "3600"}, start_new_session=True,
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for_event(tmp_path, "compiling", slow)
        os.killpg(slow.pid, signal.SIGINT)
        _, err = slow.communicate(timeout=GUARD_S)
    finally:
        slow.kill()
    assert slow.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert not list(tmp_path.glob("var/tmp/neuron-compile-cache/*/*/*.lock"))
    again = run_double(COMPILE_ONE, instance)
    assert again.returncode != 0 and "Got a cached failed neff" in again.stderr
    # The stored failure: model.log, in a public cache's shape, and no NEFF; the product reads it
    from mnist_mlp.common.compile_cache import module_state

    entry, = tmp_path.glob("var/tmp/neuron-compile-cache/neuronxcc-*+*/MODULE_*")
    assert sorted(p.name for p in entry.iterdir()) == ["compile_flags.json", "model.hlo_module.pb", "model.log"]
    assert (entry / "model.log").read_text().startswith("Failed compilation with ['neuronx-cc', 'compile', '--target=trn1'")
    assert module_state(entry) == "failed"


def test_the_pass_judges_each_platform_line_against_the_journal():
    """A kernel that says it takes core 0 and reserved 0-1, a script whose summary says 2 cores
    while it reserved 1, and cores set after the runtime read them: each named; true lines pass."""
    from tests.trn1_double.workbook_pass import NotebookOnDouble, judge_platform_lines

    summary = ("Backend: Neuron (Trainium NeuronCore through PyTorch/XLA) | torch 2.9.0 | "
               "NeuronCores visible: {} | why: …")
    outputs = "\n".join([summary.format(1), "NeuronCores: this kernel takes 0 (NEURON_RT_VISIBLE_CORES=0)",
                         summary.format(1), "[rank0]: [rank 0] " + summary.format(2)])
    events = [{"event": "reserved", "pid": 10, "argv0": "ipykernel_launcher.py", "cores": [0, 1]},
              {"event": "reserved", "pid": 11, "argv0": "train.py", "cores": [1]},
              {"event": "reserved", "pid": 12, "argv0": "train_torchrun.py", "cores": [0],
               "read": {"NEURON_RT_VISIBLE_CORES": "0"}, "set_after_read": {"NEURON_RT_VISIBLE_CORES": "1"}}]
    wrong = NotebookOnDouble("nb", outputs=outputs, kernel_pid=10)
    judge_platform_lines(wrong, events)
    assert [line.split(":")[0] for line in wrong.wrong_platform_lines] == [
        "'NeuronCores", "kernel's 'NeuronCores visible", "a script's 'NeuronCores visible"]
    assert "no script process of this notebook reserved that many" in wrong.wrong_platform_lines[-1]
    assert len(wrong.set_after_read) == 1 and "pid 12" in wrong.set_after_read[0]
    events[0]["cores"], events[2]["cores"] = [0], [0, 1]
    del events[2]["set_after_read"]
    right = NotebookOnDouble("nb", outputs=outputs, kernel_pid=10)
    judge_platform_lines(right, events)
    assert right.wrong_platform_lines == [] and len(right.platform_lines) == 4 and not right.set_after_read
    # A plain script that named no cores reserved both, and says so
    unnamed = NotebookOnDouble("nb", outputs=summary.format(2), kernel_pid=10)
    judge_platform_lines(unnamed, [{"event": "reserved", "pid": 13, "argv0": "train.py", "cores": [0, 1],
                                    "read": {}}])
    assert unnamed.wrong_platform_lines == [] and len(unnamed.platform_lines) == 1


@pytest.mark.parametrize("fail, events", [
    ("*", ["failed", "retry", "failed"]),  # the last failure stands: cached as failed
    ("#1", ["failed", "retry", "compiled"]),  # the retry compiles it
])
def test_the_persistent_cache_retries_a_failed_compile_as_the_env_vars_page_says(
        rules, tmp_path, monkeypatch, fail, events):
    """NEURON_PARALLEL_COMPILE_MAX_RETRIES: "the maximum number of retries when using Neuron
    Persistent Cache or neuron_parallel_compile": a graph new to the cache, in a training run's
    own compile, is tried that many more times."""
    from trn1_platform import compile_cache

    monkeypatch.setenv("NEURON_PARALLEL_COMPILE_MAX_RETRIES", "1")
    monkeypatch.setenv("TRN1_DOUBLE_FAIL_COMPILE", fail)
    monkeypatch.setattr(compile_cache, "_compiles", {"count": 0})
    lines = []
    if events[-1] == "failed":
        with pytest.raises(RuntimeError, match="Failed compilation with"):
            compile_cache.on_graph("1234", b"hlo", say=lines.append)
    else:
        compile_cache.on_graph("1234", b"hlo", say=lines.append)
    assert [e["event"] for e in journal(tmp_path) if e["event"] != "compiling"] == events
    entry, = tmp_path.glob("var/tmp/neuron-compile-cache/neuronxcc-*/MODULE_1234+*")
    assert compile_cache.is_failed(entry) == (events[-1] == "failed")
    assert not (entry / compile_cache.LOCK_NAME).exists()


def test_an_s3_cache_hit_names_the_neff_by_its_s3_url_in_the_local_layout(rules, tmp_path, monkeypatch):
    """A public log's S3 cache (djl-serving#1879, neuronxcc 2.13): "Using a cached neff at
    s3://<bucket>/neuronxcc-2.13.72.0+78a426937/MODULE_…+ede6753c/model.neff"."""
    from trn1_platform import compile_cache

    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", "s3://bucket/p/")
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    lines = []
    compile_cache.on_graph("1234", b"hlo", say=lines.append)
    compile_cache.on_graph("1234", b"hlo", say=lines.append)
    hit = re.search(r"Using a cached neff at (\S+)\.", lines[-1])
    assert hit and re.fullmatch(r"s3://bucket/p/neuronxcc-[\d.]+\+\w+/MODULE_1234\+[0-9a-f]{8}/model\.neff", hit[1]), lines
    assert list((tmp_path / "s3/bucket/p").glob("neuronxcc-*/MODULE_1234+*/model.neff"))


def test_a_compile_then_a_hit_print_the_wrappers_lines_in_neuron_2_29s_form(rules, monkeypatch):
    """The NKI quickstart's logs at the v2.29.0 and v2.31.0 tags: no start line, "Compiler status
    PASS", then "<date> <time>:  <pid>  [INFO]: Compilation Successfully Completed for
    model.MODULE_….hlo_module.pb"; a hit as a trn1 script quotes it, "[INFO]: Using a cached neff"
    (tests/platform_output/corpus.yaml)."""
    from trn1_platform import compile_cache

    monkeypatch.delenv("NEURON_COMPILE_CACHE_URL", raising=False)
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    lines = []
    compile_cache.on_graph("5678", b"hlo", say=lines.append)
    compile_cache.on_graph("5678", b"hlo", say=lines.append)
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: +\d+ +\[INFO\]: "
    assert len(lines) == 3 and lines[0] == "Compiler status PASS", lines
    done = re.fullmatch(stamp + r"Compilation Successfully Completed for model\.(MODULE_5678\+[0-9a-f]{8})"
                        r"\.hlo_module\.pb", lines[1])
    hit = re.fullmatch(stamp + r"Using a cached neff at (\S+)/model\.neff\. Exiting with a successfully "
                       r"compiled graph\.", lines[2])
    assert done and hit and hit[1].endswith("/" + done[1]), lines


def test_the_pass_judges_new_graphs_utilization_and_the_explorer_summary_against_the_journal():
    """"New graphs before evaluation: N", as finish_run prints it, is matched by a process that handed at least N graphs to the compile
    path (undecided where the all-reduce ran outside the graph); the utilization series by the
    cores reserved; the Explorer summary by a capture compiled with debug metadata."""
    from tests.trn1_double.workbook_pass import NotebookOnDouble, judge_run_lines

    def graph(pid, event="compiled", argv0="train.py", **extra):
        return {"event": event, "pid": pid, "argv0": argv0, **extra}

    outputs = "\n".join([
        "New graphs before evaluation: 3 (compiled or loaded from the cache in 0.10 s)",  # train.py, pid 1: 4 graphs (evaluation after)
        "[rank1]: New graphs before evaluation: 2 (compiled or loaded from the cache in 0.10 s)",  # a split torchrun rank: undecided
        "source: neuron-monitor: NeuronCore utilization (trn1); series: ['NeuronCore 0', 'NeuronCore 1']",
        "neuron-explorer (trn1 double): 5 file(s) in /tmp/x/neuron-explorer; no summary is imitated"])
    events = [graph(1), graph(1, "cached"), graph(1), graph(1, "cached-failure"),
              {"event": "reduced-outside-graph", "pid": 2, "argv0": "train_torchrun.py"},
              graph(2, argv0="train_torchrun.py"), graph(2, argv0="train_torchrun.py"),
              {"event": "reserved", "pid": 2, "argv0": "train_torchrun.py", "cores": [0]},
              {"event": "reserved", "pid": 3, "argv0": "train_torchrun.py", "cores": [1]},
              graph(4, debug=True)]
    right = NotebookOnDouble("nb", outputs=outputs, kernel_pid=10)
    judge_run_lines(right, events)
    assert right.wrong_platform_lines == [] and len(right.platform_lines) == 3, right.platform_lines
    assert [line.split(":")[0] for line in right.undecided_platform_lines] == [
        "'New graphs", "utilization series [0, 1]", "Explorer summary (5 file(s) in /tmp/x/neuron-explorer)"]
    wrong = NotebookOnDouble("nb", outputs=outputs.replace("evaluation: 3", "evaluation: 9"), kernel_pid=10)
    judge_run_lines(wrong, [e for e in events if not e.get("debug") and e.get("cores") != [1]])
    assert [line.split(":")[0] for line in wrong.wrong_platform_lines] == [
        "'New graphs", "utilization series [0, 1]", "Explorer summary (5 file(s) in /tmp/x/neuron-explorer)"]


@pytest.fixture
def environ_restored():
    """The set-up writes os.environ itself (NEURON_RT_VISIBLE_CORES, NEURON_PJRT_*, PJRT_LOCAL_*):
    every variable goes back as it was, set or unset, for the tests after these in this worker."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def set_up_module():
    """The double's torch_neuronx/xla.py alone: its package's __init__ imports torch_xla, whose
    import on the instance would start the double's runtime in this test process. The double's
    libneuronxla it imports is dropped again: left loaded, a later `import torch_xla` in this
    process would take it for a Neuron host."""
    path = REPO_ROOT / "tests/trn1_double/torch_neuronx/xla.py"
    spec = importlib.util.spec_from_file_location("trn1_double_torch_neuronx_xla", path)
    module = importlib.util.module_from_spec(spec)
    loaded = set(sys.modules)
    try:
        spec.loader.exec_module(module)
    finally:
        for name in set(sys.modules) - loaded:
            if name.startswith("libneuronxla"):
                del sys.modules[name]
    return module


@pytest.mark.parametrize("env, visible", [
    ({}, None),  # a plain process: no core variable, its runtime takes every core
    ({"TORCHELASTIC_RUN_ID": "r", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "1"),
    ({"TORCHELASTIC_RUN_ID": "r", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NEURON_RT_VISIBLE_CORES": "0-1"}, "1"),
    ({"TORCHELASTIC_RUN_ID": "r", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "NEURON_RT_VISIBLE_CORES": "1"}, "1"),
    ({"TORCHELASTIC_RUN_ID": "r", "LOCAL_RANK": "0", "XLA_USE_SPMD": "1", "NEURON_RT_VISIBLE_CORES": "0-1"}, "0-1"),
])
def test_the_set_up_gives_each_process_its_cores_as_torch_xla_2_9_does(rules, monkeypatch, environ_restored,
                                                                          env, visible):
    xla = set_up_module()
    for name in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "XLA_USE_SPMD",
                 "NEURON_RT_VISIBLE_CORES", "NEURON_PJRT_WORLD_SIZE", "NEURON_PJRT_PROCESSES_NUM_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    xla.configure_pjrt_environment()
    assert os.environ.get("NEURON_RT_VISIBLE_CORES") == visible


def test_an_inherited_range_not_one_core_per_worker_stops_the_set_up(rules, monkeypatch, environ_restored):
    xla = set_up_module()

    monkeypatch.delenv("XLA_USE_SPMD", raising=False)
    for name, value in {"TORCHELASTIC_RUN_ID": "r", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "NEURON_RT_VISIBLE_CORES": "0-1"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"value of 1 is not equal to count 2 from NEURON_RT_VISIBLE_CORES \[0, 1\]"):
        xla.configure_pjrt_environment()

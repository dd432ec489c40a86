"""The trn1 double's own rules, each against a real process (tests/trn1_double)."""
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT
from tests.trn1_double import build_instance, instance_env, journal

HOLD = ("from mnist_mlp.common.backend import select_backend\n"
        "b = select_backend(); d = b.device; import sys, time\n"
        "print(b.name, flush=True); sys.stdin.read()")


def python(code, env, **kw):
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            **kw)


@pytest.mark.e2e
def test_a_held_core_refuses_the_next_process_with_the_runtime_line(tmp_path):

    env = instance_env(tmp_path)
    holder = python(HOLD, {**env, "NEURON_RT_VISIBLE_CORES": "0"})
    try:
        assert holder.stdout.readline().strip() == "neuron"
        other = python(HOLD, {**env, "NEURON_RT_VISIBLE_CORES": "1"})  # the free core: fine
        assert other.stdout.readline().strip() == "neuron"
        other.communicate("", timeout=60)
        every = python(HOLD, env)  # no variable: every core, 0 included
        _, err = every.communicate("", timeout=60)
        assert every.returncode != 0
        assert ("ERROR NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - "
                "Requested:nc0-nc1 Available:1") in err
    finally:
        holder.communicate("", timeout=60)
    events = [(e["event"], e.get("cores")) for e in journal(tmp_path)]
    assert events == [("reserved", [0]), ("reserved", [1]), ("refused", [0, 1])]
    again = python(HOLD, env)  # the holder exited: its cores are free again
    assert again.stdout.readline().strip() == "neuron"
    again.communicate("", timeout=60)


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


COMPILE_ONE = ("from mnist_mlp.common.backend import select_backend\n"
               "d = select_backend().device\n"
               "import torch, torch_xla\n"
               "x = torch.ones(3, device=d) * 5\n"
               "torch_xla.sync(); print(x.cpu().sum().item(), flush=True)")


def run_double(code, env, timeout=120):
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
    assert [(e["event"], e.get("neff_has_metadata")) for e in journal(tmp_path)
            if e["event"] in ("compiled", "cached")] == [("compiled", None), ("cached", False)]
    capture = run_double(COMPILE_ONE, {**instance, **capture_env(tmp_path / "capture", cc_flags="")})
    assert capture.returncode == 0
    assert journal(tmp_path)[-1]["event"] == "compiled" and journal(tmp_path)[-1]["debug"]
    assert list((tmp_path / "capture/compile-cache").glob("neuronxcc-*/MODULE_*/model.done"))


def parallel_compile(code, env):
    return subprocess.run(["neuron_parallel_compile", sys.executable, "-c", code], env=env,
                          cwd=REPO_ROOT, text=True, capture_output=True, timeout=300)


@pytest.mark.e2e
def test_neuron_parallel_compile_compiles_the_graphs_its_trial_names_then_finds_none(instance, tmp_path):
    cold = parallel_compile(COMPILE_ONE, instance)
    assert cold.returncode == 0, cold.stdout[-2000:]
    assert "Extracting graphs (" in cold.stdout and "Total graphs: 1" in cold.stdout
    assert "15.0" not in cold.stdout.split("Extracting")[-1]  # the trial's value is not real
    assert [e["event"] for e in journal(tmp_path) if e["event"] not in ("reserved", "compiling")] == [
        "extracted", "trial", "compiled"]
    warm = parallel_compile(COMPILE_ONE, instance)
    assert warm.returncode == 0 and "No todo hlos found" in warm.stdout
    assert "Total graphs" not in warm.stdout


@pytest.mark.e2e
def test_neuron_parallel_compile_stops_on_a_failed_trial_and_exits_with_the_failed_count(instance):
    crash = "import sys; sys.exit(3)"
    stopped = parallel_compile(crash, instance)
    assert stopped.returncode == 1 and "There was an error in the training script." in stopped.stdout
    assert "Total graphs" not in stopped.stdout and "No todo" not in stopped.stdout
    ignored = parallel_compile(crash, {**instance, "NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE": "1"})
    assert ignored.returncode == 0 and "No todo hlos found" in ignored.stdout
    failing = parallel_compile(COMPILE_ONE, {**instance, "TRN1_DOUBLE_FAIL_COMPILE": "*"})
    assert failing.returncode == 1 and "Total failed compilations: 1" in failing.stdout


@pytest.mark.e2e
def test_a_compile_interrupted_by_ctrl_c_is_cached_as_failed(instance, tmp_path):
    """The caching page: "compilation is interrupted by ctrl-C ... The graph would be marked as failed"."""
    import signal
    import time

    slow = python(COMPILE_ONE, {**instance, "TRN1_DOUBLE_COMPILE_SECONDS": "60"})
    deadline = time.time() + 120
    while not any(e["event"] == "compiling" for e in journal(tmp_path)) and time.time() < deadline:
        time.sleep(0.2)
    slow.send_signal(signal.SIGINT)
    _, err = slow.communicate(timeout=60)
    assert slow.returncode != 0 and "KeyboardInterrupt" in err
    assert not list(tmp_path.glob("var/tmp/neuron-compile-cache/*/*/*.lock"))
    again = run_double(COMPILE_ONE, instance)
    assert again.returncode != 0 and "Got a cached failed neff" in again.stderr

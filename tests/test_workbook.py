"""helpers.setup.notebook_kernel.setup(): the core-holder rule and the NeuronCores a notebook kernel takes,
against /proc, /sys and /dev trees laid out as Linux and the Neuron driver lay them out, and a
torch_neuronx package on the path (tests/neuron_trees.py): the backend choice and the core count
are the real code's."""
import os
import re
import sys

import pytest

import helpers.setup.notebook_kernel as workbook
from helpers.setup.core_holders import BUSY_CORE_MESSAGES, CORE_RULE, neuron_device_holders
from helpers.setup.notebook_kernel import (
    CoresChosenTooLate,
    NeuronCoresHeld,
    refuse_other_holders,
    remaining_cores,
    setup,
    take_neuron_cores,
)
from mnist_mlp.common.backend import Backend
from tests.neuron_trees import TRN1_32XLARGE, on_neuron_host
from tests.proc_trees import KERNEL_CMDLINE, fake_process

CORES_AT_START = os.environ.get("NEURON_RT_VISIBLE_CORES")


def backend(name="neuron", cores=2):
    return Backend(name, "chosen by the test", "2.9.0", "2.9.0",
                   "2.9.0.2.15.32035" if name == "neuron" else None, cores)


@pytest.fixture
def machine(tmp_path):
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    for name in ("neuron0", "null"):
        (dev / name).touch()
    proc.mkdir()
    return proc, dev


def test_neuron_kernel_takes_core_0_by_default():
    env = {}
    line = take_neuron_cores(backend(), "0", env)
    assert env == {"NEURON_RT_VISIBLE_CORES": "0"}
    assert line == "NeuronCores: this kernel takes 0 (NEURON_RT_VISIBLE_CORES=0)"


def test_cores_already_set_in_the_environment_are_kept_and_said():
    env = {"NEURON_RT_VISIBLE_CORES": "1"}
    line = take_neuron_cores(backend(), "0", env)
    assert env["NEURON_RT_VISIBLE_CORES"] == "1"
    assert "takes 1" in line and "already set" in line and "instead of 0" in line


def test_a_kernel_whose_workers_take_the_cores_takes_none():
    env = {}
    line = take_neuron_cores(backend(), None, env)
    assert env == {} and "takes none" in line


def test_a_core_list_the_runtime_would_refuse_is_refused_first():
    with pytest.raises(ValueError, match="contiguous and increasing"):
        take_neuron_cores(backend(), "0,2", {})


def test_taking_a_core_later_rechecks_who_holds_the_device(machine):
    """Notebook 06 takes core 0 after its torchrun runs: a neuron-top started since is named."""
    proc, dev = machine
    fake_process(proc, 10, ["/opt/aws/neuron/bin/neuron-top"], {3: dev / "neuron0"})
    env = {}
    with pytest.raises(NeuronCoresHeld, match="pid 10"):
        take_neuron_cores(backend(), "0", env,
                          recheck=lambda cores: refuse_other_holders(proc, dev, self_pid=99, cores=cores))
    assert env == {}


def test_the_cores_a_kernel_leaves_are_one_range_or_none():
    assert [remaining_cores(taken, total) for taken, total in (
        ("0", 2), ("0", 32), ("1", 2), ("0-1", 2), ("1", 3), ("0", 1))] == [
        "1", "1-31", "0", None, None, None]


def test_the_stand_in_sets_nothing():
    env = {}
    assert "the stand-in needs none" in take_neuron_cores(backend("xla-cpu", 0), "0", env)
    assert env == {}


def test_another_kernel_holding_the_device_is_refused_with_its_name_cores_and_the_fix(machine):
    proc, dev = machine
    fake_process(proc, 4242, KERNEL_CMDLINE, {7: dev / "neuron0"}, {"NEURON_RT_VISIBLE_CORES": "1"})
    fake_process(proc, 99, KERNEL_CMDLINE, {7: dev / "neuron0"})  # this kernel itself
    with pytest.raises(NeuronCoresHeld) as err:
        refuse_other_holders(proc, dev, self_pid=99)
    text = str(err.value)
    assert "pid 4242, a Jupyter kernel" in text and "NEURON_RT_VISIBLE_CORES=1" in text
    assert not re.search(r"\bpid 99\b", text), "this kernel itself is not named"
    assert "Running Terminals and Kernels" in text and "`kill 4242`" in text
    assert BUSY_CORE_MESSAGES[0].text in text and CORE_RULE in text


def test_a_holder_on_other_declared_cores_does_not_count(machine):
    """Two JupyterLabs started with NEURON_RT_VISIBLE_CORES=0 and =1: each kernel's environment
    says which core its runtime took, so neither blocks the other; undeclared cores block."""
    proc, dev = machine
    fake_process(proc, 500, KERNEL_CMDLINE, {7: dev / "neuron0"}, {"NEURON_RT_VISIBLE_CORES": "1"})
    refuse_other_holders(proc, dev, self_pid=99, cores="0")  # raises nothing
    for ours in ("1", "0-1", None):  # the same core, a range over it, or every core (torchrun)
        with pytest.raises(NeuronCoresHeld, match="pid 500"):
            refuse_other_holders(proc, dev, self_pid=99, cores=ours)
    fake_process(proc, 501, ["python", "train.py"], {3: dev / "neuron0"}, {})  # no variable: all
    with pytest.raises(NeuronCoresHeld, match="pid 501"):
        refuse_other_holders(proc, dev, self_pid=99, cores="0")


def test_a_running_neuron_top_is_refused_as_the_troubleshooting_guide_says(machine):
    """The torch-neuronx troubleshooting entry for "NeuronCore(s) not available": "terminate any
    neuron-top sessions that are running" (docs/sources.md): setup() names it, with that advice."""
    proc, dev = machine
    fake_process(proc, 10, ["/opt/aws/neuron/bin/neuron-top"], {3: dev / "neuron0"})
    with pytest.raises(NeuronCoresHeld) as err:
        refuse_other_holders(proc, dev, self_pid=99, cores="0")
    assert "pid 10, neuron-top" in str(err.value)
    assert "terminate any neuron-top sessions" in str(err.value)


def test_monitors_and_this_process_do_not_count(machine):
    """neuron-monitor reading the device and this kernel itself are both seen, and neither is
    refused; one more kernel on the device is refused, alone."""
    proc, dev = machine
    fake_process(proc, 10, ["/opt/aws/neuron/bin/neuron-monitor"], {3: dev / "neuron0"})
    fake_process(proc, 99, KERNEL_CMDLINE, {7: dev / "neuron0"})
    scan = neuron_device_holders(proc, dev, self_pid=99)
    assert [(h.pid, h.is_monitor, h.is_this_process) for h in scan.holders] == [
        (10, True, False), (99, False, True)]
    assert scan.others == []
    refuse_other_holders(proc, dev, self_pid=99)  # raises nothing
    fake_process(proc, 4242, KERNEL_CMDLINE, {7: dev / "neuron0"})
    with pytest.raises(NeuronCoresHeld) as err:
        refuse_other_holders(proc, dev, self_pid=99)
    assert "pid 4242" in str(err.value)
    assert "pid 10," not in str(err.value) and "pid 99," not in str(err.value)


def unset_cores(monkeypatch):
    """No NEURON_RT_VISIBLE_CORES now, and whatever setup() sets is undone after the test
    (a delenv of an absent variable records nothing to undo, a setenv does); torch_xla not yet
    imported, as in a fresh kernel (restored after the test)."""
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "")
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES")
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)


@pytest.fixture
def neuron_setup(machine, monkeypatch, tmp_path):
    """setup() on a stand-in trn1.2xlarge (tests/neuron_trees.py): its /sys and /dev files under
    tmp_path, torch_neuronx importable, /proc the fake one. The real select_backend() picks
    Neuron and the real visible_neuron_cores() counts 2 cores, then what NEURON_RT_VISIBLE_CORES
    leaves."""
    proc, dev = machine
    assert on_neuron_host(monkeypatch, tmp_path) == dev
    monkeypatch.setattr(workbook, "PROC_DIR", proc)
    unset_cores(monkeypatch)
    return proc, dev


def test_setup_on_neuron_takes_one_core_and_says_so(neuron_setup, capsys):
    b = setup(data=False)
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "0" and b.neuron_cores == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Backend: Neuron") and "NeuronCores visible: 1" in out[0]
    assert out[1] == "NeuronCores: this kernel takes 0 (NEURON_RT_VISIBLE_CORES=0)"


def test_setup_picks_neuron_without_importing_torch_xla_or_torch_neuronx(neuron_setup, monkeypatch):
    """The cores are set before torch_xla's import, which on a Neuron host runs torch-neuronx's
    set-up of the runtime (docs/sources.md): choosing the backend imports neither."""
    monkeypatch.delitem(sys.modules, "torch_neuronx", raising=False)
    setup(data=False)
    assert "torch_xla" not in sys.modules and "torch_neuronx" not in sys.modules
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "0"


def test_a_kernel_that_imported_torch_xla_first_is_told_to_restart(neuron_setup, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_xla", sys.modules.get("torch_xla") or sys)
    with pytest.raises(CoresChosenTooLate, match=r"imported in this kernel before setup\(\) chose"
                       r".*Restart the kernel"):
        setup(data=False)
    assert "NEURON_RT_VISIBLE_CORES" not in os.environ  # nothing half-done
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "1")  # set before the kernel started: kept
    assert setup(data=False).neuron_cores == 1


def test_setup_for_a_torchrun_notebook_leaves_every_core_to_the_workers(neuron_setup, capsys):
    b = setup(data=False, neuron_cores=None)
    assert "NEURON_RT_VISIBLE_CORES" not in os.environ and b.neuron_cores == 2
    assert "this kernel takes none" in capsys.readouterr().out


def test_setup_counts_the_cores_of_the_machine_it_runs_on(machine, monkeypatch, tmp_path, capsys):
    """On a trn1.32xlarge (16 devices of 2 cores) a kernel that takes cores 0-7 sees those 8,
    and its torchrun workers get the 24 it left."""

    on_neuron_host(monkeypatch, tmp_path / "trn1.32xlarge", *TRN1_32XLARGE)
    monkeypatch.setattr(workbook, "PROC_DIR", machine[0])
    monkeypatch.setattr(workbook, "KERNEL_ONLY", {})
    unset_cores(monkeypatch)
    b = setup(data=False, neuron_cores="0-7")
    assert b.name == "neuron" and b.neuron_cores == 8
    assert "NeuronCores visible: 8" in capsys.readouterr().out
    assert workbook.KERNEL_ONLY == {"NEURON_RT_VISIBLE_CORES": "8-31"}


def test_setup_refuses_while_another_kernel_holds_the_device(neuron_setup):
    proc, dev = neuron_setup
    fake_process(proc, 4242, KERNEL_CMDLINE, {7: dev / "neuron0"}, {})
    with pytest.raises(NeuronCoresHeld, match="pid 4242"):
        setup(data=False)
    assert "NEURON_RT_VISIBLE_CORES" not in os.environ  # refused before taking anything


def test_setup_on_the_stand_in_prints_only_the_summary(machine, monkeypatch, tmp_path, capsys):
    proc, dev = machine
    on_neuron_host(monkeypatch, tmp_path)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setattr(workbook, "PROC_DIR", proc)
    unset_cores(monkeypatch)
    # PJRT_DEVICE=CPU on a Trainium host: a holder of the device is no concern of the stand-in.
    fake_process(proc, 4242, KERNEL_CMDLINE, {7: dev / "neuron0"}, {})
    setup(data=False)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "no NeuronCore" in out[0]
    assert os.environ.get("NEURON_RT_VISIBLE_CORES") == CORES_AT_START


def test_the_instructor_pages_quote_the_one_busy_core_message_set():
    """The busy-core messages are defined once (helpers.setup.core_holders) and quoted, each with a
    source, on the instructor's pages; no page quotes a message no source shows."""
    from mnist_mlp.common.paths import REPO_ROOT

    pages = {name: " ".join((REPO_ROOT / name).read_text().split())
             for name in ("notebooks/README.md", "docs/instructor.md")}
    for message in BUSY_CORE_MESSAGES:
        assert message.text in pages["docs/instructor.md"], message.text
        assert message.source in pages["docs/instructor.md"] or not message.source
    for message in (BUSY_CORE_MESSAGES[0], BUSY_CORE_MESSAGES[2]):
        assert message.text in pages["notebooks/README.md"], message.text
    for text in pages.values():
        assert "Failed to acquire" not in text


def test_commands_the_kernel_starts_get_the_cores_it_left(neuron_setup, monkeypatch):
    """setup() pins the kernel to core 0; a script it starts must not inherit that (the runtime
    refuses it core 0 while the kernel lives): it gets the cores the kernel left, while a
    user's own setting passes on."""
    from helpers.launch import processes

    monkeypatch.setattr(processes, "KERNEL_ONLY", {})
    monkeypatch.setattr(workbook, "KERNEL_ONLY", processes.KERNEL_ONLY)
    setup(data=False)
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "0"
    run = processes.run_streaming(
        [sys.executable, "-c", "import os; print(os.environ.get('NEURON_RT_VISIBLE_CORES'))"],
        timeout=60)
    assert run.lines[-1] == "1"  # a trn1.2xlarge has 2 cores: the kernel took 0
    assert processes.child_environment({"NEURON_RT_VISIBLE_CORES": "1"})[
        "NEURON_RT_VISIBLE_CORES"] == "1"  # asked for explicitly: passed on


def test_a_users_core_setting_passes_on_to_commands(neuron_setup, monkeypatch):
    from helpers.launch import processes

    monkeypatch.setattr(processes, "KERNEL_ONLY", {})
    monkeypatch.setattr(workbook, "KERNEL_ONLY", processes.KERNEL_ONLY)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "1")
    setup(data=False)
    assert processes.child_environment()["NEURON_RT_VISIBLE_CORES"] == "1"


def test_setup_leaves_no_core_setting_behind_for_other_tests():
    # Runs after the setup() tests above (pytest keeps file order): their fixtures undid it.
    assert os.environ.get("NEURON_RT_VISIBLE_CORES") == CORES_AT_START


def test_torchrun_workers_need_every_core_so_a_kernel_that_took_one_must_not_start_them(monkeypatch):
    """torch-xla's own check (torch_xla/_internal/neuron_utils.py, run in each torchrun worker):
    with NEURON_RT_VISIBLE_CORES naming fewer cores than LOCAL_WORLD_SIZE the worker refuses to
    start. A kernel that took core 0 hands its children only core 1."""
    from torch_xla._internal.neuron_utils import remap_visible_cores

    from helpers.launch.processes import KERNEL_ONLY, child_environment

    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    monkeypatch.setattr(workbook, "KERNEL_ONLY", KERNEL_ONLY)
    monkeypatch.setitem(KERNEL_ONLY, "NEURON_RT_VISIBLE_CORES", remaining_cores("0", 2))
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", child_environment()["NEURON_RT_VISIBLE_CORES"])
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE .* of 2 is not equal to count 1"):
        remap_visible_cores(0, 2)
    monkeypatch.delitem(KERNEL_ONLY, "NEURON_RT_VISIBLE_CORES")
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES")
    assert "NEURON_RT_VISIBLE_CORES" not in child_environment(), "setup(neuron_cores=None)"


def test_a_notebook_that_starts_two_workers_takes_no_core_before_them():
    """So every notebook with a 2-worker torchrun starts with setup(neuron_cores=None) and takes
    a core (take_neuron_cores) only after its last torchrun cell."""
    import nbformat

    from tests.paths import REPO_ROOT

    for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        torchrun = [i for i, src in enumerate(code)
                    if "run_torchrun(" in src and "nproc_per_node=2" in src]
        if not torchrun:
            continue
        first = next(src for src in code if "setup(" in src)
        assert "setup(neuron_cores=None)" in first, path.name
        takes = [i for i, src in enumerate(code) if "take_neuron_cores(" in src]
        assert all(i > max(torchrun) for i in takes), path.name

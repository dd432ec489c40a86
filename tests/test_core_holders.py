"""helpers/setup/core_holders.py on fake /proc and /dev trees laid out as Linux lays them out
(tests/proc_trees.py): who is found holding a Neuron device, in what order, which tools count as
monitors, what a holder's environment says, and the exact words a learner reads when a notebook
refuses to start (tests/test_neuron_env.py and tests/test_workbook.py check the checks built on
it)."""
from __future__ import annotations

import pytest

from helpers.setup.core_holders import (
    CORE_RULE,
    DeviceHolder,
    HolderScan,
    busy_core_messages_text,
    core_environment,
    holders_message,
    is_monitor,
    neuron_device_holders,
)
from mnist_mlp.common.platform_paths import PLATFORM_ROOT_ENV
from tests.proc_trees import KERNEL_CMDLINE, fake_process

BUSY = ("a busy core fails at start-up with 'NeuronCore(s) not available - Requested:1 "
        "Available:0' or 'Logical Neuron Core(s) not available - Requested:… Available:…'")


@pytest.fixture
def dev(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("neuron0", "neuron1", "null"):
        (dev / name).touch()
    return dev


def test_holders_come_in_pid_order_with_what_each_has_open(tmp_path, dev):
    """Numeric pid order (9 before 10), an empty command line shown as '?', a process that exited
    while we looked (no fd/) or an fd that is not a link skipped without ending the scan."""
    proc = tmp_path / "proc"
    (proc / "5").mkdir(parents=True)  # exited: its fd/ is gone
    fake_process(proc, 10, ["python", "train.py"], {3: dev / "neuron1"}, {})
    fake_process(proc, 9, [], {4: dev / "neuron0"}, {})
    (proc / "9" / "fd" / "9").write_text("")  # not a link (created last: listed first on tmpfs)
    (proc / "self").symlink_to(proc / "10")
    scan = neuron_device_holders(proc, dev, self_pid=10)
    assert scan == HolderScan([
        DeviceHolder(9, "?", ("/dev/neuron0",), False, False, False, ()),
        DeviceHolder(10, "python train.py", ("/dev/neuron1",), False, True, False, ()),
    ], [])


def test_no_proc_reports_nothing(tmp_path, dev):
    assert neuron_device_holders(tmp_path / "no-proc", dev) == HolderScan([], [])


def test_the_devices_default_to_the_platform_root(tmp_path, monkeypatch):
    """Without dev_root, the /dev of WORKBOOK_PLATFORM_ROOT (the trn1 double's) is the one read."""
    platform = tmp_path / "platform"
    (platform / "dev").mkdir(parents=True)
    (platform / "dev" / "neuron0").touch()
    proc = tmp_path / "proc"
    fake_process(proc, 7, KERNEL_CMDLINE, {5: platform / "dev" / "neuron0"})
    monkeypatch.setenv(PLATFORM_ROOT_ENV, str(platform))
    holders = neuron_device_holders(proc, self_pid=1).holders
    assert [h.devices for h in holders] == [("/dev/neuron0",)]


def test_a_monitors_environment_is_not_read(tmp_path, dev):
    proc = tmp_path / "proc"
    fake_process(proc, 3, ["neuron-monitor"], {3: dev / "neuron0"}, {"NEURON_RT_VISIBLE_CORES": "0"})
    (holder,) = neuron_device_holders(proc, dev, self_pid=1).holders
    assert holder.is_monitor and holder.core_env is None and holder.cores == "none known (a reader: neuron-ls or neuron-monitor)"


@pytest.mark.parametrize("argv, monitor", [
    ([], False),
    (["python3"], False),  # an interpreter alone: nothing after it to name the tool
    (["python3", "/opt/aws/neuron/bin/neuron-monitor"], True),  # the script's name counts
    (["python3", "train.py", "neuron-monitor"], False),
    (["/opt/aws/neuron/bin/neuron-top"], False),  # counted: the guide says to terminate its sessions
    (["neuron-profile"], True),  # no subcommand: it runs no NEFF
    (["neuron-profile", "--help"], True),
    (["neuron-profile", "-v", "capture", "-n", "f.neff"], False),
])
def test_which_command_lines_are_monitors(argv, monitor):
    assert is_monitor(argv) is monitor


def test_core_variables_as_the_process_started(tmp_path):
    """Only the core variables, in a fixed order; bytes that are not UTF-8 elsewhere in the
    environment do not stop the reading."""
    pid_dir = tmp_path / "42"
    pid_dir.mkdir()
    assert core_environment(pid_dir) is None  # no environ readable
    (pid_dir / "environ").write_bytes(b"LANG=caf\xe9\0NEURON_RT_NUM_CORES=2\0HOME=/root\0"
                                      b"NEURON_RT_VISIBLE_CORES=0-1\0")
    assert core_environment(pid_dir) == (("NEURON_RT_VISIBLE_CORES", "0-1"),
                                         ("NEURON_RT_NUM_CORES", "2"))


def holder(pid=100, kernel=True, this=False, monitor=False, core_env=None,
           devices=("/dev/neuron0", "/dev/neuron1")):
    return DeviceHolder(pid, "CMD", devices, kernel, this, monitor, core_env)


def test_each_kind_of_holder_described():
    assert holder().describe() == ("pid 100, a Jupyter kernel, holds /dev/neuron0, /dev/neuron1 "
                                   "(cores: unknown (its environment is not readable by this "
                                   "user)): CMD")
    assert holder(kernel=False, core_env=()).describe() == (
        "pid 100, a process, holds /dev/neuron0, /dev/neuron1 (cores: not pinned (no "
        "NEURON_RT_VISIBLE_CORES when it started: it may hold every core it could see)): CMD")
    # A kernel pinned by setup() after it started: its start-up environment cannot show it
    pinned_later = holder(core_env=()).describe()
    assert "not pinned" not in pinned_later and "chooses its cores after it starts" in pinned_later
    assert "its start-up environment does not show" in pinned_later
    assert holder(this=True, core_env=(("NEURON_RT_VISIBLE_CORES", "0"),)).describe() == (
        "pid 100, this notebook's own kernel, holds /dev/neuron0, /dev/neuron1 (cores: "
        "NEURON_RT_VISIBLE_CORES=0): CMD")
    assert holder(kernel=False, this=True, core_env=(("NEURON_RT_VISIBLE_CORES", "0"),
                                                     ("NEURON_RT_NUM_CORES", "1"))).describe() == (
        "pid 100, this process, holds /dev/neuron0, /dev/neuron1 (cores: "
        "NEURON_RT_VISIBLE_CORES=0, NEURON_RT_NUM_CORES=1): CMD")
    assert holder(monitor=True).describe() == (
        "pid 100, a monitor, reads /dev/neuron0, /dev/neuron1: CMD")


def test_the_refusal_a_learner_reads():
    holders = [holder(100, devices=("/dev/neuron0",)),
               holder(200, kernel=False, core_env=(), devices=("/dev/neuron1",))]
    assert busy_core_messages_text() == BUSY
    assert holders_message(holders) == (
        f"Another process holds the Neuron device: {holders[0].describe()}; "
        f"{holders[1].describe()}. {CORE_RULE} Two processes do not share a core: {BUSY}. To "
        "free it: if it is another notebook's kernel, shut it down in JupyterLab ('Running "
        "Terminals and Kernels' in the left sidebar); otherwise end it (`kill 100 200`) or wait "
        "for it to finish. Then run this cell again.")


def test_a_running_neuron_top_is_a_holder_named_with_the_guides_advice(tmp_path, dev):
    """The troubleshooting guide: "terminate any neuron-top sessions that are running" when cores
    are not available (docs/sources.md)."""
    proc = tmp_path / "proc"
    fake_process(proc, 7, ["/opt/aws/neuron/bin/neuron-top"], {3: dev / "neuron0"})
    (holder,) = neuron_device_holders(proc, dev, self_pid=1).holders
    assert not holder.is_monitor
    assert holder.describe() == (
        'pid 7, neuron-top, has /dev/neuron0 open (the Neuron troubleshooting guide says to '
        '"terminate any neuron-top sessions that are running" when NeuronCores are not '
        'available): /opt/aws/neuron/bin/neuron-top')

"""The idle stop's decision (deploy/idle_stop.py) on JupyterLab's own answers, recorded from a real
JupyterLab 4.6 (tests/data/jupyterlab_api.json: fresh, a kernel busy in a cell, the kernel idle
again, a terminal open), and on process lists laid out as /proc lays them out
(tests/proc_trees.py): a process holding /dev/neuron0 keeps a lab up, a monitor does not."""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from deploy import idle_stop
from deploy.idle_stop import LabActivity, check, decide, parse_time, read_activity
from tests.proc_trees import KERNEL_CMDLINE, fake_process

RECORDED = json.loads((Path(__file__).parent / "data" / "jupyterlab_api.json").read_text())
MINUTE = timedelta(minutes=1)


def activity(status: str, kernels: str, terminals: str = "terminals_none", holders=()):
    return LabActivity(parse_time(RECORDED[status]["started"]), RECORDED[kernels],
                       RECORDED[terminals], list(holders))


def test_a_lab_nobody_opened_stops_the_idle_minutes_after_jupyterlab_started():
    fresh = activity("status_fresh", "kernels_none")
    started = parse_time(RECORDED["status_fresh"]["started"])
    assert not decide(fresh, started + 59 * MINUTE, 60).stop
    verdict = decide(fresh, started + 61 * MINUTE, 60)
    assert verdict.stop and not verdict.busy and verdict.idle_seconds == 61 * 60
    assert verdict.why == ("stopping: idle for 61.0 min of 60 (0 kernel(s), 0 terminal(s), "
                           "no NeuronCore held)")


def test_a_busy_kernel_keeps_the_lab_up_however_old_its_last_activity():
    busy = activity("status_busy", "kernels_busy")
    long_after = parse_time(RECORDED["kernels_busy"][0]["last_activity"]) + 600 * MINUTE
    verdict = decide(busy, long_after, 60)
    assert verdict.busy and not verdict.stop and verdict.why == "busy: 1 kernel(s) busy"


def test_idle_counts_from_the_last_kernel_or_terminal_activity():
    idle = activity("status_idle", "kernels_idle", "terminals_one")
    terminal = parse_time(RECORDED["terminals_one"][0]["last_activity"])
    assert parse_time(RECORDED["kernels_idle"][0]["last_activity"]) < terminal
    assert not decide(idle, terminal + 29 * MINUTE, 30).stop
    assert decide(idle, terminal + 30 * MINUTE, 30).stop
    # and from the last moment the check saw the lab busy, when that is later
    assert not decide(idle, terminal + 30 * MINUTE, 30, last_busy=terminal + 5 * MINUTE).stop


def neuron_holders(tmp_path, cmdline):
    """A /proc with one kernel and one process that has /dev/neuron0 open."""
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    dev.mkdir()
    (dev / "neuron0").touch()
    fake_process(proc, 100, KERNEL_CMDLINE, {0: Path("/dev/null")})
    fake_process(proc, 200, cmdline, {3: dev / "neuron0"}, environ={})
    return proc, dev


@pytest.mark.parametrize("cmdline, holds", [
    (["torchrun", "--nproc_per_node=2", "mnist_mlp/train_torchrun.py"], True),
    (["neuron-monitor"], False),  # reads the device; not counted (helpers/setup/core_holders.py)
    (["neuron-top"], True),  # counted: the troubleshooting guide says to terminate its sessions
])
def test_a_process_holding_a_neuroncore_keeps_the_lab_up(tmp_path, cmdline, holds):
    proc, dev = neuron_holders(tmp_path, cmdline)
    idle = read_activity(port=1, token="", proc_root=proc, dev_root=dev)
    assert idle.started is None  # nothing listens on port 1
    started = parse_time(RECORDED["status_fresh"]["started"])
    lab = LabActivity(started, [], [], idle.core_holders)
    verdict = decide(lab, started + 600 * MINUTE, 60)
    assert verdict.busy is holds and verdict.stop is not holds
    if holds:
        assert verdict.why.startswith("busy: 1 process(es) hold a NeuronCore (pid 200, ")
        assert "/dev/neuron0" in verdict.why


def test_a_lab_whose_jupyterlab_is_gone_still_stops(tmp_path):
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    proc.mkdir()
    dev.mkdir()
    state = tmp_path / "state.json"
    first = parse_time("2026-11-25T08:00:00Z")
    verdict = check(1, "", 60, state, now=first, proc_root=proc, dev_root=dev)
    assert not verdict.stop and verdict.why.startswith("JupyterLab does not answer (")
    assert check(1, "", 60, state, now=first + 61 * MINUTE, proc_root=proc, dev_root=dev).stop


def test_the_check_remembers_when_it_last_saw_the_lab_busy(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    busy = activity("status_busy", "kernels_busy")
    idle = activity("status_idle", "kernels_idle")
    seen = iter([busy, idle])
    monkeypatch.setattr(idle_stop, "read_activity", lambda *args: next(seen))
    at = parse_time(RECORDED["status_idle"]["last_activity"]) + 120 * MINUTE
    assert check(8888, "t", 60, state, now=at).busy
    # the kernel finished long ago by its own clock, but the check saw it busy 50 minutes ago
    verdict = check(8888, "t", 60, state, now=at + 50 * MINUTE)
    assert not verdict.stop and round(verdict.idle_seconds) == 50 * 60


def test_the_command_line_refuses_a_nonsense_limit(capsys):
    with pytest.raises(SystemExit) as refused:
        idle_stop.main(["--idle-minutes", "0"])
    assert refused.value.code == 2
    assert "--idle-minutes must be more than 0" in capsys.readouterr().err

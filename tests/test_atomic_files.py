"""mnist_mlp/common/atomic_files.py: atomic and durable writes, stale temp files, writable directories.

Read-only directories are made for real: `chattr +i` as root (permission bits do not stop
root), `chmod 555` otherwise. A killed writer is a real process killed with SIGKILL.
"""
import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from mnist_mlp.common import atomic_files
from mnist_mlp.common.atomic_files import (
    UnwritableDirError,
    atomic_path,
    atomic_save,
    atomic_write_json,
    check_writable_dir,
    remove_stale_temps,
    temp_name_pattern,
    writable_dir_problem,
)
from tests.paths import REPO_ROOT
from tests.xla_stand_in import stand_in_device

DEVICE = stand_in_device()  # at collection: tests/xla_stand_in.py says why


@contextlib.contextmanager
def made_read_only(directory):
    """`directory` made genuinely unwritable for this process, restored afterwards."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode != 0:
            pytest.skip("running as root where `chattr +i` is not permitted: no way to make a read-only dir")
        try:
            yield directory
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
    else:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        try:
            yield directory
        finally:
            directory.chmod(mode)


def test_atomic_save_roundtrip(tmp_path):
    path = tmp_path / "sub" / "ck.pt"
    atomic_save({"w": torch.arange(3)}, path)
    assert torch.equal(torch.load(path)["w"], torch.arange(3))
    assert os.listdir(path.parent) == ["ck.pt"]  # no temp file (nor write probe) left behind


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "ck.pt"
    atomic_save({"w": torch.ones(2)}, path)
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        atomic_save({"w": lambda: None}, path)  # a lambda does not pickle
    assert torch.equal(torch.load(path)["w"], torch.ones(2))
    assert os.listdir(tmp_path) == ["ck.pt"]


def test_atomic_write_json(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json({"b": 1, "a": [1, 2]}, path)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    with pytest.raises(TypeError):
        atomic_write_json({"x": object()}, path)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_file_then_directory_are_fsynced_around_the_rename(tmp_path, monkeypatch):
    """The data reaches the disk before the rename publishes it, and the rename itself after."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "ck.pt"
    with atomic_path(path) as tmp:
        tmp.write_bytes(b"new")
        temp_name = str(tmp)
    assert events == [("fsync", temp_name), ("replace", str(path)), ("fsync", str(tmp_path))]
    assert path.read_bytes() == b"new"


WRITER = textwrap.dedent("""
    import sys, time
    from mnist_mlp.common.atomic_files import atomic_path
    with atomic_path(sys.argv[1]) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"half a checkpoint" * 1000)
            f.flush()
            print(tmp, flush=True)
            time.sleep(120)  # killed here, mid-write
""")


def start_writer(path):
    """A real process inside atomic_path(path), stopped mid-write; returns (process, its temp file)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, text=True)
    temp = proc.stdout.readline().strip()
    assert temp, "the writer did not start"
    return proc, Path(temp)


def test_temp_file_of_a_killed_writer_is_removed_by_the_next_write(tmp_path, capsys):
    path = tmp_path / "checkpoint_cpu.pt"
    atomic_save({"w": torch.ones(2)}, path)
    proc, temp = start_writer(path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert temp.exists() and f".{proc.pid}." in temp.name  # the killed write left its temp file
    assert torch.equal(torch.load(path)["w"], torch.ones(2))  # and the old checkpoint intact

    atomic_save({"w": torch.zeros(3)}, path)

    out = capsys.readouterr().out
    assert f"Removing {temp}: left by an interrupted write (its writer, pid {proc.pid}, is gone)" in out
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_cpu.pt"]
    assert torch.equal(torch.load(path)["w"], torch.zeros(3))


def test_temp_file_of_a_live_writer_is_left_alone(tmp_path):
    path = tmp_path / "checkpoint_cpu.pt"
    proc, temp = start_writer(path)
    try:
        atomic_write_json({"other": 1}, tmp_path / "results_cpu.json")
        atomic_save({"w": torch.ones(1)}, path)
        assert temp.exists()  # still being written by a running process
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_old_temp_files_go_and_other_files_stay(tmp_path):
    alive_pid = 1  # init: always running, so only the age can make its temp stale
    old = tmp_path / f".checkpoint_cpu.pt.{alive_pid}.0123abcd.tmp"
    fresh = tmp_path / f".checkpoint_cpu.pt.{alive_pid}.89abcdef.tmp"
    not_ours = [tmp_path / name for name in (
        ".results_cpu.json.1.0123abcd.tmp",  # another target's: left to that target's next write
        ".checkpoint_cpu.pt.tmp", "checkpoint_cpu.pt.1.0123abcd.tmp", ".checkpoint_cpu.pt.1.0123abcd.tmp.bak",
        ".xcheckpoint_cpu.pt.1.0123abcd.tmp", "checkpoint_cpu.pt")]
    for p in (old, fresh, *not_ours):
        p.write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    for p in (old, *not_ours):
        os.utime(p, (two_hours_ago, two_hours_ago))

    removed = remove_stale_temps(tmp_path, temp_name_pattern("checkpoint_cpu.pt"))

    assert removed == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (fresh, *not_ours))


# --------------------------------------------------------------------------- check_writable_dir


def test_missing_directory_is_created(tmp_path):
    target = tmp_path / "a" / "b"
    assert check_writable_dir(target) == target
    assert target.is_dir() and os.listdir(target) == []  # the write probe is gone


def test_directory_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "checkpoints"
    target.write_text("not a directory")
    with pytest.raises(UnwritableDirError) as info:
        check_writable_dir(target)
    lines = str(info.value).splitlines()
    assert lines == [f"{target} is a file, not a directory.", atomic_files.CHECKPOINT_DIR_HINT]
    assert target.read_text() == "not a directory"


def test_directory_under_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UnwritableDirError, match=f"cannot be created: {blocker} is a file"):
        check_writable_dir(blocker / "checkpoints" / "run1")


def test_read_only_directory_is_refused(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    with made_read_only(target):
        assert "is not writable" in writable_dir_problem(target)
        with pytest.raises(UnwritableDirError, match="not writable.*\n.*--checkpoint-dir"):
            check_writable_dir(target)
    assert os.listdir(target) == []


def test_atomic_save_into_an_unusable_directory_says_what_to_do(tmp_path):
    blocker = tmp_path / "checkpoints"
    blocker.write_text("x")
    with pytest.raises(UnwritableDirError, match="is a file, not a directory"):
        atomic_save({"w": torch.ones(1)}, blocker / "checkpoint_cpu.pt")
    target = tmp_path / "ro"
    target.mkdir()
    (target / "ck.pt").write_bytes(b"old")
    with made_read_only(target):
        with pytest.raises(UnwritableDirError, match="not writable"):
            atomic_save({"w": torch.ones(1)}, target / "ck.pt")
    assert (target / "ck.pt").read_bytes() == b"old"


def test_a_directory_where_the_checkpoint_goes_is_refused_before_writing(tmp_path):
    (tmp_path / "ck.pt").mkdir()
    (tmp_path / "ck.pt" / "keep").write_text("mine")
    with pytest.raises(UnwritableDirError, match="ck.pt is a directory, not a file"):
        atomic_write_json({"a": 1}, tmp_path / "ck.pt")
    assert sorted(os.listdir(tmp_path)) == ["ck.pt"] and (tmp_path / "ck.pt" / "keep").read_text() == "mine"


def test_xla_save_loads_on_cpu(tmp_path):
    """xm.save of XLA tensors (CPU stand-in) gives a file plain torch.load reads on the CPU."""
    path = tmp_path / "xla.pt"
    t = torch.arange(4.0, device=DEVICE) * 2
    assert t.device.type == "xla"
    atomic_save({"t": t}, path, xla=True)
    loaded = torch.load(path)
    assert loaded["t"].device.type == "cpu"
    assert torch.equal(loaded["t"], torch.tensor([0.0, 2.0, 4.0, 6.0]))

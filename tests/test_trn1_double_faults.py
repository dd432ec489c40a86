"""The workbook's paths that meet a failed or killed compile, on the trn1 double's faults on demand
(tests/trn1_double: TRN1_DOUBLE_FAIL_COMPILE, TRN1_DOUBLE_KILL_COMPILE): the run's error and the
line that says what to do, `--retry_failed_compilation`, the cache tool's failed and locked
entries, and the precompile report. A failed compile's error, the cache tool's listing of it and
the retry flag are tested with the compile notice (tests/test_compile_notice.py), on one run each;
a killed compile once here: the entry it leaves, the next run's wait and its notice, the cache
tool clearing the lock."""
import os
import re
import shlex
import subprocess
import sys
import threading
import time

import pytest

from helpers.cache import precompile
from mnist_mlp.common import compile_notice
from tests.paths import REPO_ROOT
from tests.trn1_double import instance_env, journal

pytestmark = pytest.mark.e2e


@pytest.fixture
def instance(tmp_path):
    env = instance_env(tmp_path)
    return env, tmp_path / "var/tmp/neuron-compile-cache"


def train(env, tmp_path, steps=2, **kw):
    argv = [sys.executable, "mnist_mlp/train.py", "--epochs", "1", "--steps-this-run", str(steps),
            "--checkpoint-dir", str(tmp_path / "checkpoints")]
    return subprocess.run(argv, env=env, cwd=REPO_ROOT, text=True, capture_output=True, **kw)


def cache_tool(env, *args):
    r = subprocess.run([sys.executable, "-m", "helpers.cache", *args], env=env, cwd=REPO_ROOT,
                       text=True, capture_output=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def readme_first_aid(symptom: str) -> list[str]:
    """The cache tool's arguments in notebooks/README.md's first-aid row for `symptom`."""
    row = next(line for line in (REPO_ROOT / "notebooks/README.md").read_text().splitlines()
               if symptom in line)
    command = re.search(r"`\.venv/bin/python -m helpers\.cache ([^`]+)`", row)[1]
    return shlex.split(command)


def read_lines(stream, into: list[str]) -> threading.Thread:
    reader = threading.Thread(target=lambda: into.extend(stream), daemon=True)
    reader.start()
    return reader


def test_a_killed_compile_leaves_a_lock_the_next_run_waits_on_and_names_until_the_cache_tool_clears_it(
        instance, tmp_path):
    env, cache = instance
    env = {**env, "TRN1_DOUBLE_COMPILE_SECONDS": "1"}
    killed = train({**env, "TRN1_DOUBLE_KILL_COMPILE": "#1"}, tmp_path, steps=1, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    entry, = cache.glob("neuronxcc-*/MODULE_*")  # the HLO and the lock stay, no NEFF
    assert sorted(p.name for p in entry.iterdir()) == [
        "compile_flags.json", "model.hlo_module.pb", "model.hlo_module.pb.lock"]
    key = f"{entry.parent.name}/{entry.name}"
    code, listing = cache_tool(env, "ls", "--root", str(cache), "--state", "locked")
    assert code == 0 and [line.split()[0] for line in listing.splitlines()
                          if line.split()[-1:] == [key]] == ["locked"], listing  # its row, not the counts
    argv = [sys.executable, "mnist_mlp/train.py", "--epochs", "1", "--steps-this-run", "1",
            "--checkpoint-dir", str(tmp_path / "checkpoints")]
    waiting = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    out, err = [], []
    readers = [read_lines(waiting.stdout, out), read_lines(waiting.stderr, err)]
    try:
        deadline = time.monotonic() + 600  # a guard: the loop ends on the two lines, or the run
        while waiting.poll() is None and time.monotonic() < deadline:
            if any("Another process must be compiling" in line for line in err) and any(
                    line.startswith("Waiting for a compile") for line in out):
                break
            time.sleep(0.2)
        assert waiting.poll() is None, "".join(out + err)  # it waits: nothing lifts a killed one's lock
        assert any("Another process must be compiling" in line for line in err), "".join(err)
        # The compile notice names the lock, and the way out (mnist_mlp/common/compile_notice.py).
        said = next((line for line in out if line.startswith("Waiting for a compile")), None)
        assert said and f"(on {key}, locked before this run began" in said, "".join(out)
        assert compile_notice.PRUNE_STALE_LOCKS in said and "not in the compile cache" not in said
        # notebooks/README.md's first aid: the cache tool's stale-lock prune, dry run first; the
        # default age limit keeps a lock this young (the run would wait 30 minutes)
        code, plan = cache_tool(env, "prune", "--root", str(cache), "--stale-locks", "--dry-run")
        assert code == 0 and "fresh lock" in plan, plan
        dry_run = readme_first_aid("Another process must be compiling")
        assert dry_run[-1] == "--dry-run"
        code, plan = cache_tool(env, *dry_run, "--root", str(cache))
        assert code == 0 and "nothing to remove" not in plan, plan
        code, done = cache_tool(env, *dry_run[:-1], "--root", str(cache))
        assert code == 0, done
        assert waiting.wait(timeout=600) == 0, "".join(err[-20:])  # the lock went: it compiled and trained
    finally:
        if waiting.poll() is None:
            os.killpg(waiting.pid, 9)
            waiting.wait(timeout=30)
        for reader in readers:
            reader.join(timeout=30)
    assert "waiting" in [e["event"] for e in journal(tmp_path)]


def test_the_precompile_report_shows_a_failed_compile(instance, tmp_path, monkeypatch):
    env, cache = instance
    for name in ("WORKBOOK_PLATFORM_ROOT", "PATH"):  # the instance's tools, as on a trn1's venv
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("PJRT_DEVICE", raising=False)  # the commands inherit this process's environment
    lines = []
    report = precompile.precompile(
        "mnist_mlp/train.py", ["--epochs", "1", "--checkpoint-dir", str(tmp_path / "ckpt")],
        trial_steps=2, backend="neuron", cwd=REPO_ROOT, timeout=600, on_line=lines.append,
        env={**env, "TRN1_DOUBLE_FAIL_COMPILE": "*"})
    assert report.parallel_totals.get("failed", 0) >= 1, lines[-20:]
    assert report.compiled_by_trial.failed >= 1
    assert any("helpers.cache ls --state failed" in note for note in report.notes), report.notes
    assert report.compiled_by_run is None  # not started: it would stop at the cached failure

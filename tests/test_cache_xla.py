"""torch-xla's own persistent cache on the CPU stand-in, made for real in subprocesses: its
layout is what helpers.cache lists, and a second run cannot use it (no speed-up on CPU).
The same subprocess checks that a NEURON_CC_FLAGS change once graphs were compiled carries a
note (they keep their flags; the next compile reads the new ones)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mnist_mlp.paths import REPO_ROOT as REPO

from helpers.cache.scan import scan_cache


SCRIPT = r"""
import json, os, sys, time, warnings
import torch, torch_xla, torch_xla.runtime as xr
from helpers.cache import flags as cache_flags

if len(sys.argv) > 2:  # the second run: imported alongside the first, waits for its cache
    deadline = time.monotonic() + 200
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)

before = cache_flags.replace_env("--retry_failed_compilation")  # nothing compiled yet: no note
xr.initialize_cache(sys.argv[1], readonly=False)
device = torch_xla.device()
a = torch.arange(16.0, device=device).reshape(4, 4)
torch_xla.sync()                       # graph 1: the upload
b = (a @ a).sum()
print("result", b.item())              # graph 2: the matmul and sum
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    after = cache_flags.replace_env(cache_flags.set_flag(os.environ["NEURON_CC_FLAGS"], "--log_level", "INFO"))
print("JSON", json.dumps({"before_note": before.note, "after_note": after.note,
                          "warned": [str(w.message) for w in caught],
                          "flags": cache_flags.os.environ["NEURON_CC_FLAGS"]}))
"""


def start(*args):
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    env.pop("NEURON_CC_FLAGS", None)
    return subprocess.Popen([sys.executable, "-c", SCRIPT, *map(str, args)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    line = next(l for l in stdout.splitlines() if l.startswith("JSON "))
    return json.loads(line[5:]), subprocess.CompletedProcess(proc.args, 0, stdout, stderr)


@pytest.fixture(scope="module")
def xla_cache(tmp_path_factory):
    base = tmp_path_factory.mktemp("xla")
    cache_dir, first_done = base / "cache", base / "first-done"
    # Two processes, started together so their (slow) torch imports overlap; the second
    # computes only once the first has finished writing the cache.
    second = start(cache_dir, first_done)
    first, first_run = finish(start(cache_dir))
    files = sorted(p.name for p in cache_dir.iterdir())
    first_done.touch()
    _, second_run = finish(second)
    return cache_dir, files, first, first_run, second_run


def test_layout_is_one_file_per_graph_named_by_hash(xla_cache):
    cache_dir, files, *_ = xla_cache
    assert len(files) == 2  # two syncs, two graphs
    assert all(name.isdigit() and len(name) >= 16 for name in files)
    assert all((cache_dir / n).is_file() for n in files)
    scan = scan_cache(cache_dir)
    assert sorted(e.module_hash for e in scan.entries) == files
    assert {(e.layout, e.state, e.version_dir) for e in scan.entries} == {("xla", "done", "torch-xla")}
    assert scan.unknown == [] and any("no speed-up" in n for n in scan.notes)


def test_second_run_on_cpu_cannot_read_the_cache(xla_cache):
    cache_dir, files, _, first_run, second_run = xla_cache
    assert "Deserializing serialized executable not supported" not in first_run.stderr
    assert "Deserializing serialized executable not supported" in second_run.stderr
    assert sorted(p.name for p in cache_dir.iterdir()) == files  # nothing new either
    a = [[4.0 * i + j for j in range(4)] for i in range(4)]
    expected = sum(a[i][k] * a[k][j] for i in range(4) for j in range(4) for k in range(4))
    assert f"result {expected}" in second_run.stdout  # it recompiled and still computed right


def test_flags_changed_after_graphs_were_compiled_carry_a_note(xla_cache):
    _, _, first, *_ = xla_cache
    assert first["before_note"] is None
    assert "keep the flags they were compiled with" in first["after_note"]
    assert "the next graph compiled" in first["after_note"]
    assert first["warned"] == []  # a note in the returned change, not a warning
    assert first["flags"] == "--retry_failed_compilation --log_level=INFO"  # written

"""torch-xla's own persistent cache on the CPU stand-in, made for real by two processes: its
layout is what helpers.cache lists, and a second run cannot use it (no speed-up on CPU).
The first run also checks that a NEURON_CC_FLAGS change once graphs were compiled carries a
note (they keep their flags; the next compile reads the new ones)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.cache.scan import scan_cache
from mnist_mlp.common.paths import REPO_ROOT as REPO
from tests.built_once import built_once

# One Python process imports torch and torch_xla (the slow part, 5 s of CPU and more), then
# forks a child for each run: two processes, each with an XLA runtime of its own started on the
# cache directory, one after the other. Each child's stdout and stderr (torch_xla's C++ log
# included) go to files; the parent writes the cache's listing between the two runs.
RUNS = r"""
import json, os, sys, traceback, warnings
import torch, torch_xla, torch_xla.runtime as xr
from helpers.cache import flags as cache_flags

cache_dir, out = sys.argv[1], sys.argv[2]


def one_run():
    before = cache_flags.replace_env("--retry_failed_compilation")  # nothing compiled yet: no note
    xr.initialize_cache(cache_dir, readonly=False)
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


def in_a_child(name):
    pid = os.fork()
    if pid == 0:
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            with open(os.path.join(out, f"{name}.{stream}"), "w") as f:
                os.dup2(f.fileno(), fd)
        code = 0
        try:
            one_run()
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


codes = {"first": in_a_child("first")}
with open(os.path.join(out, "listing.json"), "w") as f:
    json.dump(sorted(os.listdir(cache_dir)), f)
codes["second"] = in_a_child("second")
print(json.dumps(codes))
"""


def finish(out, name, code):
    stdout, stderr = ((out / f"{name}.{stream}").read_text() for stream in ("stdout", "stderr"))
    assert code == 0, stderr[-3000:]
    line = next(x for x in stdout.splitlines() if x.startswith("JSON "))
    return json.loads(line[5:]), subprocess.CompletedProcess(name, 0, stdout, stderr)


def make_cache(directory):
    """The two runs, on directory/cache; their output in directory/out."""
    cache_dir, out = directory / "cache", directory / "out"
    out.mkdir()
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    env.pop("NEURON_CC_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", RUNS, str(cache_dir), str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "codes.json").write_text(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def xla_cache(tmp_path_factory):
    directory = built_once(tmp_path_factory, "xla-cache", make_cache)  # once for both workers
    cache_dir, out = directory / "cache", directory / "out"
    codes = json.loads((out / "codes.json").read_text())
    first, first_run = finish(out, "first", codes["first"])
    _, second_run = finish(out, "second", codes["second"])
    files = json.loads((out / "listing.json").read_text())  # after the first run
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
    assert f"result {expected}" in second_run.stdout.splitlines()  # it recompiled and still computed right


def test_flags_changed_after_graphs_were_compiled_carry_a_note(xla_cache):
    _, _, first, *_ = xla_cache
    assert first["before_note"] is None
    assert "keep the flags they were compiled with" in first["after_note"]
    assert "the next graph compiled" in first["after_note"]
    assert first["warned"] == []  # a note in the returned change, not a warning
    assert first["flags"] == "--retry_failed_compilation --log_level=INFO"  # written

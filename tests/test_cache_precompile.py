"""neuron_parallel_compile flow: the exact command lines, and both execution paths.

The Neuron path runs against a stand-in `neuron_parallel_compile` written here (a real
executable that runs the trial it is given and then writes compiled entries in the real cache
layout), since the Neuron tool does not exist off Trainium.
"""
from __future__ import annotations

import json
import re
import sys

import pytest

from helpers.cache import precompile
from mnist_mlp.common.paths import REPO_ROOT as REPO
from mnist_mlp.common.platform_paths import PLATFORM_ROOT_ENV

ARGS = ["--epochs", "2", "--batch-size", "64", "--lr", "0.05", "--seed", "1", "--loader", "fast",
        "--data-dir", "/data/mnist", "--checkpoint-dir", "/tmp/ckpt"]
CURRENT = "neuronxcc-2.21.33363.0+82129205"

TRAIN_SCRIPT = r'''
import argparse, json, os, sys
from pathlib import Path
p = argparse.ArgumentParser()
for flag in ("--epochs", "--batch-size", "--seed"):
    p.add_argument(flag, type=int)
p.add_argument("--lr", type=float)
p.add_argument("--loader", choices=["fast", "torchvision"])
p.add_argument("--data-dir")
p.add_argument("--checkpoint-dir", required=True)
p.add_argument("--steps-this-run", type=int)
a = p.parse_args()
with open(os.environ["INVOCATIONS"], "a") as log:
    log.write(json.dumps(["train", *sys.argv[1:]]) + "\n")
graphs = 3 if a.steps_this_run else 4
print(f"New graphs before evaluation: {graphs} (compiled or loaded from the cache in 0.01 s)")
out = Path(a.checkpoint_dir)
out.mkdir(parents=True, exist_ok=True)
(out / "results_xla.json").write_text(json.dumps({"stage": "xla", "new_graphs": graphs}))
cache = os.environ.get("NEURON_COMPILE_CACHE_URL")
if cache and not a.steps_this_run:  # the real run reaches one graph the trial did not
    from helpers.cache.demo import neff_bytes
    entry = Path(cache) / "CURRENT" / "MODULE_9999aaaa9999aaaa9999+ede6753c"
    entry.mkdir(parents=True)
    (entry / "model.hlo_module.pb").write_bytes(b"x")
    (entry / "model.neff").write_bytes(neff_bytes())
    (entry / "model.done").write_bytes(b"")
'''.replace("CURRENT", CURRENT)

FAKE_WRAPPER = r'''#!PYTHON
import json, os, subprocess, sys
from pathlib import Path
from helpers.cache.demo import neff_bytes
with open(os.environ["INVOCATIONS"], "a") as log:
    log.write(json.dumps(["wrapper", *sys.argv[1:]]) + "\n")
trial = subprocess.run(sys.argv[1:])  # graph extraction: the trial run it was given
root = Path(os.environ["NEURON_COMPILE_CACHE_URL"]) / "CURRENT"
for h in ("1111", "2222"):  # then the parallel compile fills the cache, in the real layout
    entry = root / f"MODULE_{h}bbbb{h}bbbb{h}+ede6753c"
    entry.mkdir(parents=True)
    (entry / "model.hlo_module.pb").write_bytes(b"hlo")
    (entry / "compile_flags.json").write_text('["--target=trn1"]')
    (entry / "model.neff").write_bytes(neff_bytes())
    (entry / "model.done").write_bytes(b"")
failed = int(os.environ.get("FAIL_GRAPHS", "0"))
for i in range(failed):  # a failed compile: its failure text stored as the model.neff
    entry = root / f"MODULE_{i}ffff{i}ffff+ede6753c"
    entry.mkdir(parents=True)
    (entry / "model.hlo_module.pb").write_bytes(b"hlo")
    (entry / "model.neff").write_text("Failed compilation with ['neuronx-cc', 'compile']: boom")
    (entry / "model.done").write_bytes(b"")
print(f"INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: {2 + failed}")
print("INFO ||NEURON_PARALLEL_COMPILE||: Total successful compilations: 2")
print(f"INFO ||NEURON_PARALLEL_COMPILE||: Total failed compilations: {failed}")
sys.exit(trial.returncode)
'''.replace("PYTHON", sys.executable).replace("CURRENT", CURRENT)


def test_single_process_commands_exact_argv():
    c = precompile.build_commands("mnist_mlp/train.py", ARGS, python="python3")
    assert c.run == ["python3", "mnist_mlp/train.py", *ARGS]
    assert c.trial_run == ["python3", "mnist_mlp/train.py", *ARGS, "--steps-this-run", "10"]
    assert c.trial == ["neuron_parallel_compile", *c.trial_run]
    assert c.shell()["trial"].startswith("neuron_parallel_compile python3 mnist_mlp/train.py --epochs 2")


def test_torchrun_commands_exact_argv():
    c = precompile.build_commands("mnist_mlp/train_torchrun.py", ARGS, nproc_per_node=2, trial_steps=15,
                          python="python3", master_port=29512)
    assert c.run == ["python3", "-m", "torch.distributed.run", "--nproc_per_node=2",
                     "--master_port=29512", "--tee=3", "mnist_mlp/train_torchrun.py", *ARGS]
    assert c.trial == ["neuron_parallel_compile", *c.run, "--steps-this-run", "15"]


def test_trial_and_run_differ_only_in_the_step_limit():
    c = precompile.build_commands("s.py", ARGS, nproc_per_node=2, master_port=1234)
    assert c.trial[0] == "neuron_parallel_compile" and c.trial[1:-2] == c.run
    assert c.trial[-2:] == ["--steps-this-run", "10"]


@pytest.mark.parametrize("bad", [["--steps-this-run", "5"], ["--steps-this-run=5"],
                                 ["--steps_this_run", "5"]])
def test_step_limit_in_the_arguments_is_refused(bad):
    with pytest.raises(ValueError, match="pass trial_steps= instead"):
        precompile.build_commands("s.py", ["--epochs", "1", *bad])


@pytest.mark.parametrize("steps", [0, -1, 2.5, True])
def test_trial_steps_must_be_positive(steps):
    with pytest.raises(ValueError, match="positive whole number"):
        precompile.build_commands("s.py", [], trial_steps=steps)


def test_real_training_scripts_accept_both_command_lines():
    from mnist_mlp.common.cli import parse_args

    c = precompile.build_commands(REPO / "mnist_mlp" / "train.py", ARGS)
    run_args, trial_args = c.run[2:], c.trial_run[2:]
    assert parse_args("", run_args).steps_this_run is None
    trial = parse_args("", trial_args)
    assert trial.steps_this_run == 10 and trial.epochs == 2 and trial.batch_size == 64


def test_output_parsers():
    lines = ["[rank1]: New graphs before evaluation: 5 (compiled or loaded from the cache in 1.0 s)", "noise",
             "[rank0]: New graphs before evaluation: 6 (compiled or loaded from the cache in 1.0 s)",
             "2023-08-24 20:21:11.000895:  161136  INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: 2",
             "... INFO ||NEURON_PARALLEL_COMPILE||: Total failed compilations: 1"]
    assert precompile.new_graphs_from_output(lines) == 6
    assert precompile.new_graphs_from_output(["Graphs compiled: 2 (compile time 0.3 s)"]) == 2  # an older log
    assert precompile.parallel_compile_totals(lines) == {"total": 2, "failed": 1}
    assert precompile.new_graphs_from_output(["nothing"]) is None


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN_SCRIPT)
    return tmp_path


def invocations(tmp_path):
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def test_stand_in_explains_and_runs_only_the_trial(workdir):
    lines = []
    report = precompile.precompile(workdir / "train.py", ["--epochs", "1", "--checkpoint-dir", "ckpt"],
                           backend="xla-cpu", cwd=workdir, timeout=120, on_line=lines.append,
                           env={"INVOCATIONS": str(workdir / "calls.jsonl")})
    assert invocations(workdir) == [["train", "--epochs", "1", "--checkpoint-dir", "ckpt",
                                     "--steps-this-run", "10"]]
    assert report.mode == "stand-in" and report.graphs_traced == 3
    assert report.results == {"xla": {"stage": "xla", "new_graphs": 3}}
    text = "\n".join(lines)
    assert "No NeuronCore here, so no neuron_parallel_compile" in text
    assert "NEURON_PARALLEL_COMPILE_MAX_RETRIES=1" in text and not re.search(r"--num_parallel \d", text)
    assert report.commands.shell()["trial"] in text and report.commands.shell()["run"] in text
    assert "graphs the trial traced: 3" in text
    assert report.compiled_by_trial is None and report.cache_before is None


def fake_wrapper(workdir):
    wrapper = workdir / "bin" / "neuron_parallel_compile"
    wrapper.parent.mkdir()
    wrapper.write_text(FAKE_WRAPPER)
    wrapper.chmod(0o755)
    return wrapper


def own_platform(workdir):
    """The stand-in wrapper on a platform root of its own: another machine to the cache tool of
    other tests, which would otherwise see a neuron_parallel_compile running (no lock stale)."""
    return {PLATFORM_ROOT_ENV: str(workdir / "platform")}


def test_neuron_path_precompiles_then_trains(workdir):
    wrapper = fake_wrapper(workdir)
    cache = workdir / "neuron-cache"
    lines = []
    report = precompile.precompile(workdir / "train.py", ["--checkpoint-dir", "ckpt"], backend="neuron",
                           wrapper=str(wrapper), cwd=workdir, timeout=120, on_line=lines.append,
                           env={"INVOCATIONS": str(workdir / "calls.jsonl"),
                                "NEURON_COMPILE_CACHE_URL": str(cache), **own_platform(workdir)})
    script = str(workdir / "train.py")
    assert invocations(workdir) == [
        ["wrapper", sys.executable, script, "--checkpoint-dir", "ckpt", "--steps-this-run", "10"],
        ["train", "--checkpoint-dir", "ckpt", "--steps-this-run", "10"],
        ["train", "--checkpoint-dir", "ckpt"]]
    assert report.mode == "neuron" and report.cache_root == str(cache)
    assert report.cache_before == "empty (no cache directory yet)"
    assert report.compiled_by_trial.done == 2 and report.compiled_by_trial.failed == 0
    assert report.parallel_totals == {"total": 2, "succeeded": 2, "failed": 0}
    assert list(report.compiled_by_run.new) == [f"{CURRENT}/MODULE_9999aaaa9999aaaa9999+ede6753c"]
    assert report.cache_after_run.startswith("3 entries (done 3")
    assert any("did not trace" in n for n in report.notes)
    assert report.results["xla"]["new_graphs"] == 4  # the real run's results file
    text = "\n".join(lines)
    assert "graphs compiled ahead of time: 2" in text and "cache misses): 1" in text


def test_neuron_path_needs_the_wrapper(workdir):
    with pytest.raises(FileNotFoundError, match="comes with torch-neuronx"):
        precompile.precompile(workdir / "train.py", [], backend="neuron",
                      wrapper=str(workdir / "no-such-wrapper"), on_line=lambda _: None)


def test_failed_compiles_are_counted_as_failed_not_done(workdir):
    """neuron_parallel_compile's `scan` counts failed entries as done; the cache scan here reads
    each model.neff and counts them apart."""
    cache = workdir / "neuron-cache"
    report = precompile.precompile(workdir / "train.py", ["--checkpoint-dir", "ckpt"], backend="neuron",
                           wrapper=str(fake_wrapper(workdir)), cwd=workdir, timeout=120,
                           run_real=False, on_line=lambda _: None,
                           env={"INVOCATIONS": str(workdir / "calls.jsonl"), "FAIL_GRAPHS": "1",
                                "NEURON_COMPILE_CACHE_URL": str(cache), **own_platform(workdir)})
    assert report.compiled_by_trial.done == 2 and report.compiled_by_trial.failed == 1
    assert report.parallel_totals == {"total": 3, "succeeded": 2, "failed": 1}
    assert any("python -m helpers.cache ls --state failed" in n for n in report.notes)
    assert report.compiled_by_run is None  # run_real=False: the trial only


def test_a_trn1_2xlarge_precompiles_with_the_retry_the_docs_advise(tmp_path, monkeypatch):
    # A real trial run of a script that writes down the variable it was given; the instance
    # type (the DMI product name) is the one thing set by the test.
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys\nprint('retries', os.environ.get(sys.argv[1], 'unset'))\n")
    monkeypatch.delenv(precompile.RETRIES_VARIABLE, raising=False)
    seen = {}
    for instance in ("trn1.2xlarge", "trn1.32xlarge"):
        monkeypatch.setattr(precompile, "instance_type", lambda instance=instance: instance)
        lines = []
        precompile.precompile(probe, [precompile.RETRIES_VARIABLE], backend="xla-cpu",
                              cwd=tmp_path, timeout=60, on_line=lines.append)
        seen[instance] = next(line for line in lines if line.startswith("retries"))
    assert seen == {"trn1.2xlarge": "retries 1", "trn1.32xlarge": "retries unset"}

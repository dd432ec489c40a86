"""helpers/inside/neuron_explorer.py: the Neuron Explorer command lines notebook 06 shows, as the
Neuron 2.31 guides give them (Capture profiles, Get started, Migration)."""
import shlex

from helpers.inside.neuron_explorer import DOCS, capture_env, commands, summary_argv


def test_links_are_pinned_to_the_release():
    assert all(url.startswith("https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/")
               for url in DOCS.values())


def test_environment_capture_sets_the_documented_variables():
    env = capture_env("out", cc_flags="")
    assert env == {"NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_OUTPUT_DIR": "out",
                   "XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1",
                   "NEURON_CC_FLAGS": "--cache_dir=out/compile-cache"}


def test_a_capture_compiles_into_a_new_cache_keeping_the_compiler_flags():
    """A NEFF cached without the debug metadata would be used as it is (the Explorer's
    troubleshooting page): the capture's graphs compile again, into the capture's own cache."""
    env = capture_env("out", cc_flags="--model-type=transformer --cache_dir=/shared/cache")
    assert env["NEURON_CC_FLAGS"] == "--model-type=transformer --cache_dir=out/compile-cache"
    spaced = capture_env("out", cc_flags="--cache_dir /shared/cache -O1 --cache_dir /b --retry_failed_compilation")
    assert spaced["NEURON_CC_FLAGS"] == "-O1 --retry_failed_compilation --cache_dir=out/compile-cache"


def test_command_lines(monkeypatch):
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    lines = {k: shlex.split(v) for k, v in commands("prof dir", steps=12).items()}
    env_capture = lines["capture a run (environment variables)"]
    assert "NEURON_RT_INSPECT_OUTPUT_DIR=prof dir" in env_capture
    assert env_capture[-4:] == ["python", "mnist_mlp/train.py", "--steps-this-run", "12"]
    wrapper = lines["capture a run (CLI wrapper)"]
    assert wrapper[:4] == ["XLA_IR_DEBUG=1", "XLA_HLO_DEBUG=1",
                           "NEURON_CC_FLAGS='--cache_dir=prof dir/compile-cache'", "neuron-explorer"]
    assert wrapper[4:7] == ["inspect", "-o", "prof dir"]
    assert wrapper[-4:] == env_capture[-4:]
    assert lines["summary in the terminal"] == ["neuron-explorer", "view", "-d", "prof dir",
                                                "--output-format", "summary-text"]
    assert lines["summary in the terminal"] == summary_argv("prof dir")
    assert lines["profile one compiled graph (NEFF) on its own"] == [
        "neuron-explorer", "capture", "-n", "file.neff", "-s", "profile.ntff"]
    assert not any("neuron-profile" in " ".join(v) for v in lines.values()), "the old tool"

"""End-to-end: mnist_mlp/train_bf16.py in each --precision mode, run as a user runs it on the
CPU stand-in; and its diff against train.py, which is the lesson, kept to the BF16 changes."""
import os

import pytest
import torch

from mnist_mlp.precision import PRECISIONS
from tests.paths import REPO_ROOT
from tests.script_runs import LONG_STEPS
from tests.test_scripts import (assert_no_deprecation_warning, assert_sample_lines_in_order,
                                forbidden, stage_main)

BF16_WEIGHTS = {"fp32": False, "bf16": True, "bf16-sr": True, "bf16-master": True,
                "autocast": False}


@pytest.mark.e2e
@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precision_short_run(script_runs, precision):
    run = script_runs[f"bf16 {precision}"]
    out = run.output
    assert out.startswith("Backend: XLA on CPU")
    assert f"Precision: {precision} |" in out
    assert ("EMULATED in software" in out) is (precision == "bf16-sr")  # said, and only there
    assert_sample_lines_in_order(out)
    assert_no_deprecation_warning(out)
    results = run.results(f"bf16_{precision}")
    assert results["precision"] == precision and results["steps"] == LONG_STEPS
    assert results["graphs_compiled"] == 1, "one training graph, the same every step"
    assert results["final_loss"] < results["loss_history"][0][1]
    expected = torch.bfloat16 if BF16_WEIGHTS[precision] else torch.float32
    assert {t.dtype for t in run.state_dict(f"bf16_{precision}").values()} == {expected}


@pytest.mark.e2e
def test_fp32_mode_is_train_py(script_runs):
    """--precision fp32 computes exactly what train.py computes: the lesson is only the rest."""
    xla = script_runs["xla long"].state_dict("xla")
    fp32 = script_runs["bf16 fp32"].state_dict("bf16_fp32")
    for name in xla:
        assert torch.equal(xla[name], fp32[name]), name


def test_deprecated_bf16_variable_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """train_bf16.py's main() in this process, XLA_USE_BF16=1 set: refused once the flags are
    read, before anything else (not even the backend line, so before the device is touched),
    with nothing written."""
    from mnist_mlp import train_bf16

    monkeypatch.setenv("XLA_USE_BF16", "1")
    monkeypatch.setattr(train_bf16, "mnist_loaders", forbidden("the data was loaded"))
    monkeypatch.setattr(train_bf16, "MLP", forbidden("a model was built"))
    code, out, err = stage_main(train_bf16, ["--checkpoint-dir", str(tmp_path)], capsys)
    assert code == 1, out + err
    assert "Traceback" not in err
    assert err.startswith("error: XLA_USE_BF16 is set") and "unset XLA_USE_BF16" in err
    assert out == "" and not list(tmp_path.iterdir())


class DeviceOpened(Exception):
    """Raised where a NeuronCore would be opened: none exists here."""


NEURON_VARIABLES = ("PJRT_DEVICE", "NEURON_RT_STOCHASTIC_ROUNDING_EN", "NEURON_CC_FLAGS")
USERS_FLAGS = "--model-type=transformer --auto-cast matmult"  # set by the user before the run


@pytest.mark.parametrize("precision,rounding,flags", [
    ("bf16-sr", "1", USERS_FLAGS),
    ("autocast", "0", "--model-type=transformer --auto-cast=none"),
    ("bf16", "0", USERS_FLAGS),
    ("fp32", "0", USERS_FLAGS),
])
def test_on_neuron_the_runtime_and_compiler_settings_are_made_before_the_device_opens(
        precision, rounding, flags, tmp_path, monkeypatch, capsys):
    """train_bf16.py's main() on a stand-in trn1.2xlarge (tests/neuron_trees.py: the real
    select_backend() picks Neuron), stopped where torch_xla would open the NeuronCore: by then
    the runtime's stochastic rounding is on for bf16-sr alone (off otherwise, whatever was set
    before), and autocast alone replaces the compiler's --auto-cast with none, keeping the
    user's other flags. The runtime and the compiler read both when the device opens."""
    import importlib
    import sys

    import torch_xla

    import mnist_mlp
    import mnist_mlp.train_bf16 as stand_in_script  # this process's: put back afterwards
    from tests.neuron_trees import on_neuron_host

    monkeypatch.setattr(mnist_mlp, "train_bf16", stand_in_script)
    monkeypatch.setitem(sys.modules, "mnist_mlp.train_bf16", stand_in_script)
    on_neuron_host(monkeypatch, tmp_path)
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "0" if rounding == "1" else "1")
    monkeypatch.setenv("NEURON_CC_FLAGS", USERS_FLAGS)
    seen = {}

    def open_device():
        seen.update((name, os.environ.get(name)) for name in NEURON_VARIABLES)
        raise DeviceOpened

    monkeypatch.setattr(torch_xla, "device", open_device)
    del sys.modules["mnist_mlp.train_bf16"]
    script = importlib.import_module("mnist_mlp.train_bf16")  # as `python train_bf16.py` starts
    assert script.backend.name == "neuron"
    with pytest.raises(DeviceOpened):
        script.main(["--precision", precision, "--checkpoint-dir", str(tmp_path / "out")])
    assert seen == {"PJRT_DEVICE": "NEURON", "NEURON_RT_STOCHASTIC_ROUNDING_EN": rounding,
                    "NEURON_CC_FLAGS": flags}
    out = capsys.readouterr().out
    assert out.startswith("Backend: Neuron") and f"Precision: {precision} |" in out
    assert ("the NeuronCore rounds stochastically" in out) is (precision == "bf16-sr")
    assert "EMULATED" not in out


def test_unknown_precision_is_a_usage_error(tmp_path, capsys):
    from mnist_mlp.cli import parse_args

    with pytest.raises(SystemExit) as exit_:
        parse_args("", ["--precision", "fp16", "--checkpoint-dir", str(tmp_path)], precision=True)
    assert exit_.value.code == 2
    assert "--precision: invalid choice: 'fp16'" in capsys.readouterr().err


# The lines of train.py that train_bf16.py changes (compared stripped). Every other line of
# train.py must be in train_bf16.py too: if this fails after an edit of train.py, carry the
# edit over to train_bf16.py, so that notebook 05's diff shows only the BF16 lesson.
CHANGED_TRAIN_PY_LINES = {
    '"""Stage 2: the same training on one XLA device: one NeuronCore on Trainium (the AWS sample\'s',
    'train.py). Here the XLA-on-CPU stand-in runs it when there is no NeuronCore."""',
    "def train(model, optimizer, loader, device, epochs, tracker, sync_each_step=True):",
    "output = model(train_x)",
    "loss = loss_fn(output, train_label)",
    "args = cli.parse_args(__doc__, argv, device_loader=True, profile=True)",
    "model = MLP().to(device)",
    "sync_each_step=not args.device_loader)",
    'return finish_run("xla", args, backend, model, tracker, test_loader, started=started)',
}


def test_train_bf16_is_train_py_plus_the_bf16_lesson():
    train = (REPO_ROOT / "mnist_mlp" / "train.py").read_text().splitlines()
    bf16 = {line.strip() for line in (REPO_ROOT / "mnist_mlp" / "train_bf16.py").read_text().splitlines()}
    dropped = [line.strip() for line in train if line.strip() not in bf16]
    unexpected = [line for line in dropped if line not in CHANGED_TRAIN_PY_LINES]
    assert not unexpected, (f"train.py lines missing from train_bf16.py: {unexpected}; carry "
                            f"train.py's change over to train_bf16.py")

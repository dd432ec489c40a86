"""End-to-end: mnist_mlp/train_bf16.py in each --precision mode, run as a user runs it on the
CPU stand-in; and its diff against train.py, which is the lesson, kept to the BF16 changes."""
import pytest
import torch

from mnist_mlp.common.precision import PRECISIONS
from tests.paths import REPO_ROOT
from tests.script_runs import LONG_STEPS
from tests.test_scripts import assert_no_deprecation_warning, assert_sample_lines_in_order, forbidden, stage_main

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
    assert results["new_graphs"] == 1, "one training graph, the same every step"
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


def test_unknown_precision_is_a_usage_error(tmp_path, capsys):
    from mnist_mlp.common.cli import parse_args

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

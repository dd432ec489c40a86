"""End-to-end: mnist_mlp/train_bf16.py in each --precision mode on the CPU stand-in; and its diff
against train.py, which is the lesson, kept to the BF16 changes.

Each mode's run as a user starts it (`python mnist_mlp/train_bf16.py --precision <mode>`, one
process each) is notebook 05's: the session's execution of 05 runs all five, 600 steps each,
prints each run's backend line and summary and checks that each compiled the one graph the
stand-in expects (helpers/checks/expected.py's bf16_graphs), and the output comparison holds it
to the committed cell. So this file starts one process of its own, fp32 (train.py's equal, and
one whole log); each mode's whole log, results and checkpoint are read from the figures' run
(tests/cpu_kinds.py), which runs train_bf16.py's main() for the five modes as 05 does."""
import re

import pytest
import torch

from mnist_mlp.common.precision import PRECISIONS
from tests.cpu_kinds import BF16_STEPS
from tests.paths import REPO_ROOT
from tests.script_runs import LONG_STEPS
from tests.test_scripts import assert_no_deprecation_warning, assert_sample_lines_in_order, forbidden, stage_main

BF16_WEIGHTS = {"fp32": False, "bf16": True, "bf16-sr": True, "bf16-master": True,
                "autocast": False}
PRECISION_LINE = re.compile(r"^Precision: (\S+) \|", re.M)


def logs_by_precision(output: str) -> dict[str, str]:
    """Each train_bf16.py run's log in one process's output, by the mode its "Precision:" line
    names: from the backend line before it to the next backend line (another script's run)."""
    logs = {}
    for log in re.split(r"(?m)^(?=Backend: )", output):
        if m := PRECISION_LINE.search(log):
            assert m[1] not in logs, f"two runs of --precision {m[1]}"
            logs[m[1]] = log
    return logs


def test_each_runs_log_is_found_by_its_precision_line():
    output = ("Backend: XLA on CPU\nNew graphs before evaluation: 1\nBackend: XLA on CPU\nPrecision: fp32 | a\nstep 1\n"
              "Backend: XLA on CPU\nPrecision: bf16-sr | b\nTest accuracy: 0.5\nBackend: plain PyTorch\n")
    assert logs_by_precision(output) == {"fp32": "Backend: XLA on CPU\nPrecision: fp32 | a\nstep 1\n",
                                         "bf16-sr": "Backend: XLA on CPU\nPrecision: bf16-sr | b\n"
                                                    "Test accuracy: 0.5\n"}
    with pytest.raises(AssertionError, match="two runs of --precision fp32"):
        logs_by_precision(output + "Backend: X\nPrecision: fp32 | c\n")


@pytest.mark.e2e
def test_the_fp32_run_as_a_user_starts_it(script_runs):
    run = script_runs["bf16 fp32"]
    assert run.output.startswith("Backend: XLA on CPU")
    assert "Precision: fp32 |" in run.output and "EMULATED" not in run.output
    assert_sample_lines_in_order(run.output)
    assert_no_deprecation_warning(run.output)
    results = run.results("bf16_fp32")
    assert results["precision"] == "fp32" and results["steps"] == LONG_STEPS
    assert results["new_graphs"] == 1, "one training graph, the same every step"
    assert results["final_loss"] < results["loss_history"][0][1]
    assert {t.dtype for t in run.state_dict("bf16_fp32").values()} == {torch.float32}


@pytest.mark.e2e
@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precision_run(script_runs, precision):
    """One mode's run in the figures' process (after train.py's, before train_cpu.py's): its
    graph count there is the process's running total, so the one graph per mode is 05's check
    (and the fp32 run's above)."""
    run = script_runs["figures avx2"]
    out = logs_by_precision(run.output)[precision]
    assert out.startswith("Backend: XLA on CPU")
    assert ("EMULATED in software" in out) is (precision == "bf16-sr")  # said, and only there
    assert_sample_lines_in_order(out)
    assert_no_deprecation_warning(run.output)  # stderr follows stdout in it: the whole process
    results = run.results(f"bf16_{precision}")
    assert results["precision"] == precision and results["steps"] == int(BF16_STEPS)
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

"""The exercises: each check says Not yet / Not quite / Correct and never raises on an answer;
the solutions in notebooks/solutions/ run and are accepted; the notebooks commit the Not-yet state."""
import ast
import json
import math
import subprocess
import sys

import pytest

from helpers.checks import exercises as ex
from tests.paths import REPO_ROOT

SOLUTIONS = sorted((REPO_ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.py"))
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
JUNK = [None, "", "938?", True, [938], float("nan")]


def rows(*compiled_flags):
    """CompileMetricsRecorder-shaped rows: one per step, UncachedCompile 1 where it compiled."""
    return [{"label": f"step {i}", "UncachedCompile": int(c), "ExecuteComputation": 1}
            for i, c in enumerate(compiled_flags)]


def test_feedback_reads_the_same_as_text_and_html():
    f = ex.Feedback("Exercise 9.9 (x)", ex.WRONG, "not that", "like <this>")
    assert str(f) == "Exercise 9.9 (x) - Not quite: not that\nHint: like <this>"
    assert "<b>Hint:</b> like &lt;this&gt;" in f._repr_html_() and not f.ok
    right = ex.Feedback("Exercise 9.9 (x)", ex.RIGHT, "yes", "never shown")
    assert right.ok and "Hint" not in str(right) and "never shown" not in right._repr_html_()


def test_an_untouched_exercise_shows_no_hint():
    """Not yet: the text has no hint, only that one comes; the HTML folds it in a closed <details>."""
    untouched = ex.Feedback("Exercise 9.9 (x)", ex.NOT_YET, "set x, then run this cell.", "like <this>")
    assert "like" not in str(untouched) and ex.HINT_LATER in str(untouched)
    page = untouched._repr_html_()
    assert "<details><summary>" in page and "<details open" not in page
    assert page.index("<details>") < page.index("like &lt;this&gt;")  # only inside the fold


@pytest.fixture
def loaders_built_once(monkeypatch):
    """make_loader, each distinct loader built once in the test: a check measures len() of a
    real loader for every answer it judges, and building one over the 60,000 training images
    takes a moment."""
    import functools

    import mnist_mlp.common.data

    monkeypatch.setattr(mnist_mlp.common.data, "make_loader", functools.cache(mnist_mlp.common.data.make_loader))


def test_steps_per_epoch(mnist_root, loaders_built_once):
    assert ex.check_steps_per_epoch(None, 64, mnist_root).verdict == ex.NOT_YET
    for junk in JUNK:
        assert not ex.check_steps_per_epoch(junk, 64, mnist_root).ok
    assert ex.check_steps_per_epoch(937, 64, mnist_root).verdict == ex.WRONG  # forgot the last batch
    right = ex.check_steps_per_epoch(938, 64, mnist_root)
    assert right.ok and "holds 32 images" in right.message
    assert ex.check_steps_per_epoch(600, 100, mnist_root).ok


def test_memorised_one_batch():
    assert ex.check_memorised_one_batch(2.27, 0.01).verdict == ex.NOT_YET
    assert ex.check_memorised_one_batch(1.25, 0.1).verdict == ex.WRONG
    too_big = ex.check_memorised_one_batch(2.2, 5.0)
    assert too_big.verdict == ex.WRONG and "overshoot" in too_big.message
    assert ex.check_memorised_one_batch(math.nan, 50).verdict == ex.WRONG
    assert ex.check_memorised_one_batch(0.026, 0.5).ok


def test_graph_count():
    recorded = rows(0, 0, 1, 0, 0, 1)
    assert ex.check_graph_count(None, recorded).verdict == ex.NOT_YET
    assert ex.check_graph_count(3, recorded).verdict == ex.WRONG
    right = ex.check_graph_count(2, recorded)
    assert right.ok and "step 2, step 5" in right.message
    for junk in JUNK:
        assert not ex.check_graph_count(junk, recorded).ok


def test_graph_count_run_twice_asks_for_a_fresh_kernel_instead_of_calling_an_answer_wrong():
    """The cell run again in one kernel compiles nothing (its shapes are compiled): a prediction
    made for a fresh kernel is neither right nor wrong there."""
    again = rows(0, 0, 0, 0, 0, 0)
    assert ex.check_graph_count(2, again).verdict == ex.NOT_YET
    assert "Restart the kernel" in ex.check_graph_count(2, again).message
    assert ex.check_graph_count(0, again).ok


def test_recompile_trigger():
    assert ex.check_recompile_trigger(rows(1, 1, 1, 1, 1, 1)).verdict == ex.NOT_YET  # as committed
    assert ex.check_recompile_trigger(rows(1, 1, 0, 0, 1, 0)).verdict == ex.WRONG
    assert ex.check_recompile_trigger(rows(1, 1, 0, 0, 0, 0)).ok  # zeros start, then one graph
    assert ex.check_recompile_trigger(rows(1)).verdict == ex.NOT_YET


def test_cache_key():
    blank = dict.fromkeys(ex.CACHE_KEY_ANSWERS)
    assert ex.check_cache_key(blank).verdict == ex.NOT_YET
    answers = {k: truth for k, (truth, _) in ex.CACHE_KEY_ANSWERS.items()}
    assert ex.check_cache_key(answers).ok
    answers["seed 0 -> 1"] = True
    wrong = ex.check_cache_key(answers)
    assert wrong.verdict == ex.WRONG and "1 wrong: seed 0 -> 1" in wrong.message
    assert ex.check_cache_key({}).verdict == ex.NOT_YET


def test_cache_dir_flag(tmp_path):
    keep = {"--model-type": "transformer"}
    wanted = str(tmp_path / "classroom-cache")
    env = {"NEURON_CC_FLAGS": "--model-type=transformer"}
    assert ex.check_cache_dir_flag(env, wanted, keep).verdict == ex.NOT_YET
    assert ex.check_cache_dir_flag({"NEURON_CC_FLAGS": f"--cache_dir={wanted}"}, wanted,
                                   keep).verdict == ex.WRONG  # --model-type lost
    assert ex.check_cache_dir_flag({"NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/x"},
                                   wanted, keep).verdict == ex.WRONG
    assert ex.check_cache_dir_flag({"NEURON_CC_FLAGS": "--cache_dir='unclosed"}, wanted,
                                   keep).verdict == ex.WRONG  # does not parse: said, not raised
    assert ex.check_cache_dir_flag(
        {"NEURON_CC_FLAGS": f"--model-type=transformer --cache_dir={wanted}"}, wanted, keep).ok


def test_torchrun_standalone(capsys):
    committed = ["--nproc_per_node=2", "mnist_mlp/train_torchrun.py"]
    assert ex.check_torchrun_standalone(committed).verdict == ex.NOT_YET
    assert ex.check_torchrun_standalone(["--standalone", *committed]).ok
    # The long way round that --standalone takes: c10d on a free port (":0").
    assert ex.check_torchrun_standalone(["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0",
                                         *committed]).ok
    for wrong in (["--standalone", "--master_port=29501", *committed],  # a port after all
                  ["--standalone", "--nproc_per_node=4", "mnist_mlp/train_torchrun.py"],
                  ["--standalone", "--nproc_per_node=2", "mnist_mlp/train.py"],
                  ["--nnodes=1", *committed], ["--no-such-flag"], "--standalone", None):
        assert ex.check_torchrun_standalone(wrong).verdict == ex.WRONG, wrong
    assert "usage" not in capsys.readouterr().err  # argparse's complaint stays out of the cell


def test_distributed_sampler():
    from torch.utils.data.distributed import DistributedSampler

    assert ex.check_distributed_sampler(None, None).verdict == ex.NOT_YET
    right = DistributedSampler(range(10), num_replicas=3, rank=2, shuffle=False)
    feedback = ex.check_distributed_sampler(right, list(right))
    assert feedback.ok and "[2, 5, 8, 1]" in feedback.message  # item 1 again: the padding
    assert ex.check_distributed_sampler(right, (2, 5, 8, 1)).ok
    assert ex.check_distributed_sampler(right, [2, 5, 8]).verdict == ex.WRONG  # no padding
    assert ex.check_distributed_sampler(right, None).verdict == ex.WRONG
    for wrong in (DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False),
                  DistributedSampler(range(10), num_replicas=3, rank=2),  # shuffles
                  DistributedSampler(range(10), num_replicas=3, rank=2, shuffle=False,
                                     drop_last=True),
                  DistributedSampler(range(12), num_replicas=3, rank=2, shuffle=False),
                  list(range(10))):
        assert ex.check_distributed_sampler(wrong, [2, 5, 8, 1]).verdict == ex.WRONG, wrong


def test_bf16_checks():
    assert ex.largest_surviving_exponent() == 7
    assert ex.check_bf16_smallest_update(None).verdict == ex.NOT_YET
    assert ex.check_bf16_smallest_update(8).verdict == ex.WRONG
    assert ex.check_bf16_smallest_update(7).ok
    adds = ex.repeated_small_adds()
    assert adds["nearest"] == 1.0 and abs(adds["stochastic"] - adds["exact"]) < 0.1 * adds["exact"]
    assert ex.check_repeated_small_adds(None, None).verdict == ex.NOT_YET
    assert ex.check_repeated_small_adds(2.95, 2.95).verdict == ex.WRONG  # RNE drops them all
    assert ex.check_repeated_small_adds(1.0, 1.0).verdict == ex.WRONG
    assert ex.check_repeated_small_adds(1, 3).ok


def test_inside_a_run_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    import torch_xla.debug.metrics as met

    samples, total_ns = (met.metric_data("CompileTime") or (0, 0))[:2]
    assert ex.check_compile_counters(None, None).verdict == ex.NOT_YET
    assert ex.check_compile_counters(samples + 1, total_ns / 1e9).verdict == ex.WRONG
    assert ex.check_compile_counters(samples, total_ns / 1e9 + 5).verdict == ex.WRONG
    assert ex.check_compile_counters(samples, total_ns / 1e9).ok

    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "lr"
    assert ex.check_logged_scalars(logdir, "exercise/lr", [0.1]).verdict == ex.NOT_YET
    writer = SummaryWriter(logdir)
    for step, value in enumerate([0.1, 0.05]):
        writer.add_scalar("exercise/lr", value, step)
    writer.close()
    assert ex.check_logged_scalars(logdir, "exercise/lr", [0.1, 0.05]).ok
    assert ex.check_logged_scalars(logdir, "exercise/lr", [0.1, 0.05, 0.025]).verdict == ex.WRONG
    assert ex.check_logged_scalars(logdir, "other/tag", [0.1]).verdict == ex.NOT_YET


def test_where_the_core_wins_check():
    from helpers.inside.payoff import core_wins_from_batch, peak_flops

    widths, peak = (1024, 1024), peak_flops()
    truth = core_wins_from_batch(0.003, widths, 5e10, peak)  # about 16: the core wins at 32
    assert ex.check_core_wins_from(None, 0.003, widths, 5e10).verdict == ex.NOT_YET
    for junk in JUNK:
        assert not ex.check_core_wins_from(junk, 0.003, widths, 5e10).ok
    assert ex.check_core_wins_from(truth * 1.1, 0.003, widths, 5e10).verdict == ex.WRONG
    right = ex.check_core_wins_from(truth * 1.01, 0.003, widths, 5e10)
    assert right.ok and "the core wins" in right.message
    slow_core = ex.check_core_wins_from(core_wins_from_batch(0.003, widths, 5e11, peak), 0.003,
                                        widths, 5e11)
    assert slow_core.ok and "the CPU wins" in slow_core.message
    assert ex.check_core_wins_from(100, 0.003, widths, 2 * peak).verdict == ex.WRONG  # never wins


def in_own_process(solution) -> bool:
    """A solution that trains on XLA counts the graphs its own process compiles, in a fresh
    process as in a learner's fresh kernel: it runs as a script. The others run in this process
    (runpy, as __main__), which spares each a Python start-up and torch's import."""
    return "import torch_xla" in solution.read_text()


def run_here(solution, monkeypatch, capsys) -> subprocess.CompletedProcess:
    """The solution as `python <solution>` runs it (script_env's environment, warnings on), in
    this process; what it changes of torch's threads and of os.environ is undone afterwards."""
    import runpy
    import warnings

    import torch

    for name in ("PJRT_DEVICE", "CHECKPOINT_DIR"):  # script_env: the script chooses
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(REPO_ROOT)
    threads = torch.get_num_threads()
    capsys.readouterr()
    try:
        with warnings.catch_warnings(), pytest.raises(SystemExit) as exited:
            warnings.simplefilter("default")  # PYTHONWARNINGS=default
            runpy.run_path(str(solution), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([str(solution)], exited.value.code, out, err)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_solution_runs_and_every_check_accepts_it(solution, mnist_root, script_env, monkeypatch,
                                                  capsys):
    if in_own_process(solution):
        done = subprocess.run([sys.executable, str(solution)], cwd=REPO_ROOT, env=script_env,
                              capture_output=True, text=True, timeout=600)
    else:
        done = run_here(solution, monkeypatch, capsys)
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("Exercise ")]
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdicts and all(" - Correct: " in line for line in verdicts), done.stdout


SHUT_DOWN_LINE = "Done? *File > Close and Shut Down Notebook*"


def exercise_cells(path):
    return [c for c in json.loads(path.read_text())["cells"]
            if "exercise" in c.get("metadata", {}).get("tags", [])]


def check_calls(source: str) -> list[str]:
    return [node.func.id for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id.startswith("check_")]


@pytest.mark.parametrize("notebook", [p for p in NOTEBOOKS if not p.name.startswith("00_")],
                         ids=lambda p: p.name)
def test_notebook_ends_with_exercises_that_have_checks_and_solutions(notebook):
    cells = exercise_cells(notebook)
    assert cells, f"{notebook.name} has no cells tagged 'exercise' at its end"
    all_cells = json.loads(notebook.read_text())["cells"]
    if "".join(all_cells[-1]["source"]).startswith(SHUT_DOWN_LINE):
        all_cells = all_cells[:-1]  # the one line a learner reads after the exercises
    if all_cells[-1]["cell_type"] == "markdown" and "".join(all_cells[-1]["source"]).startswith("## Next"):
        all_cells = all_cells[:-1]  # where the lesson goes next: after the exercises (issue 46)
    assert all_cells[-len(cells):] == cells, "the exercises come last"
    calls = [name for c in cells if c["cell_type"] == "code" for name in check_calls("".join(c["source"]))]
    assert calls, f"{notebook.name}: no check cell"
    for name in calls:
        assert callable(getattr(ex, name, None)), f"{notebook.name} calls {name}, not in helpers.checks.exercises"
    assert (REPO_ROOT / "notebooks" / "solutions" / f"{notebook.stem}.py").exists()
    for cell in cells:
        for out in cell.get("outputs", []):  # committed executed: the untouched state
            text = "".join(out.get("data", {}).get("text/plain", ""))
            if text.startswith("Exercise "):
                assert " - Not yet: " in text, f"{notebook.name} commits a solved exercise: {text}"
                assert "Hint: " not in text, f"{notebook.name} shows a hint before an answer: {text}"

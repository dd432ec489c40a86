"""Tests of the notebooks' display helpers: diffs, stages, plots, xla_metrics."""
import difflib
import json
import re
import textwrap

import matplotlib

matplotlib.use("Agg")  # no display in CI; must precede pyplot's first import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers.inside import lazy_metrics as xla_metrics  # noqa: E402
from helpers.show import diffs, plots, stages  # noqa: E402
from mnist_mlp.common.paths import REPO_ROOT  # noqa: E402
from tests.built_once import built_once  # noqa: E402
from tests.xla_stand_in import stand_in_device  # noqa: E402

DEVICE = stand_in_device()  # at collection: tests/xla_stand_in.py says why


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- diffs

CPU_SCRIPT = textwrap.dedent("""\
    import torch
    device = torch.device("cpu")
    model = MLP().to(device)
    for x, y in loader:
        loss = step(x, y)
    print("done")
    """)
XLA_SCRIPT = textwrap.dedent("""\
    import torch
    import torch_xla
    device = torch_xla.device()
    model = MLP().to(device)
    for x, y in loader:
        loss = step(x, y)
        torch_xla.sync()
    print("done")
    """)


def test_diff_pairs_replaced_lines_and_marks_insertions():
    rows = diffs.script_diff_lines(CPU_SCRIPT, XLA_SCRIPT, context=10)
    changed = [(r.kind, r.left, r.right) for r in rows if r.kind != "same"]
    assert changed == [
        ("added", "", "import torch_xla"),
        ("changed", 'device = torch.device("cpu")', "device = torch_xla.device()"),
        ("added", "", "    torch_xla.sync()"),
    ]
    # Line numbers are each file's own, 1-based.
    sync = next(r for r in rows if r.right == "    torch_xla.sync()")
    assert (sync.left_no, sync.right_no) == (None, 7)
    device = next(r for r in rows if r.kind == "changed")
    assert (device.left_no, device.right_no) == (2, 3)
    # With enough context every line of both files appears once.
    assert [r.left for r in rows if r.left_no] == CPU_SCRIPT.splitlines()
    assert [r.right for r in rows if r.right_no] == XLA_SCRIPT.splitlines()


def test_diff_folds_long_unchanged_runs_into_counted_gaps():
    common = [f"line {i}" for i in range(20)]
    a = common + ["lr = 0.01"] + common
    b = common + ["lr = 0.02"] + common
    rows = diffs.script_diff_lines(a, b, context=2)
    kinds = [r.kind for r in rows]
    assert kinds == ["gap", "same", "same", "changed", "same", "same", "gap"]
    assert rows[0].hidden == 18 and rows[-1].hidden == 18
    assert diffs.script_diff_lines(a, a) == []


def test_diff_pairs_edited_lines_but_not_unrelated_ones():
    rows = diffs.script_diff_lines(
        "    tracker.stop()\n    device = backend.device\nx = 1\n",
        "    tracker.stop(wait_for_device=xm.wait_device_ops)\n"
        "    device = backend.device  # torch_xla.device()\nprint('unrelated')\n")
    assert [(r.kind, r.left.strip(), r.right.strip()) for r in rows] == [
        ("changed", "tracker.stop()", "tracker.stop(wait_for_device=xm.wait_device_ops)"),
        ("changed", "device = backend.device", "device = backend.device  # torch_xla.device()"),
        ("removed", "x = 1", ""),
        ("added", "", "print('unrelated')"),
    ]
    assert diffs.line_similarity("abc", "abc") == 1.0
    assert diffs.line_similarity("x = 1", "print('unrelated')") < diffs.SIMILAR_LINE_RATIO


def test_diff_of_removed_lines():
    rows = diffs.script_diff_lines("a\nb\nc\n", "a\nc\n", context=0)
    assert [(r.kind, r.left_no, r.left) for r in rows] == [
        ("gap", None, ""), ("removed", 2, "b"), ("gap", None, "")]
    with pytest.raises(ValueError, match="context"):
        diffs.script_diff_lines("a", "b", context=-1)


def test_diff_shows_only_the_hunks_asked_for_and_counts_the_changes_it_leaves_out(tmp_path):
    common = [f"line {i}" for i in range(10)]
    a = ["import os"] + common + ["lr = 0.01"] + common + ["print('old')"]
    b = ["import os", "import torch_xla"] + common + ["lr = 0.02"] + common + ["print('new')"]
    rows = diffs.script_diff_lines(a, b, context=1, only_hunks_with=("lr",))
    assert [r.kind for r in rows] == ["gap", "same", "changed", "same", "gap"]
    assert (rows[0].hidden, rows[0].hidden_changes) == (10, 1)  # the import: one added line
    assert (rows[-1].hidden, rows[-1].hidden_changes) == (10, 1)
    (tmp_path / "a.py").write_text("\n".join(a) + "\n")
    (tmp_path / "b.py").write_text("\n".join(b) + "\n")
    shown = diffs.show_script_diff(tmp_path / "a.py", tmp_path / "b.py", context=1, only_hunks_with=("lr",))
    assert "1 changed line not shown" in shown._repr_html_()
    assert "3 lines differ, 1 of them shown." in shown._repr_html_()
    assert repr(shown).splitlines() == ["--- a.py", "+++ b.py", "@@ -11,3 +12,3 @@", " line 9",
                                        "-lr = 0.01", "+lr = 0.02", " line 0"]
    # Every hunk kept: the same text as difflib's own unified diff.
    everything = diffs.unified_diff_text("\n".join(a) + "\n", "\n".join(b) + "\n", "a", "b",
                                         context=1, only_hunks_with=("",))
    assert everything == "".join(difflib.unified_diff([x + "\n" for x in a], [x + "\n" for x in b], "a", "b", n=1))
    with pytest.raises(ValueError, match="no hunk changes a line containing"):
        diffs.script_diff_lines(a, b, only_hunks_with=("optimizer",))


def test_show_script_diff_renders_markers_that_survive_without_css(tmp_path):
    a, b = tmp_path / "train_cpu.py", tmp_path / "train.py"
    a.write_text(CPU_SCRIPT + "x = '<tag>'\n")
    b.write_text(XLA_SCRIPT + "x = '<tag>'\n")
    shown = diffs.show_script_diff(a, b)
    page = shown._repr_html_()
    # Without styles (GitHub) the change is still readable: markers, bold, kept indentation.
    unstyled = re.sub(r' style="[^"]*"', "", page)
    assert "<td><b><code>&nbsp;&nbsp;&nbsp;&nbsp;torch_xla.sync()</code></b></td>" in unstyled
    assert "<td><b>+</b></td>" in unstyled and "<td><b>-</b></td>" in unstyled
    assert "&lt;tag&gt;" in page and "<tag>" not in page  # code is escaped, not markup
    assert "- train_cpu.py" in page and "+ train.py" in page
    # The plain-text form is a unified diff.
    text = repr(shown)
    assert "+    torch_xla.sync()" in text and '-device = torch.device("cpu")' in text


def test_show_script_diff_labels_repo_files_relative_to_the_repo(tmp_path):
    here = REPO_ROOT / "mnist_mlp" / "common" / "paths.py"
    shown = diffs.show_script_diff(here, here)
    assert "mnist_mlp/common/paths.py and mnist_mlp/common/paths.py are identical" in repr(shown)
    assert str(REPO_ROOT) not in shown._repr_html_()


def test_show_script_diff_missing_file_says_where_scripts_are(tmp_path):
    (tmp_path / "a.py").write_text("x\n")
    with pytest.raises(FileNotFoundError, match="mnist_mlp/"):
        diffs.show_script_diff(tmp_path / "a.py", tmp_path / "nope.py")


# --------------------------------------------------------------------------- results


def write_result(directory, stage, **overrides):
    data = {"stage": stage, "backend": "cpu", "world_size": 1, "epochs": 1, "steps": 10,
            "batch_size": 32, "lr": 0.01, "loader": "fast", "throughput_it_s": 100.0,
            "final_loss": 0.2, "test_accuracy": 0.95, "new_graphs": 0,
            "new_graphs_time_s": 0.0, "wall_time_s": 1.0, "loss_history": [[0, 2.3], [9, 0.2]]}
    data.update(overrides)
    (directory / f"results_{stage}.json").write_text(json.dumps(data))


def test_load_results_orders_stages_cpu_xla_then_torchrun_by_workers(tmp_path):
    for stage in ("torchrun_w8", "xla", "torchrun_w2", "cpu"):
        write_result(tmp_path, stage)
    (tmp_path / "checkpoint_cpu.pt").write_bytes(b"not json, not a results file")
    assert list(stages.load_results(tmp_path)) == ["cpu", "xla", "torchrun_w2", "torchrun_w8"]


def test_load_results_bad_files_name_the_file_and_the_fix(tmp_path):
    (tmp_path / "results_cpu.json").write_text("{truncated")
    with pytest.raises(ValueError, match=r"results_cpu\.json cannot be read as results JSON.*re-run"):
        stages.load_results(tmp_path)
    write_result(tmp_path, "cpu")
    write_result(tmp_path, "xla")
    mislabelled = json.loads((tmp_path / "results_cpu.json").read_text())
    (tmp_path / "results_xla.json").write_text(json.dumps(mislabelled))
    with pytest.raises(ValueError, match="says stage 'cpu'"):
        stages.load_results(tmp_path)
    (tmp_path / "results_xla.json").write_text(json.dumps({"stage": "xla", "final_loss": 1}))
    with pytest.raises(ValueError, match="lacks backend.*test_accuracy"):
        stages.load_results(tmp_path)
    # Nothing was removed or rewritten.
    assert json.loads((tmp_path / "results_xla.json").read_text()) == {"stage": "xla", "final_loss": 1}


def test_results_table_counts_all_workers_and_formats(tmp_path):
    write_result(tmp_path, "cpu", throughput_it_s=287.0)
    write_result(tmp_path, "torchrun_w2", world_size=2, throughput_it_s=163.0, test_accuracy=0.9312)
    rows = stages.results_table(stages.load_results(tmp_path))
    assert [(r["stage"], r["workers"], r["total_throughput_it_s"]) for r in rows] == [
        ("cpu", 1, 287.0), ("torchrun_w2", 2, 326.0)]
    text = stages.format_table(rows, ["stage", "total_throughput_it_s", "test_accuracy"])
    lines = text.splitlines()
    assert lines[0].split() == ["stage", "total_throughput_it_s", "test_accuracy"]
    assert lines[3].split() == ["torchrun_w2", "326", "0.9312"]


def test_plot_stage_comparison_skips_missing_stages_with_a_note(tmp_path, capsys):
    write_result(tmp_path, "cpu", throughput_it_s=287.0)
    write_result(tmp_path, "torchrun_w2", world_size=2, throughput_it_s=163.0)
    fig, rows = stages.plot_stage_comparison(tmp_path)
    out = capsys.readouterr().out
    assert "No results for the xla stage yet: run notebook 02" in out
    assert "cpu stage" not in out and "torchrun stage" not in out
    assert [r["stage"] for r in rows] == ["cpu", "torchrun_w2"]
    assert len(fig.axes) == 3
    throughput_bars = [p.get_height() for p in fig.axes[0].patches]
    assert throughput_bars == [287.0, 163.0]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["cpu", "torchrun_w2"]
    all_workers = fig.axes[0].collections[0].get_offsets().tolist()
    assert all_workers == [[1.0, 326.0]]  # over the torchrun_w2 bar: 2 workers x 163


def test_plot_stage_comparison_names_epochs_when_runs_differ_in_length(tmp_path):
    write_result(tmp_path, "cpu", epochs=4, steps=7500)
    write_result(tmp_path, "torchrun_w2", epochs=1, steps=937, world_size=2)  # drop_last: 59,968
    write_result(tmp_path, "bf16_fp32", epochs=4, steps=600)  # cut short by --steps-this-run
    fig, rows = stages.plot_stage_comparison(tmp_path)
    ticks = fig.axes[0].get_xticklabels()
    assert [t.get_text() for t in ticks] == ["cpu, 4 epochs", "torchrun_w2, 1 epoch", "bf16_fp32, 0.32 epochs"]
    assert {t.get_rotation() for t in ticks} == {40}  # slanted: nine stages' names fit side by side
    assert [r["epochs"] for r in rows] == [4, 1, 0.32]


def test_plot_stage_comparison_shows_only_the_stages_run_by_then(tmp_path, capsys):
    write_result(tmp_path, "cpu")
    write_result(tmp_path, "torchrun_w2", world_size=2)
    write_result(tmp_path, "bf16_fp32", steps=600)  # notebook 05's, left by an earlier pass
    fig, rows = stages.plot_stage_comparison(tmp_path, through="torchrun")
    assert [r["stage"] for r in rows] == ["cpu", "torchrun_w2"]
    out = capsys.readouterr().out
    assert "xla stage" in out and not re.search(r"\bbf16\b", out)
    with pytest.raises(ValueError, match="one of cpu, xla, torchrun, bf16"):
        stages.plot_stage_comparison(tmp_path, through="bf17")


def test_plot_stage_comparison_without_any_results_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="run the stages first"):
        stages.plot_stage_comparison(tmp_path)


# --------------------------------------------------------------------------- pictures


def test_show_digits_titles_and_flags_wrong_predictions():
    images = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    fig = plots.show_digits(images, [7, 2, 1, 0, 4], [7, 3, 1, 0, 4], columns=3)
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in titled] == ["7→7", "2→3", "1→1", "0→0", "4→4"]
    red = [ax.get_title() for ax in titled if ax.title.get_color() == "#c00000"]
    assert red == ["2→3"]
    assert len(fig.axes) == 6  # 2 rows x 3 columns, the spare one blank


def test_show_digits_accepts_tensors_and_rejects_mismatches():
    import torch

    fig = plots.show_digits(torch.zeros(2, 28, 28), torch.tensor([3, 5]))
    assert [ax.get_title() for ax in fig.axes] == ["3", "5"]
    with pytest.raises(ValueError, match="3 images but 2 labels"):
        plots.show_digits(torch.zeros(3, 28, 28), [1, 2])
    with pytest.raises(ValueError, match="shape"):
        plots.show_digits(torch.zeros(3, 784), [1, 2, 3])


def test_plot_loss_curve_pairs_lists_and_ranks():
    fig = plots.plot_loss_curve([[0, 2.3], [10, 1.0], [20, 0.5]])
    xs, ys = fig.axes[0].lines[0].get_data()
    assert list(xs) == [0, 10, 20] and list(ys) == [2.3, 1.0, 0.5]
    fig = plots.plot_loss_curve({"0": [[0, 2.0], [1, 1.0]], "1": [[0, 2.1], [1, 1.1]]})
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["0", "1"]
    fig = plots.plot_loss_curve([4.0, 2.0, 0.0, 2.0], smooth=2)
    mean = fig.axes[0].lines[1].get_ydata()
    assert list(mean) == [3.0, 1.0, 1.0, 2.0]  # centred, every step, the edges on what is there
    assert plots.running_mean([1.0, 2.0, 3.0, 4.0, 5.0], 3) == [1.5, 2.0, 3.0, 4.0, 4.5]
    smoothed = plots.plot_loss_curve({m: [[0, 2.0], [1, 1.0], [2, 0.5]] for m in "abcde"}, smooth=2)
    assert [t.get_text() for t in smoothed.axes[0].get_legend().get_texts()] == [
        *(f"{m} (mean of 2)" for m in "abcde"), "faint: each read (one batch)"]  # one entry per series
    with pytest.raises(ValueError, match="empty"):
        plots.plot_loss_curve([])


# --------------------------------------------------------------------------- XLA metrics


def test_metric_deltas_and_compiled_steps():
    before = {"UncachedCompile": 1, "CachedCompile": 4, "ExecuteComputation": 5,
              "compile_time_s": 0.5, "transfers_from_device": 2}
    after = dict(before, UncachedCompile=2, ExecuteComputation=7, compile_time_s=0.75)
    delta = xla_metrics.metric_deltas(before, after)
    assert delta == {"UncachedCompile": 1, "CachedCompile": 0, "ExecuteComputation": 2,
                     "compile_time_s": 0.25, "transfers_from_device": 0}
    rows = [dict(delta, step=0), dict(xla_metrics.metric_deltas(after, after), step=1), dict(delta, step=2)]
    assert xla_metrics.compiled_steps(rows) == [0, 2]
    fig = xla_metrics.plot_compile_metrics(rows)
    assert len(fig.axes) == 2
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["0", "1", "2"]


def test_plot_compile_metrics_marks_compiles_among_many_steps():
    quiet = {"UncachedCompile": 0, "CachedCompile": 1, "ExecuteComputation": 1,
             "compile_time_s": 0.0, "transfers_from_device": 0}
    rows = [dict(quiet, step=i, label=None) for i in range(100)]
    rows[0] = dict(rows[0], UncachedCompile=1, CachedCompile=0, compile_time_s=0.2, label="32 images")
    rows[99] = dict(rows[99], UncachedCompile=1, CachedCompile=0, compile_time_s=0.3)
    fig = xla_metrics.plot_compile_metrics(rows, xlabel="batch")
    top, bottom = fig.axes
    assert [t.get_text() for t in top.texts] == ["32 images", "step 99"]
    assert bottom.get_xlabel() == "batch"


def test_describe_a_step_in_words():
    row = {"step": 0, "label": "step 0", "UncachedCompile": 1, "CachedCompile": 0,
           "ExecuteComputation": 2, "compile_time_s": 1.616, "transfers_from_device": 1}
    assert xla_metrics.describe(row) == ("step 0: 1 new graph (1.62 s), 0 reused, "
                                "2 executions, 1 transfer from the device")
    quiet = dict(row, label=None, UncachedCompile=0, ExecuteComputation=1, transfers_from_device=0)
    assert xla_metrics.describe(quiet) == ("0 new graphs, 0 reused, 1 execution, "
                                  "0 transfers from the device")


def test_trim_lines():
    text = "\n".join(f"l{i}" for i in range(10)) + "\n"
    assert xla_metrics.trim_lines(text, 10) == text.rstrip("\n")
    assert xla_metrics.trim_lines(text, 3).splitlines() == ["l0", "l1", "l2", "... (7 more lines, 10 in all)"]
    with pytest.raises(ValueError):
        xla_metrics.trim_lines(text, 0)


SMALL_HLO = textwrap.dedent("""\
    HloModule IrToHlo.9, entry_computation_layout={(f32[2]{0})->(f32[2]{0}, f32[])}

    %AddComputation.3 (x.4: f32[], y.5: f32[]) -> f32[] {
      ROOT %add.6 = f32[] add(f32[] %x.4, f32[] %y.5)
    }

    ENTRY %IrToHlo.9 (p0.1: f32[2]) -> (f32[2], f32[]) {
      %p0.1 = f32[2]{0} parameter(0)
      %multiply.2 = f32[2]{0} multiply(f32[2]{0} %p0.1, f32[2]{0} %p0.1)
      %constant.7 = f32[] constant(0)
      %reduce.8 = f32[] reduce(f32[2]{0} %multiply.2, f32[] %constant.7), to_apply=%AddComputation.3
      %multiply.9 = f32[2]{0} multiply(f32[2]{0} %multiply.2, f32[2]{0} %p0.1)
      ROOT %tuple.10 = (f32[2]{0}, /*index=1*/f32[]) tuple(f32[2]{0} %multiply.9, f32[] %reduce.8)
    }
    """)


def test_hlo_entry_computation_and_op_counts():
    entry = xla_metrics.entry_computation(SMALL_HLO)
    assert entry.startswith("ENTRY %IrToHlo.9") and "AddComputation" not in entry.splitlines()[0]
    # The helper computation's add is not counted; the ROOT tuple (a tuple shape) is.
    assert xla_metrics.hlo_op_counts(SMALL_HLO) == {"multiply": 2, "parameter": 1, "constant": 1,
                                           "reduce": 1, "tuple": 1}
    with pytest.raises(ValueError, match="no ENTRY"):
        xla_metrics.entry_computation("IR {\n}")


def run_recorder_probe(directory):
    """A real XLA-on-CPU run of five training steps, recorded as notebook 02 records them, into
    probe.json."""
    import torch
    import torch_xla

    from helpers.inside.lazy_metrics import CompileMetricsRecorder, compiled_steps, hlo_ops, hlo_text, ir_text
    from mnist_mlp.model import MLP

    device = DEVICE
    torch.manual_seed(0)
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = CompileMetricsRecorder()
    out = {"peeks": []}
    # Batch sizes no other test of this process trains with: each shape's first step compiles.
    for step, batch in enumerate([33, 33, 33, 17, 17]):
        x = torch.randn(batch, 784).to(device)
        y = torch.randint(0, 10, (batch,)).to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if step == 0:
            out["peeks"].append(recorder.peek())  # recorded, not yet run
            out["ir"] = ir_text([loss], max_lines=5)
            out["hlo"] = hlo_text(loss, max_lines=400)
            out["entry"] = hlo_text([loss, *model.parameters()], max_lines=3, entry_only=True)
            out["ops"] = hlo_ops([loss, *model.parameters()])
        if step == 2:
            loss.item()  # the anti-pattern: runs the graph so far, then the rest at sync
        torch_xla.sync()
        recorder.record()
        if step == 0:
            out["peeks"].append(recorder.peek())  # nothing since the record
    out["rows"] = recorder.rows
    out["compiled"] = compiled_steps(recorder.rows)
    out["totals"] = recorder.totals()
    (directory / "probe.json").write_text(json.dumps(out))


@pytest.fixture(scope="module")
def recorder_probe(tmp_path_factory):
    directory = built_once(tmp_path_factory, "recorder-probe", run_recorder_probe)  # one run
    return json.loads((directory / "probe.json").read_text())  # for both xdist workers


def test_recorder_first_step_compiles_and_same_shapes_reuse_the_graph(recorder_probe):
    rows = recorder_probe["rows"]
    assert rows[0]["UncachedCompile"] >= 1 and rows[0]["compile_time_s"] > 0
    assert rows[1]["UncachedCompile"] == 0 and rows[1]["CachedCompile"] >= 1
    assert rows[1]["ExecuteComputation"] == 1
    # loss.item() mid-step: an extra execution and a device-to-host copy; the forward-only
    # graph it runs is new, so that step compiles too.
    assert rows[2]["ExecuteComputation"] == 2 and rows[2]["transfers_from_device"] >= 1
    assert rows[2]["UncachedCompile"] >= 1
    # A smaller (ragged) batch is a new shape, so a new graph; the next one reuses it.
    assert rows[3]["UncachedCompile"] >= 1 and rows[4]["UncachedCompile"] == 0
    assert recorder_probe["compiled"] == [0, 2, 3]
    assert recorder_probe["totals"]["ExecuteComputation"] == 6


def test_recorder_peek_shows_a_recorded_step_ran_nothing(recorder_probe):
    before_sync, after_record = recorder_probe["peeks"]
    assert before_sync["UncachedCompile"] == 0 and before_sync["ExecuteComputation"] == 0
    assert set(after_record.values()) == {0}
    assert len(recorder_probe["rows"]) == 5  # peek() adds no row


def test_ir_and_hlo_text_show_the_step_trimmed(recorder_probe):
    ir = recorder_probe["ir"].splitlines()
    assert ir[0].startswith("IR {") and len(ir) == 6
    assert ir[-1].startswith("... (") and "more lines" in ir[-1]
    hlo = recorder_probe["hlo"]
    assert hlo.startswith("HloModule") and "f32[120,784]" in hlo  # fc1's weight is a parameter
    assert recorder_probe["entry"].startswith("ENTRY ")
    assert len(recorder_probe["entry"].splitlines()) == 4
    # The whole step: 3 matmuls forward; backward, one per weight gradient and one per
    # gradient passed down to layers 2 and 1 (none for the input): 3 + 3 + 2.
    assert recorder_probe["ops"]["dot"] == 8

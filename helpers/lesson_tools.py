"""What the notebooks show: script diffs, digit grids, loss curves and the stage comparison.

The notebooks call these so each code cell stays about the lesson, not about plotting.
The XLA-specific views (per-step compile counters, IR and HLO text) live in
helpers/xla_metrics.py and are re-exported here, so a notebook imports from one place.
"""
from __future__ import annotations

import difflib
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from IPython.display import HTML

from helpers.tables import text_table
from mnist_mlp.paths import REPO_ROOT, default_checkpoint_dir
from helpers.xla_metrics import (  # noqa: F401  re-exported for the notebooks
    CompileMetricsRecorder, compiled_steps, describe, entry_computation, hlo_op_counts, hlo_ops,
    hlo_text, ir_text, metric_deltas, plot_compile_metrics, read_compile_metrics, trim_lines)

# --------------------------------------------------------------------------- script diffs


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff.

    kind: "same", "changed" (left line replaced by right line), "removed" (left only),
    "added" (right only) or "gap" (unchanged lines not shown; `hidden` says how many).
    Line numbers are 1-based; None where that side has no line.
    """
    kind: str
    left_no: int | None = None
    left: str = ""
    right_no: int | None = None
    right: str = ""
    hidden: int = 0


def _as_lines(text: str | list[str] | tuple[str, ...]) -> list[str]:
    if isinstance(text, str):
        return text.splitlines()
    return [line.rstrip("\n") for line in text]


# When two lines count as one changed line (shown side by side) rather than a removal and an
# addition: difflib's ratio at least SIMILAR_LINE_RATIO (difflib.Differ uses 0.75), or the
# shorter line (of at least CONTAINED_MIN_CHARS) mostly found in the longer, as when a call
# gains an argument or a comment: `tracker.stop()` -> `tracker.stop(wait_for_device=...)`.
SIMILAR_LINE_RATIO = 0.6
CONTAINED_FRACTION = 0.8
CONTAINED_MIN_CHARS = 8


def line_similarity(old: str, new: str) -> float:
    """0..1: how much `old` and `new` look like one line edited (see the constants above)."""
    matcher = difflib.SequenceMatcher(None, old.strip(), new.strip(), autojunk=False)
    ratio = matcher.ratio()
    shorter = min(len(old.strip()), len(new.strip()))
    if shorter >= CONTAINED_MIN_CHARS:
        matched = sum(block.size for block in matcher.get_matching_blocks())
        if matched / shorter >= CONTAINED_FRACTION:
            return max(ratio, SIMILAR_LINE_RATIO)
    return ratio


def _pair_block(left, right, i1, i2, j1, j2) -> list[DiffRow]:
    """Rows for a block where left[i1:i2] became right[j1:j2]: each left line is paired, in
    order, with the most similar right line still unpaired (if alike enough)."""
    rows: list[DiffRow] = []
    j = j1
    for i in range(i1, i2):
        best, best_score = None, SIMILAR_LINE_RATIO
        for k in range(j, j2):
            score = line_similarity(left[i], right[k])
            if score >= best_score and (best is None or score > best_score):
                best, best_score = k, score
        if best is None:
            rows.append(DiffRow("removed", i + 1, left[i]))
            continue
        rows += [DiffRow("added", right_no=k + 1, right=right[k]) for k in range(j, best)]
        rows.append(DiffRow("changed", i + 1, left[i], best + 1, right[best]))
        j = best + 1
    rows += [DiffRow("added", right_no=k + 1, right=right[k]) for k in range(j, j2)]
    return rows


def script_diff_lines(a: str | list[str], b: str | list[str], *, context: int = 3) -> list[DiffRow]:
    """Side-by-side rows of the changes from text `a` to text `b`, `context` unchanged lines
    around each change; longer unchanged runs become one "gap" row. [] when identical."""
    if context < 0:
        raise ValueError(f"context must be 0 or more lines, got {context}")
    left, right = _as_lines(a), _as_lines(b)
    if left == right:
        return []
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    rows: list[DiffRow] = []
    shown_to = 0  # left lines before this index are shown or already counted in a gap
    for group in matcher.get_grouped_opcodes(context):
        first_left = group[0][1]
        if first_left > shown_to:
            rows.append(DiffRow("gap", hidden=first_left - shown_to))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [DiffRow("same", i + 1, left[i], j + 1, right[j])
                         for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            rows += _pair_block(left, right, i1, i2, j1, j2)
        shown_to = group[-1][2]
    if shown_to < len(left):
        rows.append(DiffRow("gap", hidden=len(left) - shown_to))
    return rows


# Colours and layout are inline styles: JupyterLab applies them (they also override its
# right-aligned, zebra-striped table style). GitHub's notebook view strips every style
# attribute and <style> block, so the change is also carried by what survives sanitising: a
# -/+ marker column, bold changed lines, <code> for a monospace font, and indentation as
# non-breaking spaces (a <pre> per cell would keep it too, but GitHub boxes and pads each one).
_LEFT_BG = {"changed": "#ffebe9", "removed": "#ffebe9"}
_RIGHT_BG = {"changed": "#e6ffec", "added": "#e6ffec"}
_CELL = "text-align:left;vertical-align:top;padding:0 4px;border:none"


def _code_html(text: str) -> str:
    """Escaped code whose indentation survives HTML whitespace collapsing."""
    body = text.lstrip(" ")
    return "&nbsp;" * (len(text) - len(body)) + html.escape(body)


def _cell_pair(number: int | None, marker: str, text: str, background: str | None, strong: bool):
    style = _CELL + (f";background:{background}" if background else "")
    code = (f'<code style="background:transparent;padding:0;font-size:12px">{_code_html(text)}</code>'
            if text.strip() else "&nbsp;")
    if strong and text.strip():
        code = f"<b>{code}</b>"
    no = "" if number is None else str(number)
    return (f'<td style="{style};color:#57606a;text-align:right">{no}</td>'
            f'<td style="{style}"><b>{marker}</b></td>'
            f'<td style="{style}">{code}</td>')


def render_diff_html(rows: list[DiffRow], left_label: str, right_label: str) -> str:
    """An HTML table of `rows` that reads with or without CSS (see the comment above)."""
    if not rows:
        return f"<p><code>{html.escape(left_label)}</code> and <code>{html.escape(right_label)}</code> are identical.</p>"
    changed = sum(r.kind != "same" and r.kind != "gap" for r in rows)
    out = ['<table style="border-collapse:collapse;font-size:12px">',
           f'<tr><th colspan="3" style="text-align:left">- {html.escape(left_label)}</th>'
           f'<th colspan="3" style="text-align:left">+ {html.escape(right_label)}</th></tr>']
    for row in rows:
        if row.kind == "gap":
            out.append(f'<tr><td colspan="6" style="text-align:center;color:#57606a">'
                       f'<i>… {row.hidden} unchanged line{"s" * (row.hidden != 1)} …</i></td></tr>')
            continue
        differs = row.kind != "same"
        left_marker = "-" if row.kind in ("changed", "removed") else ""
        right_marker = "+" if row.kind in ("changed", "added") else ""
        out.append("<tr>"
                   + _cell_pair(row.left_no, left_marker, row.left, _LEFT_BG.get(row.kind), differs)
                   + _cell_pair(row.right_no, right_marker, row.right, _RIGHT_BG.get(row.kind), differs)
                   + "</tr>")
    out.append(f'</table><p><i>{changed} line{"s" * (changed != 1)} differ.</i></p>')
    return "\n".join(out)


class ScriptDiff(HTML):
    """An HTML display object whose plain-text form is the unified diff (for terminals, and
    for readers whose viewer shows text/plain)."""

    def __init__(self, html_text: str, unified: str):
        super().__init__(html_text)
        self.unified = unified

    def __repr__(self) -> str:
        return self.unified


def _label(path: Path) -> str:
    """The path as the reader knows it: relative to the repo (same on every machine)."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return path.name


def show_script_diff(a_path, b_path, *, context: int = 3) -> ScriptDiff:
    """The changes from script `a_path` to `b_path`, side by side, for display in a notebook."""
    texts = []
    for p in (Path(a_path), Path(b_path)):
        if not p.is_file():
            raise FileNotFoundError(
                f"{p} not found (cwd {Path.cwd()}): the training scripts are in mnist_mlp/ at "
                f"the repo root; from a notebook pass e.g. '../mnist_mlp/train.py'")
        texts.append(p.read_text())
    left_label, right_label = _label(Path(a_path)), _label(Path(b_path))
    rows = script_diff_lines(texts[0], texts[1], context=context)
    unified = "".join(difflib.unified_diff(texts[0].splitlines(True), texts[1].splitlines(True),
                                           left_label, right_label, n=context))
    return ScriptDiff(render_diff_html(rows, left_label, right_label),
                      unified or f"{left_label} and {right_label} are identical")


# --------------------------------------------------------------------------- results files

RESULTS_GLOB = "results_*.json"
_TORCHRUN_STAGE = re.compile(r"torchrun_w(\d+)")
# What the comparison plots need from every results file (the scripts write more).
REQUIRED_RESULT_KEYS = ("throughput_it_s", "final_loss", "test_accuracy")
# Which notebook (or script) writes each stage's results, for the "missing" notes.
STAGE_SOURCES = {
    "cpu": "notebook 01 (or python mnist_mlp/train_cpu.py)",
    "xla": "notebook 02 (or python mnist_mlp/train.py)",
    "torchrun": "notebook 04 (or torchrun --nproc_per_node=2 mnist_mlp/train_torchrun.py)",
}


def stage_sort_key(stage: str) -> tuple:
    """cpu, xla, then torchrun by worker count, then anything else by name."""
    if stage == "cpu":
        return (0, 0, "")
    if stage == "xla":
        return (1, 0, "")
    m = _TORCHRUN_STAGE.fullmatch(stage)
    if m:
        return (2, int(m.group(1)), "")
    return (3, 0, stage)


def load_results(checkpoint_dir=None) -> dict[str, dict]:
    """Every results_<stage>.json in `checkpoint_dir` (default: mnist_mlp.paths), by stage,
    in stage order. A file that is not valid results JSON raises an error naming it."""
    directory = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir()
    results: dict[str, dict] = {}
    for path in directory.glob(RESULTS_GLOB):
        stage = path.stem.removeprefix("results_")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); re-run the stage that writes "
                             f"it to replace it") from err
        if not isinstance(data, dict):
            raise ValueError(f"{path} holds a {type(data).__name__}, not a results object; "
                             f"re-run the stage that writes it to replace it")
        missing = [k for k in REQUIRED_RESULT_KEYS if k not in data]
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}; it was written by an older "
                             f"script: re-run that stage to replace it")
        if data.get("stage", stage) != stage:
            raise ValueError(f"{path} says stage {data['stage']!r} but its name says {stage!r}; "
                             f"rename it or re-run that stage")
        results[stage] = data
    return dict(sorted(results.items(), key=lambda item: stage_sort_key(item[0])))


def results_table(results: dict[str, dict]) -> list[dict]:
    """One row per stage: what the comparison shows. total_throughput_it_s counts all workers."""
    rows = []
    for stage, r in results.items():
        world = int(r.get("world_size") or 1)
        rows.append({
            "stage": stage,
            "backend": r.get("backend", "?"),
            "workers": world,
            "throughput_it_s": float(r["throughput_it_s"]),
            "total_throughput_it_s": float(r["throughput_it_s"]) * world,
            "final_loss": float(r["final_loss"]),
            "test_accuracy": float(r["test_accuracy"]),
            "epochs": r.get("epochs"),
            "steps": r.get("steps"),
        })
    return rows


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A plain-text table (floats to 4 significant places) that reads anywhere."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    return text_table([[row.get(c, "") for c in columns] for row in rows], columns, rule=True)


def missing_stage_notes(stages) -> list[str]:
    """A note for each of cpu, xla and torchrun (any worker count) with no results yet."""
    present = set(stages)
    notes = []
    for family, source in STAGE_SOURCES.items():
        found = any(s == family or s.startswith(family + "_") for s in present)
        if not found:
            notes.append(f"No results for the {family} stage yet: run {source}.")
    return notes


def plot_stage_comparison(checkpoint_dir=None):
    """Throughput, final loss and test accuracy of every stage with results, in one figure.

    Returns (figure, rows) where rows is results_table(); prints a note for each stage
    that has no results yet and the table as text.
    """
    import matplotlib.pyplot as plt

    directory = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir()
    results = load_results(directory)
    for note in missing_stage_notes(results):
        print(note)
    if not results:
        raise FileNotFoundError(f"No {RESULTS_GLOB} in {directory}: run the stages first "
                                f"(notebooks 01, 02 and 04, or `make notebooks`).")
    rows = results_table(results)
    labels = [r["stage"] for r in rows]
    if len({r["epochs"] for r in rows}) > 1:  # runs of different lengths: say so under each bar
        labels = [f"{r['stage']}\n{r['epochs']} epoch{'s' * (r['epochs'] != 1)}" for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    bars = ax.bar(labels, [r["throughput_it_s"] for r in rows], color="#4c72b0", label="per worker")
    ax.bar_label(bars, fmt="%.0f")
    highest = max(max(r["throughput_it_s"], r["total_throughput_it_s"]) for r in rows)
    ax.set_ylim(0, 1.3 * highest)  # headroom for the labels and the legend
    multi = [i for i, r in enumerate(rows) if r["workers"] > 1]
    if multi:  # at the bars' positions (a categorical axis would add a category per new name)
        ax.scatter(multi, [rows[i]["total_throughput_it_s"] for i in multi],
                   marker="D", color="#dd8452", zorder=3, label="all workers")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title("Train throughput (iter/sec)")
    ax = axes[1]
    ax.bar_label(ax.bar(labels, [r["final_loss"] for r in rows], color="#55a868"), fmt="%.3f")
    ax.set_ylim(0, 1.2 * max(r["final_loss"] for r in rows))
    ax.set_title("Final loss (last step)")
    ax = axes[2]
    accuracies = [r["test_accuracy"] for r in rows]
    ax.bar_label(ax.bar(labels, accuracies, color="#c44e52"), fmt="%.4f")
    ax.set_ylim(min(0.9, min(accuracies) - 0.01), 1.0)
    ax.set_title("Test accuracy")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    print(format_table(rows, ["stage", "workers", "epochs", "throughput_it_s",
                              "total_throughput_it_s", "final_loss", "test_accuracy"]))
    return fig, rows


# --------------------------------------------------------------------------- pictures


def _to_numpy(values):
    if hasattr(values, "detach"):  # a torch tensor, possibly on an XLA device
        values = values.detach().cpu().numpy()
    import numpy as np

    return np.asarray(values)


def show_digits(images, labels, predictions=None, *, columns: int = 8):
    """A grid of digits titled with their label, or "label→prediction" (red when wrong).

    images: [N, 28, 28] or [N, 1, 28, 28] (tensor or array); labels, predictions: N ints.
    """
    import matplotlib.pyplot as plt

    pics = _to_numpy(images)
    if pics.ndim == 4 and pics.shape[1] == 1:
        pics = pics[:, 0]
    if pics.ndim != 3:
        raise ValueError(f"images must be [N, 28, 28] or [N, 1, 28, 28], got shape {pics.shape}")
    labels = _to_numpy(labels).reshape(-1)
    preds = None if predictions is None else _to_numpy(predictions).reshape(-1)
    if len(labels) != len(pics) or (preds is not None and len(preds) != len(pics)):
        raise ValueError(f"{len(pics)} images but {len(labels)} labels"
                         + ("" if preds is None else f" and {len(preds)} predictions"))
    if len(pics) == 0:
        raise ValueError("no images to show")
    columns = max(1, min(columns, len(pics)))
    rows = -(-len(pics) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.3 * columns, 1.5 * rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k >= len(pics):
            continue
        ax.imshow(pics[k], cmap="gray_r")
        if preds is None:
            ax.set_title(str(int(labels[k])), fontsize=10)
        else:
            wrong = int(preds[k]) != int(labels[k])
            ax.set_title(f"{int(labels[k])}→{int(preds[k])}", fontsize=10,
                         color="#c00000" if wrong else "black")
    fig.tight_layout()
    return fig


def _as_series(history) -> tuple[list[float], list[float]]:
    points = list(history)
    if not points:
        raise ValueError("empty loss history: train at least one step first")
    if isinstance(points[0], (list, tuple)):
        steps, losses = zip(*((float(p[0]), float(p[1])) for p in points))
        return list(steps), list(losses)
    return [float(i) for i in range(len(points))], [float(v) for v in points]


def plot_loss_curve(history, *, title: str = "Training loss", smooth: int = 0):
    """Loss against step. history: [[step, loss], ...] or [loss, ...], or a dict of such
    series by name (e.g. loss_history_by_rank) drawn on one axis. smooth > 1 adds a running
    mean over that many points, which makes the trend readable over noisy batches."""
    import matplotlib.pyplot as plt
    import numpy as np

    series = history if isinstance(history, dict) else {"loss": history}
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, values in series.items():
        steps, losses = _as_series(values)
        label = None if len(series) == 1 else str(name)
        line, = ax.plot(steps, losses, alpha=0.35 if smooth > 1 else 1.0, label=label)
        if smooth > 1 and len(losses) >= smooth:
            mean = np.convolve(losses, np.ones(smooth) / smooth, mode="valid")
            ax.plot(steps[smooth - 1:], mean, color=line.get_color(),
                    label=f"{label or 'loss'} (mean of {smooth})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    if len(series) > 1 or smooth > 1:
        ax.legend()
    fig.tight_layout()
    return fig

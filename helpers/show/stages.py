"""Every stage side by side: the results records the scripts wrote, as a table and a chart."""
from __future__ import annotations

import re
from pathlib import Path

from helpers.show.tables import text_table
from mnist_mlp.common.data import TRAIN_IMAGES
from mnist_mlp.common.paths import default_checkpoint_dir
from mnist_mlp.common.precision import PRECISIONS
from mnist_mlp.common.results import RESULTS_GLOB, RunResults, load_all

_TORCHRUN_STAGE = re.compile(r"torchrun_w(\d+)")
# Which notebook (or script) writes each stage's results, for the "missing" notes.
STAGE_SOURCES = {
    "cpu": "notebook 01 (or python mnist_mlp/train_cpu.py)",
    "xla": "notebook 02 (or python mnist_mlp/train.py)",
    "torchrun": "notebook 04 (or torchrun --nproc_per_node=2 mnist_mlp/train_torchrun.py)",
    "bf16": "notebook 05 (or python mnist_mlp/train_bf16.py --precision bf16-sr)",
}
TABLE_COLUMNS = ["stage", "workers", "epochs", "throughput_it_s", "total_throughput_it_s",
                 "final_loss", "test_accuracy"]


def stage_sort_key(stage: str) -> tuple:
    """cpu, xla, torchrun by worker count, bf16 by mode, then anything else by name."""
    if stage == "cpu":
        return (0, 0, "")
    if stage == "xla":
        return (1, 0, "")
    m = _TORCHRUN_STAGE.fullmatch(stage)
    if m:
        return (2, int(m.group(1)), "")
    mode = stage.removeprefix("bf16_")
    if stage.startswith("bf16_") and mode in PRECISIONS:
        return (3, PRECISIONS.index(mode), "")
    return (4, 0, stage)


def load_results(checkpoint_dir=None) -> dict[str, RunResults]:
    """Every results record in `checkpoint_dir` (default: the scripts' own), in stage order."""
    results = load_all(checkpoint_dir)
    return dict(sorted(results.items(), key=lambda item: stage_sort_key(item[0])))


def epochs_trained(r: RunResults) -> float:
    """How many passes over the training set the run made, all workers together: a run cut
    short by --steps-this-run says so, whatever its --epochs."""
    return round(r.steps * r.batch_size * r.world_size / TRAIN_IMAGES, 2)


def results_table(results: dict[str, RunResults]) -> list[dict]:
    """One row per stage: what the comparison shows. total_throughput_it_s counts all workers."""
    return [{"stage": stage, "backend": r.backend, "workers": r.world_size,
             "throughput_it_s": r.throughput_it_s,
             "total_throughput_it_s": r.throughput_it_s * r.world_size,
             "final_loss": r.final_loss, "test_accuracy": r.test_accuracy,
             "epochs": epochs_trained(r), "steps": r.steps} for stage, r in results.items()]


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A plain-text table (floats to 4 significant places) that reads anywhere."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    return text_table([[row.get(c, "") for c in columns] for row in rows], columns, rule=True)


def family_of(stage: str) -> str | None:
    """The stage family (a STAGE_SOURCES key) a results stage belongs to; None for another name."""
    return next((f for f in STAGE_SOURCES if stage == f or stage.startswith(f + "_")), None)


def missing_stage_notes(stages, families=tuple(STAGE_SOURCES)) -> list[str]:
    """A note for each stage family of `families` (cpu, xla, torchrun, bf16) with no results yet."""
    present = {family_of(s) for s in stages}
    return [f"No results for the {family} stage yet: run {STAGE_SOURCES[family]}."
            for family in families if family not in present]


def plot_stage_comparison(checkpoint_dir=None, through: str | None = None):
    """Throughput, final loss and test accuracy of every stage with results, in one figure.

    through: the last stage family to show (a STAGE_SOURCES key): a notebook shows the stages a
    learner has run by then, not results a later notebook left in the same directory. Returns
    (figure, rows) where rows is results_table(); prints a note for each stage that has no
    results yet and the table as text.
    """
    import matplotlib.pyplot as plt

    families = list(STAGE_SOURCES)
    if through is not None:
        if through not in STAGE_SOURCES:
            raise ValueError(f"through={through!r}: one of {', '.join(STAGE_SOURCES)}")
        families = families[:families.index(through) + 1]
    directory = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir()
    results = {stage: r for stage, r in load_results(directory).items()
               if through is None or family_of(stage) in families}
    for note in missing_stage_notes(results, families):
        print(note)
    if not results:
        raise FileNotFoundError(f"No {RESULTS_GLOB} in {directory}: run the stages first "
                                f"(notebooks 01, 02, 04 and 05, or `make notebooks`).")
    rows = results_table(results)
    labels = [r["stage"] for r in rows]  # one line each, slanted below
    if len({r["epochs"] for r in rows}) > 1:  # runs of different lengths: say so under each bar
        labels = [f"{label}, {r['epochs']:g} epoch{'s' * (r['epochs'] != 1)}"
                  for label, r in zip(labels, rows)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    ax = axes[0]
    bars = ax.bar(labels, [r["throughput_it_s"] for r in rows], color="#4c72b0", label="per worker")
    ax.bar_label(bars, fmt="%.0f", fontsize=7)
    highest = max(max(r["throughput_it_s"], r["total_throughput_it_s"]) for r in rows)
    ax.set_ylim(0, 1.3 * highest)  # headroom for the labels and the legend
    multi = [i for i, r in enumerate(rows) if r["workers"] > 1]
    if multi:  # at the bars' positions (a categorical axis would add a category per new name)
        ax.scatter(multi, [rows[i]["total_throughput_it_s"] for i in multi],
                   marker="D", color="#dd8452", zorder=3, label="all workers")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title("Train throughput (iter/sec)")
    ax = axes[1]
    ax.bar_label(ax.bar(labels, [r["final_loss"] for r in rows], color="#55a868"), fmt="%.3f",
                 fontsize=7)
    ax.set_ylim(0, 1.2 * max(r["final_loss"] for r in rows))
    ax.set_title("Final loss (last step)")
    ax = axes[2]
    ax.bar_label(ax.bar(labels, [r["test_accuracy"] for r in rows], color="#c44e52"),
                 fmt="%.3f", fontsize=7)
    ax.set_ylim(0, 1.05)  # from 0: differences of a point or two should look like that
    ax.set_title("Test accuracy")
    for ax in axes:  # slanted, so nine stages' names do not run into each other
        ax.tick_params(axis="x", labelsize=7)
        plt.setp(ax.get_xticklabels(), rotation=40, ha="right", rotation_mode="anchor")
    fig.tight_layout()
    print(format_table(rows, TABLE_COLUMNS))
    return fig, rows

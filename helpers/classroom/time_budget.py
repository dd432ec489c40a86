"""The workbook's clock in one table: each notebook's reading time and, apart from it, its
compile wait on a trn1 without and with the classroom archive. Each notebook's introduction,
notebooks/README.md, README.md and docs/instructor.md state these figures as this module writes
them; tests/test_time_budget.py holds them to it, the compile counts to the graph record
(notebooks/classroom_graphs.json, the stand-in's) where no argument in a row's comment says a
trn1 compiles otherwise, and the per-compile range to the tutorial's log as
docs/sources.md quotes it. tests/test_trn1_double_pass.py holds the counts the introductions
state to the compiles the trn1 double counts.

A compile's wait is a range, not a measurement: no run-through of these notebooks on a trn1 was
measured, and the one published log of this MLP (the AWS MLP tutorial's `train.py`, 2022)
shows its first graph compiling in 3 min 5 s and its second in 7 s. A graph the imported
archive holds is a cache hit instead, read in a tenth of a second in that tutorial's second run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mnist_mlp.common.compile_notice import FASTEST_COMPILE_S, SLOWEST_COMPILE_S  # the tutorial's log


@dataclass(frozen=True)
class NotebookTime:
    title: str
    reading_min: int
    compiles: int  # neuronx-cc runs on a trn1 stepping 00-07 in order, one shared cache
    compiles_with_archive: int = 0  # the ones the classroom archive cannot save
    why_with_archive: str = ""


BUDGET = {
    "00": NotebookTime("setup", 5, 0),
    "01": NotebookTime("CPU training", 10, 0),
    "02": NotebookTime("one NeuronCore", 20, 11),
    "03": NotebookTime("compile cache", 15, 5, 2, "its first-run demo compiles `train.py`'s training "
                       "and evaluation graphs into an empty cache of its own: the first compile the lesson measures"),
    # 04 on a trn1: 2, argued, not counted. The 2-worker step is one graph with the all-reduce
    # inside (docs/sources.md, "On Neuron the gradient all-reduce of xm.optimizer_step is in the
    # step's graph"), new; the replica checksum, new; the 1-worker run (world size 1: no
    # all-reduce) and the two nodes (the 2-worker graphs) compile nothing new. The stand-in's
    # record holds 3: its gloo average cuts the step in two (mnist_mlp/common/distributed.py),
    # and the trn1 double's pass reports 04's count undecided (its all-reduce runs outside).
    "04": NotebookTime("torchrun", 10, 2),
    # 05 on a trn1: 5, the trn1 double's count: bf16's training and evaluation graphs, bf16-master's
    # training graph, autocast's two (its run sets --auto-cast=none, a flags hash of its own, so
    # its graphs are new cache entries whatever their HLO); fp32's are train.py's (02), bf16-sr's
    # are bf16's, since on Neuron its rounding is the runtime's (NEURON_RT_STOCHASTIC_ROUNDING_EN),
    # and bf16-master evaluates with bf16's graph. The stand-in's record holds 6: it also compiles
    # the emulated stochastic-rounding update, a graph a trn1 never builds.
    "05": NotebookTime("BF16", 20, 5),
    "06": NotebookTime("inside a run", 20, 6, 2, "Neuron Explorer's capture compiles `train.py`'s "
                       "training and evaluation graphs with debug metadata into a cache of its own (cached NEFFs lack it)"),
    "07": NotebookTime("when a core wins", 10, 2),
}
SOLUTIONS = NotebookTime("exercise solutions", 0, 2)  # 02's solution: its exercises' shapes the notebook did not compile


def duration(seconds: float) -> str:
    """14 s, 7 min, 1 h 42 min: seconds under a minute, else whole minutes rounded up."""
    if seconds < 60:
        return f"{round(seconds)} s"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def wait(compiles: int) -> str:
    """The compile wait of `compiles` neuronx-cc runs: each 7 s to 3 min 5 s."""
    if not compiles:
        return "none"
    return f"{duration(compiles * FASTEST_COMPILE_S)} to {duration(compiles * SLOWEST_COMPILE_S)}"


def intro_sentence(notebook: str) -> str:
    """The line a notebook's introduction states its time with, word for word."""
    b = BUDGET[notebook]
    if not b.compiles:
        return f"**Time:** {b.reading_min} min to read; no `neuronx-cc` compile."
    archive = (f"{b.compiles_with_archive} runs, {wait(b.compiles_with_archive)}"
               if b.compiles_with_archive else "none")
    return (f"**Time:** {b.reading_min} min to read. Compile wait on a trn1: `neuronx-cc` runs "
            f"**{b.compiles} times**, {wait(b.compiles)}; with the classroom archive, {archive}.")


def totals() -> NotebookTime:
    rows = [*BUDGET.values(), SOLUTIONS]
    return NotebookTime("whole workbook", sum(r.reading_min for r in rows),
                        sum(r.compiles for r in rows), sum(r.compiles_with_archive for r in rows))


def workbook_sentence() -> str:
    """The whole workbook's figures, as README.md and docs/instructor.md state them."""
    t = totals()
    return (f"{t.reading_min} minutes of reading; on a trn1, {t.compiles} `neuronx-cc` "
            f"runs, {wait(t.compiles)} of compile wait, or {t.compiles_with_archive} runs "
            f"({wait(t.compiles_with_archive)}) with the classroom archive")


def budget_table() -> str:
    """The table notebooks/README.md shows (markdown)."""
    lines = ["| notebook | reading | `neuronx-cc` runs on a trn1 | compile wait | with the "
             "classroom archive |", "|---|---|---|---|---|"]
    for number, b in BUDGET.items():
        archive = (f"{b.compiles_with_archive} runs, {wait(b.compiles_with_archive)} "
                   f"({b.why_with_archive})" if b.compiles_with_archive else "none")
        lines.append(f"| {number} · {b.title} | {b.reading_min} min | {b.compiles} | "
                     f"{wait(b.compiles)} | {archive} |")
    lines.append(f"| {SOLUTIONS.title} | | {SOLUTIONS.compiles} | {wait(SOLUTIONS.compiles)} | "
                 "none (an answer other than the solution's compiles its own graphs, once) |")
    t = totals()
    lines.append(f"| **{t.title}** | **{t.reading_min} min** | **{t.compiles}** | "
                 f"**{wait(t.compiles)}** | **{t.compiles_with_archive} runs, "
                 f"{wait(t.compiles_with_archive)}** |")
    return "\n".join(lines)


if __name__ == "__main__":  # prints what the docs paste in: python -m helpers.classroom.time_budget
    for number in BUDGET:
        print(number, intro_sentence(number))
    print(budget_table())
    print(workbook_sentence())

"""The workbook's clock in one place: each notebook's time on a trn1, from what a learner reads,
what its cells run and what `neuronx-cc` compiles, on the core path and in its optional sections
(headings "## Optional · ..."). Each notebook's introduction, notebooks/README.md, README.md and
docs/instructor.md state these figures as this module writes them; tests/test_time_budget.py holds
them to it, the reading counts to the notebooks, the compile counts (each notebook's graph list,
helpers/classroom/graph_list.py, which the notebook shows) to the graph record
(notebooks/classroom_graphs.json, the stand-in's), and the per-compile range to the tutorial's log as
docs/sources.md quotes it (the typical compile to a 2025 log there). tests/test_trn1_double_pass.py holds the counts the introductions
state to the compiles the trn1 double counts.

- Reading: markdown words at WORDS_PER_MIN and code lines at CODE_LINES_PER_MIN, both stated
  paces (a learner who reads each cell before running it; not measured), counted by
  reading_counts() and kept here as data (READING) so that an edit elsewhere in a notebook moves
  no stated figure until the counts are refreshed.
- Cells: each notebook's run time on a trn1, compiles aside (RUN_S). Inferred: the steps each cell
  trains at the AWS MLP tutorial's throughputs (287 it/s on the host CPU, 95 it/s per step
  synced, 192 it/s with MpDeviceLoader, 163 it/s per worker with two), plus about PROCESS_START_S
  for each script or torchrun it starts (not in the sources).
- Compiles: a compile's wait is a range, not a measurement. No run-through of these notebooks on
  a trn1 was measured. The one published log of this MLP (the tutorial's `train.py`, 2022, a
  pre-release compiler on a trn1.32xlarge) shows its first graph compiling in 3 min 5 s: the
  upper figure. Public logs of a current compiler (neuronx-cc 2.16, Neuron 2.21, 2025) show a
  small graph compiling in about 5 s: the typical figure. Minutes are planned with the upper
  one, so a class does not overrun. A graph the imported archive holds is a cache hit instead,
  read in a tenth of a second in that tutorial's second run.
- Rounding: each part a notebook shows (reading, cells, compile wait, optional parts) is rounded
  once to the nearest minute (a part that is not nothing shows at least 1), and every total is
  the sum of the parts shown, so a reader's sum matches it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from helpers.classroom.graph_list import counts
from mnist_mlp.common.compile_notice import SLOWEST_COMPILE_S, TYPICAL_COMPILE_S  # 2022 and 2025 logs
from mnist_mlp.common.compile_notice import duration as exact  # 3 min 5 s

WORDS_PER_MIN = 150  # technical prose read to follow it: slower than everyday reading
CODE_LINES_PER_MIN = 10  # a code line read before its cell runs: about 6 s each
PROCESS_START_S = 15  # a script's or torchrun worker's imports and device start (inferred)
WORKSHOP_MIN, SPARE_MIN = 180, 30  # the core path with the archive fits a 3-hour workshop, 30 min to spare
OPTIONAL_HEADING = "## Optional · "


@dataclass(frozen=True)
class NotebookTime:
    title: str
    compiles: int  # neuronx-cc runs on a trn1 stepping 00-07 in order, one shared cache
    compiles_with_archive: int = 0  # the ones the classroom archive cannot save
    why_with_archive: str = ""
    optional_compiles: int = 0  # of `compiles`, those in optional sections (all archive-proof here)


def _notebook(number: str, title: str, why_with_archive: str = "") -> NotebookTime:
    """A notebook's row, its compile counts taken from its graph list (graph_list.GRAPHS), which
    says what each graph is and why a trn1 compiles it: the introduction states those counts, and
    the notebook shows the list."""
    c = counts(number)
    return NotebookTime(title, c.compiles, c.compiles_with_archive, why_with_archive, c.optional_compiles)


BUDGET = {
    "00": _notebook("00", "setup"),
    "01": _notebook("01", "CPU training"),
    "02": _notebook("02", "one NeuronCore"),
    "03": _notebook("03", "compile cache", "its first-run demo compiles `train.py`'s training and "
                    "evaluation graphs into an empty cache of its own: the first compile the lesson measures"),
    # 04 on a trn1: argued, not counted: the trn1 double's pass reports 04's count undecided (its
    # all-reduce runs outside the step). docs/sources.md, "On Neuron the gradient all-reduce of
    # xm.optimizer_step is in the step's graph": graph_list lists it.
    "04": _notebook("04", "torchrun"),
    "05": _notebook("05", "BF16"),  # the trn1 double's count; graph_list says why each graph is new
    "06": _notebook("06", "inside a run", "Neuron Explorer's capture compiles `train.py`'s "
                    "training and evaluation graphs with debug metadata into a cache of its own (cached NEFFs lack it)"),
    "07": _notebook("07", "when a core wins"),
}
SOLUTIONS = NotebookTime("exercise solutions", 2)  # 02's solution: its exercises' shapes the notebook did not compile


@dataclass(frozen=True)
class Reading:
    """What a learner reads: markdown words and code lines, on the core path and in the optional
    sections (reading_counts() of the notebook)."""
    words: int
    code_lines: int
    optional_words: int = 0
    optional_code_lines: int = 0


READING = {  # python -m helpers.classroom.time_budget --counts prints them afresh
    "00": Reading(701, 24),
    "01": Reading(790, 111),
    "02": Reading(1227, 133),
    "03": Reading(1032, 146, 56, 7),
    "04": Reading(1068, 73, 124, 24),
    "05": Reading(929, 123),
    "06": Reading(1016, 107, 142, 20),
    "07": Reading(792, 92, 58, 21),
}

# Seconds its cells run on a trn1, compiles aside: (core path, optional sections), inferred as the
# module says: steps at the tutorial's it/s plus PROCESS_START_S per process started.
RUN_S = {
    "00": (30, 0),  # the checks
    "01": (60, 0),  # 7,500 steps at 287 it/s (26 s), the loaders compared
    "02": (150, 0),  # train.py: 7,500 steps at 95 it/s (79 s), 600 at 192 it/s; 2 starts; 50 steps in the kernel
    "03": (120, 30),  # runs of 5, 5 and 120 steps, the precompile trial and neuron_parallel_compile: 6 starts
    "04": (60, 60),  # 450 steps a worker at 163 it/s, 900 at 192 it/s: 3 starts; two nodes, a missing node's 5 s
    "05": (120, 0),  # five runs of 600 steps at 95 to 192 it/s: 5 starts
    "06": (120, 60),  # 200 steps profiled, 150 on two workers, 50 in the kernel, TensorBoard; Explorer's capture
    "07": (60, 20),  # the CPU sweep and three device points; the loader timed
}


def reading_counts(path) -> Reading:
    """Markdown words (split on whitespace) and non-blank code lines of a notebook, a section
    optional from a heading that starts OPTIONAL_HEADING to the next level-2 heading."""
    words, lines, optional = [0, 0], [0, 0], False
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for part in re.split(r"(?m)^(?=## )", source):
                if part.startswith("## "):
                    optional = part.startswith(OPTIONAL_HEADING)
                words[optional] += len(part.split())
        elif cell["cell_type"] == "code":
            lines[optional] += sum(1 for line in source.splitlines() if line.strip())
    return Reading(words[0], lines[0], words[1], lines[1])


def duration(seconds: float) -> str:
    """14 s, 7 min, 1 h 42 min: seconds under a minute, else whole minutes, the nearest."""
    if seconds < 60:
        return f"{round(seconds)} s"
    return hours(round(seconds / 60))


def hours(minutes_: int) -> str:
    """7 min, 1 h 42 min."""
    return f"{minutes_} min" if minutes_ < 60 else f"{minutes_ // 60} h {minutes_ % 60} min"


def wait(compiles: int) -> str:
    """The compile wait of `compiles` neuronx-cc runs: each about 5 s (typical) to 3 min 5 s (upper)."""
    if not compiles:
        return "none"
    return f"{duration(compiles * TYPICAL_COMPILE_S)} to {duration(compiles * SLOWEST_COMPILE_S)}"


@dataclass(frozen=True)
class Seconds:
    """One notebook's planned seconds on a trn1 (compiles at their upper figure)."""
    reading: float
    cells: float
    compiles_with_archive: float  # the core path's compile wait with the archive imported
    compiles_without_archive: float  # and without it
    optional: float  # the optional sections, their compiles included


def seconds(notebook: str) -> Seconds:
    b, r = BUDGET[notebook], READING[notebook]
    run, optional_run = RUN_S[notebook]
    read = 60 * (r.words / WORDS_PER_MIN + r.code_lines / CODE_LINES_PER_MIN)
    optional_read = 60 * (r.optional_words / WORDS_PER_MIN + r.optional_code_lines / CODE_LINES_PER_MIN)
    return Seconds(read, run, (b.compiles_with_archive - b.optional_compiles) * SLOWEST_COMPILE_S,
                   (b.compiles - b.optional_compiles) * SLOWEST_COMPILE_S,
                   optional_read + optional_run + b.optional_compiles * SLOWEST_COMPILE_S
                   if r.optional_words or r.optional_code_lines else 0)


def whole_minutes(seconds_: float) -> int:
    """The nearest whole minute; a part that is not nothing shows at least 1."""
    return max(1, round(seconds_ / 60)) if seconds_ > 0 else 0


@dataclass(frozen=True)
class Minutes:
    """One notebook's figures as it shows them: each part rounded once, the totals their sums."""
    reading: int
    cells: int
    compiles_with_archive: int
    compiles_without_archive: int
    optional: int

    @property
    def core_with_archive(self) -> int:
        return self.reading + self.cells + self.compiles_with_archive

    @property
    def core_without_archive(self) -> int:
        return self.reading + self.cells + self.compiles_without_archive


def minutes(notebook: str) -> Minutes:
    """seconds(), each part in whole minutes (whole_minutes)."""
    s = seconds(notebook)
    return Minutes(*(whole_minutes(value) for value in
                     (s.reading, s.cells, s.compiles_with_archive, s.compiles_without_archive, s.optional)))


MODELLED = "Modelled, not measured"


def intro_sentence(notebook: str) -> str:
    """The lines a notebook's introduction states its time with, word for word."""
    b, m = BUDGET[notebook], minutes(notebook)
    parts = [f"{m.reading} to read", f"{m.cells} of cells"]
    if not b.compiles:
        text = f"**Time:** {m.core_with_archive} min ({', '.join(parts)} on a trn1). No `neuronx-cc` compile."
    else:
        if m.compiles_with_archive:
            parts.append(f"{m.compiles_with_archive} of compiles")
        kept = b.compiles_with_archive
        archive = (f"{kept} even with the archive" + (" (in an optional part)" if b.optional_compiles else "")
                   if kept else "none with the archive")
        text = (f"**Time:** {m.core_with_archive} min with the classroom archive ({', '.join(parts)} on a "
                f"trn1), {m.core_without_archive} without it ({m.compiles_without_archive - m.compiles_with_archive}"
                f" more of compiles). `neuronx-cc` runs **{b.compiles} times**, {archive}.")
    if m.optional:
        text += f" Optional parts add {m.optional} min."
    if b.compiles:
        return f"{text} {MODELLED} (each compile at {exact(SLOWEST_COMPILE_S)}, its upper figure)."
    return f"{text} {MODELLED}."


@dataclass(frozen=True)
class Totals:
    """The whole workbook: each figure the sum of the notebooks' figures as shown."""
    reading: int
    cells: int
    compiles_with_archive: int  # minutes of compile wait on the core path
    compiles_without_archive: int
    core_with_archive: int
    core_without_archive: int
    optional: int
    compiles: int  # neuronx-cc runs, the exercise solutions' included
    compiles_with_archive_count: int


def totals() -> Totals:
    every = [minutes(n) for n in BUDGET]
    rows = [*BUDGET.values(), SOLUTIONS]
    return Totals(*(sum(getattr(m, name) for m in every) for name in
                    ("reading", "cells", "compiles_with_archive", "compiles_without_archive",
                     "core_with_archive", "core_without_archive", "optional")),
                  sum(r.compiles for r in rows), sum(r.compiles_with_archive for r in rows))


def spare_sentence() -> str:
    """What the core path with the archive leaves of a 3-hour workshop (notebooks/README.md)."""
    return (f"The core path with the archive leaves {WORKSHOP_MIN - totals().core_with_archive} minutes of a "
            "3-hour workshop")


def workbook_sentence() -> str:
    """The whole workbook's figures, as README.md and docs/instructor.md state them."""
    t = totals()
    return (f"The core path takes {hours(t.core_with_archive)} on a trn1 with the classroom archive "
            f"and {hours(t.core_without_archive)} without it; the optional sections add "
            f"{hours(t.optional)}. In all `neuronx-cc` runs {t.compiles} times ({wait(t.compiles)}), "
            f"or {t.compiles_with_archive_count} times ({wait(t.compiles_with_archive_count)}) with the archive")


def self_paced_sentence() -> str:
    """What `make classroom-cache` costs a learner on their own trn1 (README.md, notebooks/README.md)."""
    t = totals()
    run = t.cells + sum(RUN_S[n][1] for n in BUDGET) / 60
    return (f"It runs every notebook and solution unattended, in about {hours(round(run))} of cells plus "
            f"{wait(t.compiles)} of compiles")


def budget_table() -> str:
    """The table notebooks/README.md shows (markdown): in each row the core path is the sum of
    its reading, cells and compile wait; the last row sums each column."""
    lines = ["| notebook | reading | cells on a trn1 | `neuronx-cc` runs | compile wait, with / without the "
             "archive | core path, with the archive | without it | optional sections |",
             "|---|---|---|---|---|---|---|---|"]
    for number, b in BUDGET.items():
        m = minutes(number)
        kept = f" ({b.compiles_with_archive} with the archive: {b.why_with_archive})" if b.compiles_with_archive else ""
        lines.append(f"| {number} · {b.title} | {m.reading} min | {m.cells} min | {b.compiles}, "
                     f"{wait(b.compiles)}{kept} | {m.compiles_with_archive} / {m.compiles_without_archive} min | "
                     f"{m.core_with_archive} min | {m.core_without_archive} min | "
                     f"{f'{m.optional} min' if m.optional else 'none'} |")
    lines.append(f"| {SOLUTIONS.title} | | | {SOLUTIONS.compiles}, {wait(SOLUTIONS.compiles)} (an answer "
                 "other than the solution's compiles its own graphs, once) | | | | |")
    t = totals()
    lines.append(f"| **whole workbook** | **{t.reading} min** | **{t.cells} min** | "
                 f"**{t.compiles}, {wait(t.compiles)}** | **{t.compiles_with_archive} / "
                 f"{t.compiles_without_archive} min** | **{hours(t.core_with_archive)}** | "
                 f"**{hours(t.core_without_archive)}** | **{hours(t.optional)}** |")
    return "\n".join(lines)


if __name__ == "__main__":  # prints what the docs paste in: python -m helpers.classroom.time_budget [--counts]
    import sys

    from mnist_mlp.common.paths import REPO_ROOT

    if "--counts" in sys.argv:
        for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            print(f"    \"{path.name[:2]}\": {reading_counts(path)},")
    else:
        for number in BUDGET:
            print(number, intro_sentence(number))
        print(budget_table())
        print(workbook_sentence())
        print(spare_sentence())
        print(self_paced_sentence())

"""The workbook's clock in one place: each notebook's time on a trn1, from what a learner reads,
what its cells run and what `neuronx-cc` compiles, on the core path and in its optional sections
(headings "## Optional · ..."). Each notebook's introduction, notebooks/README.md, README.md and
docs/instructor.md state these figures as this module writes them; tests/test_time_budget.py holds
them to it, the reading counts to the notebooks, the compile counts (each notebook's graph list,
helpers/classroom/graph_list.py, which the notebook shows) to the graph record
(notebooks/classroom_graphs.json, the stand-in's), and the per-compile range to the tutorial's log as
docs/sources.md quotes it (the typical compile to a 2025 log there). tests/browser/test_trn1_double_pass.py holds the counts the introductions
state to the compiles the trn1 double counts.

- Reading: all a learner reads on the core path, counted by reading_counts() and kept here as
  data (READING) so that an edit elsewhere in a notebook moves no stated figure until the counts
  are refreshed (`python -m helpers.classroom.time_budget --counts`, which `make notebooks` runs
  last and which restates every figure below where it is stated, refresh()):
  markdown words at WORDS_PER_MIN, code lines at CODE_LINES_PER_MIN, lines of output at
  OUTPUT_LINES_PER_MIN, table rows (a script diff, a checklist) at TABLE_ROWS_PER_MIN, and a
  picture (a plot, a figure) as one unit of PICTURE_MIN. These paces are stated, not measured: the
  one timed reading (issue #58: a PyTorch engineer new to XLA read the core path with its outputs
  in about 190 min, running nothing) is a figure they were not fitted to, and
  tests/test_time_budget.py holds the clock within a tenth of it. An output folded out of sight
  (cell tag FOLDED_TAG, which JupyterLab and the site show collapsed) is read only when opened:
  it counts with the optional parts.
- Exercises: each exercise's working time, stated per exercise (EXERCISE_MIN) by one rule:
  EXERCISE_SHORT_MIN for a prediction or a line that the check then confirms, EXERCISE_LONG_MIN for
  one that writes or fixes several lines or works a sum. The Carpentries state each episode's
  teaching and exercise minutes and correct them from real workshops: carpentries-lab/
  deep-learning-intro issue 124 (2021) timed its exercises at 9 to 17 min each, talk-through
  included; ours are smaller, and the check cell replaces most of the talk-through.
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
- Plans: a 3-hour class (three_hour_class) takes the notebooks in order, each on its core path
  with the archive and its short exercises, while SPARE_MIN of WORKSHOP_MIN is left; the whole
  workbook (sittings) packs each notebook whole, every exercise and optional part included, into
  3-hour sittings with the same spare.
- Rounding: each part a notebook shows (reading, exercises, cells, compile wait, optional parts) is rounded
  once to the nearest minute (a part that is not nothing shows at least 1), and every total is
  the sum of the parts shown, so a reader's sum matches it.
"""
from __future__ import annotations

import json
import re
from dataclasses import astuple, dataclass
from pathlib import Path

from helpers.classroom.graph_list import counts
from mnist_mlp.common.compile_notice import SLOWEST_COMPILE_S, TYPICAL_COMPILE_S  # 2022 and 2025 logs

WORDS_PER_MIN = 150  # technical prose read to follow it: slower than everyday reading
CODE_LINES_PER_MIN = 10  # a code line read before its cell runs: about 6 s each
PROCESS_START_S = 15  # a script's or torchrun worker's imports and device start (inferred)
OUTPUT_LINES_PER_MIN = 20  # a line of output skimmed for the figure the prose names: 3 s, twice code's pace
TABLE_ROWS_PER_MIN = 10  # a row of a script diff or a table, read like a code line
PICTURE_MIN = 1  # a plot or figure read as one unit: its axes, its legend, the point it makes
EXERCISE_SHORT_MIN, EXERCISE_LONG_MIN = 5, 10  # a prediction or one line; several lines or a sum
WORKSHOP_MIN, SPARE_MIN = 180, 30  # each sitting a 3-hour slot with at least 30 min to spare
OPTIONAL_HEADING = "## Optional · "
FOLDED_TAG = "hide-output"  # myst-nb's tag; the cell's metadata also says jupyter.outputs_hidden


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
class Counts:
    """What a learner reads in one part of a notebook."""
    words: int = 0
    code_lines: int = 0
    output_lines: int = 0
    table_rows: int = 0
    pictures: int = 0

    def seconds(self) -> float:
        return 60 * (self.words / WORDS_PER_MIN + self.code_lines / CODE_LINES_PER_MIN
                     + self.output_lines / OUTPUT_LINES_PER_MIN + self.table_rows / TABLE_ROWS_PER_MIN
                     + self.pictures * PICTURE_MIN)


@dataclass(frozen=True)
class Reading:
    """reading_counts() of a notebook: the core path, the optional sections, and the outputs
    folded out of sight on the core path (read when opened)."""
    core: Counts
    optional: Counts = Counts()
    folded: Counts = Counts()


def _c(*figures: int) -> Counts:
    return Counts(*figures)


READING = {  # words, code lines, output lines, table rows, pictures: `--counts` refreshes them
    "00": Reading(_c(711, 24, 12, 11, 0)),
    "01": Reading(_c(772, 115, 38, 0, 3)),
    "02": Reading(_c(1266, 133, 121, 0, 2), _c(0, 0, 0, 0, 0), _c(0, 0, 0, 65, 0)),
    "03": Reading(_c(1034, 146, 140, 0, 1), _c(56, 7, 25, 0, 0)),
    "04": Reading(_c(1078, 73, 77, 0, 2), _c(117, 24, 39, 0, 0), _c(0, 0, 0, 44, 0)),
    "05": Reading(_c(962, 123, 109, 0, 2), _c(0, 0, 0, 0, 0), _c(0, 0, 0, 90, 0)),
    "06": Reading(_c(1024, 107, 76, 0, 3), _c(152, 20, 20, 0, 0)),
    "07": Reading(_c(784, 92, 54, 0, 1), _c(58, 21, 10, 0, 0)),
}

# Each exercise's working minutes, in the notebook's order (the rule in the module's docstring).
EXERCISE_MIN = {
    "00": (),
    "01": (EXERCISE_SHORT_MIN, EXERCISE_LONG_MIN),  # predict steps per epoch; tune lr until one batch is learnt
    "02": (EXERCISE_SHORT_MIN, EXERCISE_LONG_MIN),  # predict a graph count; find and fix a recompile trigger
    "03": (EXERCISE_LONG_MIN, EXERCISE_SHORT_MIN),  # seven cache-key predictions; one flag line
    "04": (EXERCISE_SHORT_MIN, EXERCISE_LONG_MIN),  # torchrun's arguments; build a DistributedSampler
    "05": (EXERCISE_SHORT_MIN, EXERCISE_LONG_MIN),  # try exponents; predict a thousand rounded adds
    "06": (EXERCISE_SHORT_MIN, EXERCISE_LONG_MIN),  # read two counters; write scalars with a SummaryWriter
    "07": (EXERCISE_LONG_MIN, EXERCISE_LONG_MIN),  # count a step's FLOPs; solve for the crossover batch
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


def output_counts(outputs) -> Counts:
    """A cell's outputs as a learner reads them: a picture is one unit, an HTML table its rows,
    anything else its non-blank text lines (a widget its text form)."""
    lines = rows = pictures = 0
    for output in outputs:
        if output.get("output_type") == "stream":
            lines += sum(1 for line in "".join(output["text"]).splitlines() if line.strip())
            continue
        data = output.get("data", {})
        html = "".join(data.get("text/html", ""))
        if any(kind.startswith("image/") for kind in data):
            pictures += 1
        elif html.count("<tr"):
            rows += html.count("<tr")
        else:
            text = "".join(data.get("text/plain", "")) or "".join(output.get("traceback", []))
            lines += sum(1 for line in text.splitlines() if line.strip())
    return Counts(output_lines=lines, table_rows=rows, pictures=pictures)


def _add(a: Counts, b: Counts) -> Counts:
    return Counts(*(x + y for x, y in zip(astuple(a), astuple(b))))


def folded(cell) -> bool:
    return FOLDED_TAG in cell.get("metadata", {}).get("tags", [])


def reading_counts(path) -> Reading:
    """What a learner reads in a notebook: markdown words (split on whitespace), non-blank code
    lines and the outputs (output_counts), a section optional from a heading that starts
    OPTIONAL_HEADING to the next level-2 heading; a folded output on the core path apart."""
    parts, optional = {"core": Counts(), "optional": Counts(), "folded": Counts()}, False
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for part in re.split(r"(?m)^(?=## )", source):
                if part.startswith("## "):
                    optional = part.startswith(OPTIONAL_HEADING)
                where = "optional" if optional else "core"
                parts[where] = _add(parts[where], Counts(words=len(part.split())))
        elif cell["cell_type"] == "code":
            where = "optional" if optional else "core"
            code = Counts(code_lines=sum(1 for line in source.splitlines() if line.strip()))
            parts[where] = _add(parts[where], code)
            out = "folded" if where == "core" and folded(cell) else where
            parts[out] = _add(parts[out], output_counts(cell.get("outputs", [])))
    return Reading(**parts)


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
    exercises: float
    cells: float
    compiles_with_archive: float  # the core path's compile wait with the archive imported
    compiles_without_archive: float  # and without it
    optional: float  # the optional sections, their compiles included, and the folded outputs


def seconds(notebook: str) -> Seconds:
    b, r = BUDGET[notebook], READING[notebook]
    run, optional_run = RUN_S[notebook]
    optional = (r.optional.seconds() + optional_run + b.optional_compiles * SLOWEST_COMPILE_S
                if r.optional != Counts() else 0)
    return Seconds(r.core.seconds(), 60 * sum(EXERCISE_MIN[notebook]), run,
                   (b.compiles_with_archive - b.optional_compiles) * SLOWEST_COMPILE_S,
                   (b.compiles - b.optional_compiles) * SLOWEST_COMPILE_S, optional + r.folded.seconds())


def whole_minutes(seconds_: float) -> int:
    """The nearest whole minute; a part that is not nothing shows at least 1."""
    return max(1, round(seconds_ / 60)) if seconds_ > 0 else 0


@dataclass(frozen=True)
class Minutes:
    """One notebook's figures as it shows them: each part rounded once, the totals their sums."""
    reading: int
    exercises: int
    cells: int
    compiles_with_archive: int
    compiles_without_archive: int
    optional: int

    @property
    def core_with_archive(self) -> int:
        return self.reading + self.exercises + self.cells + self.compiles_with_archive

    @property
    def core_without_archive(self) -> int:
        return self.reading + self.exercises + self.cells + self.compiles_without_archive


def minutes(notebook: str) -> Minutes:
    """seconds(), each part in whole minutes (whole_minutes)."""
    s = seconds(notebook)
    return Minutes(*(whole_minutes(value) for value in
                     (s.reading, s.exercises, s.cells, s.compiles_with_archive, s.compiles_without_archive,
                      s.optional)))


MODELLED = "Modelled, not measured"


def intro_sentence(notebook: str) -> str:
    """The lines a notebook's introduction states its time with, word for word."""
    b, m = BUDGET[notebook], minutes(notebook)
    parts = [f"{m.reading} to read"] + ([f"{m.exercises} of exercises"] if m.exercises else []) + [f"{m.cells} of cells"]
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
        what = "Optional parts" if READING[notebook].optional != Counts() else "Folded outputs"
        text += f" {what} add {m.optional} min."
    if b.compiles:
        return f"{text} {MODELLED} (each compile at its upper figure)."
    return f"{text} {MODELLED}."


@dataclass(frozen=True)
class Totals:
    """The whole workbook: each figure the sum of the notebooks' figures as shown."""
    reading: int
    exercises: int
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
                    ("reading", "exercises", "cells", "compiles_with_archive", "compiles_without_archive",
                     "core_with_archive", "core_without_archive", "optional")),
                  sum(r.compiles for r in rows), sum(r.compiles_with_archive for r in rows))


TIMED_READING_MIN = 190  # issue #58: one reader, the core path with its outputs, nothing run


def reading_check_minutes() -> int:
    """The clock's reading of the core path with its folded outputs opened, what that reader read."""
    return round(sum(READING[n].core.seconds() + READING[n].folded.seconds() for n in BUDGET) / 60)


def span(numbers: list[str]) -> str:
    """'02', '03 and 04', '00 to 03'."""
    if len(numbers) < 3:
        return " and ".join(numbers)
    return f"{numbers[0]} to {numbers[-1]}"


def long_exercises(notebook: str) -> int:
    return sum(m for m in EXERCISE_MIN[notebook] if m > EXERCISE_SHORT_MIN)


def class_minutes(notebook: str) -> int:
    """A notebook in the 3-hour class: its core path with the archive, its short exercises only."""
    return minutes(notebook).core_with_archive - long_exercises(notebook)


def three_hour_class() -> list[str]:
    """The notebooks a 3-hour class covers, in order, while it leaves SPARE_MIN to spare."""
    covered: list[str] = []
    for number in BUDGET:
        if sum(class_minutes(n) for n in [*covered, number]) > WORKSHOP_MIN - SPARE_MIN:
            break
        covered.append(number)
    return covered


def whole_minutes_of(notebook: str) -> int:
    """A notebook whole: core path with the archive, every exercise, the optional parts and folded outputs."""
    return minutes(notebook).core_with_archive + minutes(notebook).optional


def sittings() -> list[list[str]]:
    """The whole workbook in 3-hour sittings, each notebook whole and in order, each sitting with
    SPARE_MIN to spare."""
    plan: list[list[str]] = [[]]
    for number in BUDGET:
        if plan[-1] and sum(whole_minutes_of(n) for n in [*plan[-1], number]) > WORKSHOP_MIN - SPARE_MIN:
            plan.append([])
        plan[-1].append(number)
    return plan


def class_sentence() -> str:
    """The 3-hour class, what it covers and what it leaves for later (README, notebooks/README.md,
    docs/instructor.md)."""
    covered = three_hour_class()
    used = sum(class_minutes(n) for n in covered)
    later = [n for n in BUDGET if n not in covered]
    left = sum(long_exercises(n) for n in covered)
    return (f"A 3-hour class covers notebooks {span(covered)} on the core path with the archive, with "
            f"their short exercises: {hours(used)}, leaving {WORKSHOP_MIN - used} min for questions "
            f"and a break. It leaves for later {span(later)}, the longer exercises of the notebooks it "
            f"covers ({left} min) and the optional parts")


def sittings_sentence() -> str:
    """The whole workbook in sittings (README, notebooks/README.md, docs/instructor.md)."""
    plan = sittings()
    parts = [f"{span(s)} ({hours(sum(whole_minutes_of(n) for n in s))})" for s in plan]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return (f"The whole workbook, every exercise and optional part included, takes {len(plan)} "
            f"sitting{'s' if len(plan) > 1 else ''} of 3 hours: {listed}, each with at least {SPARE_MIN} min to spare")


def workbook_sentence() -> str:
    """The whole workbook's figures, as README.md and docs/instructor.md state them."""
    t = totals()
    return (f"The core path takes {hours(t.core_with_archive)} on a trn1 with the classroom archive "
            f"and {hours(t.core_without_archive)} without it, {hours(t.exercises)} of exercises included; "
            f"the optional sections and folded outputs add {hours(t.optional)}. In all `neuronx-cc` runs "
            f"{t.compiles} times ({wait(t.compiles)}), "
            f"or {t.compiles_with_archive_count} times ({wait(t.compiles_with_archive_count)}) with the archive")


def self_paced_sentence() -> str:
    """What `make classroom-cache` costs a learner on their own trn1 (README.md, notebooks/README.md)."""
    t = totals()
    run = t.cells + sum(RUN_S[n][1] for n in BUDGET) / 60
    return (f"It runs every notebook and solution unattended, in about {hours(round(run))} of cells plus "
            f"{wait(t.compiles)} of compiles")


def budget_table() -> str:
    """The table notebooks/README.md shows (markdown): in each row the core path is the sum of
    its reading, exercises, cells and compile wait; the last row sums each column."""
    lines = ["| notebook | reading | exercises | cells on a trn1 | `neuronx-cc` runs | compile wait, with / "
             "without the archive | core path, with the archive | without it | optional parts, folded outputs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for number, b in BUDGET.items():
        m = minutes(number)
        kept = f" ({b.compiles_with_archive} with the archive: {b.why_with_archive})" if b.compiles_with_archive else ""
        exercises = " + ".join(str(e) for e in EXERCISE_MIN[number])
        lines.append(f"| {number} · {b.title} | {m.reading} min | "
                     f"{f'{exercises} = {m.exercises} min' if m.exercises else 'none'} | {m.cells} min | "
                     f"{b.compiles}, {wait(b.compiles)}{kept} | {m.compiles_with_archive} / "
                     f"{m.compiles_without_archive} min | {m.core_with_archive} min | {m.core_without_archive} min | "
                     f"{f'{m.optional} min' if m.optional else 'none'} |")
    lines.append(f"| {SOLUTIONS.title} | | | | {SOLUTIONS.compiles}, {wait(SOLUTIONS.compiles)} (an answer "
                 "other than the solution's compiles its own graphs, once) | | | | |")
    t = totals()
    lines.append(f"| **whole workbook** | **{t.reading} min** | **{t.exercises} min** | **{t.cells} min** | "
                 f"**{t.compiles}, {wait(t.compiles)}** | **{t.compiles_with_archive} / "
                 f"{t.compiles_without_archive} min** | **{hours(t.core_with_archive)}** | "
                 f"**{hours(t.core_without_archive)}** | **{hours(t.optional)}** |")
    return "\n".join(lines)


def reading_source(counted: dict[str, Reading]) -> str:
    """READING as this module holds it, from reading_counts() of each notebook."""
    def figures(c: Counts) -> str:
        return f"_c({', '.join(str(n) for n in astuple(c))})"

    rows = []
    for number, r in counted.items():
        parts = [figures(r.core)] + ([figures(r.optional)] if r.optional != Counts() or r.folded != Counts() else [])
        parts += [figures(r.folded)] if r.folded != Counts() else []
        rows.append(f'    "{number}": Reading({", ".join(parts)}),')
    return "\n".join(["READING = {  # words, code lines, output lines, table rows, pictures: `--counts` "
                      "refreshes them", *rows, "}"])


def refresh_counts(module: Path, notebooks: Path) -> str:
    """Rewrites READING in `module` with the notebooks' counts now; returns the new block."""
    counted = {path.name[:2]: reading_counts(path) for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb"))}
    text = module.read_text()
    start = text.index("\nREADING = {") + 1
    end = text.index("\n}\n", start) + 2
    block = reading_source(counted)
    module.write_text(text[:start] + block + text[end:])
    return block


# Where the stated figures live, and the text each function writes there (refresh()).
STATED = {
    r"The core path takes \d.*? or \d+ times \([^)]*\) with the archive": workbook_sentence,
    r"A 3-hour class covers .*? and the optional parts": class_sentence,
    r"The whole workbook, every exercise and optional part included, takes .*? to spare": sittings_sentence,
    r"It runs every notebook and solution unattended, in about .*? of compiles": self_paced_sentence,
    r"The clock gives \d+ min for the same reading": lambda: f"The clock gives {reading_check_minutes()} min "
                                                           "for the same reading",
}
DOCS = ("README.md", "notebooks/README.md", "docs/instructor.md")
TIME_LINE = re.compile(r"\*\*Time:\*\*.*?Modelled, not measured(?: \(each compile at [^)]*\))?\.", re.S)


def _write_intros(notebooks: Path) -> bool:
    """Each notebook's "**Time:**" line as intro_sentence() writes it; whether any changed."""
    import nbformat

    changed = False
    for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "markdown")
        line = intro_sentence(path.name[:2])
        new = TIME_LINE.sub(lambda _, line=line: line, cell.source, count=1)
        if new != cell.source:
            cell.source, changed = new, True
            nbformat.write(nb, path)
    return changed


def refresh(root: Path, module: Path) -> str:
    """After the notebooks changed (`make notebooks`): READING from them, then every stated figure
    (the introductions' time lines, the docs' sentences and table) from the clock. A time line's
    own words are counted, so it repeats until the figures hold still. Run in its own process:
    it updates this module's READING in place."""
    for _ in range(5):
        block = refresh_counts(module, root / "notebooks")
        READING.clear()
        READING.update({p.name[:2]: reading_counts(p) for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))})
        if not _write_intros(root / "notebooks"):
            break
    for name in DOCS:
        path = root / name
        text = path.read_text()
        for pattern, sentence in STATED.items():
            text = re.sub(pattern, lambda _, s=sentence: s(), text, flags=re.S)
        if name == "notebooks/README.md":
            start = text.index("| notebook | reading |")
            text = text[:start] + budget_table() + text[text.index("\n\n", start):]
        path.write_text(text)
    return block


if __name__ == "__main__":  # prints what the docs paste in: python -m helpers.classroom.time_budget [--counts]
    import sys

    from mnist_mlp.common.paths import REPO_ROOT

    if "--counts" in sys.argv:  # after `make notebooks`: the outputs moved, so every stated figure does
        print(refresh(REPO_ROOT, Path(__file__)))
    else:
        for number in BUDGET:
            print(number, intro_sentence(number))
        print(budget_table())
        print(workbook_sentence())
        print(class_sentence())
        print(sittings_sentence())
        print(self_paced_sentence())

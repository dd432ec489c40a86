"""One time budget (helpers/classroom/time_budget.py): every notebook's introduction, the
instructor's page, the README and docs/instructor.md state its figures word for word; its
reading counts are the notebooks'; its compile counts are the graph record's new graphs (plus
03's first run into an empty cache of its own; less what only the stand-in's mechanics compile,
by the budget's own argument); its per-compile range is the tutorial's log as docs/sources.md
quotes it, and the typical compile to a 2025 log; every total is the sum of the figures shown beside
it; the core path with the archive fits a 3-hour workshop with time to spare."""
from __future__ import annotations

import json
import re
from datetime import datetime

import nbformat
import pytest

from helpers.classroom import graph_list, time_budget
from helpers.classroom.time_budget import (
    BUDGET,
    READING,
    RUN_S,
    SOLUTIONS,
    budget_table,
    intro_sentence,
    reading_counts,
    self_paced_sentence,
    totals,
    wait,
    workbook_sentence,
)
from mnist_mlp.common import compile_notice
from tests.paths import REPO_ROOT

NOTEBOOKS = {p.name[:2]: p for p in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
STATED_COMPILES = re.compile(r"\*\*(\d+)\s+(?:new\s+graphs|graphs|times)\*\*")  # the double's reading


def introduction(path) -> str:
    return next(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


def test_every_notebook_has_a_budget_row():
    assert sorted(BUDGET) == sorted(READING) == sorted(RUN_S) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_the_reading_counts_are_the_notebooks(number):
    """The stated reading time follows the notebook: its counts within a tenth (or a few words and
    lines) of what it holds now, its optional sections where its headings say. Refresh them with
    `python -m helpers.classroom.time_budget --counts`."""
    stated, counted = READING[number], reading_counts(NOTEBOOKS[number])
    for name, slack in (("words", 40), ("code_lines", 6), ("optional_words", 40), ("optional_code_lines", 6)):
        got, want = getattr(stated, name), getattr(counted, name)
        assert abs(got - want) <= max(slack, 0.1 * want), f"{number} {name}: stated {got}, the notebook has {want}"
    assert (stated.optional_words > 0) == (counted.optional_words > 0)


def test_reading_counts_split_the_optional_sections_off(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nOne two three.\n\n## Optional · More\n\nfour five"),
                nbformat.v4.new_code_cell("x = 1\n\ny = 2"),
                nbformat.v4.new_markdown_cell("## Back\n\nsix"), nbformat.v4.new_code_cell("z = 3")]
    nbformat.write(nb, tmp_path / "probe.ipynb")
    counted = reading_counts(tmp_path / "probe.ipynb")
    # "# Title One two three." | "## Optional · More four five" and 2 lines | "## Back six" and 1 line
    assert counted == time_budget.Reading(5 + 3, 1, 6, 2)


def test_the_core_path_fits_a_workshop_with_the_archive_and_time_to_spare():
    t = totals()
    assert t.core_with_archive <= time_budget.WORKSHOP_MIN - time_budget.SPARE_MIN, t
    assert t.core_without_archive > t.core_with_archive  # why a learner without it starts elsewhere
    assert t.optional > 0


def test_the_cells_take_at_least_the_tutorials_pace():
    """The run times are inferred; each at least the steps its runs train at the tutorial's it/s
    plus the processes they start."""
    start = time_budget.PROCESS_START_S
    assert RUN_S["01"][0] >= 7500 / 287  # 4 epochs of 1,875 steps on the host CPU
    assert RUN_S["02"][0] >= 7500 / 95 + 600 / 192 + 2 * start  # train.py synced, then MpDeviceLoader
    assert RUN_S["04"][0] >= 450 / 163 + 900 / 192 + 2 * start  # two workers, then one
    assert RUN_S["05"][0] >= 5 * 600 / 192 + 5 * start  # five precisions


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_introduction_states_its_reading_time_and_compile_wait(number):
    intro = " ".join(introduction(NOTEBOOKS[number]).split())
    assert intro_sentence(number) in intro
    stated = STATED_COMPILES.search(intro)  # what tests/test_trn1_double_pass.py compares
    assert (int(stated[1]) if stated else 0) == BUDGET[number].compiles


def test_the_docs_state_the_same_figures():
    flat = {name: " ".join((REPO_ROOT / name).read_text().split())
            for name in ("README.md", "docs/instructor.md", "notebooks/README.md")}
    for name, text in flat.items():
        assert workbook_sentence() in text, name
    for name in ("README.md", "notebooks/README.md"):  # what a learner without an instructor can do
        assert self_paced_sentence() in flat[name], name
    assert time_budget.spare_sentence() in flat["notebooks/README.md"]
    assert budget_table() in (REPO_ROOT / "notebooks/README.md").read_text()


def _minutes(text: str) -> int:
    """'2 h 31 min' or '31 min' or '31' -> 151 / 31 / 31."""
    h = re.fullmatch(r"(?:(\d+) h )?(\d+)(?: min)?", text.strip().strip("*"))
    assert h, text
    return 60 * int(h[1] or 0) + int(h[2])


@pytest.mark.parametrize("number", sorted(NOTEBOOKS))
def test_each_time_line_adds_up(number):
    """Read from the notebook as a learner reads it: the minutes with the archive are the parts in
    the brackets summed, and the minutes without it are those plus the extra compiles stated."""
    intro = " ".join(introduction(NOTEBOOKS[number]).split())
    line = re.search(r"\*\*Time:\*\* (\d+) min(?: with the classroom archive)? \(([^)]*) on a trn1\)"
                     r"(?:, (\d+) without it \((\d+) more of compiles\))?", intro)
    assert line, intro
    parts = [int(n) for n in re.findall(r"(\d+) (?:to read|of cells|of compiles)", line[2])]
    assert int(line[1]) == sum(parts), line[0]
    if line[3]:
        assert int(line[3]) == int(line[1]) + int(line[4]), line[0]
    assert "Modelled, not measured" in intro


def test_the_table_adds_up():
    """In notebooks/README.md's table each row's core path is its reading, cells and compile wait,
    with the archive and without; the whole-workbook row is each column's sum."""
    text = (REPO_ROOT / "notebooks/README.md").read_text()
    table = text[text.index("| notebook | reading |"):].split("\n\n")[0]
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            for line in table.splitlines() if re.match(r"\| (\d\d ·|\*\*whole workbook)", line)]
    assert len(rows) == len(NOTEBOOKS) + 1
    sums = [0] * 7
    for i, row in enumerate(rows):
        reading, cells = _minutes(row[1]), _minutes(row[2])
        with_wait, without_wait = (int(n) for n in re.findall(r"\d+", row[4]))
        core, core_without = _minutes(row[5]), _minutes(row[6])
        optional = 0 if row[7] == "none" else _minutes(row[7])
        figures = [reading, cells, with_wait, without_wait, core, core_without, optional]
        if i < len(NOTEBOOKS):
            assert core == reading + cells + with_wait and core_without == reading + cells + without_wait, row
            sums = [a + b for a, b in zip(sums, figures)]
        else:
            assert figures == sums, (row, sums)
    assert _minutes(rows[-1][5]) == totals().core_with_archive


def test_each_graph_list_is_the_graph_records_new_graphs():
    """Per notebook, the listed graphs the stand-in builds and the archive holds are exactly the
    record's graphs new to it (the pass's order: notebooks, then solutions); the budget's counts
    are the lists' (a trn1's graphs, those the archive cannot save, those in optional parts)."""
    record = json.loads((REPO_ROOT / "notebooks/classroom_graphs.json").read_text())
    by_item = record["backends"]["xla-cpu"]["by_item"]
    seen, new = set(), {}
    for item in sorted(by_item, key=lambda k: (k.startswith("solutions/"), k)):  # the pass's order
        new[item] = len(set(by_item[item]) - seen)
        seen |= set(by_item[item])
    for number, path in NOTEBOOKS.items():
        listed, b = graph_list.counts(number), BUDGET[number]
        assert listed.stand_in_new == new[path.name], (number, "the list and the record disagree")
        assert (b.compiles, b.compiles_with_archive, b.optional_compiles) == (
            listed.compiles, listed.compiles_with_archive, listed.optional_compiles), number
        assert b.optional_compiles <= b.compiles_with_archive  # the model: optional compiles are archive-proof
    assert SOLUTIONS.compiles == sum(n for item, n in new.items() if item.startswith("solutions/"))


@pytest.mark.parametrize("number", [n for n in sorted(NOTEBOOKS) if BUDGET[n].compiles])
def test_each_notebook_shows_its_graph_list_under_its_introduction(number):
    """The cell after the setup cell prints the list; each graph's cell is found, in the list's
    section (optional or not), and the list's count is the introduction's."""
    cells = json.loads(NOTEBOOKS[number].read_text())["cells"]
    shown = "".join(cells[2]["source"])
    assert cells[2]["cell_type"] == "code" and f'show_graph_list("{number}")' in shown
    text = graph_list.graph_list(number)
    assert text.startswith(f"neuronx-cc runs {BUDGET[number].compiles} times on a trn1")
    for graph in graph_list.GRAPHS[number]:
        _, heading = graph_list.find_cell(cells, graph.cell)
        assert heading.startswith("Optional · ") == graph.optional, (number, graph.what, heading)


def test_a_graph_list_names_cells_by_one_line_and_says_what_only_one_backend_builds(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["# T\n\n## Part"]},
             {"cell_type": "code", "source": ["a = 1\n", "step()"]},
             {"cell_type": "markdown", "source": ["## Optional · More"]},
             {"cell_type": "code", "source": ["step()"]}]
    assert graph_list.find_cell(cells, "a = 1") == (1, "Part")
    with pytest.raises(ValueError, match="2 code cells hold 'step\\(\\)'"):
        graph_list.find_cell(cells, "step()")
    text = graph_list.graph_list("04")
    assert "the 2-worker step, the all-reduce inside *" in text and "* on a trn1 only." in text
    assert text.split("Only the stand-in builds:")[1].count('  in "Launch: ') == 2  # the gloo halves


def test_a_graph_list_names_sections_not_cells_and_gives_no_exercise_away():
    """A reader sees headings, not cell numbers; the exercises' graphs are one counted line, and
    the rows still add up to the header's count."""
    text = graph_list.graph_list("02")
    assert not re.search(r"cell \d", text) and "\nThe script: a `sync()` every step, or `MpDeviceLoader`\n" in text
    exercises = text.split("\nExercises\n")[1].splitlines()
    assert len(exercises) == 1 and exercises[0].split()[:2] == ["5", "graphs"]
    assert "batch 24" not in text and "loss_history" not in text and "broken" not in text
    table_rows = [line for line in text.splitlines()[4:] if line.startswith("  ")]
    assert len(table_rows) - 1 + 5 == BUDGET["02"].compiles


def test_the_counts_follow_the_list():
    assert graph_list.counts("06") == graph_list.Counts(6, 2, 2, 4)
    assert graph_list.counts("04") == graph_list.Counts(2, 0, 0, 3)
    assert graph_list.counts("01") == graph_list.Counts(0, 0, 0, 0)


def test_a_compile_takes_what_the_tutorials_log_shows():
    row = next(line for line in (REPO_ROOT / "docs/sources.md").read_text().splitlines()
               if line.startswith("| `train.py`'s first run compiles two graphs"))
    stamps = [datetime.strptime(s, "%H:%M:%S") for s in re.findall(r"2022-04-12 (\d\d:\d\d:\d\d)", row)]
    start, first_done, second_start, second_done = stamps
    assert (first_done - start).seconds == compile_notice.SLOWEST_COMPILE_S  # 3 min 5 s
    assert (second_done - second_start).seconds == compile_notice.FASTEST_COMPILE_S  # 7 s


def test_a_current_compile_takes_what_a_2025_log_shows():
    """The typical compile: neuronx-cc 2.16's call to the other worker's read of the finished NEFF."""
    row = next(line for line in (REPO_ROOT / "docs/sources.md").read_text().splitlines()
               if line.startswith("| A small graph compiles in about 5 s"))
    assert "neuronxcc-2.16.345.0" in row
    call, cached = [datetime.strptime(s, "%H:%M:%S") for s in re.findall(r"2025-01-13 (\d\d:\d\d:\d\d)", row)]
    assert (cached - call).seconds == compile_notice.TYPICAL_COMPILE_S  # 5 s
    assert compile_notice.TYPICAL_COMPILE_S < compile_notice.FASTEST_COMPILE_S < compile_notice.SLOWEST_COMPILE_S


def test_waits_read_as_a_learner_plans_them():
    assert wait(0) == "none"
    assert wait(2) == "10 s to 6 min"  # 2 x 5 s; 2 x 185 s = 6 min 10 s, to the nearest minute
    assert wait(33) == "3 min to 1 h 42 min"  # 2 min 45 s; 101 min 45 s


def test_each_part_is_rounded_once_and_shows_when_it_is_not_nothing():
    assert [time_budget.whole_minutes(s) for s in (0, 10, 89, 91, 200)] == [0, 1, 1, 2, 3]

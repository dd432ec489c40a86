"""One time budget (helpers/classroom/time_budget.py): every notebook's introduction, the
instructor's page, the README and docs/instructor.md state its figures word for word; its
reading counts are the notebooks'; its compile counts are the graph record's new graphs (plus
03's first run into an empty cache of its own; less what only the stand-in's mechanics compile,
by the budget's own argument); its per-compile range is the tutorial's log as docs/sources.md
quotes it; the core path with the archive fits a 3-hour workshop with time to spare."""
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
    totals,
    wait,
    workbook_sentence,
)
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
    assert budget_table() in (REPO_ROOT / "notebooks/README.md").read_text()


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
    assert (first_done - start).seconds == time_budget.SLOWEST_COMPILE_S  # 3 min 5 s
    assert (second_done - second_start).seconds == time_budget.FASTEST_COMPILE_S  # 7 s


def test_waits_read_as_a_learner_plans_them():
    assert wait(0) == "none"
    assert wait(2) == "14 s to 7 min"  # 2 x 7 s; 2 x 185 s = 6 min 10 s, rounded up
    assert wait(33) == "4 min to 1 h 42 min"

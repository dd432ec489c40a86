"""The lesson's limits, held on the committed notebooks: each numbered notebook fits one workshop
slot, and the code a learner reads is the code the lesson teaches.

- markdown words (`\\w+` tokens): at most 800 in 00, 1,500 in every other notebook, 9,000 in all;
- no `assert` line and no output-marker comment in a code cell: a check is one call to
  helpers.checks.check (it prints what holds, raises when not), nbval's markers are cell tags;
- no code cell longer than 15 lines: one idea per cell.

NOT_YET_REWRITTEN holds the notebooks still waiting for their learner-first rewrite (issue #24),
each at what it measures today: for them the test holds those figures as ceilings, so a change
can only bring one closer to the limits, and a notebook that meets them must leave the list.
"""
import re

import nbformat
import pytest

from mnist_mlp.common.paths import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WORDS = re.compile(r"\w+")
MARKER_COMMENT = re.compile(r"^\s*#.*\b(NBVAL_[A-Z_]+|BACKEND_OUTPUT)\b")
MAX_WORDS, MAX_WORDS_SETUP, MAX_WORDS_ALL, MAX_CELL_LINES = 1500, 800, 9000, 15
# name: (markdown words, lesson findings) measured on the committed notebook, as ceilings.
NOT_YET_REWRITTEN: dict[str, tuple[int, int]] = {}


def markdown_words(nb) -> int:
    return sum(len(WORDS.findall(c.source)) for c in nb.cells if c.cell_type == "markdown")


def limit_for(path) -> int:
    return MAX_WORDS_SETUP if path.name.startswith("00_") else MAX_WORDS


def read(path):
    return nbformat.read(path, as_version=4)


def test_the_limits_see_what_they_limit():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nTwo words, `torch_xla.sync()` 3."),
                nbformat.v4.new_code_cell("assert x\n# NBVAL_IGNORE_OUTPUT\n" + "y\n" * 20)]
    assert markdown_words(nb) == 6  # Title Two words torch_xla sync 3
    assert list(lesson_findings("t.ipynb", nb)) == [
        "t.ipynb code cell 1: an assert line (use helpers.checks.check)",
        "t.ipynb code cell 1: an output-marker comment (tag the cell instead)",
        "t.ipynb code cell 1: 22 lines (at most 15: one idea per cell)"]


def lesson_findings(name, nb):
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        if any(line.lstrip().startswith("assert ") for line in lines):
            yield f"{name} code cell {index}: an assert line (use helpers.checks.check)"
        if any(MARKER_COMMENT.match(line) for line in lines):
            yield f"{name} code cell {index}: an output-marker comment (tag the cell instead)"
        if len(lines) > MAX_CELL_LINES:
            yield f"{name} code cell {index}: {len(lines)} lines (at most {MAX_CELL_LINES}: one idea per cell)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_fits_one_workshop_slot(path):
    words = markdown_words(read(path))
    if path.name in NOT_YET_REWRITTEN:
        ceiling = NOT_YET_REWRITTEN[path.name][0]
        assert limit_for(path) < words <= ceiling, (
            f"{path.name}: {words:,} words; not yet rewritten, it may not grow past {ceiling:,}, "
            f"and once within {limit_for(path):,} it leaves NOT_YET_REWRITTEN")
        return
    assert words <= limit_for(path), (
        f"{path.name}: {words:,} words of markdown, at most {limit_for(path):,}: move reference "
        f"material to docs/ and link it in one line")


def test_the_workbook_fits_its_day():
    words = {path.name: markdown_words(read(path)) for path in NOTEBOOKS}
    # The notebooks not yet rewritten count at the per-notebook limit they must reach.
    counted = {name: (MAX_WORDS if name in NOT_YET_REWRITTEN else n) for name, n in words.items()}
    assert sum(counted.values()) <= MAX_WORDS_ALL, f"{sum(counted.values()):,} words in all: {words}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_code_a_learner_reads_is_the_lesson(path):
    found = list(lesson_findings(path.name, read(path)))
    if path.name in NOT_YET_REWRITTEN:
        ceiling = NOT_YET_REWRITTEN[path.name][1]
        assert 0 < len(found) <= ceiling, (
            f"{path.name}: {len(found)} findings; not yet rewritten, it may not pass {ceiling}, and "
            f"with none left it leaves NOT_YET_REWRITTEN:\n" + "\n".join(found))
        return
    assert not found, "\n".join(found)


PICTURE_LINK = re.compile(r"!\[([^\]]*)\]\((images/[^)\s]+)\)")
GENERIC_FONTS = ("sans-serif", "serif", "monospace")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_picture_a_notebook_shows_is_committed_with_alt_text(path):
    """A markdown image link renders in JupyterLab, on GitHub and in the committed notebook alike
    only if the file is in the repository (no cell attachments); its alt text is what a reader
    without the picture gets."""
    links = [m.groups() for c in read(path).cells if c.cell_type == "markdown"
             for m in PICTURE_LINK.finditer(c.source)]
    for alt, target in links:
        assert (path.parent / target).is_file(), f"{path.name} shows {target}, which is not there"
        assert len(WORDS.findall(alt)) >= 3, f"{path.name}: {target} needs alt text, not {alt!r}"


@pytest.mark.parametrize("svg", sorted((REPO_ROOT / "notebooks" / "images").glob("*.svg")),
                         ids=lambda p: p.name)
def test_a_picture_is_accessible_and_renders_anywhere(svg):
    """A title and a description for screen readers, a viewBox so it scales, and every font
    family ending in a generic one: a browser showing an <img> loads no web fonts."""
    from xml.etree import ElementTree

    root = ElementTree.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg" and root.get("viewBox"), f"{svg.name}: an <svg> with a viewBox"
    assert (root.findtext(f"{ns}title") or "").strip(), f"{svg.name} has no <title>"
    assert (root.findtext(f"{ns}desc") or "").strip(), f"{svg.name} has no <desc>"
    families = {e.get("font-family") for e in root.iter() if e.get("font-family")}
    assert families and all(f.rsplit(",", 1)[-1].strip() in GENERIC_FONTS for f in families), (
        f"{svg.name}: font families {sorted(families)} must end in one of {GENERIC_FONTS}")

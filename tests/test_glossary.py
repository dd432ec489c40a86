"""Every glossary term is defined at or before its first use, in reading order: the README, then
notebooks 00 to 07 (their markdown cells).

The glossary is the list under "## Glossary" in notebooks/README.md. Each entry starts with its
term in bold (two bold terms when it defines two, "**Rank** and **world size**"), then a link to
the page that defines it; a sub-entry ("  - **Peak**: …") is defined on its parent's page. A
definition is the term in bold, in the sentence that says what it is: "**XLA** (Accelerated Linear
Algebra) is …". The README, a front door and not a lesson, may instead link the term to the
glossary at its first use ("[lazy tensors](notebooks/README.md#glossary)").

The first unit of text that uses a term (a paragraph of the README, a markdown cell of a notebook)
must be the one that defines it (or links it, in the README), and the glossary's link must name
the page of its first bold definition. A term matches as a whole word, case aside, singular or
plural, in the text a reader reads (link targets aside).

Acronyms too: the first unit that uses one spells it out ("EFA (Elastic Fabric Adapter)"), unless
the glossary defines it or it is on KNOWN_ACRONYMS, those a PyTorch engineer knows (CPU, GPU, SGD…).
"""
from __future__ import annotations

import json
import re

import pytest

from tests.paths import REPO_ROOT

GLOSSARY_PAGE = REPO_ROOT / "notebooks" / "README.md"
READING_ORDER = [REPO_ROOT / "README.md",
                 *sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
# "- **Term** ([02](02_single_core_xla.ipynb)…", "- **Rank** and **world size** ([04](…))…", or a
# parent entry whose sub-entries ("  - **Peak**: …") are defined on its page.
ENTRY = re.compile(r"^- (.*?)\(\[[^\]]*\]\(([^)#]+)")
SUB_ENTRY = re.compile(r"^\s+- ((?:\*\*[^*]+\*\*(?: and )?)+):")
BOLD = re.compile(r"\*\*(.+?)\*\*")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\(notebooks/README\.md#glossary\)")


def glossary() -> dict[str, str]:
    """term -> the file its entry links to (relative to notebooks/)."""
    text = GLOSSARY_PAGE.read_text().split("\n## Glossary", 1)[1]
    terms, page = {}, None
    for line in text.splitlines():
        if match := ENTRY.match(line):
            page = match[2]
            for term in BOLD.findall(match[1]):
                terms[plain(term)] = page
        elif (match := SUB_ENTRY.match(line)) and page:
            for term in BOLD.findall(match[1]):
                terms[plain(term)] = page
    return terms


def plain(text: str) -> str:
    return re.sub(r"^the\s+", "", text.replace("`", "").strip(), flags=re.I)


def units(path) -> list[str]:
    """The text a reader meets, in order: the README's paragraphs, or a notebook's markdown cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return [FENCED.sub("", "".join(c["source"])) for c in cells if c["cell_type"] == "markdown"]
    return re.split(r"\n\s*\n", FENCED.sub("", path.read_text()))


def mentions(term: str, text: str) -> bool:
    text = LINK_TARGET.sub("]", text).replace("`", "")
    return re.search(rf"(?<![\w/-]){re.escape(term)}(s|es)?(?![\w-])", text, re.I) is not None


def defines(term: str, text: str) -> bool:
    return any(mentions(term, bold) for bold in BOLD.findall(text))


def defines_or_links(term: str, text: str) -> bool:
    return defines(term, text) or any(mentions(term, name) for name in GLOSSARY_LINK.findall(text))


def first(term: str, test, pages=READING_ORDER) -> tuple[int, int, str] | None:
    for page_index, path in enumerate(pages):
        for unit_index, text in enumerate(units(path)):
            if test(term, text):
                return page_index, unit_index, path.name
    return None


TERMS = glossary()


def test_the_glossary_is_read():
    assert {"XLA", "Graph", "NEFF", "All-reduce", "Rank", "world size", "Crossover", "Peak"} <= set(TERMS)
    assert TERMS["Peak"] == "07_when_a_core_wins.ipynb"
    assert mentions("NeuronCore", "two NeuronCores.") and not mentions("XLA", "torch_xla")
    assert defines("graph", "a **graph**, the step's operations") and not defines("graph", "the graph")
    assert defines_or_links("lazy tensor", "[lazy tensors](notebooks/README.md#glossary)")


NOTEBOOKS = READING_ORDER[1:]


@pytest.mark.parametrize("term", sorted(TERMS))
def test_a_term_is_defined_at_or_before_its_first_use(term):
    used, defined = first(term, mentions), first(term, defines_or_links)
    assert used is not None, f"{term!r}: in the glossary, but the lesson never uses it"
    assert defined is not None and defined[:2] <= used[:2], (
        f"{term!r}: first used in {used[2]} (unit {used[1]}), defined only later or nowhere "
        f"({defined}): define it where it is first used, or reword that use")
    # A learner may open the notebooks alone (on the website): there a link to the glossary from
    # the README defines nothing, and the first notebook that uses a term bolds it.
    used, defined = first(term, mentions, NOTEBOOKS), first(term, defines, NOTEBOOKS)
    if used is not None:
        assert defined is not None and defined[:2] <= used[:2], (
            f"{term!r}: the notebooks use it first in {used[2]} (unit {used[1]}), and define it "
            f"(bold) only later or nowhere ({defined})")
    bold = first(term, defines)
    assert bold is not None, f"{term!r}: the README links it to the glossary, but no page defines it"
    linked = (GLOSSARY_PAGE.parent / TERMS[term]).resolve()
    assert linked == READING_ORDER[bold[0]].resolve(), (
        f"{term!r}: the glossary links to {TERMS[term]}, but {bold[2]} defines it first")


# Acronyms a PyTorch engineer knows: the lesson uses them unexpanded.
KNOWN_ACRONYMS = {
    "API", "AWS", "BERT", "BF16", "CI", "CPU", "CUDA", "FP16", "FP32", "GB", "GPU", "MLP", "MNIST",
    "PATH", "PIL", "SGD", "SSH",
}
# Two or more capitals (digits allowed after the first), a plural "s" aside: "NEFF", "FLOPs".
ACRONYM = re.compile(r"(?<![\w/.-])([A-Z][A-Z0-9]*[A-Z][A-Z0-9]*)s?(?![\w/-])")
CODE_SPAN = re.compile(r"`[^`\n]*`")
URL_OR_TAG = re.compile(r"https?://\S+|<[^>\n]+>")


def acronyms(text: str) -> set[str]:
    """The acronyms a reader reads in a unit (code spans, link targets, URLs and HTML tags aside)."""
    text = URL_OR_TAG.sub(" ", CODE_SPAN.sub(" ", LINK_TARGET.sub("]", text)))
    return set(ACRONYM.findall(text))


def expands(acronym: str, text: str) -> bool:
    """`text` spells the acronym out beside it: "EFA (Elastic Fabric Adapter)" or "interquartile
    range (IQR, …)". The spelled-out words start with the acronym's first letter and hold its
    letters in order."""
    text = LINK_TARGET.sub("]", text).replace("[", "").replace("]", "").replace("*", "")
    letters = [c.lower() for c in acronym if c.isalpha()]

    def spells(words: str) -> bool:
        words = words.strip().lower()
        if not words or words[0] != letters[0]:
            return False
        position = 0
        for letter in letters:
            position = words.find(letter, position)
            if position < 0:
                return False
            position += 1
        return True

    after = re.finditer(rf"\b{acronym}s?\b\W*\(([^)]+)\)", text)
    if any(spells(m[1]) for m in after):
        return True
    before = re.finditer(rf"((?:[\w-]+\s+){{1,6}})\({acronym}s?\b", text)
    return any(spells(" ".join(m[1].split()[i:])) for m in before for i in range(len(m[1].split())))


def glossary_words() -> set[str]:
    return {word.rstrip("s") if word.endswith("s") and word[:-1].isupper() else word
            for term in TERMS for word in term.split()}


def test_the_acronym_check_reads_what_a_reader_reads():
    assert acronyms("One **NEFF**, `PJRT_DEVICE=CPU`, [docs](https://x/AWS.html) and FLOPs") == {"NEFF", "FLOP"}
    assert expands("EFA", "instances with EFA (Elastic Fabric Adapter) networking")
    assert expands("IQR", "the interquartile range (IQR, the middle half of its steps)")
    assert expands("NEFF", "a **NEFF**\n  ([Neuron Executable File Format](https://x)), a program")
    assert not expands("EBS", "512 GB of EBS (see below)") and not expands("SDK", "an SDK upgrade")


def test_every_acronym_is_known_in_the_glossary_or_expanded_at_its_first_use():
    """In reading order (the README, then 00 to 07), the first unit that uses an acronym spells it
    out, unless the glossary defines it or a PyTorch engineer knows it (KNOWN_ACRONYMS)."""
    known = KNOWN_ACRONYMS | glossary_words()
    seen, unexplained = set(), []
    for path in READING_ORDER:
        for index, text in enumerate(units(path)):
            for acronym in sorted(acronyms(text) - seen - known):
                if not expands(acronym, text):
                    unexplained.append(f"{acronym} ({path.name}, unit {index})")
            seen |= acronyms(text)
    assert not unexplained, ("acronyms neither known, in the glossary, nor spelled out at their first "
                             f"use: {unexplained}: expand each where it first appears, e.g. "
                             "'EFA (Elastic Fabric Adapter)'")

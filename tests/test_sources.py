"""docs/sources.md is the one home for cited Neuron facts: every Neuron documentation URL the
workbook shows (README, docs, notebooks, helpers, the scripts) is pinned to a release and is one
of the sources listed there."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from mnist_mlp.common.paths import REPO_ROOT

SOURCES = REPO_ROOT / "docs" / "sources.md"
NEURON_DOCS = re.compile(r"https?://awsdocs-neuron\.readthedocs-hosted\.com[^\s)\"'<>`\]\\|]*")
PINNED = re.compile(r"https://awsdocs-neuron\.readthedocs-hosted\.com/en/v\d+\.\d+\.\d+/")
# Where the workbook cites: the learner's pages, the instructor's, and the code that prints.
CITING = ("README.md", "docs/*.md", "notebooks/*.md", "notebooks/*.ipynb", "helpers/**/*.py",
          "mnist_mlp/*.py")


def _strings_in_python(text: str) -> list[str]:
    """Every string a Python file spells, with module-level string constants substituted where
    they are added to or formatted into another string (DOCS + "tools/x.html", f"{CACHING}: …"),
    since that is how the helpers build their URLs."""
    tree = ast.parse(text)
    names: dict[str, str] = {}

    def value(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return names.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = value(node.left), value(node.right)
            return None if left is None or right is None else left + right
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    parts.append(value(part.value) or " ")  # unknown: breaks the URL there
                else:
                    parts.append(value(part) or "")
            return "".join(parts)
        return None

    for node in tree.body:  # module constants, in order (later ones may use earlier ones)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            found = value(node.value)
            if found is not None:
                names[node.targets[0].id] = found
    return [s for node in ast.walk(tree) if (s := value(node)) is not None]


def neuron_urls(text: str, python: bool = False) -> set[str]:
    """The Neuron documentation URLs in a text, without #fragments."""
    texts = _strings_in_python(text) if python else [text]
    return {url.split("#", 1)[0].rstrip(".,;:") for t in texts for url in NEURON_DOCS.findall(t)}


def notebook_text(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells)


def cited_urls() -> dict[str, set[str]]:
    """URL -> the files that cite it."""
    found: dict[str, set[str]] = {}
    for pattern in CITING:
        for path in sorted(REPO_ROOT.glob(pattern)):
            if ".venv" in path.parts or path == SOURCES:
                continue
            if path.suffix == ".ipynb":
                urls = neuron_urls(notebook_text(path))
            else:
                urls = neuron_urls(path.read_text(), python=path.suffix == ".py")
            for url in urls:
                found.setdefault(url, set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def listed_sources(text: str) -> set[str]:
    """The URLs in docs/sources.md's table rows (the source column), without #fragments."""
    urls = set()
    for line in text.splitlines():
        if line.startswith("|"):
            urls |= neuron_urls(line)
    return urls


def problems(cited: dict[str, set[str]], listed: set[str]) -> list[str]:
    out = []
    for url, files in sorted(cited.items()):
        where = ", ".join(sorted(files))
        if not PINNED.match(url):
            out.append(f"{url} (in {where}) is not pinned to a release: use /en/vX.Y.Z/, "
                       "never /en/latest/")
        elif PINNED.fullmatch(url):
            continue  # a release's root, from which code builds page URLs: not a citation
        elif url not in listed:
            out.append(f"{url} (in {where}) is not in docs/sources.md: add a row with the "
                       "claim it supports and the sentence it quotes")
    return out


def test_a_made_up_page_is_caught_unpinned_or_unlisted():
    readme = ("See [caching](https://awsdocs-neuron.readthedocs-hosted.com/en/latest/a.html) and "
              "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/b.html#part, and "
              "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/c.html.")
    code = ('DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/"\n'
            'PAGE = DOCS + "d.html"\nnote = f"{DOCS}e.html: quoted"\n')
    sources = ("| claim | source | quote |\n|---|---|---|\n"
               "| b | https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/b.html#x | \"…\" |\n"
               "| d | https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/d.html | \"…\" |\n")
    cited = {url: {"README.md"} for url in neuron_urls(readme)}
    for url in neuron_urls(code, python=True):
        cited.setdefault(url, set()).add("helpers/x.py")
    found = problems(cited, listed_sources(sources))
    assert len(found) == 3, found
    assert "/en/latest/a.html (in README.md) is not pinned" in found[0]
    assert "/en/v2.31.0/c.html (in README.md) is not in docs/sources.md" in found[1]
    assert "/en/v2.31.0/e.html (in helpers/x.py) is not in docs/sources.md" in found[2]


def test_python_urls_built_from_a_root_constant_are_found():
    code = ('ROOT = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/"\n'
            'GUIDE = (ROOT + "tools/"\n         "neuron-ls.html")\n')
    assert "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/tools/neuron-ls.html" in (
        neuron_urls(code, python=True))


def test_sources_table_has_claim_source_and_quote_columns():
    text = SOURCES.read_text()
    rows = [line for line in text.splitlines() if line.startswith("|") and "http" in line]
    assert rows, "docs/sources.md has no table rows with a source URL"
    for row in rows:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        assert len(cells) >= 3 and all(cells[:3]), f"a row needs claim | source | quote: {row}"


def _sources_text() -> str:
    return SOURCES.read_text() if SOURCES.is_file() else ""


@pytest.mark.parametrize("problem", problems(cited_urls(), listed_sources(_sources_text()))
                         or [None])
def test_every_neuron_url_the_workbook_cites_is_pinned_and_listed(problem):
    assert problem is None, problem

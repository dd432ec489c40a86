"""docs/architecture.md read as data, and the modules it describes.

The page is the one list of packages: its package table (each package's "may import" cell), its
layer diagram, the table of modules that change global state when imported and the table of how
a process starts. tests/test_architecture.py holds the code to all of them; tests/test_startup.py
imports every runtime module the page does not name as an exception. A table or diagram this
cannot read is an error that says which, not a silently empty list.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "architecture.md"
# The product's import graph: every module under these. tests/ (the trn1 double in
# tests/trn1_double/ among it) is not part of it; deploy/ is checked apart (it only imports).
PRODUCT_ROOTS = ("mnist_mlp", "helpers")
STANDARD_LIBRARY = "the standard library"


class PageError(ValueError):
    """docs/architecture.md is not in the shape this reader expects."""


def sections(text: str) -> dict[str, str]:
    """{"## heading": body} for every second-level heading."""
    parts = re.split(r"^(## .+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def section(text: str, starts: str) -> str:
    found = [body for head, body in sections(text).items() if head.startswith(starts)]
    if len(found) != 1:
        raise PageError(f"docs/architecture.md needs one section headed {starts!r}; found {len(found)}")
    return found[0]


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table in `text`, each as rows of {header: cell}."""
    found, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-| :]+\|$", lines[i + 1]):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip("|").split("|")]
                if len(cells) != len(header):
                    raise PageError(f"a table row with {len(cells)} cells under {len(header)} "
                                    f"headers: {lines[i]!r}")
                rows.append(dict(zip(header, cells, strict=True)))
                i += 1
            found.append(rows)
        else:
            i += 1
    return found


def table_with(text: str, column: str) -> list[dict[str, str]]:
    found = [t for t in tables(text) if t and column in t[0]]
    if len(found) != 1:
        raise PageError(f"expected one table with a {column!r} column; found {len(found)}")
    return found[0]


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def dotted(name: str) -> str:
    """`helpers/show/` or `helpers/show` -> helpers.show; `mnist_mlp/train.py` -> mnist_mlp.train."""
    name = name.strip().strip("/")
    return (name[:-3] if name.endswith(".py") else name).replace("/", ".")


@dataclass
class Page:
    packages: list[str]                    # dotted, in the table's order
    may_import: dict[str, set[str]]        # package -> packages of the workbook it may import
    used_by: dict[str, set[str]]           # package -> the packages its "used by" cell names
    third_party: dict[str, set[str]]       # package -> import names, for rows that name them
    layers: dict[str, int]
    arrows: dict[str, set[str]]            # the diagram's arrows, names resolved
    import_exceptions: list[str]           # modules that change global state when imported
    long_lived_starters: list[str]         # the modules that start a child that runs beside us
    waiting_starters: list[str]            # the modules that run a command and wait for it
    deploy_imports: set[str]               # what the page says deploy/ imports

    def lookup(self, short: str) -> list[str]:
        name = dotted(short)
        return [p for p in self.packages if p == name or p.endswith("." + name)]

    def resolve(self, short: str) -> str:
        """`launch` or `helpers.launch` -> helpers.launch (a package the page lists)."""
        found = self.lookup(short)
        if len(found) != 1:
            raise PageError(f"{short!r} names no one package of the page's table ({self.packages})")
        return found[0]


def _may_import(cell: str, page: Page) -> tuple[set[str], set[str]]:
    workbook = {page.resolve(name) for name in backticked(cell)}
    others = set()
    for item in re.split(r",|\band\b", re.sub(r"`[^`]*`", "", cell)):
        item = item.strip()
        if item == STANDARD_LIBRARY:
            others.add(STANDARD_LIBRARY)
        elif item:
            others.add(item.lower().replace("-", "_"))  # a distribution -> its import name
    return workbook, others


def _layers(text: str, page: Page) -> None:
    block = re.search(r"```\n(layer .*?)```", section(text, "## What imports what"), re.DOTALL)
    if not block:
        raise PageError("the section 'What imports what' needs a ``` block of `layer N` lines")
    layer = None
    for line in block.group(1).splitlines():
        found = re.match(r"^(?:layer\s+(\d+))?\s+([\w.]+)\s*(?:→\s*(.+))?$", line)
        if not found:
            raise PageError(f"a layer line this cannot read: {line!r}")
        if found.group(1) is not None:
            layer = int(found.group(1))
        package = page.resolve(found.group(2))
        page.layers[package] = layer
        targets = [t.strip() for t in (found.group(3) or "").split(",") if t.strip()]
        page.arrows[package] = {page.resolve(t) for t in targets}


def read_page(path: Path = PAGE) -> Page:
    text = path.read_text(encoding="utf-8")
    packages_table = table_with(section(text, "## The packages"), "may import")
    page = Page([], {}, {}, {}, {}, {}, [], [], [], set())
    page.packages = [dotted(backticked(row["package"])[0]) for row in packages_table]
    for row in packages_table:
        package = dotted(backticked(row["package"])[0])
        workbook, others = _may_import(row["may import"], page)
        page.may_import[package] = workbook
        if others:
            page.third_party[package] = others
    for i, row in enumerate(packages_table):  # "every package below", or the packages it names
        below = set(page.packages[i + 1:]) if "every package below" in row["used by"] else set()
        named = {p for name in backticked(row["used by"]) for p in page.lookup(name)}
        page.used_by[page.packages[i]] = below | named
    _layers(text, page)

    rules = section(text, "## Two rules")
    imports = table_with(rules, "what importing it does")
    page.import_exceptions = [dotted(m) for row in imports for m in backticked(row["module"])]
    starts = table_with(rules, "started by")
    for row in starts:
        modules = [dotted(m) for m in backticked(row["in"])]
        if "child_process.start" in row["started by"]:
            page.long_lived_starters = modules
        elif "subprocess.run" in row["started by"]:
            page.waiting_starters = modules
    if not page.long_lived_starters or not page.waiting_starters:
        raise PageError("the process table needs a `child_process.start` row and a `subprocess.run` row")

    deploy = [p for p in re.split(r"\n\s*\n", text) if p.startswith("`deploy/`")]
    if len(deploy) != 1:
        raise PageError("expected one paragraph that starts with `deploy/`")
    page.deploy_imports = {dotted(m) for m in backticked(deploy[0])
                           if m.startswith(tuple(f"{root}." for root in PRODUCT_ROOTS))}
    return page


def module_files(roots=PRODUCT_ROOTS, base: Path = REPO_ROOT) -> dict[str, Path]:
    """{dotted module name: file} for every .py under `roots` (a package by its own name)."""
    found = {}
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found

"""What docs/sources.md and the workbook's own docstrings say about the workbook is what its
code does: every repository path they name exists, every module, function or constant they name
by its dotted name (helpers.setup.core_holders.CORE_RULE) resolves, every name a sources row
pairs with a file (`helpers/setup/core_holders.py`, `BUSY_CORE_MESSAGES`) is in that file, and
the variables a row says a file sets are set there."""
from __future__ import annotations

import ast
import re

from tests.paths import REPO_ROOT

SOURCES = REPO_ROOT / "docs/sources.md"
PACKAGES = ("mnist_mlp", "helpers")
REPO_PATH = re.compile(r"`((?:mnist_mlp|helpers|tests|deploy|notebooks|docs|benchmarks)/[\w/.-]+\.(?:py|md|json|ipynb|sh|yaml|sbatch))`")
DOTTED = re.compile(r"\b((?:mnist_mlp|helpers)(?:\.[A-Za-z_]\w*)+)")
PAIRED = re.compile(r"`((?:mnist_mlp|helpers|tests)/[\w/.-]+\.py)`,? `([A-Za-z_]\w+)`")
SETS = re.compile(r"`((?:mnist_mlp|helpers)/[\w/.-]+\.py)` sets (?:it|`(\w+)`)")


def docstrings() -> dict[str, str]:
    """Every module, class and function docstring of the workbook's packages, by where it is."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in [tree, *ast.walk(tree)]:
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        found[f"{path.relative_to(REPO_ROOT)}:{getattr(node, 'name', '')}"] = doc
    return found


TEXTS = {"docs/sources.md": SOURCES.read_text(), **docstrings()}


def _names(tree: ast.AST) -> dict[str, ast.AST | None]:
    """The names a module or class body defines (functions, classes, assignments, imports), and
    in a package's __init__ the names its lazy exports list (string constants)."""
    names: dict[str, ast.AST | None] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
        elif isinstance(node, (ast.If, ast.Try)):
            names.update(_names(node))
    if isinstance(tree, ast.ClassDef):  # dataclass fields and properties are body names too
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.setdefault(node.value, None)  # lazy_exports' lists, __all__
    return names


def resolves(dotted: str) -> bool:
    """A dotted name as a module file, or a name defined in the longest module prefix (read, not
    imported: importing the workbook's modules costs seconds of torch)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO_ROOT.joinpath(*parts[:cut])
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not path.is_file():
            continue
        node: ast.AST | None = ast.parse(path.read_text())
        for attr in parts[cut:]:
            names = _names(node) if node is not None else {}
            if attr not in names and not (base.is_dir() and (base / f"{attr}.py").exists()):
                return False
            node = names.get(attr)
        return True
    return False


def test_every_repository_path_named_exists():
    missing = {where: path for where, text in TEXTS.items() for path in REPO_PATH.findall(text)
               if not (REPO_ROOT / path).exists()}
    assert missing == {}


def test_every_dotted_name_resolves():
    names = {(where, name.rstrip(".")) for where, text in TEXTS.items() for name in DOTTED.findall(text)}
    assert len(names) > 40  # the docstrings do name the workbook's own pieces (a regex that finds none fails here)
    assert sorted((where, name) for where, name in names if not resolves(name)) == []


def test_a_name_a_sources_row_pairs_with_a_file_is_in_it():
    pairs = PAIRED.findall(TEXTS["docs/sources.md"])
    assert pairs
    assert [(path, name) for path, name in pairs if name not in (REPO_ROOT / path).read_text()] == []


def test_a_variable_a_sources_row_says_a_file_sets_is_set_there():
    rows = [line for line in TEXTS["docs/sources.md"].splitlines() if SETS.search(line)]
    assert rows
    for row in rows:
        path, name = SETS.search(row).groups()
        name = name or re.findall(r"`(NEURON_\w+)=", row)[0]  # "sets it": the row's variable
        code = (REPO_ROOT / path).read_text()
        assert re.search(rf"\b{name}\b", code), (path, name)

"""docs/architecture.md kept true, reading the page alone: the import graph measured with `ast`
over every module of mnist_mlp/ and helpers/ (imports inside functions count too) against the
page's package table and layers; each package's modules against the page's lists; the modules
over 300 lines against the page's table of why; the modules that change global state when
imported and the modules that start processes against the page's two tables. The package list
comes from the page (tests/architecture_page.py).
"""
from __future__ import annotations

import ast
import functools
import graphlib
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from tests.architecture_page import PAGE as PAGE_PATH
from tests.architecture_page import (
    PRODUCT_ROOTS,
    STANDARD_LIBRARY,
    backticked,
    module_files,
    read_page,
    section,
    table_with,
)
from tests.paths import REPO_ROOT

LONG_MODULE_LINES = 300  # a module longer than this is named on the page with why
PAGE = read_page()
PAGE_TEXT = PAGE_PATH.read_text(encoding="utf-8")
MODULES = module_files()

# Calls that start a process. Long-lived: the child runs beside us (it must die with us);
# waiting: the call returns when the child has ended.
LONG_LIVED_CALLS = {"subprocess.Popen", "psutil.Popen", "os.fork", "os.forkpty", "os.popen",
                    "os.posix_spawn", "os.posix_spawnp", "pty.fork", "pty.spawn",
                    "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
                    "multiprocessing.Process", "concurrent.futures.ProcessPoolExecutor"}
LONG_LIVED_PREFIXES = ("os.spawn", "os.exec")
WAITING_CALLS = {"subprocess.run", "subprocess.call", "subprocess.check_call",
                 "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput",
                 "os.system"}
# Libraries whose use starts processes: nbclient and nbconvert run a notebook in a kernel they
# start and shut down before returning.
WAITING_LIBRARIES = {"nbclient", "nbconvert", "jupyter_client"}
LONG_LIVED_LIBRARIES = {"multiprocessing"}


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


@functools.cache
def lazy_export_map(package: str) -> dict[str, str]:
    """name -> submodule for a package whose __init__ exports names lazily
    (mnist_mlp.common.exports.lazy_exports(__name__, {submodule: [names]}))."""
    if not is_package(package):
        return {}
    for node in ast.walk(parse(MODULES[package])):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports"
                and len(node.args) == 2):
            return {name: f"{package}.{sub}" for sub, names in ast.literal_eval(node.args[1]).items()
                    for name in names}
    return {}


def imported_names(module: str, tree: ast.Module) -> list[tuple[str, int]]:
    """(absolute module name, line) for each import anywhere in the module: `from a import b`
    gives a.b when that is a module of ours, else a."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = module.split(".") if is_package(module) else module.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                lazy = lazy_export_map(base).get(alias.name) if base in MODULES else None
                found.append((sub if sub in MODULES else lazy or base, node.lineno))
    return found


def package_of(module: str) -> str | None:
    owners = [p for p in PAGE.packages if module == p or module.startswith(p + ".")]
    return max(owners, key=len) if owners else None


def measured_edges() -> dict[tuple[str, str], list[str]]:
    """{(importer package, imported package): ["file:line", ...]} between different packages."""
    edges = defaultdict(list)
    for module, path in MODULES.items():
        source = package_of(module)
        for name, line in imported_names(module, parse(path)):
            target = package_of(name)
            if source and target and target != source:
                edges[source, target].append(f"{path.relative_to(REPO_ROOT)}:{line}")
    return dict(edges)


EDGES = measured_edges()


def test_the_page_lists_its_packages_once_and_its_diagram_matches_its_table():
    assert len(PAGE.packages) == len(set(PAGE.packages)), PAGE.packages
    assert set(PAGE.layers) == set(PAGE.packages), "every package in the table is in one layer"
    assert PAGE.arrows == PAGE.may_import, "the diagram's arrows are the table's 'may import' cells"
    for package in PAGE.packages:
        assert Path(REPO_ROOT, *package.split("."), "__init__.py").is_file(), f"{package} is no package"


def test_every_module_belongs_to_a_package_on_the_page():
    homeless = [m for m in MODULES if package_of(m) is None]
    # A folder that only holds the page's packages (helpers/) is no package itself: it imports nothing.
    for module in homeless:
        assert any(p.startswith(module + ".") for p in PAGE.packages), \
            f"{module} is in no package of docs/architecture.md's table: add a row, or move it"
        assert imported_names(module, parse(MODULES[module])) == [], f"{module} imports something"


def test_the_code_imports_exactly_what_the_page_allows():
    allowed = {(a, b) for a, targets in PAGE.may_import.items() for b in targets}
    unsaid = {edge: where for edge, where in EDGES.items() if edge not in allowed}
    assert not unsaid, ("imports docs/architecture.md does not allow (add them to the 'may import' "
                        "cell and the diagram, or remove them):\n"
                        + "\n".join(f"{a} -> {b}: {', '.join(w)}" for (a, b), w in sorted(unsaid.items())))
    unused = sorted(allowed - set(EDGES))
    assert not unused, f"the page allows imports no module makes (remove them from the page): {unused}"


def test_each_package_is_used_by_the_packages_its_row_says():
    for package in PAGE.packages:
        importers = {a for a, b in EDGES if b == package}
        assert PAGE.used_by[package] == importers, (f"{package}'s 'used by' cell names packages "
                                                    f"{sorted(PAGE.used_by[package])}; "
                                                    f"{sorted(importers)} import it")


def test_no_cycle_and_every_import_points_to_a_lower_layer():
    graph = defaultdict(set)
    for source, target in EDGES:
        graph[source].add(target)
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError, naming the cycle
    upward = [(a, b) for a, b in EDGES if PAGE.layers[b] >= PAGE.layers[a]]
    assert not upward, f"imports that do not point to a lower layer: {upward}"


def test_the_runtime_never_imports_helpers_and_only_the_libraries_its_row_names():
    for package, allowed in PAGE.third_party.items():
        for module, path in MODULES.items():
            if package_of(module) != package:
                continue
            for name, line in imported_names(module, parse(path)):
                top = name.split(".")[0]
                where = f"{path.relative_to(REPO_ROOT)}:{line}"
                if package_of(name) is None:
                    assert top not in PRODUCT_ROOTS, f"{where} imports {name}, above {package}"
                if top in PRODUCT_ROOTS or (STANDARD_LIBRARY in allowed
                                            and top in sys.stdlib_module_names):
                    continue
                assert top in allowed, f"{where} imports {top}, which {package}'s row does not name"
    runtime = [p for p in PAGE.packages if p.split(".")[0] == "mnist_mlp"]
    assert runtime and all(p in PAGE.third_party for p in runtime), \
        "the runtime's row names the libraries it may import"
    upward = [(a, b) for a, b in EDGES if a.split(".")[0] == "mnist_mlp" and b.split(".")[0] == "helpers"]
    assert not upward, f"the runtime imports helpers: {upward}"


def page_module_lists() -> dict[Path, list[str]]:
    """{folder: the module names its bullet in the page's module section gives}, glosses left out."""
    lists = {}
    for line in section(PAGE_TEXT, "## The modules").splitlines():
        found = re.match(r"^- `([\w/]+/)`: (.*)$", line)
        if found:
            plain = re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", found.group(2))  # (glosses), nested too
            lists[Path(REPO_ROOT, found.group(1))] = backticked(plain)
    return lists


def test_the_page_names_every_module_of_each_package():
    lists = page_module_lists()
    folders = sorted(p.parent for root in PRODUCT_ROOTS for p in (REPO_ROOT / root).rglob("__init__.py")
                     if p.parent != REPO_ROOT / "helpers")
    assert sorted(lists) == folders, "docs/architecture.md lists the modules of exactly these folders"
    for folder, named in lists.items():
        present = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
        present |= {f"{p.parent.name}/" for p in folder.glob("*/__init__.py")}
        where = folder.relative_to(REPO_ROOT)
        assert sorted(set(named) - present) == [], f"the page names modules {where} does not hold"
        assert sorted(present - set(named)) == [], f"the page leaves out modules of {where}"


def test_a_module_over_300_lines_is_named_on_the_page_with_why():
    files = list(MODULES.values()) + sorted((REPO_ROOT / "deploy").glob("*.py"))
    long = {str(f.relative_to(REPO_ROOT)) for f in files
            if len(f.read_text(encoding="utf-8").splitlines()) > LONG_MODULE_LINES}
    named = {backticked(row["module"])[0]: row for row in table_with(section(PAGE_TEXT, "## The modules"),
                                                                     "why its one job is long")}
    assert sorted(long - set(named)) == [], "over 300 lines: merge by job, or say on the page why it may grow"
    assert sorted(set(named) - long) == [], "the page names these as long; they are not: drop their rows"
    assert all(row["why its one job is long"] for row in named.values())


def module_level_calls(tree: ast.Module) -> set[str]:
    """Names of the functions called by the module's own statements (not inside a def or class,
    nor under `if __name__ == "__main__":`)."""
    called = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(statement, ast.If) and "__main__" in ast.unparse(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                called.add(ast.unparse(node.func).split(".")[-1])
    return called


def test_the_scripts_the_page_names_are_the_only_modules_that_choose_a_backend_when_imported():
    choosing = sorted(m for m, path in MODULES.items()
                      if module_level_calls(parse(path)) & {"select_xla_backend", "select_backend"})
    assert choosing == sorted(PAGE.import_exceptions)
    for module, path in MODULES.items():
        for name, line in imported_names(module, parse(path)):
            assert name not in PAGE.import_exceptions, (f"{path.relative_to(REPO_ROOT)}:{line} "
                                                        f"imports {name}, which chooses the "
                                                        f"backend when imported")


def qualified_calls(tree: ast.Module) -> set[str]:
    """Dotted names of everything called, through the module's import aliases."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0])
                            for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            aliases.update({(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names})
    calls = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            head, _, rest = ast.unparse(node.func).partition(".")
            calls.add(".".join(filter(None, [aliases.get(head, head), rest])))
    return calls


def process_starts(path: Path) -> tuple[set[str], set[str]]:
    """(long-lived starts, waiting starts) the module makes."""
    tree = parse(path)
    calls = qualified_calls(tree)
    libraries = {name.split(".")[0] for name, _ in imported_names("", tree)}
    long_lived = {c for c in calls if c in LONG_LIVED_CALLS or c.startswith(LONG_LIVED_PREFIXES)}
    waiting = (calls & WAITING_CALLS) | (libraries & WAITING_LIBRARIES)
    return long_lived | (libraries & LONG_LIVED_LIBRARIES), waiting


def all_starts() -> dict[str, tuple[set[str], set[str]]]:
    files = dict(MODULES)
    files.update({f"deploy.{p.stem}": p for p in sorted((REPO_ROOT / "deploy").glob("*.py"))})
    return {module: process_starts(path) for module, path in files.items()}


STARTS = all_starts()


def test_every_child_that_runs_beside_us_starts_through_child_process():
    starters = {m: sorted(long) for m, (long, _) in STARTS.items() if long}
    assert sorted(starters) == sorted(PAGE.long_lived_starters), (
        "only the module the page names starts a process that runs beside us (it dies with its "
        f"parent): use mnist_mlp.common.child_process.start instead of {starters}")


def notebook_entry_modules() -> set[str]:
    solutions = sorted((REPO_ROOT / "notebooks" / "solutions").glob("*.py"))
    sources = [p.read_text(encoding="utf-8") for p in solutions]
    for notebook in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                code = "".join(cell["source"])
                sources.append("\n".join(line for line in code.splitlines()
                                         if not line.lstrip().startswith(("%", "!"))))
    return {name for source in sources for name, _ in imported_names("", ast.parse(source))}


def reachable_from_notebooks() -> set[str]:
    """Every module of ours a notebook kernel can import: the notebooks' and the solutions'
    imports, closed over our modules' imports (their parent packages included)."""
    seen, todo = set(), list(notebook_entry_modules())
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            module = ".".join(parts[:i])
            if module in MODULES and module not in seen:
                seen.add(module)
                todo += [n for n, _ in imported_names(module, parse(MODULES[module]))]
    return seen


def test_only_command_line_tools_no_notebook_imports_run_a_command_and_wait():
    waiting = sorted(m for m, (_, wait) in STARTS.items() if wait)
    assert waiting == sorted(PAGE.waiting_starters), \
        {m: sorted(STARTS[m][1]) for m in set(waiting) ^ set(PAGE.waiting_starters) if m in STARTS}
    kernel_side = reachable_from_notebooks()
    assert len(kernel_side) > 20 and "helpers.setup.notebook_kernel" in kernel_side
    assert not kernel_side & set(waiting), (
        "a notebook kernel can import these, whose children would outlive a killed kernel: "
        f"start them with mnist_mlp.common.child_process.start instead: {sorted(kernel_side & set(waiting))}")


def test_deploy_imports_what_the_page_says_and_nothing_imports_deploy():
    measured = {name for path in (REPO_ROOT / "deploy").glob("*.py")
                for name, _ in imported_names("deploy", parse(path))
                if name.split(".")[0] in PRODUCT_ROOTS}
    assert measured == PAGE.deploy_imports
    for module, path in MODULES.items():
        assert not [n for n, _ in imported_names(module, parse(path)) if n.split(".")[0] == "deploy"]

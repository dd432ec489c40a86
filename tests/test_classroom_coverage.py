"""The classroom cache covers every graph: a pass through a workbook (its kernels, the scripts
they start, the exercise solutions) records the fingerprint of each compiled graph's HLO, and
another execution must compile none outside that record. Real kernels (nbclient, nbconvert),
real torch_xla on the CPU stand-in, a small workbook written here so the test stays cheap."""
import json
import sys

import nbformat
import pytest

from helpers.classroom.graph_log import GraphDumps, hlo_dump_env, read_fingerprints
from helpers.classroom.graph_record import describe_uncovered, read_record, uncovered
from helpers.classroom.notebook_pass import build_classroom_cache, check_pass, graph_pass, record_notebooks
from helpers.inside.lazy_metrics import graph_hashes
from helpers.launch.processes import run_streaming
from tests.browser.conftest import kernel_env

# Kernels and processes that start torch_xla; on one xdist worker, so the module-scoped pass
# (`recorded`) runs once, not once per worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("classroom-coverage")]

SET_UP = "import os\nos.environ['PJRT_DEVICE'] = 'CPU'"
KERNEL_GRAPH = """import torch, torch_xla
x = torch.arange(6.0, device=torch_xla.device())
print((x * 2).sum().item())"""
# A cell launching a script the way notebook 03 does: it asks for PT_XLA_DEBUG_LEVEL itself and
# reads the graph hashes from the output (the HLO dump, set by XLA_FLAGS, is inherited).
CHILD = ("import torch, torch_xla; y = torch.ones(5, device=torch_xla.device()); "
         "print((y + 1).sum().item())")
SCRIPT_GRAPH = f"""import sys
from helpers.launch.processes import run_streaming
from helpers.inside.lazy_metrics import graph_hashes
from helpers.inside.lazy_metrics import graph_hashes
run = run_streaming([sys.executable, "-c", {CHILD!r}], timeout=300, env={{"PJRT_DEVICE": "CPU", "PT_XLA_DEBUG_LEVEL": "1"}})
assert len(graph_hashes(run.lines)) == 1, run.lines"""
# The solution, a script, traces the kernel's graph too, and one of its own.
SOLUTION = f"""{SET_UP}
{KERNEL_GRAPH}
z = torch.ones(3, 3, device=torch_xla.device())
print((z @ z).sum().item())
"""
NEW_CELL = """z = torch.ones(7, device=torch_xla.device())
print((z - 1).sum().item())"""


def write_notebook(path, *cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


@pytest.fixture(scope="module")
def workbook(tmp_path_factory):
    repo = tmp_path_factory.mktemp("classroom") / "workbook"
    (repo / "notebooks" / "solutions").mkdir(parents=True)
    write_notebook(repo / "notebooks" / "01_kernel.ipynb", SET_UP, KERNEL_GRAPH)
    write_notebook(repo / "notebooks" / "02_script.ipynb", SCRIPT_GRAPH)
    (repo / "notebooks" / "solutions" / "01_kernel.py").write_text(SOLUTION)
    return repo


@pytest.fixture(scope="module")
def recorded(workbook):
    """`make notebooks` on the small workbook: executed in place, then its solution; recorded."""
    said = []
    assert record_notebooks(workbook, on_line=said.append) == 0, said
    return workbook / "notebooks" / "classroom_graphs.json", "\n".join(said)


def test_make_notebooks_executes_in_place_and_records_kernel_script_and_solution_graphs(workbook, recorded):
    path, said = recorded
    executed = nbformat.read(workbook / "notebooks" / "01_kernel.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in executed.cells[1].outputs)
    assert "30.0" in printed.split(), f"saved with its outputs: {printed!r}"
    record = read_record("xla-cpu", path)
    assert set(record.by_item) == {"01_kernel.ipynb", "02_script.ipynb", "solutions/01_kernel.py"}
    kernel, script, solution = (record.by_item[k] for k in sorted(record.by_item))
    assert len(kernel) == len(script) == 1 and len(solution) == 2, record.by_item
    assert kernel < solution, "the same graph in a kernel and in a script: one fingerprint"
    assert kernel != script, "the script a cell started has its own graph, recorded"
    assert json.loads(path.read_text())["backends"]["xla-cpu"]["graphs"] == 3
    assert f"{path}: 3 distinct graphs on xla-cpu, from 3 notebooks and solutions" in said


def test_another_process_and_machine_setting_give_the_same_fingerprints(workbook, recorded, tmp_path):
    # The script notebook 02 started, run again alone: another process, cwd and CPU ISA. torch_xla's
    # graph hash (its output, saved in the notebook) changes with the ISA; the HLO does not.
    path, _ = recorded
    env = {"PJRT_DEVICE": "CPU", "PT_XLA_DEBUG_LEVEL": "1",
           **hlo_dump_env(tmp_path / "dumps", {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"})}
    run = run_streaming([sys.executable, "-c", CHILD], timeout=300, env=env, cwd=tmp_path,
                        on_line=lambda line: None)
    assert read_fingerprints(tmp_path / "dumps") == read_record("xla-cpu", path).by_item["02_script.ipynb"]
    saved = nbformat.read(workbook / "notebooks" / "02_script.ipynb", as_version=4)
    in_notebook = graph_hashes("".join(o.get("text", "") for o in saved.cells[0].outputs))
    assert len(in_notebook) == 1 and len(graph_hashes(run.lines)) == 1
    assert graph_hashes(run.lines) != in_notebook, "the ISA flag took effect"


def test_a_students_pass_elsewhere_compiles_nothing_outside_the_record(workbook, recorded, tmp_path):
    path, _ = recorded
    record = read_record("xla-cpu", path)
    # Another checkpoint dir and dump dir, PJRT_DEVICE not preset, another ISA: a student's machine.
    learner = graph_pass(workbook, tmp_path / "learner", solutions=[],
                         notebooks=[workbook / "notebooks" / "01_kernel.ipynb"],
                         extra_env={"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"}, on_line=lambda line: None)
    assert learner.graphs == {"01_kernel.ipynb": record.by_item["01_kernel.ipynb"]}
    said = []
    assert check_pass(learner, record, path, on_line=said.append) == 0
    assert "compiles 0" in said[0]


def test_the_classroom_cache_says_how_many_graphs_it_recorded_and_that_they_are_covered(workbook, tmp_path):
    said = []
    record = tmp_path / "classroom_graphs.json"
    assert build_classroom_cache(tmp_path / "classroom.tar.gz", repo=workbook, backend="xla-cpu",
                                 workdir=tmp_path / "classroom", solutions=[],
                                 notebooks=[workbook / "notebooks" / "01_kernel.ipynb"],
                                 record=record, on_line=said.append) == 0
    said = "\n".join(said)
    assert "1 distinct graphs compiled by the whole pass" in said
    assert f"Recorded in {record} (xla-cpu): the record covers all 1." in said
    assert "no archive is written" in said and not (tmp_path / "classroom.tar.gz").exists()
    assert read_record("xla-cpu", record).by_item.keys() == {"01_kernel.ipynb"}


def test_a_new_cell_with_a_new_graph_fails_naming_its_notebook(recorded, tmp_path):
    """What tests/test_notebook_graphs.py does after the session's run: the kernel environment of
    the browser test and its nbclient fallback, one label per notebook."""
    from nbclient import NotebookClient

    path, _ = recorded
    (tmp_path / "notebooks").mkdir()
    changed = tmp_path / "notebooks" / "01_kernel.ipynb"
    write_notebook(changed, SET_UP, KERNEL_GRAPH, NEW_CELL)
    dumps = GraphDumps(tmp_path / "dumps")
    notebook = nbformat.read(changed, as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=300,
                   resources={"metadata": {"path": str(changed.parent)}}).execute(
        env=kernel_env(changed.parent, dumps))
    dumps.collect(changed.name)
    record = read_record("xla-cpu", path)
    missing = uncovered(dumps.by_label, record)
    assert list(missing) == ["01_kernel.ipynb"] and len(missing["01_kernel.ipynb"]) == 1
    said = describe_uncovered(missing, record, path)
    assert said.startswith("01_kernel.ipynb compiled 1 graph(s) not in classroom_graphs.json "
                           "(xla-cpu, 3 graphs)")
    assert "run `make notebooks`" in said and "`make classroom-cache`" in said

"""The classroom cache covers every graph: a pass through a workbook (its kernels, the scripts
they start, the exercise solutions) logs each compiled graph's hash, and a student's pass must
compile none outside the classroom pass's set. Real kernels (nbclient), real torch_xla on the CPU
stand-in, a small workbook written here so the test stays cheap."""
import json
import sys

import nbformat
import pytest

from helpers.classroom import build_classroom_cache, check_pass, graph_pass, read_graphs_record
from helpers.graph_log import (GRAPH_LOG_ENV, child_debug_env, coverage, graph_log_env,
                               read_graph_log)
from helpers.processes import run_streaming

pytestmark = pytest.mark.e2e  # kernels and processes that start torch_xla

KERNEL_GRAPH = """import torch, torch_xla
x = torch.arange(6.0, device=torch_xla.device())
print((x * 2).sum().item())"""
# A cell launching a script the way notebook 03 does: it asks for PT_XLA_DEBUG_LEVEL itself and
# reads the hashes from the output, which must not be diverted into the graph log.
SCRIPT_GRAPH = """import sys
from helpers.processes import run_streaming
from helpers.xla_metrics import graph_hashes
child = "import torch, torch_xla; y = torch.ones(5, device=torch_xla.device()); print((y + 1).sum().item())"
run = run_streaming([sys.executable, "-c", child], timeout=300, env={"PJRT_DEVICE": "CPU", "PT_XLA_DEBUG_LEVEL": "1"})
assert len(graph_hashes(run.lines)) == 1, run.lines"""
SOLUTION = """import torch, torch_xla
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
    write_notebook(repo / "notebooks" / "01_kernel.ipynb", "import os\nos.environ['PJRT_DEVICE'] = 'CPU'",
                   KERNEL_GRAPH)
    write_notebook(repo / "notebooks" / "02_script.ipynb", SCRIPT_GRAPH)
    (repo / "notebooks" / "solutions" / "01_kernel.py").write_text(
        "import os\nos.environ['PJRT_DEVICE'] = 'CPU'\n" + SOLUTION)
    return repo


@pytest.fixture(scope="module")
def classroom(workbook):
    said = []
    code = build_classroom_cache(workbook / "build" / "classroom.tar.gz", repo=workbook,
                                 backend="xla-cpu", workdir=workbook / "build" / "classroom",
                                 on_line=said.append)
    assert code == 0, said
    return workbook / "build" / "classroom" / "graphs.json", "\n".join(said)


def test_the_classroom_pass_records_kernel_script_and_solution_graphs(classroom):
    record, said = classroom
    by_notebook = json.loads(record.read_text())["by_notebook"]
    assert set(by_notebook) == {"01_kernel.ipynb", "02_script.ipynb", "01_kernel.py"}
    assert all(by_notebook.values()), f"each compiled at least one graph: {by_notebook}"
    everything = read_graphs_record(record)
    assert everything == set().union(*map(set, by_notebook.values()))
    assert len(everything) >= 3, "the kernel's, the script's and the solution's graphs differ"
    assert f"{len(everything)} distinct graphs compiled by the whole pass" in said
    assert f"the archive would hold all {len(everything)}" in said and "no archive is written" in said


def test_a_second_pass_in_another_environment_compiles_nothing_new(workbook, classroom, tmp_path):
    record, _ = classroom
    # Another checkpoint dir, another log location, PJRT_DEVICE not preset: a student's machine.
    learner = graph_pass(workbook, tmp_path / "learner", solutions=False, on_line=lambda line: None)
    instructor = json.loads(record.read_text())["by_notebook"]
    for name, graphs in learner.graphs.items():
        assert graphs == set(instructor[name]), f"{name}: the same graphs again (deterministic)"
    said = []
    assert check_pass(record, tmp_path / "learner" / "graph-logs", on_line=said.append) == 0
    assert "compiles 0" in said[0]


def test_a_new_cell_with_a_new_graph_is_caught(workbook, classroom, tmp_path):
    record, _ = classroom
    changed = tmp_path / "workbook"
    (changed / "notebooks").mkdir(parents=True)
    write_notebook(changed / "notebooks" / "01_kernel.ipynb", "import os\nos.environ['PJRT_DEVICE'] = 'CPU'",
                   KERNEL_GRAPH, NEW_CELL)
    graph_pass(changed, tmp_path / "learner", solutions=False, on_line=lambda line: None)
    said = []
    assert check_pass(record, tmp_path / "learner" / "graph-logs", on_line=said.append) == 1
    assert said[0].startswith("1 of the 2 graphs compiled by this pass are not in the classroom cache"), said
    assert "make classroom-cache" in said[0]


def test_graph_log_env_collects_a_child_and_leaves_an_explicit_reader_its_output(tmp_path, monkeypatch):
    log = tmp_path / "graphs.log"
    env = graph_log_env(log)
    assert env["PT_XLA_DEBUG_LEVEL"] == "1" and env[GRAPH_LOG_ENV] == env["PT_XLA_DEBUG_FILE"]
    child = "import torch, torch_xla; print((torch.ones(2, device=torch_xla.device()) * 3).sum().item())"
    quiet = run_streaming([sys.executable, "-c", child], timeout=300, env={"PJRT_DEVICE": "CPU", **env},
                          on_line=lambda line: None)
    assert not any("Graph Hash" in line for line in quiet.lines), "the analysis went to the file"
    logged = read_graph_log(log)
    assert len(logged) == 1
    monkeypatch.setenv(GRAPH_LOG_ENV, str(log))
    monkeypatch.setenv("PT_XLA_DEBUG_FILE", str(log))
    assert child_debug_env({"PT_XLA_DEBUG_LEVEL": "1"}) == ({"PT_XLA_DEBUG_FILE": ""}, str(log))
    assert child_debug_env({}) == ({}, None)
    assert read_graph_log(tmp_path / "absent.log") == set()
    missing = coverage({"a", "b"}, {"a"})
    assert not missing.ok and missing.missing == {"b"} and "1 of the 2" in missing.describe()

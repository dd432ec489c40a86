"""Every graph this session's one execution of the notebooks compiled (their kernels, the scripts
they start, their torchrun workers) is in the committed record, notebooks/classroom_graphs.json:
the classroom cache built from the same pass holds it, so a student compiles none. A new cell
that traces a new graph fails here, naming its notebook. Runs in the notebook group, after the
notebooks (it takes `executed_notebooks`)."""
from __future__ import annotations

import pytest

from helpers.checks.expected import expected
from helpers.classroom.graph_record import (
    RECORD,
    REGENERATE,
    describe_uncovered,
    kernel_backend,
    read_record,
    uncovered,
)
from helpers.classroom.notebook_pass import workbook_notebooks
from tests.browser.conftest import kernel_env
from tests.paths import REPO_ROOT


def test_every_graph_the_notebooks_compiled_is_in_the_record(executed_notebooks, lab_notebooks,
                                                              notebook_graphs, request):
    for path in workbook_notebooks(REPO_ROOT):
        executed_notebooks(path.name)  # each ran (in order), once per session
    notebook_graphs.collect("after the last Run All")
    # On the trn1 double XLA still compiles for the CPU, so its graphs are the stand-in's, but for
    # a torchrun worker's: the double all-reduces outside the step's graph (its journal's
    # reduced-outside-graph), which neither a trn1 nor the stand-in's gloo group does. Those
    # notebooks' graphs are left out, named; on a trn1 the record is the Neuron backend's.
    backend = kernel_backend(kernel_env(lab_notebooks))
    split = set()
    if request.getfixturevalue("trn1_instance") is not None:
        on_double = request.getfixturevalue("workbook_on_trn1")
        split = {path.name for path in workbook_notebooks(REPO_ROOT) if on_double[path.name[:2]].split_processes}
        print(f"left out: {sorted(split)} (the double all-reduced outside the graph there)")
        assert split == {"04_torchrun_data_parallel.ipynb", "06_inside_a_run.ipynb"}, split  # torchrun's
    record = read_record(backend)
    if record is None and expected(backend).graph_record is None:
        pytest.skip(f"no {backend} record in {RECORD.name}, and none is needed: "
                    f"{expected(backend).source('graph_record')}")
    assert record is not None, f"{RECORD} holds no {backend} record: {REGENERATE}"
    traced = {label: graphs for label, graphs in notebook_graphs.by_label.items() if label not in split}
    print("\n".join(f"{label}: {len(graphs)} graphs" for label, graphs in traced.items() if graphs))
    missing = uncovered(traced, record)
    assert not missing, describe_uncovered(missing, record)

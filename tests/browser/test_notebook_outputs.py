"""Every code cell's committed outputs against this session's one execution of its notebook (the
browser run's saved file; nbclient's where no browser is found outside CI), compared by nbval's
own comparison with tests/nbval_sanitize.cfg: see tests/notebook_outputs.py for the markers and
the Neuron mode, as the execution runs on the trn1 double (tests/browser/conftest.py), or on a
trn1's NeuronCores. The session ends with a count of the cells compared and not compared, and why."""
from __future__ import annotations

import pytest

from tests.notebook_outputs import code_cells, compare_cell, read_notebook, read_sanitizer
from tests.paths import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SANITIZER = REPO_ROOT / "tests" / "nbval_sanitize.cfg"
CELLS = [(path.name, index) for path in NOTEBOOKS
         for index in range(len(code_cells(read_notebook(path))))]


@pytest.fixture(scope="session")
def sanitizer():
    return read_sanitizer(SANITIZER)


@pytest.fixture(scope="session")
def committed():
    return {path.name: code_cells(read_notebook(path)) for path in NOTEBOOKS}


@pytest.mark.parametrize("notebook, index", CELLS, ids=[f"{n}::cell {i}" for n, i in CELLS])
def test_output_matches_the_committed_one(executed_notebooks, committed, sanitizer, notebook,
                                          index, record_property):
    executed = code_cells(read_notebook(executed_notebooks(notebook)))
    assert len(executed) == len(committed[notebook]), f"{notebook}: the run has other cells"
    # The execution ran on the trn1 double (or on this host's NeuronCores): the Neuron mode.
    record_property("notebook_output", compare_cell(committed[notebook][index], executed[index],
                                                    sanitizer, "neuron"))

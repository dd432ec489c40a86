"""The whole workbook on the trn1 double (tests/trn1_double), as one learner's trn1.2xlarge: the
test session's one execution of the notebooks (JupyterLab's, tests/browser/conftest.py), with the
kernels the learner leaves open (tests/trn1_double/workbook_pass.py: KEPT_OPEN).

Every check() in the notebooks is judged against the Neuron values of helpers/checks/expected.py
(the backend is `neuron` there); one the double cannot decide prints "? … undecided" and the
notebook runs on. Nothing from this pass is shown as measured on Trainium; its outputs are
compared with the committed ones in the Neuron mode (tests/notebook_outputs.py).
"""
import re

import pytest

from tests.trn1_double import UNDECIDABLE_CHECKS

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("notebooks")]


@pytest.fixture(scope="module")
def workbook_on_trn1(workbook_on_trn1):
    for r in workbook_on_trn1.values():  # shown with -s, and in the closing note
        print(f"trn1 double: {r.name}: {r.seconds:.0f} s, {len(r.compiled)} neuronx-cc runs "
              f"({r.split_compiles} with the all-reduce outside the graph; stated "
              f"{r.stated_compiles}), {len(r.cached)} read from the cache "
              f"({len(r.cached_without_metadata)} without the debug metadata asked for), "
              f"{r.refused} refused, {len(r.undecided)} undecided, "
              f"{'failed' if r.error else 'ran to its end'}")
        print(f"trn1 double: {r.name}: compiled by {r.compiled_by}")
        for line in r.undecided:
            print(f"trn1 double: {r.name}: {line}")
        if r.split_compiles:
            print(f"trn1 double: {r.name}: ? neuronx-cc runs undecided here: {r.split_compiles} of "
                  f"{len(r.compiled)} by processes whose all-reduce the double ran outside the step's "
                  f"graph (journal: reduced-outside-graph); a trn1's count ({r.stated_compiles}) is "
                  f"the argument in helpers/classroom/time_budget.py")
        for line in r.platform_lines + r.wrong_platform_lines:
            print(f"trn1 double: {r.name}: {'ok' if line in r.platform_lines else 'WRONG'}: {line}")
        for line in r.undecided_platform_lines:
            print(f"trn1 double: {r.name}: ? {line}")
        if r.open_when_started:
            print(f"trn1 double: {r.name}: started beside {r.open_when_started}; "
                  f"setup() with a core-holding kernel open: {(r.refused_by_open_kernels or '-')[-300:]}")
    return workbook_on_trn1


def test_every_notebook_runs_to_its_end(workbook_on_trn1):
    assert sorted(workbook_on_trn1) == [f"0{i}" for i in range(8)]
    assert {n: r.error[-600:] for n, r in workbook_on_trn1.items() if r.error} == {}


def test_only_the_checks_the_double_cannot_decide_are_undecided(workbook_on_trn1):
    lines = [line for r in workbook_on_trn1.values() for line in r.undecided]
    assert lines and all(line.startswith(tuple(f"? {label}" for label in UNDECIDABLE_CHECKS))
                         for line in lines), lines
    assert workbook_on_trn1["05"].undecided  # and 05 ran on past it (test above)


def test_no_process_is_refused_a_core(workbook_on_trn1):
    assert {n: r.refused for n, r in workbook_on_trn1.items() if r.refused} == {}


def test_each_notebook_runs_the_compiler_as_often_as_its_introduction_says(workbook_on_trn1):
    """Every notebook whose introduction states a count, except where the double's count is not
    a trn1's: compiles by a process whose all-reduce the double ran outside the graph (the
    journal's reduced-outside-graph) are undecided, never matched by construction. Splitting a
    step only adds graphs, so there the double's count still may not fall short of the stated."""
    stated = {n: r for n, r in workbook_on_trn1.items() if r.stated_compiles is not None}
    assert set(stated) == {"02", "03", "04", "05", "06", "07"}
    undecided = {n for n, r in stated.items() if r.split_compiles}
    assert undecided <= {"04", "06"}, undecided  # the notebooks that run torchrun
    assert {n: (r.stated_compiles, len(r.compiled)) for n, r in stated.items()
            if n not in undecided and r.stated_compiles != len(r.compiled)} == {}
    assert {n: (r.stated_compiles, len(r.compiled)) for n, r in stated.items()
            if n in undecided and r.stated_compiles > len(r.compiled)} == {}


def test_every_platform_line_is_what_the_journal_says_its_process_held(workbook_on_trn1):
    """The cores a kernel or script says it takes or sees, against the reservations the double's
    runtime journaled for it; and no process set its cores after torch-neuronx's set-up read them."""
    assert {n: r.set_after_read for n, r in workbook_on_trn1.items() if r.set_after_read} == {}
    assert {n: r.wrong_platform_lines for n, r in workbook_on_trn1.items() if r.wrong_platform_lines} == {}
    assert sum(len(r.platform_lines) for r in workbook_on_trn1.values()) >= 8  # lines were judged
    judged = [line for r in workbook_on_trn1.values() for line in r.platform_lines + r.undecided_platform_lines]
    assert any(line.startswith("'New graphs: ") for line in judged), judged  # the scripts' own line, read


def test_no_graph_asked_for_debug_metadata_is_read_from_a_cache_without_it(workbook_on_trn1):
    """The Explorer page: "Previously-cached NEFFs don't have this metadata"."""
    assert {n: r.cached_without_metadata for n, r in workbook_on_trn1.items()
            if r.cached_without_metadata} == {}


def test_kernels_left_open_run_beside_the_next_notebooks_as_the_prose_allows(workbook_on_trn1):
    """00's, 01's and 04's kernels, left running, hold no core: the notebooks after them run to
    their end (test above) with nothing refused, and no setup() was met by a holder."""
    assert workbook_on_trn1["02"].open_when_started == ["00", "01"]
    assert workbook_on_trn1["05"].open_when_started == ["00", "04"]
    assert {n: r.refused_by_open_kernels for n, r in workbook_on_trn1.items()
            if r.refused_by_open_kernels and n != "03"} == {}


def test_a_core_holding_kernel_left_open_is_named_by_the_next_notebooks_setup(workbook_on_trn1):
    """02 still open when 03 starts: 03's setup() stops before touching the device (the journal:
    no core reserved meanwhile), naming 02's kernel by its pid, saying why its cores cannot be
    read (setup() pinned them after that kernel started), not that it pinned none, and how to
    shut it down; the learner does, and 03 runs to its end."""
    refusal = workbook_on_trn1["03"].refused_by_open_kernels
    assert workbook_on_trn1["03"].open_when_started == ["00", "02"]
    assert refusal and "NeuronCoresHeld" in refusal, refusal
    # "pid <n>, a Jupyter kernel": the comma ends the pid, so a longer pid holding its digits cannot pass
    assert f"pid {workbook_on_trn1['02'].kernel_pid}, a Jupyter kernel" in refusal and "shut" in refusal, refusal
    assert "a notebook kernel chooses its cores after it starts" in refusal and "not pinned" not in refusal
    assert workbook_on_trn1["03"].reserved_while_refused == []
    assert workbook_on_trn1["03"].error is None


# "<date> <time>:  <pid>  [INFO]: Using a cached neff at <cache>/neuronxcc-…/MODULE_…/model.neff. …"
CACHE_HIT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: +\d+ +\[INFO\]: Using a cached neff at "
                       r"\S+/neuronxcc-[^/\s]+/MODULE_[^/\s]+/model\.neff\. ")


def test_notebook_03s_second_run_shows_the_cache_hit_through_its_summary(workbook_on_trn1):
    """03's second run prints only its summary (helpers.launch.processes.summary_only); its lesson
    on a trn1 is the compiler wrapper's cache hit, which the double prints in Neuron 2.29's form
    ("[INFO]:", after a date and a pid: tests/platform_output/corpus.yaml)."""
    shown = [line for line in workbook_on_trn1["03"].outputs.splitlines() if "Using a cached neff" in line]
    assert shown and all(CACHE_HIT.match(line) for line in shown), workbook_on_trn1["03"].outputs[-3000:]

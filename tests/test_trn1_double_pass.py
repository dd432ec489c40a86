"""The whole workbook on the trn1 double (tests/trn1_double), as one learner's trn1.2xlarge.

Every check() in the notebooks is judged against the Neuron values of helpers/checks/expected.py
(the backend is `neuron` there). Nothing from this pass is compared with the committed outputs
(they are the stand-in's) or shown as measured on Trainium.
"""
import pytest

from helpers.classroom.notebook_pass import workbook_notebooks
from tests.paths import REPO_ROOT as REPO
from tests.trn1_double import build_instance
from tests.trn1_double.workbook_pass import run_workbook

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("trn1-double")]


@pytest.fixture(scope="module")
def workbook_on_trn1(tmp_path_factory):
    work = tmp_path_factory.mktemp("trn1")
    env = {**build_instance(work / "instance"), "CHECKPOINT_DIR": str(work / "checkpoints")}
    import os

    env = {**{k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}, **env}
    results = run_workbook(workbook_notebooks(REPO), work / "instance", env)
    for r in results:  # shown with -s, and in the closing note
        print(f"trn1 double: {r.name}: {r.seconds:.0f} s, {len(r.compiled)} neuronx-cc runs "
              f"(stated {r.stated_compiles}), {len(r.cached)} read from the cache, "
              f"{r.refused} refused, {'failed' if r.error else 'ran to its end'}")
    return {r.name[:2]: r for r in results}


# What the double cannot decide, by notebook: the check that meets it, and why. Compute is XLA
# on the CPU, which rounds to nearest: the NeuronCore's stochastic rounding
# (NEURON_RT_STOCHASTIC_ROUNDING_EN, docs/sources.md) is hardware the double does not have, so
# the BF16 recipe that relies on it stalls here as it would on any round-to-nearest device.
DOUBLE_CANNOT_DECIDE = {
    "05": "largest test-accuracy gap of the three BF16 recipes to FP32",
}


def test_every_notebook_runs_to_its_end(workbook_on_trn1):
    assert sorted(workbook_on_trn1) == [f"0{i}" for i in range(8)]
    failed = {n: r.error for n, r in workbook_on_trn1.items() if r.error}
    unexplained = {n: e[-600:] for n, e in failed.items()
                   if n not in DOUBLE_CANNOT_DECIDE or DOUBLE_CANNOT_DECIDE[n] not in e}
    assert not unexplained, unexplained


def test_no_process_is_refused_a_core(workbook_on_trn1):
    assert {n: r.refused for n, r in workbook_on_trn1.items() if r.refused} == {}


# 06: the double counts 6 compiler runs where the stand-in's graph record (the source of the
# figure its introduction states) counts 4 new graphs; the two count eager mode's per-operation
# graphs differently, and which of them a trn1's neuronx-cc sees is not settled here.
COUNTS_NOT_COMPARABLE = {"06"}


def test_each_notebook_runs_the_compiler_as_often_as_its_introduction_says(workbook_on_trn1):
    stated = {n: (r.stated_compiles, len(r.compiled)) for n, r in workbook_on_trn1.items()
              if r.stated_compiles is not None and n not in COUNTS_NOT_COMPARABLE
              and not r.error}  # a notebook stopped early compiled only part of its graphs
    assert {"02", "03", "04", "07"} <= set(stated)
    assert all(s == c for s, c in stated.values()), stated

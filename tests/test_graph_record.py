"""The graph fingerprint, the dump directory and the committed record, without starting XLA
(tests/test_classroom_coverage.py runs them on real kernels and scripts)."""
import json

import pytest

from helpers.classroom.graph_log import GraphDumps, hlo_dump_env, hlo_fingerprint, read_fingerprints
from helpers.classroom.graph_record import (
    RECORD,
    GraphRecord,
    describe_uncovered,
    kernel_backend,
    read_record,
    uncovered,
    write_record,
)

# A module as XLA dumps it (`module_0001.SyncTensorsGraph.19.before_optimizations.txt`).
MODULE = """HloModule SyncTensorsGraph.19, entry_computation_layout={()->(f32[])}

%AddComputation.13 (x.14: f32[], y.15: f32[]) -> f32[] {
  %x.14 = f32[] parameter(0)
  %y.15 = f32[] parameter(1)
  ROOT %add.16 = f32[] add(%x.14, %y.15)
}

ENTRY %SyncTensorsGraph.19 () -> (f32[]) {
  %constant.3 = f32[] constant(1)
  %broadcast.7 = f32[5]{0} broadcast(%constant.3), dimensions={}
  %constant.11 = f32[] constant(0)
  %reduce.17 = f32[] reduce(%broadcast.7, %constant.11), dimensions={0}, to_apply=%AddComputation.13
  ROOT %tuple.18 = (f32[]) tuple(%reduce.17)
}
"""


def test_the_fingerprint_ignores_the_module_name_and_nothing_else():
    renamed = MODULE.replace("SyncTensorsGraph.19", "SyncTensorsGraph.212")
    assert renamed != MODULE and hlo_fingerprint(renamed) == hlo_fingerprint(MODULE)
    other_shape = MODULE.replace("f32[5]", "f32[6]")
    assert hlo_fingerprint(other_shape) != hlo_fingerprint(MODULE)
    other_constant = MODULE.replace("constant(1)", "constant(2)")
    assert hlo_fingerprint(other_constant) != hlo_fingerprint(MODULE)
    assert len(hlo_fingerprint(MODULE)) == 16
    with pytest.raises(ValueError, match="not an HLO module dump"):
        hlo_fingerprint("define void @main()")


def test_the_dump_flags_come_after_the_callers_own(tmp_path):
    flags = hlo_dump_env(tmp_path, {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"})["XLA_FLAGS"].split()
    assert flags[0] == "--xla_cpu_max_isa=SSE4_2"
    assert f"--xla_dump_to={tmp_path.resolve()}" in flags and "--xla_dump_hlo_as_text" in flags
    # --xla_dump_large_constants would change torch_xla's own graph hashes: never set.
    assert not any("large_constants" in f for f in flags)
    assert hlo_dump_env(tmp_path, {})["XLA_FLAGS"].startswith("--xla_dump_to=")


def test_collect_files_the_dumps_under_a_label_and_empties_the_directory(tmp_path):
    dumps = GraphDumps(tmp_path / "dumps")
    stamp = "1795462088516920.module_0000.SyncTensorsGraph.19"
    (dumps.directory / f"{stamp}.before_optimizations.txt").write_text(MODULE)
    (dumps.directory / f"{stamp}.ir-no-opt.ll").write_text("; LLVM IR")
    assert dumps.collect("01_a.ipynb") == {hlo_fingerprint(MODULE)}
    assert list(dumps.directory.iterdir()) == [], "read, then deleted"
    assert dumps.collect("02_b.ipynb") == set()
    assert dumps.by_label == {"01_a.ipynb": {hlo_fingerprint(MODULE)}, "02_b.ipynb": set()}
    assert read_fingerprints(tmp_path / "absent") == set()


def test_the_record_is_kept_per_backend_and_a_partial_run_keeps_the_rest(tmp_path):
    path = tmp_path / "classroom_graphs.json"
    assert read_record("xla-cpu", path) is None
    write_record(GraphRecord("xla-cpu", "2.9.0", {"01_a.ipynb": {"aa"}, "solutions/01_a.py": {"aa", "bb"},
                                                  "09_gone.ipynb": {"zz"}}), path)
    write_record(GraphRecord("neuron", "2.9.0", {"01_a.ipynb": {"nn"}}), path)
    again = write_record(GraphRecord("xla-cpu", "2.9.0", {"01_a.ipynb": {"cc"}}), path,
                         keep=["01_a.ipynb", "solutions/01_a.py"])
    assert again.by_item == {"01_a.ipynb": {"cc"}, "solutions/01_a.py": {"aa", "bb"}}
    stored = json.loads(path.read_text())
    stand_in = stored["backends"]["xla-cpu"]
    assert stand_in["graphs"] == 3 and "09_gone.ipynb" not in stand_in["by_item"], "gone: dropped"
    assert read_record("neuron", path).graphs == {"nn"}, "the other backend's record stays"
    assert read_record("xla-cpu", path).graphs == {"aa", "bb", "cc"}


def test_an_uncovered_graph_is_named_with_its_notebook_and_the_fix(tmp_path):
    record = GraphRecord("xla-cpu", "2.9.0", {"01_a.ipynb": {"aa"}, "solutions/01_a.py": {"bb"}})
    traced = {"01_a.ipynb": {"aa", "bb"}, "02_b.ipynb": {"aa", "ee"}, "outside Run All": set()}
    missing = uncovered(traced, record)
    assert missing == {"02_b.ipynb": {"ee"}}, "a graph of the solution covers the notebook too"
    said = describe_uncovered(missing, record, tmp_path / "classroom_graphs.json")
    assert said.startswith("02_b.ipynb compiled 1 graph(s) not in classroom_graphs.json "
                           "(xla-cpu, 2 graphs): ee")
    assert "`make notebooks`" in said and "`make classroom-cache`" in said


def test_the_kernels_backend_follows_pjrt_device_and_the_record_lives_beside_the_notebooks():
    assert kernel_backend({"PJRT_DEVICE": "CPU"}) == "xla-cpu"
    assert RECORD.parent.name == "notebooks" and RECORD.name == "classroom_graphs.json"

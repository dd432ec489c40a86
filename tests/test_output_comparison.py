"""The notebook output comparison (tests/notebook_outputs.py) and the scan for machine-dependent
values (tests/machine_values.py): each shown to catch what it is for, then run on the committed
notebooks. No notebook is executed here (make test-quick runs these)."""
from __future__ import annotations

import copy

import nbformat
import pytest

from tests.machine_values import find_varying, fixed_text
from tests.notebook_outputs import OutputMismatch, code_cells, compare_cell, read_notebook, read_sanitizer
from tests.paths import REPO_ROOT

SANITIZER = read_sanitizer(REPO_ROOT / "tests" / "nbval_sanitize.cfg")
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
new_code_cell, new_output = nbformat.v4.new_code_cell, nbformat.v4.new_output


def cell(source, *outputs, count=1, tags=(), backend_output=None):
    c = new_code_cell(source, outputs=list(outputs))
    c.execution_count = count
    if tags:
        c.metadata["tags"] = list(tags)
    if backend_output:
        c.metadata["backend_output"] = backend_output
    return c


def stdout(text):
    return new_output("stream", name="stdout", text=text)


def test_the_same_outputs_compare_equal_and_a_changed_one_is_caught():
    committed = cell("print(x)", stdout("accuracy 0.97 on 10000 images\n"))
    assert compare_cell(committed, copy.deepcopy(committed), SANITIZER) == "compared"
    run = cell("print(x)", stdout("accuracy 0.97 on 9999 images\n"))
    with pytest.raises(OutputMismatch, match="9999"):
        compare_cell(committed, run, SANITIZER)


def test_a_real_committed_cell_with_one_changed_character_fails():
    # The notebooks' own outputs, one digit changed in an output no sanitizer touches.
    nb = read_notebook(REPO_ROOT / "notebooks" / "01_cpu_training.ipynb")
    for original in code_cells(nb):
        texts = [o for o in original.outputs if o.output_type == "stream"]
        if texts and "784" in texts[0].text:
            break
    else:
        pytest.fail("no committed stdout in notebook 01 mentions 784 (the model's input size)")
    assert compare_cell(original, copy.deepcopy(original), SANITIZER) == "compared"
    changed = copy.deepcopy(original)
    first = next(o for o in changed.outputs if o.output_type == "stream")
    first.text = first.text.replace("784", "785", 1)
    with pytest.raises(OutputMismatch, match="785"):
        compare_cell(changed, original, SANITIZER)


def test_what_varies_by_run_is_sanitized_not_failed():
    committed = cell("train()", stdout("Final loss is 0.1234\nTrain throughput (iter/sec): 812.3\n"))
    run = cell("train()", stdout("Final loss is 0.0987\nTrain throughput (iter/sec): 640.0\n"))
    assert compare_cell(committed, run, SANITIZER) == "compared"


def test_forms_a_saved_notebook_may_take_compare_equal():
    # JupyterLab and nbclient save streams split differently, other execution counts and widget
    # model ids; none of that is an output change.
    widget = {"application/vnd.jupyter.widget-view+json": {"model_id": "a" * 32, "version_major": 2,
                                                           "version_minor": 0},
              "text/plain": "CacheBrowser: 12 entries"}
    committed = cell("b", stdout("one\ntwo\n"),
                     new_output("execute_result", data=widget, execution_count=7))
    other = copy.deepcopy(widget)
    other["application/vnd.jupyter.widget-view+json"]["model_id"] = "b" * 32
    run = cell("b", stdout("one\n"), stdout("two\n"),
               new_output("execute_result", data=other, execution_count=3), count=3)
    assert compare_cell(committed, run, SANITIZER) == "compared"


def test_markers_decide_what_is_compared():
    ignored = cell("print(t)", stdout("12:00\n"), tags=["nbval-ignore-output"])
    assert compare_cell(ignored, cell(ignored.source, stdout("13:00\n")), SANITIZER) == (
        "not compared: nbval-ignore-output")
    backend = cell("print(n)", stdout("1 graph\n"), backend_output="graphs compiled per run")
    on_neuron = cell(backend.source, stdout("2 graphs\n"))
    with pytest.raises(OutputMismatch):
        compare_cell(backend, on_neuron, SANITIZER, mode="stand-in")
    assert compare_cell(backend, on_neuron, SANITIZER, mode="neuron") == (
        "not compared: backend output (graphs compiled per run)")


def test_the_neuron_mode_leaves_the_compilers_stderr_lines_out_and_compares_the_rest():
    """The wrapper's lines in both public forms (tests/platform_output/corpus.yaml: 2024's from an
    aws-k8s-tester log, 2026's from the NKI quickstart's)."""
    committed = cell("loss = step()", stdout("loss 2.30\n"))
    for line in ("2024-08-06 21:20:41.000072:  1185  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at "
                 "/var/tmp/neuron-compile-cache/neuronxcc-2.14.227.0+2d4f85be/MODULE_14849917709285030391"
                 "+d41d8cd9/model.neff. Exiting with a successfully compiled graph.\n",
                 "2026-03-30 22:54:03.000603:  349295  [INFO]: Compilation Successfully Completed for "
                 "model.MODULE_142812826281072284+70e3f644.hlo_module.pb\n"):
        compiling = cell(committed.source, new_output("stream", name="stderr", text=line), stdout("loss 2.30\n"))
        assert compare_cell(committed, compiling, SANITIZER, mode="neuron") == "compared"
        with pytest.raises(OutputMismatch):
            compare_cell(committed, compiling, SANITIZER, mode="stand-in")
        other_loss = cell(committed.source, compiling.outputs[0], stdout("loss 2.31\n"))
        with pytest.raises(OutputMismatch):
            compare_cell(committed, other_loss, SANITIZER, mode="neuron")


def test_a_cell_that_raised_fails_even_when_its_output_is_not_compared():
    error = new_output("error", ename="AssertionError", evalue="new_graphs == 2", traceback=[])
    for marks in ({"tags": ["nbval-ignore-output"]}, {"backend_output": "counts"}):
        with pytest.raises(OutputMismatch, match="raised AssertionError"):
            compare_cell(cell("x", **marks), cell("x", error, **marks), SANITIZER, mode="neuron")
    expected = cell("x", error, tags=["nbval-raises-exception"])
    assert compare_cell(expected, copy.deepcopy(expected), SANITIZER) == "compared"


def notebook_with(*outputs, source="print(result)", tags=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell(source, *outputs, tags=tags)]
    return nb


def test_the_scan_catches_a_raw_hash_and_a_tmp_path_that_no_sanitizer_covers():
    # A graph hash as torch_xla prints it (it differs by CPU ISA) and a mkdtemp directory.
    text = ("graph 6d05d052b1e4c2a7f7e0a3d9c1b2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0\n"
            "saved to /tmp/tmpk2j4l9x1/model.pt\n")
    found = {(f.kind, f.text) for f in find_varying(notebook_with(stdout(text)), SANITIZER, hostname="")}
    assert ("hash", "6d05d052b1e4c2a7f7e0a3d9c1b2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0") in found
    assert ("absolute path", "/tmp/tmpk2j4l9x1/model.pt") in found


def test_the_scan_knows_every_kind_before_sanitizing():
    text = ("listening on 127.0.0.1:41235 as pid 4242 at 0x7f3a2c1d9e80, ip-10-0-12-34, "
            "started at 16:20:05, took 3.2 s, in /home/ubuntu/x, from /x/site-packages/y\n")
    found = {f.kind for f in find_varying(notebook_with(stdout(text)), [], hostname="trn1-node")}
    assert found == {"port", "pid", "hex address", "hostname", "timestamp", "duration",
                     "absolute path", "site-packages path"}
    assert {f.kind for f in find_varying(notebook_with(stdout("on trn1-node\n")), [],
                                         hostname="trn1-node")} == {"this machine's hostname"}


def test_the_scan_leaves_what_a_sanitizer_covers_ignored_cells_and_the_codes_own_values():
    covered = stdout("pid 4242 at 0x7f3a2c1d9e80 took 3.2 s\n")
    assert find_varying(notebook_with(covered), SANITIZER, hostname="") == []
    raw = stdout("hash 6d05d052b1e4c2a7f7e0a3d9c1b2e3f4\n")
    assert find_varying(notebook_with(raw, tags=["nbval-ignore-output"]), SANITIZER,
                        hostname="") == []
    assert find_varying(notebook_with(raw), SANITIZER, hostname="",
                        fixed="DEMO = '6d05d052b1e4c2a7f7e0a3d9c1b2e3f4'") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_outputs_hold_nothing_that_varies_between_machines(path):
    found = find_varying(read_notebook(path), SANITIZER, path.name, fixed=FIXED)
    assert not found, (
        "committed outputs hold values that differ between machines; print what the lesson "
        "needs instead, add a narrow section to tests/nbval_sanitize.cfg, or tag the cell "
        "nbval-ignore-output:\n" + "\n".join(str(f)[:300] for f in found[:20]))


FIXED = fixed_text(REPO_ROOT)

"""helpers/checks/expected.py: one place for backend-dependent values, each cited (the stand-in's
measured in tests/test_expected_stand_in.py); and no notebook asserts a backend-dependent quantity
without it (issue 16.1). Starts no XLA runtime: make mutants runs these for each mutant."""
from __future__ import annotations

import ast
import re

import nbformat
import pytest

from helpers.checks.expected import BACKENDS, DOCS, Expected, Fact, add_quantity, expected
from mnist_mlp.common.backend import Backend
from mnist_mlp.common.paths import REPO_ROOT
from mnist_mlp.common.precision import PRECISIONS

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# What an assert may not compare with a literal: these differ between the stand-in and Neuron.
BACKEND_QUANTITY = re.compile(
    r"\bnew_graphs\b|graphs_traced|\blayouts?\b|\.mode\b|gradient_reduce|neuron_cores"
    r"|core_count|cores_visible|visible_neuron_cores|not_loadable|new_entries")
# The brief's patterns that must match no assert line at all.
FORBIDDEN = (re.compile(r"new_graphs.*==\s*\d"), re.compile(r"==\s*[\"']stand-in[\"']"),
             re.compile(r"==\s*\{\s*[\"']xla[\"']\s*\}"))


def test_every_backend_has_every_quantity():
    names = {b: set(expected(b).facts) for b in BACKENDS}
    assert names["neuron"] == names["xla-cpu"] == names["cpu"]
    assert {"train_graphs", "bf16_graphs", "cache_layouts", "precompile_mode", "gradient_reduce",
            "neuron_cores_visible", "kernel_holds_core_after_xla"} <= names["neuron"]


def test_neuron_values_cite_the_pinned_release():
    neuron = expected("neuron")
    for name, fact in neuron.facts.items():
        urls = re.findall(r"https://\S+", fact.source)
        assert urls, f"{name}: no source"
        assert all(u.startswith(DOCS) for u in urls), f"{name}: not pinned to v2.31.0: {urls}"
    assert neuron.inferred("train_graphs") and neuron.source("train_graphs").startswith("inferred")
    assert not neuron.inferred("precompile_mode")


def test_values_differ_where_the_backends_do():
    neuron, stand_in = expected("neuron"), expected("xla-cpu")
    assert stand_in.train_graphs == {1} and neuron.train_graphs == {1, 2}
    assert stand_in.cache_layouts == {"xla"} and "neuronxcc" in neuron.cache_layouts
    assert (stand_in.precompile_mode, neuron.precompile_mode) == ("stand-in", "neuron")
    assert (stand_in.gradient_reduce, neuron.gradient_reduce) == ("gloo", "xla")
    assert 0 in stand_in.neuron_cores_visible and 0 not in neuron.neuron_cores_visible
    assert set(stand_in.bf16_graphs) == set(neuron.bf16_graphs) == set(PRECISIONS)


def test_backend_object_or_name_and_clear_errors():
    backend = Backend("xla-cpu", "test", "2.9.0", "2.9.0", None, 0)
    assert expected(backend) == expected("xla-cpu")
    with pytest.raises(ValueError, match="unknown backend 'gpu': pass a mnist_mlp.common.backend.Backend"):
        expected("gpu")
    with pytest.raises(AttributeError, match="no quantity 'graphs'.*add it, with its source"):
        expected("neuron").graphs  # noqa: B018
    assert expected("neuron").describe("train_graphs").startswith("1 or 2 on neuron (inferred")
    assert expected("xla-cpu").describe("neuron_cores_visible").startswith("0 on xla-cpu")


def test_add_quantity_registers_it_for_every_backend_once():
    add_quantity("test_only_quantity", neuron=Fact(2, DOCS + "x.html"), xla_cpu=Fact(1, "measured"))
    try:
        assert [expected(b).test_only_quantity for b in BACKENDS] == [2, 1, 1]
        with pytest.raises(ValueError, match="already defined"):
            add_quantity("test_only_quantity", neuron=Fact(2, ""), xla_cpu=Fact(1, ""))
    finally:
        for b in BACKENDS:
            expected(b).facts.pop("test_only_quantity")


def assert_lines(path):
    """(cell number among code cells, assert source) for every assert in a notebook."""
    nb = nbformat.read(path, as_version=4)
    code_number = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code_number += 1
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                           for line in cell.source.splitlines())
        try:
            tree = ast.parse(source)
        except SyntaxError as err:
            raise AssertionError(f"{path.name} code cell {code_number} does not parse: {err}") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                yield code_number, ast.get_source_segment(source, node.test)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_backend_dependent_asserts_take_their_values_from_expected(path):
    bypassing = [f"code cell {n}: assert {text}" for n, text in assert_lines(path)
                 if BACKEND_QUANTITY.search(text) and "expect." not in text
                 or any(p.search(text) for p in FORBIDDEN)]
    assert not bypassing, (f"{path.name} asserts backend-dependent values without "
                           "helpers/checks/expected.py (expect = expected(backend); assert x in "
                           "expect.<quantity>):\n" + "\n".join(bypassing))


def test_the_checker_catches_a_literal():
    source = 'assert run.new_graphs == 1\nassert report.mode == "stand-in"\n'
    tests = [ast.get_source_segment(source, n.test) for n in ast.walk(ast.parse(source))
             if isinstance(n, ast.Assert)]
    assert all(BACKEND_QUANTITY.search(t) and "expect." not in t for t in tests)
    assert FORBIDDEN[0].search(tests[0]) and FORBIDDEN[1].search(tests[1])
    assert isinstance(expected("cpu"), Expected)


def test_claims_print_word_for_word():
    """What a notebook prints with describe()/source(): ranges as 'a to b', sets joined with
    'or', a source without 'inferred from' unless the value was inferred."""
    neuron, stand_in = expected("neuron"), expected("xla-cpu")
    assert neuron.describe("neuron_cores_visible").startswith("1 to 128 on neuron (")
    assert stand_in.describe("precompile_mode") == (
        "stand-in on xla-cpu (no neuron_parallel_compile without Neuron: "
        "helpers/cache/precompile.py runs the trial alone)")
    assert neuron.source("precompile_mode") == neuron.facts["precompile_mode"].source
    assert neuron.source("train_graphs") == "inferred from " + neuron.facts["train_graphs"].source


def test_an_unknown_quantity_is_named_with_the_known_ones():
    known = ", ".join(sorted(expected("cpu").facts))
    for ask in (lambda e: e.source("graphs"), lambda e: e.inferred("graphs"),
                lambda e: e.describe("graphs"), lambda e: e.graphs):
        with pytest.raises(AttributeError) as err:
            ask(expected("cpu"))
        assert str(err.value) == (f"helpers.checks.expected has no quantity 'graphs'; known: "
                                  f"{known} (add it, with its source, there)")
    with pytest.raises(ValueError) as err:
        expected("gpu")
    assert str(err.value) == ("unknown backend 'gpu': pass a mnist_mlp.common.backend.Backend or one of "
                              "neuron, xla-cpu, cpu")


def test_expected_values_copy_like_any_value():
    """copy and pickle build the object before its facts are set: asking it for an attribute
    then must be a plain AttributeError, not a crash."""
    import copy
    import pickle

    for backend in BACKENDS:
        assert copy.copy(expected(backend)) == expected(backend)
        assert pickle.loads(pickle.dumps(expected(backend))) == expected(backend)

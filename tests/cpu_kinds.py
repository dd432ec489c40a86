"""The figures the notebooks print from training, made again at one kernel level of this CPU, for
tests/test_cpu_kinds.py: a committed output must read the same on every x86-64 CPU, with AVX-512
kernels or without.

`python -m tests.cpu_kinds --checkpoint-dir DIR` runs, in this one process, the training whose
figures the notebooks' checks print, with the notebooks' arguments: train.py's defaults (notebook
02), train_bf16.py's five precisions for 600 steps (05), train_cpu.py's defaults (01, whose own
loop is the script's), each script's main() as `python mnist_mlp/<script>` would run it. Then it
executes the notebooks' own cells that print those figures (FIGURE_CELLS), as they stand in the
committed notebooks, reading these runs' results where a cell would have started the run
(`run_streaming` does nothing, `load_results` reads DIR), and writes what each printed to
DIR/figures.json. The environment chooses the kernel level: LOWERED_TO_AVX2 lowers an AVX-512
CPU to what a CPU without AVX-512 runs.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import io
import json
import sys
from pathlib import Path

from mnist_mlp.common.paths import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
# What a CPU without AVX-512 runs, on one that has it: PyTorch's own CPU kernels (ATen), the
# oneDNN kernels that PyTorch/XLA's CPU backend calls for its matrix products (without this one,
# train.py's figure stays the AVX-512 one), MKL's BLAS, and XLA's own code generation.
LOWERED_TO_AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}
BF16_STEPS = "600"  # notebook 05's STEPS
# notebook -> the code cells (found by a line of each) that print a figure of training, in the
# order they run; a cell before them that the figures need runs too (05's training cell builds
# `runs`; its fc1 step needs the batch and the device model the cell before it makes).
FIGURE_CELLS = {
    "02_single_core_xla.ipynb": ['xla = load_results()["xla"]'],
    "05_bf16.ipynb": ["runs = {precision: load_results()", 'check("test accuracy FP32 minus',
                      'args = parse_args("notebook 05", [])', "lost[name] = "],
    "01_cpu_training.ipynb": ['check("test accuracy", results.test_accuracy'],
}
# Names a figure cell's imports would bind that this run provides instead.
PROVIDED = {"run_streaming", "load_results"}
# Checks of a figure cell left out, and why: not a figure of training, and not what one process
# running every script measures (its later runs reuse the graphs its earlier ones compiled).
NOT_FIGURES = {"every mode met the new graphs expected here": "graph counts, integers"}


def figure_cells(notebook: str) -> list[tuple[int, str]]:
    """(code cell index, source) of each of the notebook's FIGURE_CELLS in the committed file."""
    import nbformat

    cells = [c for c in nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
             if c.cell_type == "code"]
    found = []
    for line in FIGURE_CELLS[notebook]:
        matches = [(i, c.source) for i, c in enumerate(cells) if line in c.source]
        if len(matches) != 1:
            raise LookupError(f"{notebook}: {len(matches)} code cells hold {line!r}; "
                              f"tests/cpu_kinds.py's FIGURE_CELLS names one")
        found.append(matches[0])
    return found


def left_out(statement: ast.stmt) -> bool:
    """A check of NOT_FIGURES, or an import of nothing but PROVIDED names."""
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return not statement.names
    call = statement.value if isinstance(statement, ast.Expr) else None
    return (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "check"
            and isinstance(call.args[0], ast.Constant) and call.args[0].value in NOT_FIGURES)


def without_provided_imports(source: str) -> ast.Module:
    """The cell's code, its imports of PROVIDED names and its NOT_FIGURES checks left out."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            node.names = [a for a in node.names if (a.asname or a.name) not in PROVIDED]
    tree.body = [n for n in tree.body if not left_out(n)]
    return tree


def run_cells(notebook: str, namespace: dict) -> dict[int, str]:
    """Execute the notebook's figure cells in `namespace`, statement by statement (a failed
    check is printed as its ✗ line and the cell goes on): code cell index -> what it printed."""
    from helpers.checks import CheckFailed

    printed = {}
    for index, source in figure_cells(notebook):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for statement in without_provided_imports(source).body:
                code = compile(ast.Module([statement], []), f"{notebook} cell {index}", "exec")
                try:
                    exec(code, namespace)
                except CheckFailed as failed:
                    print(failed)
        printed[index] = out.getvalue()
    return printed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    directory = parser.parse_args(argv).checkpoint_dir
    into = ["--checkpoint-dir", str(directory)]
    # The XLA stages first: train_cpu.py leaves PyTorch on one thread, as notebook 01 does.
    from mnist_mlp import train, train_bf16
    from mnist_mlp.common import PRECISIONS, mnist_loaders, parse_args

    xm = importlib.import_module("torch_xla.core.xla_model")  # once train chose the device
    # torch.manual_seed leaves the XLA device's random state alone, and a run's torch.rand on the
    # device (bf16-sr's draws) moves it on: each run starts from a fresh process's state.
    fresh_rng = xm.get_rng_state()
    train.main(into)
    for precision in PRECISIONS:
        xm.set_rng_state(fresh_rng)
        train_bf16.main(["--precision", precision, "--steps-this-run", BF16_STEPS, *into])

    import torch

    from helpers.checks import check, expected
    from helpers.show import load_results, text_table
    from mnist_mlp.model import MLP

    provided = {"backend": train.backend, "sys": sys, "torch": torch, "check": check,
                "expected": expected, "MLP": MLP, "PRECISIONS": PRECISIONS,
                "text_table": text_table, "run_streaming": lambda *args, **kwargs: None,
                "load_results": functools.partial(load_results, directory)}
    printed = {}
    for notebook in ("02_single_core_xla.ipynb", "05_bf16.ipynb"):
        printed[notebook] = run_cells(notebook, {"__name__": "__main__", **provided})

    from mnist_mlp import train_cpu

    train_cpu.main(into)
    args = parse_args("notebook 01", [])
    notebook_01 = {"__name__": "__main__", **provided, "args": args,
                   "train_loader": mnist_loaders(args)[0],
                   "results": load_results(directory)["cpu"]}
    printed["01_cpu_training.ipynb"] = run_cells("01_cpu_training.ipynb", notebook_01)
    (directory / "figures.json").write_text(json.dumps(printed, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

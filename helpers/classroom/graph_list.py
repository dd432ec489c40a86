"""The graphs behind each notebook's `neuronx-cc` count: what each graph is, the section it comes
from, whether the classroom archive holds it, and why it is new.

The time budget (time_budget.BUDGET) takes its compile counts from these lists, so a notebook's
introduction and its list cannot disagree; tests/test_time_budget.py holds the lists to the graph
record (notebooks/classroom_graphs.json): per notebook, the listed graphs the stand-in builds that
the archive holds are exactly the record's graphs new to that notebook. A notebook shows its list
with `show_graph_list("02")`, which finds each graph's cell in the notebook itself and names it by
its section's heading (a reader sees headings, not cell numbers). The exercises' graphs show as one
line, their count only: which graphs they are is what the exercises ask.

Words (notebook 02's table): a **new graph** is one this process has not run yet (torch-xla's
UncachedCompile); a **compile** is a `neuronx-cc` run, for a new graph the compile cache lacks; a
**cache hit** loads its NEFF from the cache instead. Each graph listed here is a compile on a
trn1 stepping through 00-07 in order with one shared cache, and no archive.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mnist_mlp.common.paths import REPO_ROOT

BOTH, TRN1_ONLY, STAND_IN_ONLY = "both", "trn1 only", "stand-in only"


@dataclass(frozen=True)
class Graph:
    what: str
    cell: str  # a line of the code cell that builds it: the cell is found in the notebook
    why_new: str
    archive: bool = True  # the classroom archive holds it (a cache hit on a machine that imported it)
    on: str = BOTH  # BOTH, TRN1_ONLY (the stand-in builds other graphs), STAND_IN_ONLY
    optional: bool = False  # in a section headed "## Optional · "


_TRAIN = 'run_streaming([sys.executable, "../mnist_mlp/train.py"], timeout=900)'
_RAGGED, _EX1, _EX2 = "ragged.record(", "check_graph_count(predicted_graphs", "check_recompile_trigger("
_FIRST_RUNS, _BF16 = 'for name in ("first", "second"):', '"../mnist_mlp/train_bf16.py", "--precision"'
_TORCHRUN, _EAGER = "run_2 = run_torchrun(", "torch_xla.experimental.eager_mode(True)"
_FRESH_CACHE = "an empty cache of its own"  # the archive is not in it
_CAPTURE = "debug metadata, its own cache"  # a cached NEFF lacks the metadata

GRAPHS: dict[str, tuple[Graph, ...]] = {
    "00": (),
    "01": (),  # plain PyTorch: no graph
    "02": (
        Graph("the training step, batch 32", 'step0 = recorder.record("step 0")', "the workbook's first graph"),
        Graph("the forward pass, cut off by `loss.item()`", "logged.append(loss.item())",
              "`item()` needs the loss before the step ends"),
        Graph("the training step at batch 16", _RAGGED, "a new batch shape"),
        Graph("`train.py`'s training step", _TRAIN, "the script still holds `output` at the step's end"),
        Graph("`train.py`'s evaluation, batch 1,000", _TRAIN, "no cell evaluated before"),
        Graph("`train.py --device-loader`'s step", '"--device-loader", "--steps-this-run"',
              "`view()` joins the graph"),
        Graph("exercise 1: the step at batch 24", _EX1, "a new batch shape"),
        Graph("exercise 1: the step at batch 12", _EX1, "a new batch shape"),
        *(Graph(f"exercise 2's broken loop, step {i}", _EX2, "`loss_history` grows") for i in range(3)),
    ),
    "03": (
        Graph("`train.py`'s training step", _FIRST_RUNS, _FRESH_CACHE, archive=False),
        Graph("`train.py`'s evaluation", _FIRST_RUNS, _FRESH_CACHE, archive=False),
        Graph("this kernel's step, batch 32", 'recorder.record(f"batch {batch_size}")',
              "no live tensor at `sync()`, unlike 02's"),
        Graph("this kernel's step, batch 64", 'recorder.record(f"batch {batch_size}")', "a new batch shape"),
        Graph("the step at learning rate 1.0", "lr_compiles[lr] =", "1.0 is baked in as a constant"),
    ),
    "04": (
        Graph("the 2-worker step, the all-reduce inside", _TORCHRUN, "`xm.optimizer_step` all-reduces in it",
              on=TRN1_ONLY),
        Graph("the 2-worker step up to the gradients", _TORCHRUN,
              "reading the gradients for gloo ends the graph", on=STAND_IN_ONLY),
        Graph("the update after the gloo average", _TORCHRUN, "the second half of that step",
              on=STAND_IN_ONLY),
        Graph("the final replica checksum", _TORCHRUN, "no earlier run compares replicas"),
    ),
    "05": (
        Graph("`bf16`'s training step", _BF16, "BF16 weights"),
        Graph("`bf16`'s evaluation, shared", _BF16, "BF16 weights"),
        Graph("`bf16-sr`'s emulated stochastic-rounding update", _BF16,
              "a trn1 runs `bf16`'s graph, its NeuronCore rounding stochastically", on=STAND_IN_ONLY),
        Graph("`bf16-master`'s training step", _BF16, "the FP32 master copy"),
        Graph("`autocast`'s training step", _BF16, "its casts; on a trn1 its flags"),
        Graph("`autocast`'s evaluation", _BF16, "its casts; on a trn1 its flags"),
    ),
    "06": (
        *(Graph(f"eager `relu(fc1(x))`, operation {i} of 3", _EAGER, "one graph per operation")
          for i in (1, 2, 3)),
        Graph("the same, as one lazy graph", "lazy = torch.relu(model.fc1(x))", "8 images: a new shape"),
        Graph("`train.py`'s training step", "neuron_explorer.commands(", _CAPTURE, archive=False,
              on=TRN1_ONLY, optional=True),
        Graph("`train.py`'s evaluation", "neuron_explorer.commands(", _CAPTURE, archive=False,
              on=TRN1_ONLY, optional=True),
    ),
    "07": (
        Graph("a step at batch 2048", "device = device_sweep(", "a new batch shape"),
        Graph("a step at batch 512, layers 1024 wide", "device = device_sweep(", "new shapes"),
    ),
}


@dataclass(frozen=True)
class Counts:
    compiles: int  # neuronx-cc runs on a trn1
    compiles_with_archive: int  # of them, those the archive cannot save
    optional_compiles: int  # of them, those in optional sections
    stand_in_new: int  # graphs new to the stand-in's record (notebooks/classroom_graphs.json)


def counts(notebook: str) -> Counts:
    on_trn1 = [g for g in GRAPHS[notebook] if g.on != STAND_IN_ONLY]
    return Counts(len(on_trn1), sum(not g.archive for g in on_trn1), sum(g.optional for g in on_trn1),
                  sum(g.archive and g.on != TRN1_ONLY for g in GRAPHS[notebook]))


def notebook_path(notebook: str, root: Path = REPO_ROOT) -> Path:
    found = sorted((root / "notebooks").glob(f"{notebook}_*.ipynb"))
    if len(found) != 1:
        raise ValueError(f"no single notebook {notebook}_*.ipynb in {root / 'notebooks'}: found {found}")
    return found[0]


def find_cell(cells: list[dict], line: str) -> tuple[int, str]:
    """(index, the level-2 heading above it) of the one code cell whose source holds `line`."""
    heading, found = "", []
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            heading = next((h for h in reversed(re.findall(r"(?m)^## (.+)$", source))), heading)
        elif line in source:
            found.append((index, heading))
    if len(found) != 1:
        raise ValueError(f"{len(found)} code cells hold {line!r}, not one: update "
                         "helpers/classroom/graph_list.py's GRAPHS where the notebook moved it")
    return found[0]


EXERCISES = "Exercises"  # the heading of a notebook's exercises: their graphs are not named


def graph_list(notebook: str, path: Path | None = None) -> str:
    """The list as a notebook shows it: a trn1's graphs under the heading of the section that builds
    each, the exercises' as one line, then those only the stand-in builds."""
    from helpers.show.tables import text_table

    cells = json.loads((path or notebook_path(notebook)).read_text())["cells"]
    c = counts(notebook)
    placed = sorted(((*find_cell(cells, g.cell), g) for g in GRAPHS[notebook]), key=lambda t: t[0])
    rows, sections, stand_in, exercises = [], [], [], []
    for _, heading, graph in placed:
        if graph.on == STAND_IN_ONLY:
            stand_in.append(f"  in \"{heading}\": {graph.what} ({graph.why_new})")
        elif heading == EXERCISES:
            exercises.append(graph)
        else:
            sections.append(heading)
            rows.append([graph.what + (" *" if graph.on == TRN1_ONLY else "")
                         + (" (optional)" if graph.optional else ""),
                         "yes" if graph.archive else "no", graph.why_new])
    if exercises:
        held = {g.archive for g in exercises}
        sections.append(EXERCISES)
        rows.append([f"{len(exercises)} graphs", "yes" if held == {True} else "no" if held == {False} else "some",
                     "which ones is what the exercises ask"])
    saved = c.compiles - c.compiles_with_archive
    # words a reader at the top of 02 already knows: "cache hit" is defined further down
    archive = ("With the classroom archive each loads from the cache instead: no neuronx-cc run."
               if saved == c.compiles else
               f"With the classroom archive the {saved} it holds load from the cache instead.")
    table = text_table(rows, ["graph", "archive", "new because"], rule=True).splitlines()
    lines = [f"neuronx-cc runs {c.compiles} times on a trn1, once for each graph below, each under "
             f"its section's heading (counted on the stand-in and a simulated trn1, not on a real "
             f"one).\n{archive}", *("  " + t for t in table[:2])]
    for index, (heading, row) in enumerate(zip(sections, table[2:])):
        if index == 0 or sections[index - 1] != heading:
            lines.append(heading)
        lines.append("  " + row)
    if any(g.on == TRN1_ONLY for g in GRAPHS[notebook]):
        lines.append("* on a trn1 only.")
    if stand_in:
        lines += ["Only the stand-in builds:", *stand_in]
    return "\n".join(lines)


def show_graph_list(notebook: str) -> None:
    """Print a notebook's list (its cell under the introduction)."""
    print(graph_list(notebook))

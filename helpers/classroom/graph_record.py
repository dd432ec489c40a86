"""The committed record of every graph the workbook compiles, per backend:
notebooks/classroom_graphs.json, fingerprints (helpers/classroom/graph_log.py) per notebook and per
exercise solution.

`make notebooks` writes it (and `make classroom-cache`); `make test` asserts that every graph its
one execution of the notebooks compiled is in it (tests/test_notebook_graphs.py), so a new cell
cannot add a graph the classroom cache lacks without the test saying so.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from mnist_mlp.common.atomic_files import atomic_path
from mnist_mlp.common.paths import REPO_ROOT

RECORD = REPO_ROOT / "notebooks" / "classroom_graphs.json"
REGENERATE = ("run `make notebooks` (it re-executes the notebooks in place, then every exercise "
              "solution, and rewrites notebooks/classroom_graphs.json), commit the record, and "
              "rebuild the classroom cache (`make classroom-cache` on a trn1)")
ABOUT = ("Fingerprints of the HLO of every XLA graph each notebook and exercise solution compiles "
         "(helpers/classroom/graph_log.py), per backend. Written by `make notebooks` and `make "
         "classroom-cache`; `make test` fails on a graph outside it.")


@dataclass
class GraphRecord:
    backend: str  # "xla-cpu" (the stand-in) or "neuron"
    torch_xla: str | None  # the version that lowered the graphs
    by_item: dict[str, set[str]]  # "02_x.ipynb" or "solutions/02_x.py" -> fingerprints

    @property
    def graphs(self) -> set[str]:
        return set().union(*self.by_item.values())


def installed_torch_xla() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-xla")
    except PackageNotFoundError:
        return None


def kernel_backend(env: Mapping[str, str] | None = None) -> str:
    """The backend select_backend() picks in a kernel started with env (PJRT_DEVICE=CPU forces
    the stand-in): "neuron", "xla-cpu" or "cpu"."""
    from mnist_mlp.common.backend import visible_neuron_cores

    env = os.environ if env is None else env
    if (importlib.util.find_spec("torch_neuronx") and visible_neuron_cores(env) > 0
            and env.get("PJRT_DEVICE", "").upper() != "CPU"):
        return "neuron"
    return "xla-cpu" if importlib.util.find_spec("torch_xla") else "cpu"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {"about": ABOUT, "backends": {}}


def read_record(backend: str, path: Path = RECORD) -> GraphRecord | None:
    """The record of one backend; None when none is committed for it."""
    section = _read(path)["backends"].get(backend)
    if section is None:
        return None
    return GraphRecord(backend, section.get("torch_xla"),
                       {item: set(graphs) for item, graphs in section["by_item"].items()})


def write_record(record: GraphRecord, path: Path = RECORD, keep: Iterable[str] = ()) -> GraphRecord:
    """Write one backend's record; items named in keep that this one did not run stay as they
    were (a partial re-run). Returns the record as written."""
    data = _read(path)
    old = read_record(record.backend, path)
    by_item = {k: v for k, v in (old.by_item if old else {}).items() if k in set(keep)}
    merged = GraphRecord(record.backend, record.torch_xla, {**by_item, **record.by_item})
    data["about"] = ABOUT
    data["backends"][record.backend] = {
        "torch_xla": merged.torch_xla, "graphs": len(merged.graphs),
        "by_item": {item: sorted(merged.by_item[item]) for item in sorted(merged.by_item)}}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return merged


def uncovered(traced: Mapping[str, set[str]], record: GraphRecord) -> dict[str, set[str]]:
    """label -> the graphs it traced that the record lacks (labels with none left out)."""
    known = record.graphs
    return {label: graphs - known for label, graphs in traced.items() if graphs - known}


def describe_uncovered(missing: Mapping[str, set[str]], record: GraphRecord,
                       path: Path = RECORD) -> str:
    """What failed and what to do, naming each notebook (or run) that traced a new graph."""
    lines = [f"{label} compiled {len(graphs)} graph(s) not in {path.name} ({record.backend}, "
             f"{len(record.graphs)} graphs): {', '.join(sorted(graphs)[:5])}"
             f"{', ...' if len(graphs) > 5 else ''}" for label, graphs in missing.items()]
    lines.append("Each is a neuronx-cc compile on every student machine that imported the classroom "
                 "cache. A cell that traces what depends on time or machine compiles a new graph "
                 f"each run: fix it. A notebook changed on purpose: {REGENERATE}.")
    installed = installed_torch_xla()
    if record.torch_xla and installed and installed != record.torch_xla:
        lines.append(f"The record was made with torch-xla {record.torch_xla}, this is {installed}: "
                     "another version may lower the same code to other graphs.")
    return "\n".join(lines)

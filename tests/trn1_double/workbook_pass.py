"""The workbook on the trn1 double, as one learner on one trn1.2xlarge: notebooks 00 to 07 in
order, one instance (one compile cache, one pair of NeuronCores), each kernel shut down where
the notebook's prose says so and not before.

What a learner does between notebooks is read from the prose itself: a notebook whose markdown
says to shut its kernel down "before notebook NN" keeps it running until NN starts; any other
notebook's kernel is shut down when it ends, as notebook 00's rule for the whole workbook says
("When you finish a notebook, *File > Close and Shut Down Notebook*").
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.trn1_double import journal

SHUT_DOWN_BEFORE = re.compile(r"[Bb]efore notebook (\d\d), shut this kernel down")
# "compiles **11 new graphs**", "runs `neuronx-cc` **7 times**": what the introduction promises.
STATED_COMPILES = re.compile(r"\*\*(\d+)\s+(?:new\s+graphs|graphs|times)\*\*")


@dataclass
class NotebookOnDouble:
    name: str
    seconds: float = 0.0
    error: str | None = None  # the failing cell's error, as the learner would read it
    compiled: list[str] = field(default_factory=list)  # cache keys compiled while it ran, each time
    compiled_by: dict[str, int] = field(default_factory=dict)  # compiles by program (+debug, +split)
    cached: list[str] = field(default_factory=list)  # cache keys read from the cache (every hit)
    refused: int = 0  # processes refused NeuronCores while it ran
    undecided: list[str] = field(default_factory=list)  # "? <label> ...": checks the double cannot decide
    split_compiles: int = 0  # compiles by processes that all-reduced outside the graph (no trn1 count)
    cached_without_metadata: list[str] = field(default_factory=list)  # debug asked, cached NEFF lacks it
    stated_compiles: int | None = None  # neuronx-cc runs its introduction promises a trn1
    outputs: str = ""  # every text output, for the pass's checks


def markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def kept_until(nb) -> str | None:
    """The notebook number before which the prose says to shut this kernel down, if any."""
    m = SHUT_DOWN_BEFORE.search(markdown(nb))
    return m[1] if m else None


def text_outputs(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out["text"])
            elif "data" in out and "text/plain" in out["data"]:
                parts.append(out["data"]["text/plain"])
            elif out.get("output_type") == "error":
                parts.append("\n".join(out.get("traceback", [])))
    return "\n".join(parts)


def shut_down(client: NotebookClient) -> None:
    """Kernel > Shut Down Kernel: the kernel process ends (and its NeuronCores are free)."""
    run_sync(client.km.shutdown_kernel)(now=False)


def run_workbook(notebooks: list[Path], root: Path, env: dict[str, str],
                 timeout: int = 900) -> list[NotebookOnDouble]:
    """Execute `notebooks` in order on the instance at `root`. A notebook stops at its first
    failing cell, as Run All does; the next one runs all the same, as a learner would go on. A
    check the instance cannot decide prints "? …" and the notebook runs on."""
    running: dict[str, NotebookClient] = {}  # kept kernels, by the notebook number that ends them
    results = []
    try:
        for path in notebooks:
            number = path.name[:2]
            for client in [c for until, c in running.items() if until <= number]:
                shut_down(client)
            running = {u: c for u, c in running.items() if u > number}
            nb = nbformat.read(path, as_version=4)
            result = NotebookOnDouble(path.stem)
            if m := STATED_COMPILES.search(markdown(nb)):
                result.stated_compiles = int(m[1])
            seen = len(journal(root))
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": str(path.parent)}})
            started = time.perf_counter()
            client.km = client.create_kernel_manager()
            client.start_new_kernel(env=env, cwd=str(path.parent))
            client.start_new_kernel_client()
            try:
                for index, cell in enumerate(nb.cells):
                    client.execute_cell(cell, index)
            except CellExecutionError as err:
                result.error = str(err)[-3000:]
            result.seconds = time.perf_counter() - started
            result.outputs = text_outputs(nb)
            until = kept_until(nb)
            if not until or result.error:
                shut_down(client)  # first: a kernel hands its last graphs over as it exits
            events = journal(root)[seen:]
            split = {e["pid"] for e in events if e["event"] == "reduced-outside-graph"}
            result.undecided = [line for line in result.outputs.splitlines() if line.startswith("? ")]
            for event in events:
                if event["event"] == "compiled":
                    result.compiled.append(event["key"])
                    result.split_compiles += event["pid"] in split
                    by = event["argv0"] + " +debug" * bool(event.get("debug")) + " +split" * (event["pid"] in split)
                    result.compiled_by[by] = result.compiled_by.get(by, 0) + 1
                elif event["event"] == "cached":
                    result.cached.append(event["key"])
                    if event.get("neff_has_metadata") is False:
                        result.cached_without_metadata.append(event["key"])
                elif event["event"] == "refused":
                    result.refused += 1
            results.append(result)
            if until and result.error is None:
                running[until] = client
    finally:
        for client in running.values():
            shut_down(client)
    return results

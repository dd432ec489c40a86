"""Which XLA graphs a pass through the workbook compiled, from torch_xla's own debug output.

With PT_XLA_DEBUG_LEVEL=1 torch_xla writes a "Compilation Analysis" block, naming the graph's
hash, for every graph it compiles; PT_XLA_DEBUG_FILE sends those blocks to a file instead of the
output. Both are inherited, so one file collects the graphs of a kernel, the scripts it starts
and their torchrun workers. The classroom cache (helpers/classroom.py) records its set; a
student's pass must compile nothing outside it.

    env.update(graph_log_env(path))      # before starting a kernel (or JupyterLab)
    read_graph_log(path)                 # -> {graph hash, ...}
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

# Hook for anything that starts kernels (the browser test's JupyterLab): a file path. When set,
# graph_log_env(path) is what those kernels get in their environment.
GRAPH_LOG_ENV = "WORKBOOK_GRAPH_LOG"
DEBUG_LEVEL, DEBUG_FILE = "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE"
GRAPH_HASH = re.compile(r"Graph Hash:\s*([0-9a-f]{16,64})\b")


def graph_log_env(path: str | os.PathLike) -> dict[str, str]:
    """The variables that make every process started with them log its compiled graphs to path."""
    path = os.fspath(Path(path).resolve())
    return {DEBUG_LEVEL: "1", DEBUG_FILE: path, GRAPH_LOG_ENV: path}


def graph_hashes_in(text: str) -> set[str]:
    return set(GRAPH_HASH.findall(text))


def read_graph_log(path: str | os.PathLike) -> set[str]:
    """Every graph hash in a log; an absent log holds none (nothing compiled)."""
    try:
        return graph_hashes_in(Path(path).read_text(errors="replace"))
    except FileNotFoundError:
        return set()


def child_debug_env(caller_env: Mapping[str, str] | None,
                    inherited: Mapping[str, str] = os.environ) -> tuple[dict[str, str], str | None]:
    """A child whose caller asks for PT_XLA_DEBUG_LEVEL to read the analysis from its output
    (notebook 03) must not have it diverted to an inherited graph log. Returns the variables
    to remove from the child's environment, and the log its hash lines must be copied to."""
    caller_env = caller_env or {}
    log = inherited.get(GRAPH_LOG_ENV)
    if log and DEBUG_LEVEL in caller_env and DEBUG_FILE not in caller_env:
        return {DEBUG_FILE: ""}, log
    return {}, None


def append_graph_lines(log: str | os.PathLike, lines: Iterable[str]) -> None:
    """Copy the graph-hash lines of a child's output into the graph log."""
    found = [line for line in lines if GRAPH_HASH.search(line)]
    if found:
        with open(log, "a") as out:
            out.write("".join(f"{line.strip()}\n" for line in found))


@dataclass(frozen=True)
class Coverage:
    """A pass's graphs against the classroom cache's."""
    traced: frozenset  # graphs the pass compiled
    cached: frozenset  # graphs the classroom cache holds

    @property
    def missing(self) -> frozenset:
        return self.traced - self.cached

    @property
    def ok(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        if self.ok:
            return (f"all {len(self.traced)} graphs compiled by this pass are among the "
                    f"{len(self.cached)} of the classroom cache: a student machine compiles 0")
        return (f"{len(self.missing)} of the {len(self.traced)} graphs compiled by this pass are "
                f"not in the classroom cache ({', '.join(sorted(self.missing)[:5])}"
                f"{', ...' if len(self.missing) > 5 else ''}): each would be a neuronx-cc compile "
                "on every student machine. Run `make classroom-cache` again after changing a "
                "notebook or script, and keep what the cells trace independent of time and machine.")


def coverage(traced: Iterable[str], cached: Iterable[str]) -> Coverage:
    return Coverage(frozenset(traced), frozenset(cached))

"""The corpus of real Neuron output (tests/platform_output/corpus.yaml): excerpts of what Neuron
tools printed or wrote on real instances, from public issue threads and the Neuron docs, each
with its URL, date and version. The tests run the product's readers of platform output over it
(tests/test_platform_output.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

CORPUS = Path(__file__).parent / "platform_output" / "corpus.yaml"

# Every kind of platform output the workbook reads or promises, and what it is.
KINDS = {
    "wrapper.compile_start": "the compiler wrapper starts neuronx-cc",
    "wrapper.compile_success": "a compile ends well",
    "wrapper.cache_hit": "a graph read from the compile cache",
    "wrapper.compile_failure": "a compile fails",
    "wrapper.cached_failure": "a graph whose cached compile failed before",
    "wrapper.lock_wait": "the wait on another process's lock",
    "compiler.error": "neuronx-cc's own error line, with its error code",
    "parallel_compile.extract": "neuron_parallel_compile's trial names a graph",
    "parallel_compile.summary": "neuron_parallel_compile's closing totals",
    "parallel_compile.failure": "a compile failing under neuron_parallel_compile",
    "cache.layout": "paths of the compile cache: version directories and MODULE_ names",
    "cache.failed_entry": "what a failed entry holds",
    "runtime.busy_core": "the runtime's error when a NeuronCore is held by another process",
    "runtime.worker_output": "what a training worker prints on Neuron",
    "monitor.report": "neuron-monitor's JSON report",
    "packages.installed": "the Neuron packages' installed versions, as pip lists them",
    "explorer.output": "what neuron-explorer prints or writes",
}
# The level, tag and message of a wrapper line: "INFO ||NEURON_CC_WRAPPER||: Using a cached neff at"
# (logs to 2025-11), "[INFO]: Compilation Successfully Completed for model" (from 2026-03, Neuron 2.29).
TAGGED = re.compile(r"(?:(?:INFO|ERROR|WARNING) \|\|[A-Z_]+\|\||\[(?:INFO|ERROR|WARNING)\]): "
                    r"[A-Za-z]+(?: [A-Za-z]+)*(?=\W|$)")


@dataclass(frozen=True)
class Excerpt:
    id: str
    kinds: tuple[str, ...]
    url: str
    date: str
    version: str
    origin: str  # "user log" or "docs"
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @property
    def year(self) -> str:
        return str(self.date)[:4]


def _load():
    data = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))

    def read(entries):
        return [Excerpt(e["id"], tuple(e["kinds"]), e["url"], str(e["date"]), str(e["version"]),
                        e["origin"], e["text"]) for e in entries]
    return read(data["excerpts"]), read(data["quoted"]), dict(data["absent"])


# QUOTED: part of a line as a public source quotes it (a script's comment), or as the stored copy
# of a real log cuts it short; not a whole line
EXCERPTS, QUOTED, ABSENT = _load()


def of_kind(*kinds: str) -> list[Excerpt]:
    return [e for e in EXCERPTS if set(kinds) & set(e.kinds)]


def newest(kind: str, having: str) -> tuple[Excerpt, str]:
    """The newest excerpt, or quoted part of a line, of a kind with a line holding `having`, and
    that line."""
    found = [(e, line) for e in of_kind(kind) + [q for q in QUOTED if kind in q.kinds]
             for line in e.lines if having in line]
    return max(found, key=lambda pair: pair[0].date)

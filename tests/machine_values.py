"""Values that differ from one machine or run to the next, found in committed notebook outputs.

A committed output is compared on every machine, so each such value must be covered by a section
of tests/nbval_sanitize.cfg, or its cell tagged nbval-ignore-output. find_varying() applies the
sanitizer first and reports what is left: hashes (torch_xla's graph hashes differ by CPU ISA),
absolute paths, temp names, pids, ports, hex addresses, timestamps, hostnames and durations.
A value the workbook's own code writes literally (a demo cache's entry names, a default path) is
the same everywhere: found in `fixed_text`, it is not reported.
"""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

from tests.notebook_outputs import cell_options, code_cells, read_notebook, sanitize

KINDS = {
    "hash": re.compile(r"(?<![\w.])[0-9a-fA-F]{16,}(?!\w)"),
    "absolute path": re.compile(
        r"(?<![\w.~])/(?:tmp|var/tmp|home|root|work|Users|private|mnt|srv|builds|runner)/[^\s'\"<>)\]&]*"),
    "site-packages path": re.compile(r"\S*/(?:site|dist)-packages/\S*"),
    "temp name": re.compile(r"\btmp[_-]?[a-z0-9_]{6,}\b"),
    "pid": re.compile(r"\b(?:pid|PID|process id)[ =:]+\d+\b"),
    "port": re.compile(r"\b(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1?\]):\d{2,5}\b"),
    "hex address": re.compile(r"\b0x[0-9a-fA-F]{6,}\b"),
    "timestamp": re.compile(r"\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d|\b\d\d:\d\d:\d\d\b"),
    "hostname": re.compile(r"\bip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}\b"),
    "duration": re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds|min|mins|minutes)\b"
                           r"|\[\d\d:\d\d<\d\d:\d\d"),
}
SCANNED_MIME = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")


@dataclass
class Found:
    where: str
    kind: str
    text: str

    def __str__(self):
        return f"{self.where}: {self.kind} {self.text!r}"


def output_texts(cell):
    """(label, text) of every output a comparison looks at."""
    for n, out in enumerate(cell.get("outputs", [])):
        if out.output_type == "stream":
            yield f"output {n} ({out.name})", out.text
        elif out.output_type in ("display_data", "execute_result"):
            for mime in SCANNED_MIME:
                if mime in out.get("data", {}):
                    value = out.data[mime]
                    yield f"output {n} ({mime})", value if isinstance(value, str) else str(value)
        elif out.output_type == "error":
            yield f"output {n} (error)", "\n".join([out.ename, out.evalue])


def fixed_text(repo_root: Path) -> str:
    """The workbook's own code and notebook sources: what they spell out is not machine-made."""
    parts = [p.read_text() for d in ("helpers", "mnist_mlp") for p in (repo_root / d).rglob("*.py")]
    for path in sorted((repo_root / "notebooks").glob("*.ipynb")):
        parts += [c.source for c in read_notebook(path).cells]
    return "\n".join(parts)


def is_fixed(kind: str, value: str, fixed: str) -> bool:
    """Written by the code itself: the value, or for a path its first three parts, an
    f-string's fixed head (e.g. a demo's /tmp/ubuntu/neuroncc_compile_workdir/...)."""
    value = value.rstrip(".,;:'")
    if kind == "absolute path":
        value = "/".join(value.split("/")[:4])
    return bool(fixed) and value in fixed


def find_varying(nb, patterns, name: str = "notebook", hostname: str | None = None,
                 fixed: str = "") -> list[Found]:
    """What varies between machines in nb's compared outputs, after the sanitizer; values that
    occur in `fixed` (fixed_text()) are not reported."""
    hostname = socket.gethostname() if hostname is None else hostname
    kinds = dict(KINDS)
    if hostname and len(hostname) >= 4:
        kinds["this machine's hostname"] = re.compile(rf"\b{re.escape(hostname)}\b")
    found = []
    for index, cell in enumerate(code_cells(nb)):
        options = cell_options(cell)
        if options.skip or not options.check:
            continue
        for label, text in output_texts(cell):
            clean = sanitize(text, patterns)
            for kind, pattern in kinds.items():
                for match in pattern.finditer(clean):
                    if is_fixed(kind, match.group(0), fixed):
                        continue
                    found.append(Found(f"{name} code cell {index} {label}", kind, match.group(0)))
    return found

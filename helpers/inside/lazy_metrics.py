"""Make PyTorch/XLA's lazy execution visible: per-step compile counters, IR and HLO text.

torch_xla is imported inside the functions, never at module import, so importing this module
cannot initialise the XLA runtime before select_backend() has chosen the device.
"""
from __future__ import annotations

import re
from collections import Counter

from mnist_mlp.common.xla_metrics import FIELDS, read_compile_metrics

MAX_BARS = 40  # plot_compile_metrics draws bars up to this many steps, lines beyond


def metric_deltas(before: dict, after: dict) -> dict[str, float]:
    """after - before for every field in FIELDS (a missing field counts as 0)."""
    return {k: after.get(k, 0) - before.get(k, 0) for k in FIELDS}


class CompileMetricsRecorder:
    """Call record() after each step's torch_xla.sync(); each call waits for the device,
    then appends and returns what that step added to the counters: {"step": i, "label": ..., UncachedCompile: ..., ...}.

    Counters are process-wide, so anything run between two record() calls counts towards
    the later step (that is the point: it shows hidden compiles and executions).
    """

    def __init__(self):
        self.rows: list[dict] = []
        self._last = read_compile_metrics()

    def record(self, label: str | None = None, *, wait: bool = True) -> dict:
        # sync() only launches a graph; it runs asynchronously. Waiting makes each row hold
        # its own step's execution (a diagnostic, so the lost overlap does not matter).
        if wait:
            import torch_xla.core.xla_model as xm

            xm.wait_device_ops()
        now = read_compile_metrics()
        row = {"step": len(self.rows), "label": label, **metric_deltas(self._last, now)}
        self._last = now
        self.rows.append(row)
        return row

    def peek(self) -> dict[str, float]:
        """What the counters moved since the last record() (or the start), without waiting
        for the device or adding a row: e.g. to show that recording a step ran nothing."""
        return metric_deltas(self._last, read_compile_metrics())

    def totals(self) -> dict[str, float]:
        return {k: sum(r[k] for r in self.rows) for k in FIELDS}


def _count(n, singular: str, plural: str | None = None) -> str:
    n = int(n)
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def describe(row: dict) -> str:
    """One line in words: '1 new graph (1.62 s), 0 reused, 1 execution, ...'. A new graph is
    UncachedCompile (compiled, or on a trn1 maybe a compile-cache hit); a reused one is
    CachedCompile, found in this process's memory."""
    prefix = f"{row['label']}: " if row.get("label") else ""
    new = _count(row["UncachedCompile"], "new graph")
    if row["UncachedCompile"]:
        new += f" ({row['compile_time_s']:.2f} s)"
    return (prefix + ", ".join([
        new,
        f"{int(row['CachedCompile'])} reused",
        _count(row["ExecuteComputation"], "execution"),
        _count(row["transfers_from_device"], "transfer from the device",
               "transfers from the device"),
    ]))


def compiled_steps(rows: list[dict]) -> list[int]:
    """The steps that met a new graph (UncachedCompile went up)."""
    return [r["step"] for r in rows if r["UncachedCompile"] > 0]


def plot_compile_metrics(rows: list[dict], *, title: str = "What each step did",
                         xlabel: str = "step"):
    """Per step: graphs (new ones red, reused ones grey) and executions on top, the new graphs'
    seconds below, so the steps that met a new graph stand out. Up to MAX_BARS steps as bars with
    every tick labelled (a row's label, else its step); more as lines, each compile marked."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("no steps recorded: call recorder.record() after each step")
    x = list(range(len(rows)))  # rows in order; ticks show each row's label or step
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.2), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    uncached = [r["UncachedCompile"] for r in rows]
    if len(rows) <= MAX_BARS:
        width = 0.4
        top.bar([i - width / 2 for i in x], uncached, width,
                color="#c44e52", label="UncachedCompile (new graph)")
        top.bar([i - width / 2 for i in x], [r["CachedCompile"] for r in rows], width,
                bottom=uncached, color="#b0b0b0", label="CachedCompile (reused in memory)")
        top.bar([i + width / 2 for i in x], [r["ExecuteComputation"] for r in rows], width,
                color="#4c72b0", label="ExecuteComputation (graph ran)")
        bottom.bar(x, [r["compile_time_s"] for r in rows], color="#c44e52")
    else:  # too many for bars: lines, with each compile marked and named
        top.plot(x, [r["ExecuteComputation"] for r in rows], color="#4c72b0", lw=1,
                 label="ExecuteComputation (graph ran)")
        top.plot(x, [r["CachedCompile"] for r in rows], color="#b0b0b0", lw=1, ls="--",
                 label="CachedCompile (reused in memory)")
        marked = [i for i in x if uncached[i]]
        top.plot(marked, [uncached[i] for i in marked], "v", color="#c44e52", ms=10,
                 label="UncachedCompile (new graph)")
        for i in marked:
            top.annotate(rows[i].get("label") or f"step {rows[i]['step']}", (i, uncached[i]),
                         xytext=(0, 8),
                         textcoords="offset points", ha="center", fontsize=8, color="#c44e52")
        bottom.stem(x, [r["compile_time_s"] for r in rows], linefmt="#c44e52", markerfmt=" ",
                    basefmt=" ")
    highest = max(max(r["UncachedCompile"] + r["CachedCompile"], r["ExecuteComputation"])
                  for r in rows)
    top.set_ylim(0, 1.6 * max(highest, 1) + 0.5)  # headroom for the legend
    top.set_ylabel("count")
    top.yaxis.get_major_locator().set_params(integer=True)
    top.legend(fontsize=8, loc="upper right")
    top.set_title(title)
    bottom.set_ylabel("compile or load, s")
    bottom.set_xlabel(xlabel)
    labelled = any(r.get("label") for r in rows)
    if len(rows) <= MAX_BARS:  # every tick labelled while they fit
        bottom.set_xticks(x, [r.get("label") or str(r["step"]) for r in rows], fontsize=8,
                          rotation=35 if labelled else 0, ha="right" if labelled else "center")
    else:
        bottom.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


def trim_lines(text: str, max_lines: int = 30) -> str:
    """The first max_lines lines of text, then one line saying how many were left out."""
    if max_lines < 1:
        raise ValueError(f"max_lines must be at least 1, got {max_lines}")
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join(lines[:max_lines]
                     + [f"... ({len(lines) - max_lines} more lines, {len(lines)} in all)"])


def _tensor_list(tensors):
    import torch

    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


def ir_text(tensors, max_lines: int = 30) -> str:
    """The lazy IR graph torch_xla has recorded (not yet run) for these XLA tensors, trimmed."""
    import torch_xla

    return trim_lines(torch_xla._XLAC._get_xla_tensors_text(_tensor_list(tensors)), max_lines)


def entry_computation(hlo: str) -> str:
    """The ENTRY computation of an HLO module's text: the graph itself, without the small
    helper computations (max, add for reductions) printed before it."""
    start = re.search(r"^ENTRY ", hlo, flags=re.MULTILINE)
    if start is None:
        raise ValueError("no ENTRY computation in this text: is it HLO (hlo_text's output)?")
    return hlo[start.start():]


# One HLO instruction: `[ROOT] %name = <shape or (tuple shape)> opcode(operands...)`.
_HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%\S+ = (?:\([^)]*\)|\S+) ([a-z][\w-]*)\(",
                              flags=re.MULTILINE)


def hlo_op_counts(hlo: str) -> dict[str, int]:
    """How many of each HLO operation the ENTRY computation has, most frequent first."""
    counts = Counter(_HLO_INSTRUCTION.findall(entry_computation(hlo)))
    return dict(counts.most_common())


def hlo_text(tensors, max_lines: int = 30, *, entry_only: bool = False) -> str:
    """The HLO that graph lowers to: what the compiler (neuronx-cc on Trainium) gets, trimmed.
    entry_only: start at the ENTRY computation (the graph), skipping the helper ones."""
    import torch_xla

    hlo = torch_xla._XLAC._get_xla_tensors_hlo(_tensor_list(tensors))
    return trim_lines(entry_computation(hlo) if entry_only else hlo, max_lines)


def hlo_ops(tensors) -> dict[str, int]:
    """hlo_op_counts() of the HLO for these XLA tensors' pending graph."""
    import torch_xla

    return hlo_op_counts(torch_xla._XLAC._get_xla_tensors_hlo(_tensor_list(tensors)))


GRAPH_HASH_LINE = re.compile(r"Graph Hash:\s*([0-9a-f]+)")


def graph_hashes(output) -> list[str]:
    """The hash of every graph compiled, in order, from a run's output under
    PT_XLA_DEBUG_LEVEL=1 (torch_xla prints a "Compilation Analysis" block per compile).

    These are torch-xla's lazy-tensor graph hashes, its in-memory cache key: they mix in XLA's
    configuration, so another CPU gives others for the same script. Compare them within one
    machine; never commit them. The Neuron cache is keyed differently (MODULE_<HLO hash>+<flags hash>).
    """
    text = output if isinstance(output, str) else "\n".join(output)
    return GRAPH_HASH_LINE.findall(text)

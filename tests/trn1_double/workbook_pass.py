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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.trn1_double import journal

KERNEL_TAKES = re.compile(r"^NeuronCores: this kernel takes (none|[\d,-]+)", re.M)
NEURON_BACKEND = re.compile(r"Backend: Neuron \(.*\| NeuronCores visible: (\d+) \|")
SHUT_DOWN_BEFORE = re.compile(r"[Bb]efore notebook (\d\d), shut this kernel down")
# "compiles **11 new graphs**", "runs `neuronx-cc` **7 times**": what the introduction promises.
STATED_COMPILES = re.compile(r"\*\*(\d+)\s+(?:new\s+graphs|graphs|times)\*\*")
# mnist_mlp.common.results.finish_run's line, every rank (a torchrun rank's behind its prefix)
NEW_GRAPHS = re.compile(r"^(?:\[rank\d+\]: )?(?:\[rank \d+\] )?New graphs(?: before evaluation)?: (\d+) \(compiled or loaded", re.M)
# notebook 06's utilization widget, as its cell prints the source and the series it drew
UTILIZATION = re.compile(r"^source: (.*?); series: \[(.*)\]$", re.M)
# the double's neuron-explorer `view` (tests/trn1_double/tools/neuron_explorer.py)
EXPLORER_SUMMARY = re.compile(r"^neuron-explorer \(trn1 double\): (\d+) file\(s\) in (\S+);", re.M)
# the journal's events for one graph a process handed to the Neuron compile path
GRAPH_EVENTS = ("compiled", "cached", "cached-failure", "extracted")


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
    split_processes: int = 0  # processes that all-reduced outside the graph (their graphs are the double's)
    cached_without_metadata: list[str] = field(default_factory=list)  # debug asked, cached NEFF lacks it
    stated_compiles: int | None = None  # neuronx-cc runs its introduction promises a trn1
    outputs: str = ""  # every text output, for the pass's checks
    kernel_pid: int | None = None
    set_after_read: list[str] = field(default_factory=list)  # cores set after the runtime read them
    platform_lines: list[str] = field(default_factory=list)  # platform lines judged, and how
    undecided_platform_lines: list[str] = field(default_factory=list)  # where the sources disagree
    wrong_platform_lines: list[str] = field(default_factory=list)  # those the journal contradicts
    open_when_started: list[str] = field(default_factory=list)  # other notebooks' kernels still running
    refused_by_open_kernels: str | None = None  # setup()'s error while a core-holding kernel ran
    reserved_while_refused: list[list[int]] = field(default_factory=list)  # cores the refused kernel took


def _cores(spec: str) -> list[int]:
    cores = []
    for part in spec.split(","):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def judge_platform_lines(result: NotebookOnDouble, events: list[dict]) -> None:
    """Each platform line the notebook printed against what the journal says the printing
    process held: the kernel's "NeuronCores: this kernel takes X" and its backend summary's
    "NeuronCores visible: N" against the kernel's own reservation; every other Neuron backend
    summary (a script's, a torchrun worker's) against the reservations of the scripts it
    started, each printed count matched by one process's (a summary wrapped in a side-by-side
    display is not read); and any core variable set after the runtime read it."""
    reserved = [e for e in events if e["event"] == "reserved"]
    for e in events:
        if e.get("set_after_read"):
            result.set_after_read.append(f"pid {e['pid']} ({e['argv0']}): read {e.get('read')}, "
                                         f"set later {e['set_after_read']}, {e['event']} {e.get('cores')}")
    kernel = [e["cores"] for e in reserved if e["pid"] == result.kernel_pid]
    summaries = [int(m[1]) for m in NEURON_BACKEND.finditer(result.outputs)]
    takes = list(KERNEL_TAKES.finditer(result.outputs))
    if takes:  # setup()'s line, then take_neuron_cores()' where a later section takes a core (06)
        m = takes[-1]  # the kernel's last choice, made before its torch_xla import, is what it reserved
        line = m[0]
        if m[1] == "none":
            ok = not kernel
            says = "it reserved none" if ok else f"it reserved {kernel[0]}"
        else:
            ok = not kernel or kernel[0] == _cores(m[1])
            says = f"it reserved {kernel[0]}" if kernel else "it never opened the device"
        (result.platform_lines if ok else result.wrong_platform_lines).append(f"{line!r}: {says}")
        if summaries and len(takes) > 1:  # setup()'s summary, printed before the kernel chose its cores
            visible = summaries.pop(0)
            result.platform_lines.append(f"kernel's 'NeuronCores visible: {visible}': printed before the kernel's later choice; "
                                         f"its later {line!r} is judged above")
        elif summaries:  # the kernel's own summary comes first, from setup()
            visible = summaries.pop(0)
            ok = not kernel or visible == len(kernel[0])
            (result.platform_lines if ok else result.wrong_platform_lines).append(
                f"kernel's 'NeuronCores visible: {visible}': "
                + (f"it reserved {kernel[0]}" if kernel else "it never opened the device"))
    scripts = [e for e in reserved if e["pid"] != result.kernel_pid and e["argv0"].endswith(".py")]
    # A plain process that named no cores reserves every core (torch-neuronx 2.9's set-up, as
    # the double follows it, names none for it: trn1_double/torch_neuronx/xla.py).
    others = sorted(len(e["cores"]) for e in scripts)
    for visible in summaries:
        if visible in others:
            others.remove(visible)
            result.platform_lines.append(f"a script's 'NeuronCores visible: {visible}': a script reserved that many")
        else:
            result.wrong_platform_lines.append(
                f"a script's 'NeuronCores visible: {visible}': no script process of this notebook "
                f"reserved that many (left unmatched: {others})")


def judge_run_lines(result: NotebookOnDouble, events: list[dict]) -> None:
    """The run lines a notebook printed against the journal: each "New graphs: N" (a
    script's or a torchrun rank's) matched by one script process that handed at least N graphs
    to the Neuron compile path (it prints before its test pass compiles more; a process whose
    all-reduce the double ran outside the graph counts graphs no trn1 does: undecided); notebook
    06's utilization series against the cores its processes reserved (their busy % is not in the
    sources: the double reports 0 %); the Explorer summary against the capture the journal shows
    compiled with debug metadata (the summary's shape is not in the sources)."""
    split = {e["pid"] for e in events if e["event"] == "reduced-outside-graph"}
    graphs: dict[int, int] = {}
    for e in events:
        if e["event"] in GRAPH_EVENTS and e["argv0"].endswith(".py"):  # a script, or the kernel
            graphs[e["pid"]] = graphs.get(e["pid"], 0) + 1
    exact = sorted(n for pid, n in graphs.items() if pid not in split)
    undecided = sorted(n for pid, n in graphs.items() if pid in split)
    # the largest first, each taking the smallest count that covers it: every line finds one if any can
    for printed in sorted((int(m[1]) for m in NEW_GRAPHS.finditer(result.outputs)), reverse=True):
        line = f"'New graphs: {printed}'"
        if (match := next((n for n in exact if n >= printed), None)) is not None:
            exact.remove(match)
            result.platform_lines.append(f"{line}: a script process handed {match} graphs to the compile path")
        elif (match := next((n for n in undecided if n >= printed), None)) is not None:
            undecided.remove(match)
            result.undecided_platform_lines.append(
                f"{line}: undecided, its process all-reduced outside the graph ({match} graphs here)")
        else:
            result.wrong_platform_lines.append(
                f"{line}: no script process of this notebook handed that many graphs to the compile "
                f"path (left: {exact + undecided})")
    reserved = {core for e in events if e["event"] == "reserved" for core in e["cores"]}
    for m in UTILIZATION.finditer(result.outputs):
        if "neuron-monitor" not in m[1]:
            continue  # the stand-in's psutil source: no NeuronCore to judge
        series = {int(c) for c in re.findall(r"NeuronCore (\d+)", m[2])}
        line = f"utilization series {sorted(series)}"
        ok = bool(series) and series <= reserved
        (result.platform_lines if ok else result.wrong_platform_lines).append(
            f"{line}: the journal's reservations in this notebook held cores {sorted(reserved)}")
        result.undecided_platform_lines.append(
            f"{line}: busy % undecided (no published figure for this model; the double reports 0 %)")
    for m in EXPLORER_SUMMARY.finditer(result.outputs):
        captured = [e for e in events if e["event"] in ("compiled", "cached") and e.get("debug")]
        line = f"Explorer summary ({m[1]} file(s) in {m[2]})"
        if captured and int(m[1]) > 0:
            result.platform_lines.append(f"{line}: the capture compiled {len(captured)} graph(s) with "
                                         "debug metadata (journal)")
        else:
            result.wrong_platform_lines.append(f"{line}: the journal shows {len(captured)} graph(s) "
                                               "compiled with debug metadata")
        result.undecided_platform_lines.append(f"{line}: its shape is not in the sources at 2.31")


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


# A kernel that setup() refused compiled nothing and took no core, so nothing of its exit is
# judged. Once in about ten runs it did not exit after the shutdown request (a fresh clone waited
# the first half of the 600 s guard, 300 s, for jupyter_client's SIGTERM; cause not found): its
# guard is short.
REFUSED_KERNEL_GUARD_S = 30


def shut_down(client: NotebookClient, guard_s: float = 600) -> None:
    """Kernel > Shut Down Kernel: the kernel process ends (and its NeuronCores are free). It exits
    by itself: at exit it hands the double its last graphs (eager mode's among them), which
    jupyter_client's default 5 s before a kill can cut short on a loaded machine; the wait ends when
    the kernel does, with a guard only (after half of it jupyter_client sends SIGTERM, after the
    rest SIGKILL)."""
    client.km.shutdown_wait_time = guard_s
    run_sync(client.km.shutdown_kernel)(now=False)


def refuse_at_setup(result: NotebookOnDouble, path: Path, env: dict[str, str],
                    instance: Path | None) -> None:
    """setup_refusal() while a core-holding kernel runs, recorded in `result`: setup()'s error,
    and the cores the instance's journal says the refusing kernel reserved meanwhile (none: it
    stopped before touching the device)."""
    seen = len(journal(instance)) if instance else 0
    result.refused_by_open_kernels = setup_refusal(path, env) or "setup() went through"
    if instance:
        result.reserved_while_refused = [e["cores"] for e in journal(instance)[seen:]
                                         if e["event"] == "reserved"]


def setup_refusal(path: Path, env: dict[str, str]) -> str | None:
    """A notebook's cells up to its setup() call, in a kernel of their own: the error setup()
    raised (its last lines), or None when it went through. That kernel is then shut down."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.km = client.create_kernel_manager()
    client.start_new_kernel(env=env, cwd=str(path.parent))
    client.start_new_kernel_client()
    try:
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
            if cell.cell_type == "code" and "setup(" in cell.source:
                return None
        return None
    except CellExecutionError as err:
        return str(err)[-3000:]
    finally:
        shut_down(client, REFUSED_KERNEL_GUARD_S)


# Kernels the learner leaves running (File > Close and Shut Down Notebook forgotten), through
# the notebook named: 00's and 01's never open the device and 04's takes no core, so the prose
# ("one notebook's kernel at a time on the device") allows them; 02's holds core 0, so 03's
# setup() must refuse, naming it.
KEPT_OPEN = {"00": "07", "01": "02", "02": "03", "04": "05"}


def shut_before(nb, number: str, kept_open: dict[str, str]) -> str | None:
    """The notebook before which the learner shuts this kernel down: the prose's "before notebook
    NN", else the one after the notebook kept_open says it stays open through; None: at its end."""
    return kept_until(nb) or (f"{int(kept_open[number]) + 1:02d}" if number in kept_open else None)


def started(path: Path, nb, open_kernels: list[str]) -> NotebookOnDouble:
    """A notebook's record as it starts, beside the kernels still open (their two-digit numbers)."""
    result = NotebookOnDouble(path.stem)
    result.open_when_started = list(open_kernels)
    if m := STATED_COMPILES.search(markdown(nb)):
        result.stated_compiles = int(m[1])
    return result


def first_error(nb) -> str | None:
    """The first error a cell raised, as the learner reads it (its traceback's last lines)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                tail = "\n".join(out.get("traceback", []))[-2000:]
                return f"{out.get('ename')}: {out.get('evalue')}\n{tail}"
    return None


def judged(result: NotebookOnDouble, nb, events: list[dict]) -> NotebookOnDouble:
    """The notebook's outputs and the journal's events while it ran (its kernel shut down first,
    unless the learner keeps it open), judged: compiles, cache reads, refusals, platform lines."""
    result.outputs = text_outputs(nb)
    split = {e["pid"] for e in events if e["event"] == "reduced-outside-graph"}
    result.split_processes = len(split)
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
    judge_platform_lines(result, events)
    judge_run_lines(result, events)
    return result


def holds_a_core(result: NotebookOnDouble, events: list[dict]) -> bool:
    return any(e["event"] == "reserved" and e["pid"] == result.kernel_pid for e in events)


def run_workbook(notebooks: list[Path], root: Path | None, env: dict[str, str],
                 timeout: int = 900, kept_open: dict[str, str] | None = None,
                 save: bool = False, ran: Callable[[Path], object] | None = None) -> list[NotebookOnDouble]:
    """Execute `notebooks` in order on the instance at `root` (None: this host's own platform,
    no journal to judge) with nbclient (where no browser is
    found outside CI; the test session's run is JupyterLab's, tests/browser/conftest.py). A
    notebook stops at its first failing cell, as Run All does; the next one runs all the same, as
    a learner would go on. A check the instance cannot decide prints "? …" and the notebook runs
    on. With `save`, each executed notebook is written back to its path; `ran(path)` is called
    after each notebook's run.

    `kept_open` {"02": "03"}: a learner leaves notebook 02's kernel running through notebook 03.
    A kept kernel that holds no NeuronCore (00's, 01's, 04's) just runs beside the next ones. One
    that holds a core is met by the next notebook's setup(), which must refuse and name it
    (recorded in refused_by_open_kernels); the learner then shuts it down, as the refusal says,
    and runs that notebook from the top."""
    kept_open = kept_open or {}
    running: list[tuple[str, str, NotebookClient, bool]] = []  # (name, shut before, client, holds a core)
    results = []
    try:
        for path in notebooks:
            number = path.name[:2]
            for _, _, client, _ in [r for r in running if r[1] <= number]:
                shut_down(client)
            running = [r for r in running if r[1] > number]
            nb = nbformat.read(path, as_version=4)
            result = started(path, nb, [name for name, *_ in running])
            if holders := [r for r in running if r[3]]:
                refuse_at_setup(result, path, env, root)
                for _, _, client, _ in holders:  # what the refusal tells the learner to do
                    shut_down(client)
                running = [r for r in running if not r[3]]
            seen = len(journal(root)) if root else 0
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": str(path.parent)}})
            begun = time.perf_counter()
            client.km = client.create_kernel_manager()
            client.start_new_kernel(env=env, cwd=str(path.parent))
            client.start_new_kernel_client()
            result.kernel_pid = client.km.provisioner.pid
            try:
                for index, cell in enumerate(nb.cells):
                    client.execute_cell(cell, index)
            except CellExecutionError as err:
                result.error = str(err)[-3000:]
            result.seconds = time.perf_counter() - begun
            if save:
                nbformat.write(nb, path)
            if ran:
                ran(path)
            until = shut_before(nb, number, kept_open)
            if not until or result.error:
                shut_down(client)  # first: a kernel hands its last graphs over as it exits
            events = journal(root)[seen:] if root else []
            results.append(judged(result, nb, events))
            if until and result.error is None:
                running.append((result.name[:2], until, client, holds_a_core(result, events)))
    finally:
        for _, _, client, _ in running:
            shut_down(client)
    return results

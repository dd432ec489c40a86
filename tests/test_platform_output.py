"""Every product reader of Neuron platform output against every real excerpt of its kind
(tests/platform_output/corpus.yaml): the notebooks' summary filter, neuron_parallel_compile's
totals, the compile cache's names and states, the cache scanner, neuron-monitor's reports, the
busy-core messages a check quotes; and the trn1 double's lines against the newest real form."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.cache.location import same_compiler_version, version_order
from helpers.cache.precompile import parallel_compile_totals
from helpers.cache.scan import scan_cache
from helpers.inside.utilization import parse_neuron_monitor_report
from helpers.launch.processes import SUMMARY_LINE
from helpers.setup.core_holders import BUSY_CORE_MESSAGES
from helpers.setup.environment_checks import check_pins
from mnist_mlp.common.compile_cache import MODULE_DIR, VERSION_DIR, module_entries, module_state
from mnist_mlp.common.compile_notice import CompileNotice
from tests.platform_corpus import ABSENT, EXCERPTS, KINDS, QUOTED, TAGGED, Excerpt, newest, of_kind


def excerpt_id(excerpt: Excerpt) -> str:
    return excerpt.id


def test_the_corpus_holds_20_excerpts_from_8_sources_and_covers_every_kind_or_says_why_not():
    assert len(EXCERPTS) >= 20 and len({e.url for e in EXCERPTS}) >= 8
    assert len({e.id for e in EXCERPTS}) == len(EXCERPTS)
    for e in EXCERPTS:
        assert e.url.startswith("https://github.com/") and e.date[:2] == "20" and e.version, e.id
        assert set(e.kinds) <= set(KINDS) and e.origin in ("user log", "docs") and e.text, e.id
    covered = {k for e in EXCERPTS + QUOTED for k in e.kinds}
    absent = {k.split(" ")[0] for k in ABSENT}
    assert set(KINDS) <= covered | absent, set(KINDS) - covered - absent
    for q in QUOTED:  # a part of a line, as a public source quotes it
        assert q.url.startswith("https://github.com/") and set(q.kinds) <= set(KINDS) and len(q.lines) == 1, q.id
    # both spellings of the wrapper's tag are in real logs: the reader must meet both
    hits = of_kind("wrapper.cache_hit")
    assert {"||NCC_WRAPPER||", "||NEURON_CC_WRAPPER||"} <= {t for e in hits for t in re.findall(
        r"\|\|[A-Z_]+WRAPPER\|\|", e.text)}


# What each kind's line says, whatever decorates it: the summary must keep such a line.
MESSAGE = {
    "wrapper.cache_hit": "Using a cached neff",
    "wrapper.compile_success": "Compilation Successfully Completed",
    "wrapper.cached_failure": "Got a cached failed neff",
    "wrapper.compile_failure": "ompilation failed",  # also "Failed compilation with"
    "wrapper.compile_start": "Call compiler with cmd",
    "parallel_compile.summary": "Total ",
    "parallel_compile.failure": "Error",
    "runtime.busy_core": "not available",
    "wrapper.lock_wait": "Another process must be compiling",
}
KEPT = [(kind, e, line) for kind, message in MESSAGE.items()
        for e in of_kind(kind) + [q for q in QUOTED if kind in q.kinds]
        for line in e.lines if message in line or (kind == "wrapper.compile_failure"
                                                   and "Failed compilation with" in line)]


@pytest.mark.parametrize("kind,excerpt,line", KEPT, ids=[f"{k}-{e.id}-{i}" for i, (k, e, _) in enumerate(KEPT)])
def test_a_later_runs_summary_keeps_every_real_line_the_lesson_needs(kind, excerpt, line):
    """helpers.launch.processes.summary_only: notebook 03's second run shows "Using a cached
    neff" in the 2023 spelling (||NCC_WRAPPER||), 2024's (||NEURON_CC_WRAPPER||) and Neuron
    2.29's ("[INFO]: Using a cached neff", as a trn1 script quotes it), a compile's end in 2.29's
    form ("[INFO]: Compilation Successfully Completed for model.MODULE_…"), and a failure however
    the wrapper or runtime words it."""
    assert SUMMARY_LINE.search(line), line


@pytest.mark.parametrize("message", ["Using a cached neff at /c/neuronxcc-9+ab/MODULE_1+2/model.neff",
                                     "Got a cached failed neff at /c/model.neff",
                                     "Another process must be compiling MODULE_1+2"])
def test_the_summary_keys_on_the_wrappers_message_not_on_its_tag(message):
    assert SUMMARY_LINE.search(f"2030-01-01 00:00:00.000001:  7  INFO ||SOME_NEW_TAG||: {message}")
    assert SUMMARY_LINE.search(f"2030-01-01 00:00:00.000001: 7 [INFO]: {message}")


def test_the_summary_leaves_out_the_compilers_progress_dots_and_the_cache_path_lines():
    noise = [line for e in of_kind("wrapper.compile_start", "wrapper.compile_success")
             for line in e.lines if set(line) == {"."} or "||NEURON_CACHE||" in line]
    assert noise and not [line for line in noise if SUMMARY_LINE.search(line)]


TOTALS = {"docs-npc-2023-summary": {"total": 2, "succeeded": 2, "failed": 0},
          "docs-nxdt-2024-08-summary": {"total": 22, "succeeded": 22, "failed": 0},
          "docs-nxdt-2024-11-summary": {"total": 36, "succeeded": 36, "failed": 0}}


@pytest.mark.parametrize("excerpt", of_kind("parallel_compile.summary"), ids=excerpt_id)
def test_parallel_compiles_totals_are_read_in_each_tag_it_printed(excerpt):
    """||PARALLEL_COMPILE|| (2024-08) and ||NEURON_PARALLEL_COMPILE|| (2023, 2024-11), with or
    without the leading "INFO: "."""
    assert parallel_compile_totals(excerpt.lines) == TOTALS[excerpt.id]


# A cache path in a log: <version dir>/<entry dir>[/<file>...]
CACHE_PATH = re.compile(r"((?:neuronxcc|USER_neuroncc)-[^/\s]+)/(MODULE_[^/\s.]+(?:\+[0-9a-f]+)?)((?:/[^\s/]+)*)")


def cache_paths(excerpt: Excerpt) -> list[tuple[str, str, str]]:
    return [(m[1], m[2], m[3].removesuffix(".")) for m in CACHE_PATH.finditer(excerpt.text)]


@pytest.mark.parametrize("excerpt", of_kind("cache.layout"), ids=excerpt_id)
def test_every_real_cache_name_is_read_as_a_cache_entry(excerpt, tmp_path):
    """The version directories (neuronxcc-<version>+<build>, 8 or 9 hex digits of build) and the
    MODULE_ names (decimal or 20 hex digits, then +<flags hash>; the 2022 SDK's
    USER_neuroncc-…/MODULE_<decimal>/) as users' logs and the docs show them: the compile
    notice's reader (module_entries) and the cache tool's scanner find each."""
    paths = cache_paths(excerpt)
    assert paths, excerpt.text
    for version_dir, module, rest in paths:
        entry = tmp_path / version_dir / module
        neff = entry / (rest.lstrip("/") if rest.endswith(".neff") else "model.neff")
        neff.parent.mkdir(parents=True, exist_ok=True)
        neff.write_bytes(b"\x00NEFF" + bytes(range(64)))
        if version_dir.startswith("neuronxcc-"):
            (entry / "model.done").touch()
    found = {e.key: e for e in scan_cache(tmp_path).entries}
    for version_dir, module, _ in paths:
        key = f"{version_dir}/{module}"
        assert key in found and found[key].state == "done", (key, sorted(found))
        if version_dir.startswith("neuronxcc-"):
            assert VERSION_DIR.fullmatch(version_dir) and MODULE_DIR.fullmatch(module)
            assert found[key].compiler_version == version_dir.removeprefix("neuronxcc-")
            assert module_state(tmp_path / key) == "done" and key in module_entries(tmp_path)
        else:
            assert found[key].layout == "legacy"


def stored_failure(excerpt: Excerpt) -> str:
    """The failure text the wrapper stored and printed back: from "Failed compilation with"."""
    text = excerpt.text[excerpt.text.index("Failed compilation with"):]
    return text.strip()


FAILURES = [e for e in of_kind("cache.failed_entry", "wrapper.compile_failure", "wrapper.cached_failure")
            if "Failed compilation with" in e.text]


@pytest.mark.parametrize("where", ["model.neff", "model.log"])
@pytest.mark.parametrize("excerpt", FAILURES, ids=excerpt_id)
def test_an_entry_holding_a_real_failure_text_reads_as_failed(excerpt, where, tmp_path):
    """A failed entry: model.hlo_module.pb and the wrapper's failure text, in model.neff (the
    wrapper reads it back from there: "Got a cached failed neff at …/model.neff … Failed
    compilation with …") or in model.log without a NEFF (the public cache's files)."""
    entry = tmp_path / "neuronxcc-2.15.141.0+d3cfc8ca" / "MODULE_d3007680bbf6cce0a595+4497a662"
    entry.mkdir(parents=True)
    (entry / "model.hlo_module.pb").write_bytes(b"\x08\x01hlo")
    (entry / where).write_text(stored_failure(excerpt))
    assert module_state(entry) == "failed"
    [scanned] = scan_cache(tmp_path).entries
    assert scanned.state == "failed"
    if where == "model.neff":  # the scanner shows the stored failure, as the wrapper prints it back
        assert scanned.failure.startswith("Failed compilation with ['neuronx-cc'")
    # the compile notice: a graph that failed before this run began, named as such
    notice = CompileNotice(cache_dir=tmp_path, poll_s=60).start()
    notice.stop()
    assert notice.still("failed") == [f"{entry.parent.name}/{entry.name}"]


def test_every_real_compiler_version_directory_matches_its_installed_version():
    """helpers.cache.location compares the installed neuronx-cc (its package version, no build)
    with the cache's directory names (with +<build>), and orders them by release."""
    dirs = sorted({v for e in of_kind("cache.layout") for v, _, _ in cache_paths(e) if v.startswith("neuronxcc-")})
    assert len(dirs) >= 6, dirs
    for name in dirs:
        version = name.removeprefix("neuronxcc-")
        assert same_compiler_version(version, version.split("+")[0]), name
        assert version_order(version)[:2] == tuple(int(x) for x in version.split(".")[:2]), name


@pytest.mark.parametrize("text", [line for e in of_kind("compiler.error", "wrapper.cached_failure")
                                  for line in e.lines if re.search(r"\[[A-Z_]+\d{3}\]", line)])
def test_a_neff_holding_a_real_compiler_error_reads_as_failed(text, tmp_path):
    """A model.neff whose text is neuronx-cc's error line (its code: [LUR015], [NLA001]) or the
    wrapper's failure as a 2.15 log prints it back (after a space), not a program."""
    entry = tmp_path / "neuronxcc-2.15.141.0+d3cfc8ca" / "MODULE_d3007680bbf6cce0a595+4497a662"
    entry.mkdir(parents=True)
    (entry / "model.hlo_module.pb").write_bytes(b"\x08\x01hlo")
    (entry / "model.neff").write_text(text + "\n")
    assert module_state(entry) == "failed"


def test_the_only_failed_entry_names_in_real_logs_are_what_the_reader_knows():
    names = {rest.strip("/") for e in of_kind("cache.failed_entry") for _, _, rest in cache_paths(e)}
    assert names <= {"model.neff", "model.log", "model.done"}, names


@pytest.mark.parametrize("excerpt", of_kind("monitor.report"), ids=excerpt_id)
def test_neuron_monitors_report_is_read_per_core(excerpt):
    """The Neuron 2.31 guide's neuroncore_counters example in the report structure the same guide
    gives (its "[...]" for more cores left out: no real report from a trn1 is public)."""
    group = "\n".join(line for line in excerpt.lines if line.strip() != "[...]")
    group = re.sub(r",(\s*})", r"\1", group)  # the comma before the left-out "[...]"
    report = {"neuron_runtime_data": [{"pid": 7, "error": "",
                                       "report": json.loads("{" + group + "}")}]}
    sample = parse_neuron_monitor_report(json.dumps(report), time_s=0.0)
    assert sample.busy_percent == {"NeuronCore 0": 42.01, "NeuronCore 1": 42.02}
    assert sample.errors == []


@pytest.mark.parametrize("excerpt", of_kind("packages.installed"), ids=excerpt_id)
def test_installed_versions_with_their_build_label_match_their_pins(excerpt, tmp_path, monkeypatch):
    """Neuron's wheels install as <version>+<build> (torch-neuronx 2.9.0.2.13.26312+8e870898);
    requirements-neuron.txt pins <version>: the version-pin check takes one for the other."""
    installed = dict(line.split() for line in excerpt.lines)
    pins = tmp_path / "requirements-neuron.txt"
    pins.write_text("".join(f"{name}=={version.split('+')[0]}\n" for name, version in installed.items()))
    monkeypatch.setattr("importlib.metadata.version", installed.__getitem__)
    result = check_pins(requirement_files=(pins,), packages=tuple(installed))
    assert result.ok, result.message
    assert "torch-neuronx 2.9.0.2.13.26312+8e870898" in result.message


def squeeze(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("message", BUSY_CORE_MESSAGES, ids=lambda m: m.text[:40])
def test_every_busy_core_message_a_check_quotes_is_in_real_output_or_says_it_is_not(message):
    """helpers.setup.core_holders quotes these in its errors: each is in the corpus's runtime
    lines (the runtime pads its columns with spaces), or says where it was seen instead."""
    real = [squeeze(line) for e in of_kind("runtime.busy_core") for line in e.lines]
    pattern = re.escape(squeeze(message.text)).replace("…", ".*")
    if "heading" in message.where:  # the docs' title for the error: its words, not its cores
        said = re.escape(squeeze(message.text.split("Requested:")[0]))
        assert any(re.search(said, line) for line in real), message.text
    elif message.source:
        assert any(re.search(pattern, line) for line in real), message.text
    else:
        assert "not quoted" in message.where and "runtime.busy_core (newer form)" in ABSENT


# ---- the trn1 double speaks the newest real form of each kind (it imports no product code) ----

def double_rules():
    import importlib.util
    path = Path(__file__).parent / "trn1_double" / "trn1_platform" / "rules.py"
    spec = importlib.util.spec_from_file_location("trn1_double_rules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NEFF = "/var/tmp/neuron-compile-cache/neuronxcc-2.26.6360.0+d0ab1e26/MODULE_1+d41d8cd9/model.neff"
DOUBLE_LINES = {  # kind: (what the newest real line says, the double's line)
    "wrapper.cache_hit": ("Using a cached neff", lambda r: r.CACHED_NEFF_LINE.format(neff=NEFF)),
    "wrapper.compile_success": ("Compilation Successfully Completed", lambda r: r.COMPLETED_LINE.format(
        module="MODULE_1+d41d8cd9")),
    "wrapper.cached_failure": ("Got a cached failed neff", lambda r: r.CACHED_FAILURE_LINE.format(
        neff=NEFF, failure="Failed compilation with ['neuronx-cc']: x")),
    "wrapper.compile_failure": ("Failed compilation with", lambda r: r.COMPILE_FAILED_LINE.format(
        failure="Failed compilation with ['neuronx-cc']: x")),
    "parallel_compile.summary": ("Total graphs", lambda r: r.NPC_PREFIX + "Total graphs: 2"),
    "parallel_compile.extract": ("Extracting graphs", lambda r: r.EXTRACTING_LINE.format(path="/c/m.pb")),
}


@pytest.mark.parametrize("kind", sorted(DOUBLE_LINES))
def test_the_double_prints_the_newest_real_form_of_each_kind(kind):
    """The same level, tag and words as the newest public log of that kind (the docs' 2023
    examples say ||NCC_WRAPPER|| and INFO for a cached failure; users' logs from 2024 on say
    ||NEURON_CC_WRAPPER||, and ERROR for failures; from Neuron 2.29 a cache hit and a compile's
    end say "[INFO]:", with no tag)."""
    says, line_of = DOUBLE_LINES[kind]
    excerpt, real = newest(kind, says)
    form = TAGGED.search(real)[0]
    double_line = line_of(double_rules())
    assert form in double_line, (excerpt.id, form, double_line)
    assert SUMMARY_LINE.search(double_line)


def test_the_double_opens_and_ends_a_compile_as_the_newest_logs_do():
    """"Compiler status PASS" closes a compile in every log from 2023 on; the 2022 tutorial's
    "Exiting with a successfully compiled graph" after it (a line of its own) is gone. The newest logs (Neuron 2.29
    on) print no "Call compiler with cmd" before the compile, and the wrapper's "Compilation
    Successfully Completed" line after "Compiler status PASS": so does the double."""
    rules = double_rules()
    for excerpt in of_kind("wrapper.compile_success"):
        if excerpt.year >= "2023":
            assert any(line.endswith("Compiler status PASS") for line in excerpt.lines) and not any(
                "||: Exiting with a successfully compiled graph" in line for line in excerpt.lines)
    latest = max(of_kind("wrapper.compile_success"), key=lambda e: e.date)
    assert latest.year >= "2026" and not any("Call compiler with cmd" in line for line in latest.lines)
    after = latest.lines[latest.lines.index("Compiler status PASS") + 1]
    assert TAGGED.search(after)[0] in rules.COMPLETED_LINE
    assert rules.COMPILED_LINES == ("Compiler status PASS",) and not hasattr(rules, "COMPILE_START_LINE")


# ---- what the notebooks and the checks' facts say a trn1 prints ----

REPO = Path(__file__).resolve().parents[1]
# (where, what it says a trn1 prints, the corpus kind that shows it; None: marked "from the
# docs only" in the same notebook cell)
PROMISED = [
    ("notebooks/03_compile_cache.ipynb", "Using a cached neff", "wrapper.cache_hit"),
    ("helpers/checks/expected.py", "Using a cached neff at …", "wrapper.cache_hit"),
    ("helpers/checks/expected.py", "neuronxcc-<version>/MODULE_<hash>+<flags>/", "cache.layout"),
    ("helpers/checks/expected.py", "USER_neuroncc-*", "cache.layout"),
    ("helpers/setup/core_holders.py", "NeuronCore(s) not available - ", "runtime.busy_core"),
    ("notebooks/02_single_core_xla.ipynb", "95 it/s", None),
    ("notebooks/02_single_core_xla.ipynb", "192 it/s", None),
    ("notebooks/04_torchrun_data_parallel.ipynb", "1.7× the images of one", None),
    ("notebooks/04_torchrun_data_parallel.ipynb", "Another process must be compiling …", "wrapper.lock_wait"),
]


def texts_of(where: str) -> list[str]:
    path = REPO / where
    if path.suffix == ".ipynb":
        return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    return [path.read_text()]


def as_pattern(said: str) -> str:
    """A promised line as a regex: <placeholders>, * and … stand for any part of a name."""
    parts = re.split(r"<[a-z]+>|\*|…", said)
    return r"[^\s/]*".join(re.escape(p) for p in parts)


@pytest.mark.parametrize("where,said,kind", PROMISED, ids=[p[1][:30] for p in PROMISED])
def test_every_line_the_workbook_says_a_trn1_prints_is_real_or_marked_from_the_docs(where, said, kind):
    cells = [t for t in texts_of(where) if said in t]
    assert cells, f"{where} no longer says {said!r}: update PROMISED"
    if kind is None:
        assert all("from the docs only" in cell for cell in cells), (where, said)
        return
    real = [line for e in of_kind(kind) + [q for q in QUOTED if kind in q.kinds] for line in e.lines]
    assert any(re.search(as_pattern(said), line) for line in real), (said, kind)


# ---- what a trn1 prints, shown beside the stand-in's output ----

TRN1_LOG_BLOCK = re.compile(r"```text\n(.*?)\n```", re.S)  # a notebook's ```text block: a trn1's log


def shown_trn1_logs():
    """(notebook, cell text, lines) of every ```text block in the notebooks' markdown."""
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                for block in TRN1_LOG_BLOCK.findall(text):
                    yield path.name, text, block.splitlines()


def test_each_trn1_log_a_notebook_shows_is_verbatim_dated_and_sourced():
    """Each shown line is a whole line of one corpus excerpt, unedited (lines may be left out);
    the cell links that excerpt's source and gives its date, and says whose it is: a user's log,
    or the docs' example. Notebooks 02, 03 and 04 show one: a compile, a cache hit, two workers
    sharing one compile."""
    shown = list(shown_trn1_logs())
    assert {name[:2] for name, _, _ in shown} >= {"02", "03", "04"}, shown
    for name, cell, lines in shown:
        matches = [e for e in EXCERPTS if f"({e.url})" in cell and set(lines) <= set(e.lines)]
        assert matches, (name, lines, "not a corpus excerpt's lines under a link to its source")
        excerpt = matches[0]
        assert excerpt.date[:10] in cell, (name, excerpt.id, excerpt.date)
        assert ("a user's" in cell.lower()) == (excerpt.origin == "user log"), (name, excerpt.id, excerpt.origin)
        assert excerpt.origin == "user log" or "from the docs" in cell, (name, excerpt.id)

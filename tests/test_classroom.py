"""make reset and the classroom cache: real git repositories, real script runs, real archives."""
import os
import subprocess
import sys

import pytest

from helpers.cache.demo import build_demo_cache
from helpers.cache.location import CACHE_URL_ENV
from helpers.cache.scan import scan_cache
from helpers.classroom.reset import reset
from tests.paths import REPO_ROOT

STAMP = ".venv/.requirements-stamp"  # make -o: do not re-install the venv inside a test


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def workbook(tmp_path):
    """A git checkout shaped like the workbook, used for a while: edits, outputs, data."""
    repo = tmp_path / "workbook"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "notebooks" / "01_cpu.ipynb").write_text('{"committed": true}\n')
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "workbook")
    (repo / "notebooks" / "01_cpu.ipynb").write_text('{"edited by the learner": true}\n')
    (repo / "notebooks" / "mine.ipynb").write_text("{}\n")  # the learner's own: kept
    (repo / "notebooks" / ".ipynb_checkpoints").mkdir()
    (repo / "notebooks" / ".ipynb_checkpoints" / "01_cpu-checkpoint.ipynb").write_text("{}")
    for name in ("checkpoints", "results", "data", ".venv"):
        (repo / name).mkdir()
        (repo / name / "file").write_text(name)
    return repo


def test_reset_restores_the_notebooks_and_removes_run_outputs(workbook):
    said = []
    assert reset(workbook, yes=True, out=said.append) == 0
    text = "\n".join(said)
    assert "notebooks/01_cpu.ipynb" in text and "checkpoints/" in text and "results/" in text
    assert text.index("notebooks/01_cpu.ipynb") < text.index("Reset done"), "shown first"
    assert said[-1].endswith("run the notebooks again in order from 01."), said  # what 04 needs
    assert (workbook / "notebooks" / "01_cpu.ipynb").read_text() == '{"committed": true}\n'
    assert (workbook / "notebooks" / "mine.ipynb").exists()
    assert not (workbook / "checkpoints").exists() and not (workbook / "results").exists()
    assert not (workbook / "notebooks" / ".ipynb_checkpoints").exists()
    assert (workbook / "data" / "file").exists() and (workbook / ".venv" / "file").exists()
    assert reset(workbook, yes=True, out=said.append) == 0 and said[-1].startswith("Nothing to reset")


def test_reset_asks_first_and_changes_nothing_without_a_yes(workbook):
    said = []
    assert reset(workbook, out=said.append) == 1  # no terminal to ask: says how to go ahead
    assert "--yes" in said[-1]
    assert reset(workbook, ask=lambda prompt: "n", out=said.append) == 1
    assert "edited" in (workbook / "notebooks" / "01_cpu.ipynb").read_text()
    assert (workbook / "checkpoints" / "file").exists()
    assert reset(workbook, ask=lambda prompt: "y", out=said.append) == 0
    assert not (workbook / "checkpoints").exists()


def test_reset_removes_a_symlinked_output_dir_but_not_what_it_points_to(workbook, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.pt").write_text("x")
    (workbook / "results" / "file").unlink()
    (workbook / "results").rmdir()
    (workbook / "results").symlink_to(elsewhere)
    assert reset(workbook, yes=True, out=lambda _: None) == 0
    assert not (workbook / "results").exists() and (elsewhere / "precious.pt").exists()


def test_reset_outside_a_git_checkout_says_so(tmp_path):
    said = []
    assert reset(tmp_path, yes=True, out=said.append) == 2
    assert len(said) == 1 and "not a git checkout" in said[0]


def test_make_reset_passes_yes_only_when_asked():
    plan = subprocess.run(["make", "-n", "-o", STAMP, "reset", "YES=1"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "-m helpers.classroom reset --yes" in plan
    plan = subprocess.run(["make", "-n", "-o", STAMP, "reset"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "--yes" not in plan


def test_make_classroom_cache_and_check_run_the_classroom_pass():
    assert "-m helpers.classroom cache --archive build/classroom-cache.tar.gz" in make_plan("classroom-cache")
    assert "-m helpers.classroom check" in make_plan("classroom-check")


def test_make_notebooks_runs_the_notebooks_then_the_solutions_and_records_their_graphs():
    plan = make_plan("notebooks")
    assert ("-m helpers.classroom notebooks --notebooks notebooks/00_setup.ipynb "
            "notebooks/01_cpu_training.ipynb") in plan
    assert "--solutions notebooks/solutions/01_cpu_training.py" in plan
    assert "-m tests.browser.trace_viewer_png" in plan, "06's Trace Viewer picture is refreshed"
    assert plan.rstrip().splitlines()[-1].startswith(".venv/bin/python -m helpers.classroom.time_budget --counts"), (
        "the clock's figures are restated last, from the outputs just written")
    part = make_plan("notebooks", "NOTEBOOKS=notebooks/00_setup.ipynb", "SOLUTIONS=").rstrip().splitlines()
    assert part[-2].rstrip().endswith("notebooks --notebooks notebooks/00_setup.ipynb --solutions"), part
    assert "trace_viewer_png" not in "\n".join(part), "06's picture only when 06 runs"


def test_notebook_06_shows_a_committed_picture_of_the_real_trace_viewer():
    """A live viewer is blank on GitHub: 06 shows the picture make notebooks takes of one."""
    from PIL import Image, ImageStat

    from tests.browser.trace_viewer_png import PICTURE, SIZE

    notebook = (REPO_ROOT / "notebooks" / "06_inside_a_run.ipynb").read_text()
    assert f"images/{PICTURE.name}" in notebook
    with Image.open(PICTURE) as picture:
        assert picture.format == "PNG" and picture.size == (SIZE["width"], SIZE["height"])
        spread = ImageStat.Stat(picture.convert("L")).stddev[0]
    assert spread > 20, "drawn tracks, not a blank page"


def test_classroom_check_without_a_record_says_to_make_one_first(tmp_path):
    env = {**os.environ, "PJRT_DEVICE": "CPU"}  # the stand-in's record, whatever the machine
    done = subprocess.run([sys.executable, "-m", "helpers.classroom", "check", "--record",
                           str(tmp_path / "classroom_graphs.json")], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "has no record for xla-cpu" in done.stderr
    assert "run `make notebooks` (or `make classroom-cache`) first" in done.stderr


def test_make_classroom_import_loads_an_exported_archive(tmp_path):
    teacher = build_demo_cache(tmp_path / "teacher", labels=["done_hex", "failed"])
    archive = tmp_path / "classroom.tar.gz"
    subprocess.run([sys.executable, "-m", "helpers.cache", "export", "--root", str(teacher),
                    "--no-progress", str(archive)], check=True, capture_output=True)
    student = tmp_path / "student-cache"
    env = {k: v for k, v in os.environ.items() if k != "NEURON_CC_FLAGS"}
    env[CACHE_URL_ENV] = str(student)
    done = subprocess.run(["make", "--no-print-directory", "-o", STAMP, "classroom-import",
                           f"ARCHIVE={archive}"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [e.state for e in scan_cache(student).entries] == ["done"], "done entries only"

    missing = subprocess.run(["make", "--no-print-directory", "-o", STAMP, "classroom-import"],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "usage: make classroom-import ARCHIVE=" in missing.stderr


def make_plan(*args):
    return subprocess.run(["make", "-n", "--no-print-directory", "-o", STAMP, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout


def test_make_lab_listens_where_told_and_allows_root_only_as_root():
    lab = next(line for line in make_plan("lab").splitlines() if "--ServerApp.ip" in line)
    assert "--ServerApp.ip=127.0.0.1 --ServerApp.port=8888" in lab
    assert ("--allow-root" in lab) == (os.geteuid() == 0)
    lab = next(line for line in make_plan("lab", "LAB_IP=0.0.0.0", "LAB_PORT=8890").splitlines()
               if "--ServerApp.ip" in line)
    assert "--ServerApp.ip=0.0.0.0 --ServerApp.port=8890" in lab


def test_make_test_installs_the_browser_and_slurm_before_pytest():
    plan = make_plan("test")
    for installer in ("install_browser.sh", "install_slurm.sh"):
        assert installer in plan, plan
        assert plan.index(installer) < plan.index("-m pytest")


def test_on_trainium_the_check_counts_the_graphs_a_pass_compiled_into_the_cache(tmp_path):
    from helpers.cache.demo import DEMO_ENTRIES
    from helpers.classroom.notebook_pass import check_cache, done_entries

    imported = build_demo_cache(tmp_path / "imported", labels=["done_hex"])
    after = build_demo_cache(tmp_path / "after", labels=["done_hex", "done_big", "failed"])
    assert done_entries(tmp_path / "absent") == set(), "no cache yet: nothing cached"
    said = []
    assert check_cache(done_entries(imported), after, on_line=said.append) == 1
    assert said[0].startswith(f"1 graphs were compiled into {after} during this pass")
    assert DEMO_ENTRIES["done_big"].key in said[0], "named; the failed compile is not a graph"
    assert check_cache(done_entries(after), after, on_line=said.append) == 0
    assert said[1].startswith("0 graphs compiled into")


def test_a_full_notebooks_pass_forgets_earlier_results_and_keeps_the_checkpoints(tmp_path):
    # Stage comparisons print every results file: a stale one would be committed with them.
    from helpers.classroom.notebook_pass import forget_earlier_results

    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    for name in ("results_bf16_fp32.json", "results_cpu.json", "checkpoint_cpu.pt", "torchrun_w2.log"):
        (checkpoints / name).write_text("{}")
    said = []
    forget_earlier_results(tmp_path, on_line=said.append)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_cpu.pt", "torchrun_w2.log"]
    assert said == [f"A fresh pass: removing the earlier results in {checkpoints}: "
                    "results_bf16_fp32.json, results_cpu.json"]
    forget_earlier_results(tmp_path, on_line=said.append)
    assert len(said) == 1, "nothing left to remove: nothing said"

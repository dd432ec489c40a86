"""The browser test's own plumbing, without a browser: where it looks for Chromium, what it says
when it finds none (skip outside CI, fail under CI=true), the copy of the workbook it serves, and
how it reads a notebook file the Jupyter server may be saving."""
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser.find_browser import find_chromium, in_ci, is_snap, profile_parent
from tests.browser.lab_page import whole_notebook_text
from tests.browser.lab_server import browser_problem, make_workspace
from tests.paths import REPO_ROOT


def fake_browser(path: Path, text: str = "#!/bin/sh\necho Chromium 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_missing_browser_is_named_with_the_fix(tmp_path):
    problem = browser_problem({"CHROMIUM": str(tmp_path / "no-chromium"), "PATH": ""})
    assert problem.startswith(f"no Chromium found (looked at CHROMIUM={tmp_path / 'no-chromium'})")
    assert "make browser" in problem and "snap install chromium" in problem


def test_chromium_is_looked_for_in_order(tmp_path):
    nowhere = (tmp_path / "usr-bin-chromium", tmp_path / "snap-bin-chromium")
    bin_dir = tmp_path / "bin"
    assert find_chromium({"PATH": str(bin_dir)}, fixed_places=nowhere) is None
    chrome = fake_browser(bin_dir / "google-chrome")
    assert find_chromium({"PATH": str(bin_dir)}, fixed_places=nowhere) == chrome
    wrapper = fake_browser(bin_dir / "chromium-browser", "#!/bin/sh\nexec /snap/bin/chromium \"$@\"\n")
    assert find_chromium({"PATH": str(bin_dir)}, fixed_places=nowhere) == wrapper
    snap = fake_browser(nowhere[1])
    assert find_chromium({"PATH": str(bin_dir)}, fixed_places=nowhere) == snap
    debian = fake_browser(nowhere[0])
    assert find_chromium({"PATH": str(bin_dir)}, fixed_places=nowhere) == debian
    chosen = fake_browser(tmp_path / "mine" / "chrome")
    assert find_chromium({"CHROMIUM": str(chosen)}, fixed_places=nowhere) == chosen
    # a CHROMIUM that is not there is not quietly replaced by another browser
    assert find_chromium({"CHROMIUM": str(tmp_path / "gone")}, fixed_places=nowhere) is None


def test_a_snap_chromium_gets_its_profile_where_the_snap_may_write(tmp_path):
    # Ubuntu's chromium-browser is a script that runs the snap, which cannot see /tmp.
    wrapper = fake_browser(tmp_path / "chromium-browser", "#!/bin/sh\nexec /snap/bin/chromium \"$@\"\n")
    debian = fake_browser(tmp_path / "chromium", "\x7fELF" + "x" * 100)
    assert is_snap(wrapper) and not is_snap(debian)
    assert profile_parent(wrapper, tmp_path) == Path.home() / "snap/chromium/common/workbook-browser-test"
    assert profile_parent(debian, tmp_path) == tmp_path
    assert in_ci({"CI": "true"}) and not in_ci({}) and not in_ci({"CI": "false"})


def run_browser_selftest(tmp_path, **env_changes):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(CHROMIUM=str(tmp_path / "no-chromium"), **env_changes)
    return subprocess.run(  # (no nbval: the notebook-output plugin has no part in this)
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:nbval", "-rs", "-q",
         "tests/browser/test_lab_notebooks.py::test_the_detector_catches_errors_broken_widgets_and_console_errors"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.e2e
def test_without_a_browser_the_test_is_skipped_outside_ci_and_fails_under_ci(tmp_path):
    skipped = run_browser_selftest(tmp_path)
    assert skipped.returncode == 0, skipped.stdout[-2000:]
    assert re.search(r"\b1 skipped\b", skipped.stdout), skipped.stdout[-2000:]  # pytest's count, not 11
    assert "browser test skipped: no Chromium found" in skipped.stdout
    failed = run_browser_selftest(tmp_path, CI="true")
    assert failed.returncode != 0, failed.stdout[-2000:]
    assert "the browser test cannot run (CI=true): no Chromium found" in failed.stdout


def test_the_served_notebooks_are_a_copy_beside_the_real_code(tmp_path):
    notebooks = make_workspace(REPO_ROOT, tmp_path / "workbook")
    assert notebooks == tmp_path / "workbook" / "notebooks"
    assert not notebooks.is_symlink()
    names = sorted(p.name for p in notebooks.glob("[0-9][0-9]_*.ipynb"))
    assert names == sorted(p.name for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    # the notebooks' ../mnist_mlp/... paths resolve to the repo's own scripts
    assert (notebooks / ".." / "mnist_mlp" / "train.py").resolve() == REPO_ROOT / "mnist_mlp" / "train.py"
    first = notebooks / names[0]
    original = (REPO_ROOT / "notebooks" / names[0]).read_bytes()
    first.write_text(json.dumps({"overwritten": True}))
    assert (REPO_ROOT / "notebooks" / names[0]).read_bytes() == original, "the repo's stays as it was"
    assert not (tmp_path / "workbook" / ".git").exists(), "no git in the copy: nothing to commit by mistake"


# ---- make browser (tests/browser/install_browser.sh), with the system's tools replaced by fakes
# that log their arguments: what it would install, as root, on Debian and on Ubuntu

def run_make_browser(tmp_path, os_id: str, uid: str = "0", emoji_installed: bool = False):
    fakes, log = tmp_path / "fakes", tmp_path / "calls.log"
    fakes.mkdir()
    status = "install ok installed" if emoji_installed else "unknown ok not-installed"
    scripts = {"id": f"echo {uid}", "dpkg-query": f"echo '{status}'", "fc-list": "true",
               "apt-get": f'echo "apt-get $*" >> {log}', "snap": f'echo "snap $*" >> {log}',
               "sudo": "exit 1"}
    for name, body in scripts.items():
        fake_browser(fakes / name, f"#!/bin/sh\n{body}\n")
    os_release = tmp_path / "os-release"
    os_release.write_text(f"ID={os_id}\n")
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "HOME": str(tmp_path), "CHROMIUM": str(tmp_path / "none"),
           "OS_RELEASE": str(os_release)}
    result = subprocess.run(["bash", "tests/browser/install_browser.sh"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout, log.read_text() if log.exists() else ""


def test_make_browser_installs_chromium_and_the_emoji_font_on_debian(tmp_path):
    out, calls = run_make_browser(tmp_path, "debian")
    assert "apt-get install -y -q chromium" in calls
    assert "apt-get install -y -q fonts-noto-color-emoji" in calls
    assert calls.count("apt-get update") == 1


def test_make_browser_uses_the_snap_on_ubuntu_and_still_adds_the_font(tmp_path):
    out, calls = run_make_browser(tmp_path, "ubuntu")
    assert "snap install chromium" in calls and "install -y -q chromium" not in calls
    assert "apt-get install -y -q fonts-noto-color-emoji" in calls


def test_make_browser_as_a_user_without_sudo_says_what_to_run(tmp_path):
    out, calls = run_make_browser(tmp_path, "ubuntu", uid="1000")
    assert calls == ""
    assert "install Chromium (a snap on Ubuntu) yourself: sudo snap install chromium" in out
    assert "sudo apt-get install -y fonts-noto-color-emoji" in out
    assert "No Chromium: make test skips the browser test (under CI=true it fails)." in out


def test_loadgroup_keeps_an_xdist_group_on_one_worker(tmp_path):
    """make test's split (-n 2 --dist loadgroup) runs the notebook chain on one worker, so each
    notebook executes once: what the pinned pytest and pytest-xdist do with xdist_group marks
    (pytest 9.2.0 loses them: pytest-dev/pytest-xdist#1386, hence the pin in requirements.txt)."""
    import re
    import subprocess
    import sys

    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(
            "import pytest\n\n@pytest.mark.xdist_group(name='chain')\n"
            "@pytest.mark.parametrize('i', range(4))\ndef test_in_group(i):\n    pass\n\n"
            "@pytest.mark.parametrize('i', range(4))\ndef test_free(i):\n    pass\n")
    # Only xdist among the plugins: the others (nbval's nbformat, its jsonschema grammar) cost
    # each of the three processes seconds and take no part in the split.
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist", "-n", "2", "--dist",
                           "loadgroup", "-v", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                          env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    workers = {m.group(1) for m in re.finditer(r"\[(gw\d)\].*test_in_group", done.stdout)}
    assert len(re.findall(r"PASSED .*test_in_group", done.stdout)) == 8 and len(workers) == 1, (
        done.stdout[-2000:])


class FileBeingSaved:
    """A notebook file as successive reads find it while the Jupyter server saves it in place."""
    name = "06_inside_a_run.ipynb"

    def __init__(self, reads):
        self.reads = iter(reads)

    def read_text(self):
        return next(self.reads)


def test_a_notebook_file_met_mid_save_is_read_again_until_whole():
    whole = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    assert whole_notebook_text(FileBeingSaved(["", whole[:20], whole])) == whole
    with pytest.raises(AssertionError, match=r"^06_inside_a_run\.ipynb held no whole notebook for 0 s \(0 characters\)$"):
        whole_notebook_text(FileBeingSaved(itertools.repeat("")), guard_s=0.3)

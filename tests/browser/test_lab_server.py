"""The browser test's own plumbing, without a browser: what it says when it cannot run, and the
copy of the workbook it serves."""
import json
from pathlib import Path

from tests.browser.lab_server import browser_problem, make_workspace
from tests.conftest import REPO_ROOT


def test_a_missing_browser_is_named_with_the_fix(tmp_path):
    problem = browser_problem(tmp_path / "no-chromium")
    assert problem.startswith(f"no Chromium at {tmp_path / 'no-chromium'}")
    assert "make browser" in problem and "apt-get install -y chromium" in problem


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

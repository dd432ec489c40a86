"""Lint is part of the suite: ruff (pinned in requirements.txt, configured in pyproject.toml) finds
nothing in the code, the tests and the notebooks. `make lint` runs the same, with --fix to try."""
import subprocess
import sys

from tests.paths import REPO_ROOT


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_the_house_asks_for_are_on():
    import tomllib

    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert {"E4", "E7", "E9", "F", "B", "I"} <= set(config["select"])

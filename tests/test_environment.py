"""The pins: requirements.txt and environment.yml agree, and the venv has what they say."""
import importlib.metadata
import re

import yaml

from tests.conftest import REPO_ROOT

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)$")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_pins():
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            m = PIN.match(line)
            assert m, f"requirements.txt: {line!r} is not pinned exactly (name==version)"
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def conda_pins():
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]
    return {normalize(m.group(1)): m.group(2) for m in map(PIN.match, pip_section)}


def test_the_stack_is_pinned_exactly():
    pins = requirement_pins()
    assert pins["torch"] == "2.9.0" and pins["torch-xla"] == "2.9.0"
    assert pins["torchvision"] == "0.24.0"
    for tool in ("jupyterlab", "ipywidgets", "matplotlib", "tqdm", "numpy", "pytest", "nbval"):
        assert tool in pins


def test_environment_yml_names_the_same_pins():
    assert conda_pins() == requirement_pins()


def test_installed_versions_match_the_pins():
    for name, version in requirement_pins().items():
        installed = importlib.metadata.version(name)
        assert installed.split("+")[0] == version, f"{name}: installed {installed}, pinned {version}"


def test_neuron_extras_come_from_the_neuron_repository():
    text = (REPO_ROOT / "requirements-neuron.txt").read_text()
    assert "--extra-index-url https://pip.repos.neuron.amazonaws.com" in text
    assert re.search(r"^torch-neuronx==2\.9\.\*$", text, re.M)
    assert re.search(r"^neuronx-cc==2\.\*$", text, re.M)

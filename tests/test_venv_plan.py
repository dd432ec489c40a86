"""make venv's three paths (helpers/setup/venv_plan.py), decided from real directory layouts: a Neuron
DLAMI venv made by `python -m venv` holding dist-info METADATA of the versions under test, a
Neuron device node (a file here), or neither. The plans are checked down to the exact pip command
lines; the DLAMI layering itself is built and run."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from helpers.setup import venv_plan
from helpers.setup.venv_plan import BASE_PTH, CPU_INDEX, Refusal, plan
from tests.paths import REPO_ROOT

PIP = ["-m", "pip", "install", "--disable-pip-version-check"]
NEURON_2_31 = {"torch": "2.9.0+cpu", "torch_xla": "2.9.0", "torchvision": "0.24.0+cpu",
               "torch_neuronx": "2.9.0.2.15.32035", "neuronx_cc": "2.26.6360.0"}


def make_venv(path: Path, *flags: str, python: str = sys.executable) -> Path:
    subprocess.run([python, "-m", "venv", "--without-pip", *flags, str(path)], check=True)
    return path


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def fake_dlami(tmp_path: Path, versions=NEURON_2_31) -> Path:
    """/opt/aws_neuronx_venv_pytorch_2_9 as the DLAMI lays it out: a venv (bin/python a symlink
    to a real interpreter), the packages' dist-info, and a console script of the venv's own."""
    base = make_venv(tmp_path / "opt" / "aws_neuronx_venv_pytorch_2_9")
    for name, version in versions.items():
        info = site_packages(base) / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                       f"Version: {version}\n")
    torchrun = base / "bin" / "torchrun"
    torchrun.write_text(f"#!{base}/bin/python\nimport sys\nprint(sys.prefix)\n")
    torchrun.chmod(0o755)
    return base


def neuron_device(tmp_path: Path) -> Path:
    device = tmp_path / "dev" / "neuron0"
    device.parent.mkdir()
    device.touch()
    return device


def test_on_the_dlami_the_venv_is_layered_on_it_and_installs_only_the_extras(tmp_path):
    base, venv = fake_dlami(tmp_path), tmp_path / "work" / ".venv"
    p = plan(venv, dlami_venv=str(base), neuron_device=str(neuron_device(tmp_path)))
    assert p.path == "dlami" and p.base.path == base and not p.remove
    assert p.base.site == [str(site_packages(base))]
    assert p.create == [f"{base}/bin/python", "-m", "venv", str(venv)]
    py = f"{venv}/bin/python"
    # requirements.txt whole: pip finds torch, torch-xla and torchvision in the DLAMI venv
    # (checked just above to be the pinned ones) and downloads only the notebook packages.
    assert p.pip == [[py, *PIP, "-r", "requirements.txt"],
                     [py, *PIP, "-q", "--no-deps", "-e", "."]]
    assert p.notes[0] == (
        f"Using the Neuron DLAMI venv {base} (Python {sys.version.split()[0]}) as the base of "
        f"{venv}: torch 2.9.0+cpu, torch-xla 2.9.0, torchvision 0.24.0+cpu, torch-neuronx "
        "2.9.0.2.15.32035, neuronx-cc 2.26.6360.0, as pinned.")


@pytest.mark.parametrize("changed, says", [
    ({"torch": "2.9.1+cpu", "torchvision": "0.24.1+cpu"},
     "torch 2.9.1+cpu (pinned 2.9.0); torchvision 0.24.1+cpu (pinned 0.24.0)"),
    ({"torch": "2.9.1+cu128"}, "torch 2.9.1+cu128 (pinned 2.9.0)"),
    ({"torch_neuronx": "2.9.0.2.14.27725", "neuronx_cc": "2.25.3371.0"},  # a Neuron 2.30 DLAMI
     "torch-neuronx 2.9.0.2.14.27725 (pinned 2.9.0.2.15.32035); "
     "neuronx-cc 2.25.3371.0 (pinned 2.26.6360.0)"),
])
def test_other_versions_in_the_dlami_venv_are_refused_with_what_to_do(tmp_path, changed, says):
    versions = {**NEURON_2_31, **changed}
    base = fake_dlami(tmp_path, versions)
    with pytest.raises(Refusal) as refused:
        plan(tmp_path / ".venv", dlami_venv=str(base), neuron_device=str(neuron_device(tmp_path)))
    message = str(refused.value)
    assert message.startswith(f"The Neuron DLAMI venv {base} holds {says}.\n")
    assert "\n    make venv DLAMI_VENV=\n" in message and "Neuron 2.31" in message


def test_a_refusal_over_a_layered_venv_says_to_remove_it_first(tmp_path):
    base = fake_dlami(tmp_path, {**NEURON_2_31, "torch": "2.9.1+cpu"})
    venv = make_venv(tmp_path / ".venv", python=f"{base}/bin/python")
    (site_packages(venv) / BASE_PTH).write_text("")  # layered on an earlier DLAMI venv
    with pytest.raises(Refusal, match="\n    make clean-venv && make venv DLAMI_VENV=\n"):
        plan(venv, dlami_venv=str(base))


def test_a_dlami_venv_without_torch_xla_is_refused(tmp_path):
    versions = {k: v for k, v in NEURON_2_31.items() if k != "torch_xla"}
    base = fake_dlami(tmp_path, versions)
    with pytest.raises(Refusal, match=r"holds torch-xla missing \(pinned 2\.9\.0\)"):
        plan(tmp_path / ".venv", dlami_venv=str(base))


def test_the_command_line_refuses_with_exit_status_2_and_the_message(tmp_path):
    base = fake_dlami(tmp_path, {**NEURON_2_31, "torch": "2.9.1+cpu"})
    result = subprocess.run([sys.executable, "-m", "helpers.setup.venv_plan", "--venv",
                             str(tmp_path / ".venv"), "--dlami-venv", str(base), "--dry-run"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"make venv: The Neuron DLAMI venv {base} holds torch "
                                    "2.9.1+cpu (pinned 2.9.0).")


def test_trainium_without_the_dlami_takes_torch_from_the_cpu_wheel_index(tmp_path):
    venv = tmp_path / ".venv"
    p = plan(venv, python="python3.12", dlami_venv=str(tmp_path / "opt" / "none"),
             neuron_device=str(neuron_device(tmp_path)))
    py = f"{venv}/bin/python"
    assert p.path == "cpu-index" and p.base is None
    assert p.create == ["python3.12", "-m", "venv", str(venv)]
    assert p.pip == [[py, *PIP, "--extra-index-url", "https://download.pytorch.org/whl/cpu",
                      "-r", "requirements.txt", "-r", "requirements-neuron.txt"],
                     [py, *PIP, "-q", "--no-deps", "-e", "."]]
    # torch-neuronx and neuronx-cc come from the Neuron repository that file names.
    assert "--extra-index-url https://pip.repos.neuron.amazonaws.com" in \
        (REPO_ROOT / "requirements-neuron.txt").read_text()


def test_the_cpu_index_serves_the_pins_unchanged():
    # Why the pins need no +cpu: a pin without a local label matches the CPU index's build
    # (PEP 440), and pip prefers it to PyPI's because the local label sorts it higher.
    assert Version("2.9.0+cpu") in SpecifierSet("==2.9.0")
    assert Version("0.24.0+cpu") in SpecifierSet("==0.24.0")
    assert Version("2.9.0+cpu") > Version("2.9.0")
    assert CPU_INDEX == "https://download.pytorch.org/whl/cpu"


def test_elsewhere_everything_comes_from_pypi_as_before(tmp_path):
    venv = tmp_path / ".venv"
    p = plan(venv, dlami_venv=str(tmp_path / "none"), neuron_device=str(tmp_path / "neuron0"))
    py = f"{venv}/bin/python"
    assert p.path == "pypi"
    assert p.create == ["python3", "-m", "venv", str(venv)]
    assert p.pip == [[py, *PIP, "-r", "requirements.txt"], [py, *PIP, "-q", "--no-deps", "-e", "."]]
    # DLAMI_VENV= (empty) turns the DLAMI check off.
    assert plan(venv, dlami_venv="", neuron_device=str(tmp_path / "neuron0")).pip == p.pip


def test_an_existing_venv_is_reused_and_a_broken_one_replaced(tmp_path):
    venv = make_venv(tmp_path / ".venv")
    kept = plan(venv, dlami_venv="", neuron_device=str(tmp_path / "neuron0"))
    assert kept.create is None and not kept.remove
    (venv / "bin" / "python").unlink()  # e.g. the system python was upgraded under it
    broken = plan(venv, dlami_venv="", neuron_device=str(tmp_path / "neuron0"))
    assert broken.remove and broken.create == ["python3", "-m", "venv", str(venv)]


def test_a_venv_built_before_the_dlami_check_is_kept_as_it_is(tmp_path):
    base, venv = fake_dlami(tmp_path), make_venv(tmp_path / ".venv")
    p = plan(venv, dlami_venv=str(base), neuron_device=str(neuron_device(tmp_path)))
    assert p.path == "cpu-index" and p.create is None and p.base is None
    assert p.notes[0] == (f"{venv} exists and was not built on the DLAMI venv {base}: kept as it "
                          "is (`make clean-venv && make venv` rebuilds it on the DLAMI venv).")


def test_the_layered_venv_sees_the_dlamis_packages_and_runs_its_commands(tmp_path):
    base, venv = fake_dlami(tmp_path), tmp_path / ".venv"
    p = plan(venv, dlami_venv=str(base))
    subprocess.run(p.create, check=True, capture_output=True)  # what execute() runs first
    pth = venv_plan.write_base_pth(venv, p.base)
    assert pth == site_packages(venv) / BASE_PTH
    python = str(venv / "bin" / "python")
    seen = subprocess.run([python, "-c", "import importlib.metadata as m, sys; "
                           "print(m.version('torch'), m.version('torch-neuronx'), sys.prefix)"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert seen == ["2.9.0+cpu", "2.9.0.2.15.32035", str(venv)]
    # Now it is a layered venv: the next make venv keeps it on the DLAMI path.
    assert plan(venv, dlami_venv=str(base)).path == "dlami"
    # The DLAMI venv's torchrun, run by the layered venv's python (it sees the notebook packages).
    (venv / "bin" / "jupyter").write_text("#!/bin/sh\n")  # the venv's own commands stay
    assert venv_plan.link_base_commands(venv, p.base) == ["torchrun"]
    torchrun = venv / "bin" / "torchrun"
    assert torchrun.read_text().splitlines()[0] == f"#!{venv}/bin/python"
    assert subprocess.run([str(torchrun)], capture_output=True, text=True,
                          check=True).stdout.strip() == str(venv)


def test_system_site_packages_over_the_dlami_venv_would_not_see_its_torch(tmp_path):
    # Why the .pth file: a venv made by a venv's python points at the interpreter underneath.
    base = fake_dlami(tmp_path)
    over = make_venv(tmp_path / "over", "--system-site-packages", python=f"{base}/bin/python")
    found = subprocess.run([f"{over}/bin/python", "-c", "import importlib.metadata as m; "
                            "m.version('torch-neuronx')"], capture_output=True, text=True)
    assert found.returncode != 0 and "PackageNotFoundError" in found.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_venv_hands_the_decision_to_the_planner():
    plan_lines = subprocess.run(["make", "-n", "--no-print-directory", "-B", "venv",
                                 "VENV=/tmp/not-made"], cwd=REPO_ROOT, capture_output=True,
                                text=True, check=True).stdout.splitlines()
    assert plan_lines[0] == ("python3 -m helpers.setup.venv_plan --venv /tmp/not-made --python python3 "
                             '--dlami-venv "/opt/aws_neuronx_venv_pytorch_2_9"')
    assert "pip install" not in "\n".join(plan_lines)


@pytest.mark.skipif(os.path.exists("/dev/neuron0") or os.path.exists(venv_plan.DLAMI_VENV),
                    reason="a Trainium host or a DLAMI: not the plain-PyPI machine")
def test_this_checkout_s_venv_keeps_todays_plan():
    out = subprocess.run([sys.executable, "-m", "helpers.setup.venv_plan", "--venv", ".venv",
                          "--dry-run"], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "path: pypi"
    assert out[-2:] == [".venv/bin/python -m pip install --disable-pip-version-check -r "
                        "requirements.txt",
                        ".venv/bin/python -m pip install --disable-pip-version-check -q --no-deps "
                        "-e ."]

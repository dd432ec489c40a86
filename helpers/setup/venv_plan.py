"""How `make venv` builds the workbook's venv on this machine: which torch it uses and where from.

* dlami: the Neuron 2.31 "Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04)" keeps its PyTorch in
  /opt/aws_neuronx_venv_pytorch_2_9 (Neuron DLAMI User Guide, v2.31.0). When it holds exactly our
  pins, the workbook's venv is layered on it: pip then downloads only the notebook packages, and
  the DLAMI venv is never written to. Layered is a .pth file adding the DLAMI venv's site-packages
  after the new venv's own (`--system-site-packages` would not do: a venv made from a venv sees
  /usr's packages, not the DLAMI venv's). Other versions there are refused: a second torch over
  the DLAMI's would shadow the one torch-neuronx was built for.
* cpu-index: a Trainium host without that venv: torch from PyTorch's CPU wheel index (the one the
  Neuron setup guide names beside its own), so none of PyPI's CUDA libraries come down.
* pypi: anywhere else (a laptop, CI): everything from PyPI.

Standard library only, and it never imports torch: the Makefile runs it with the system python
before any venv exists. `python3 -m helpers.setup.venv_plan --venv .venv --dry-run` prints the plan.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DLAMI_VENV = "/opt/aws_neuronx_venv_pytorch_2_9"
NEURON_DEVICE = "/dev/neuron0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIP = ["-m", "pip", "install", "--disable-pip-version-check"]
# What the DLAMI venv must hold, each pinned in one of these files.
STACK = {"requirements.txt": ("torch", "torch-xla", "torchvision"),
         "requirements-neuron.txt": ("torch-neuronx", "neuronx-cc")}
# The .pth file that puts the DLAMI venv's site-packages on the workbook venv's sys.path.
BASE_PTH = "_neuron_dlami_base.pth"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)$")

# Run by the DLAMI venv's python: what it sees, read from the installed metadata (no imports).
_QUERY = """
import importlib.metadata as md, json, platform, sys, sysconfig
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
print(json.dumps({"python": platform.python_version(),
                  "site": sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}),
                  "versions": {name: version(name) for name in sys.argv[1:]}}))
"""


class Refusal(Exception):
    """make venv stops here: the message says why and what to do."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(repo: Path = REPO_ROOT) -> dict[str, str]:
    """Every name==version pin of requirements.txt and requirements-neuron.txt."""
    found = {}
    for filename in STACK:
        for line in (repo / filename).read_text().splitlines():
            m = PIN.match(line.split("#")[0].strip())
            if m:
                found[normalize(m.group(1))] = m.group(2)
    return found


def public(version: str) -> str:
    """2.9.0+cpu -> 2.9.0: the local label names the build (cpu, cu128), not the release."""
    return version.split("+")[0]


@dataclass
class Base:
    """The DLAMI venv the workbook's venv is layered on."""
    path: Path
    python_version: str
    site: list[str]
    versions: dict[str, str | None]


@dataclass
class Plan:
    path: str                                  # "dlami" | "cpu-index" | "pypi"
    venv: Path
    notes: list[str] = field(default_factory=list)
    remove: bool = False                       # the venv's python is gone: start again
    create: list[str] | None = None            # the command that makes the venv, if needed
    base: Base | None = None                   # dlami: layered on this
    pip: list[list[str]] = field(default_factory=list)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def works(python: Path) -> bool:
    try:
        return subprocess.run([str(python), "-c", "import sys"], capture_output=True,
                              timeout=60).returncode == 0
    except OSError:
        return False


def read_base(dlami_venv: Path) -> Base:
    names = [name for group in STACK.values() for name in group]
    out = subprocess.run([str(venv_python(dlami_venv)), "-c", _QUERY, *names], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    found = json.loads(out)
    return Base(dlami_venv, found["python"], found["site"], found["versions"])


def layered_on(venv: Path) -> bool:
    """Was this venv made on the DLAMI venv (it carries the .pth file)?"""
    return any(venv.glob(f"lib/python3*/site-packages/{BASE_PTH}"))


def mismatches(base: Base, wanted: dict[str, str]) -> list[str]:
    return [f"{name} {base.versions[name] or 'missing'} (pinned {wanted[name]})"
            for group in STACK.values() for name in group
            if base.versions[name] is None or public(base.versions[name]) != wanted[name]]


def plan(venv, python="python3", dlami_venv=DLAMI_VENV, neuron_device=NEURON_DEVICE,
         repo: Path = REPO_ROOT) -> Plan:
    """What make venv does here. Raises Refusal when the DLAMI venv's versions are not ours."""
    venv = Path(venv)
    py = str(venv_python(venv))
    exists = works(venv_python(venv))
    trainium = os.path.exists(neuron_device)
    dlami = Path(dlami_venv) if dlami_venv and works(venv_python(Path(dlami_venv))) else None
    wanted = pins(repo)
    requirements = ["-r", "requirements.txt"]

    if dlami and (not exists or layered_on(venv)):
        base = read_base(dlami)
        stack = ", ".join(f"{name} {base.versions[name]}"
                          for group in STACK.values() for name in group)
        wrong = mismatches(base, wanted)
        if wrong:
            raise Refusal(
                f"The Neuron DLAMI venv {dlami} holds {'; '.join(wrong)}.\n"
                "The workbook is pinned to Neuron 2.31's PyTorch 2.9 stack (requirements.txt, "
                "requirements-neuron.txt) and will not put a second torch over the DLAMI's.\n"
                "Either launch the Neuron 2.31 'Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu "
                "24.04)', or build a venv of the workbook's own that ignores the DLAMI's:\n"
                f"    {'make clean-venv && ' if exists else ''}make venv DLAMI_VENV=\n"
                "(on a Trainium host: torch from PyTorch's CPU wheel index plus torch-neuronx "
                "and neuronx-cc from the Neuron pip repository).")
        p = Plan("dlami", venv, base=base)
        p.notes.append(f"Using the Neuron DLAMI venv {dlami} (Python {base.python_version}) as "
                       f"the base of {venv}: {stack}, as pinned.")
        if not exists:
            p.remove = venv.exists()
            p.create = [str(venv_python(dlami)), "-m", "venv", str(venv)]
        p.notes.append(f"Installing only what the notebooks add (requirements.txt; the stack "
                       f"above is installed already) into {venv}: about 0.2 GB to download.")
        p.pip = [[py, *PIP, *requirements]]
    else:
        p = Plan("cpu-index" if trainium else "pypi", venv)
        if dlami:
            p.notes.append(f"{venv} exists and was not built on the DLAMI venv {dlami}: kept as "
                           f"it is (`make clean-venv && make venv` rebuilds it on the DLAMI venv).")
        if not exists:
            p.remove = venv.exists()
            p.create = [python, "-m", "venv", str(venv)]
            p.notes.append(f"Creating {venv} with {python}.")
        if trainium:
            requirements += ["-r", "requirements-neuron.txt"]
            p.notes.append(f"Trainium host ({neuron_device}) without the Neuron DLAMI venv "
                           f"({dlami_venv or 'DLAMI_VENV unset'}): torch and torchvision from "
                           f"PyTorch's CPU wheel index, torch-neuronx and neuronx-cc from the "
                           f"Neuron pip repository, the rest from PyPI; no CUDA libraries.")
            p.pip = [[py, *PIP, "--extra-index-url", CPU_INDEX, *requirements]]
        else:
            p.notes.append(f"Installing requirements.txt into {venv}: the first time this "
                           f"downloads about 4.4 GB (torch, and 3.2 GB of CUDA libraries it needs "
                           f"even on a CPU) and takes a few minutes.")
            p.pip = [[py, *PIP, *requirements]]
    p.pip.append([py, *PIP, "-q", "--no-deps", "-e", "."])
    return p


# ---- carrying a plan out

def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         check=True, capture_output=True, text=True).stdout
    return Path(out.strip())


def write_base_pth(venv: Path, base: Base) -> Path:
    """The DLAMI venv's site-packages after the venv's own; site.addsitedir also runs the .pth
    files found there, as the DLAMI venv's own python does."""
    pth = site_packages(venv_python(venv)) / BASE_PTH
    pth.write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in base.site))
    return pth


def link_base_commands(venv: Path, base: Base) -> list[str]:
    """The DLAMI venv's commands (torchrun, neuronx-cc, neuron_parallel_compile, ...) in the
    venv's bin/, run by the venv's python: what the workbook starts finds them there, and they
    see the notebook packages too. Commands the venv has already, and binaries, are left alone."""
    base_bin, bin_dir = base.path / "bin", venv / "bin"
    linked = []
    for script in sorted(base_bin.iterdir()):
        target = bin_dir / script.name
        if target.exists() or script.name.startswith(("python", "pip", "activate", "Activate")):
            continue
        try:
            first, rest = script.read_text().split("\n", 1)
        except (UnicodeDecodeError, ValueError, OSError):
            continue
        interpreter = first[2:].strip().split(" ")[0] if first.startswith("#!") else ""
        if Path(interpreter).parent != base_bin:
            continue
        target.write_text(f"#!{bin_dir / 'python'}\n{rest}")
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        linked.append(script.name)
    return linked


def execute(p: Plan, repo: Path = REPO_ROOT, dry_run: bool = False) -> None:
    """Carry the plan out, saying each step first; dry_run: only say them."""
    def run(argv: list[str]) -> None:
        print(shlex.join(argv), flush=True)
        if not dry_run:
            subprocess.run(argv, check=True, cwd=repo)

    print(f"path: {p.path}")
    for note in p.notes:
        print(note, flush=True)
    if p.remove:
        print(shlex.join(["rm", "-rf", str(p.venv)]), flush=True)
        if not dry_run:
            shutil.rmtree(p.venv)
    if p.create:
        run(p.create)
    if p.base:
        pth = p.venv / BASE_PTH if dry_run else write_base_pth(p.venv, p.base)
        print(f"{pth}: adds {', '.join(p.base.site)}", flush=True)
    for argv in p.pip:
        run(argv)
    if p.base:
        linked = "its commands" if dry_run else " ".join(link_base_commands(p.venv, p.base))
        print(f"From {p.base.path}/bin, run by {p.venv}/bin/python: {linked or 'none'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", default=".venv")
    parser.add_argument("--python", default="python3", help="makes the venv off the DLAMI")
    parser.add_argument("--dlami-venv", default=DLAMI_VENV, help="empty: do not use it")
    parser.add_argument("--neuron-device", default=NEURON_DEVICE)
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    args = parser.parse_args(argv)
    try:
        p = plan(args.venv, args.python, args.dlami_venv, args.neuron_device)
    except Refusal as refusal:
        print(f"make venv: {refusal}", file=sys.stderr)
        return 2
    execute(p, dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())

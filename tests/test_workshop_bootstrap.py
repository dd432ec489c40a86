"""A workshop lab boots as its user data says (deploy/user_data.sh run with the header the
template gives it): on a simulated Neuron DLAMI (tests/workshop_machine.py), from a class bundle
(deploy/bundle.py) of this checkout with no network beyond the bundle's file (no git remote, no
package index, MNIST and the classroom cache from the bundle), up to a real JupyterLab from the
lab's venv answering on 127.0.0.1 with the token it published, the idle-stop unit's own command
run against that JupyterLab, and "ready" signalled to the wait condition. A failure at
each boot step (installing the AWS CLI, the clone, the DLAMI and its pins, the cache import)
signals "FAILED: <reason>" at once to the same URL, as a SUCCESS: the seat fails, not the stack.
No boot here reaches a package index.

What stands in for AWS and systemd: `aws` and `systemctl` on PATH, and for the wait condition
handle's presigned URL an HTTP server on 127.0.0.1 (tests/workshop_machine.py). The user data's
seams (LAB_USER, LAB_DLAMI_VENV, LAB_REPO_DIR, LAB_LOG, and bootstrap's LAB_PORT, LAB_CONFIG_DIR,
LAB_SYSTEMD_DIR) point the rest into a temp directory (docs/workshop-stack.md)."""
from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from deploy.bundle import build_requirements, download_command, make_bundle
from deploy.template import embedded_user_data, load
from helpers.cache.archive import export_cache
from helpers.cache.demo import build_demo_cache
from helpers.cache.scan import scan_cache
from tests.workshop_machine import (
    NEURON_PACKAGES,
    SignalServer,
    recorded_calls,
    stop_units,
    write_commands,
    write_dlami,
    write_repository,
)

STACK, REGION, SEAT, BRANCH = "teststack", "us-east-1", "01", "workshop-test"
TOKEN_PARAMETER = f"/{STACK}/lab{SEAT}/jupyter-token"
VENV_PREFIX = Path(sys.prefix)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_data(values: dict[str, str]) -> str:
    """The template's user data for one seat, Fn::Sub done as CloudFormation does it."""
    header, body = embedded_user_data(load())
    header = header.replace("${Seat}", values["Seat"])  # Fn::ForEach's part, then Fn::Sub's
    filled = re.sub(r"\$\{([^}!]+)\}", lambda m: values[m.group(1)], header)
    return filled + body


def boot(tmp_path: Path, mnist_root, signals: SignalServer, *, dlami: Path | None,
         archive: Path | None = None, commit: str | None = None, without_aws: bool = False,
         bundled: bool = False, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict]:
    """bundled: the lab boots from a class bundle of the repository (with `archive` as its
    classroom cache), and the repository is gone before it boots."""
    machine = {
        "repo": tmp_path / "home" / "workbook", "systemd": tmp_path / "systemd",
        "config": tmp_path / "etc", "log": tmp_path / "workshop-lab.log",
        "cache": tmp_path / "neuron-compile-cache", "port": free_port(),
        "idle": tmp_path / "opt-workshop-lab" / "idle-stop",
        "bundle": tmp_path / "opt-workshop-lab" / "bundle",
    }
    machine["systemd"].mkdir()
    machine["calls"] = write_commands(tmp_path / "bin")
    origin = tmp_path / "origin"
    origin.mkdir()
    url, head = write_repository(origin, BRANCH)
    bundle = ""
    this_python = "{}.{}".format(*sys.version_info[:2])
    if bundled:
        # The wheels the lab's pip needs: here only what `pip install -e .` builds with (the
        # simulated DLAMI lends the rest), downloaded as `make class-bundle` does, for this Python.
        wheels = tmp_path / "wheels"
        downloaded = subprocess.run(download_command(wheels, this_python, build_requirements()),
                                    capture_output=True, text=True, timeout=300)
        assert downloaded.returncode == 0, downloaded.stderr[-2000:]
        machine["class-bundle"] = tmp_path / "class-bundle.tar.gz"
        machine["manifest"] = make_bundle(machine["class-bundle"], repo=origin, commit=head,
                                          data_dir=mnist_root, wheels=wheels, cache=archive,
                                          python_version=this_python)
        shutil.rmtree(origin)  # no git remote to reach
        bundle, url, archive = str(machine["class-bundle"]), "", None
    script = tmp_path / "user-data"
    script.write_text(user_data({
        "AWS::StackName": STACK, "AWS::Region": REGION, "Seat": SEAT,
        f"Lab{SEAT}Signal": signals.url, f"Lab{SEAT}Token": TOKEN_PARAMETER,
        "RepositoryUrl": url, "RepositoryCommit": commit or head, "BundleUrl": bundle,
        "ClassroomCacheUrl": str(archive or ""), "IdleMinutes": "60"}))
    path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    if without_aws:  # no AWS CLI anywhere, and pip finds none to install
        (tmp_path / "bin" / "aws").unlink()
        path = ":".join(d for d in path.split(":") if not (Path(d) / "aws").exists())
    env = {**os.environ,
           "PATH": path,
           "LAB_USER": getpass.getuser(), "LAB_REPO_DIR": str(machine["repo"]),
           "LAB_DLAMI_VENV": str(dlami or tmp_path / "opt" / "none"),
           "LAB_LOG": str(machine["log"]), "LAB_PORT": str(machine["port"]),
           "LAB_CONFIG_DIR": str(machine["config"]), "LAB_SYSTEMD_DIR": str(machine["systemd"]),
           "LAB_TOOLS": str(tmp_path / "tools"),
           # a guard only: the boot ends when JupyterLab answers, however loaded the machine
           "LAB_READY_SECONDS": "600",
           "LAB_IDLE_DIR": str(machine["idle"]), "LAB_BUNDLE_DIR": str(machine["bundle"]),
           "MNIST_DATA_DIR": str(mnist_root), "NEURON_COMPILE_CACHE_URL": str(machine["cache"]),
           # The simulated DLAMI lends the notebook packages too, so pip installs none of them
           # into .venv; their Jupyter configuration and JupyterLab's assets, which an install
           # there would bring, are found where this venv has them.
           "JUPYTER_CONFIG_PATH": str(VENV_PREFIX / "etc" / "jupyter"),
           "JUPYTER_PATH": str(VENV_PREFIX / "share" / "jupyter")}
    if without_aws or bundled:
        env["PIP_NO_INDEX"] = "1"  # no package index
    if bundled:
        del env["MNIST_DATA_DIR"]  # the lab's own data/, filled from the bundle
    env.pop("PYTHONPATH", None)  # the lab runs the clone, not this checkout
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                            timeout=timeout)
    return result, machine


def get(port: int, path: str, token: str | None):
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.status, json.load(answer)


@pytest.mark.e2e
def test_a_lab_boots_from_the_class_bundle_to_jupyterlab_on_loopback_with_no_way_out(tmp_path, mnist_root):
    source = tmp_path / "classroom"
    build_demo_cache(source / "cache", ["done_hex", "failed"])
    archive = tmp_path / "classroom-cache.tar.gz"
    exported = export_cache(source / "cache", archive, progress=False)
    dlami = write_dlami(tmp_path / "opt")
    started = time.monotonic()
    try:
        with SignalServer() as signals:
            result, lab = boot(tmp_path, mnist_root, signals, dlami=dlami, archive=archive, bundled=True)
        took = time.monotonic() - started
        log = result.stdout + result.stderr  # what the lab's log file and console get
        assert result.returncode == 0, log[-3000:]
        assert "workshop lab: ready" in lab["log"].read_text()
        print(f"class bundle {lab['class-bundle'].stat().st_size / 1e6:.1f} MB "
              f"({lab['manifest']['total_bytes'] / 1e6:.1f} MB unpacked); user data to a ready lab: {took:.1f} s")

        # From the bundle, with no way out: no probe of one, the clone from the bundle's commit,
        # every member checked against the manifest, MNIST the bundle's files (make data fetched
        # nothing: they were right), pip's index off (setuptools came from the bundle's wheels).
        assert "checking the way out" not in log and "no way out" not in log
        unpacked = re.search(r"^class bundle: (\d+) members checked \(sha256\) and unpacked into (.+)$", log, re.M)
        assert unpacked and int(unpacked[1]) == len(lab["manifest"]["members"])
        assert {"repository.bundle", "classroom-cache.tar.gz", "mnist/train-images-idx3-ubyte"} \
            <= set(lab["manifest"]["members"])
        assert Path(unpacked[2]) == lab["bundle"]
        head = subprocess.run(["git", "-C", str(lab["repo"]), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert head == lab["manifest"]["commit"]
        for name in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
            copied = lab["repo"] / "data" / "MNIST" / "raw" / name
            assert copied.read_bytes() == (mnist_root / "MNIST" / "raw" / name).read_bytes(), name

        # The venv was layered on the DLAMI venv (make venv's dlami path), not downloaded.
        assert f"Using the Neuron DLAMI venv {dlami}" in log
        assert (next((lab["repo"] / ".venv").glob("lib/python3*/site-packages"))
                / "_neuron_dlami_base.pth").is_file()

        # The classroom cache, from the bundle: the done entry imported, the failed one not.
        entries = {e.key: e.state for e in scan_cache(lab["cache"]).entries}
        assert exported.entries == 1 and list(entries.values()) == ["done"]
        assert f"3/5 the classroom compile cache from {lab['bundle'] / 'classroom-cache.tar.gz'}" in log

        # JupyterLab answers on 127.0.0.1 with the lab's token, only with it, from the clone.
        token = (lab["config"] / "lab.env").read_text().strip().removeprefix("JUPYTER_TOKEN=")
        assert len(token) == 48 and (lab["config"] / "lab.env").stat().st_mode & 0o077 == 0
        status, contents = get(lab["port"], "/api/contents", token)
        assert status == 200 and "00_setup.ipynb" in {c["name"] for c in contents["content"]}
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(lab["port"], "/api/contents", None)
        refused.value.close()  # it holds the answer's socket: a later test's GC would warn of it
        assert refused.value.code == 403
        session = psutil.Process(int((lab["systemd"] / "workshop-lab.service.pid").read_text()))
        listening = {c.laddr.ip for p in [session, *session.children(recursive=True)]
                     for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        assert listening == {"127.0.0.1"}

        # The token went to its SSM parameter; the wait condition got one success signal, with
        # the empty Content-Type its presigned URL needs (as AWS's curl example sends it).
        calls = recorded_calls(lab["calls"])
        assert calls[-1] == ["aws", "ssm", "put-parameter", "--region", REGION, "--name",
                             TOKEN_PARAMETER, "--type", "String", "--overwrite", "--value", token]
        assert signals.signals == [{"Status": "SUCCESS", "UniqueId": f"Lab{SEAT}", "Data": "ready",
                                    "Reason": f"Lab{SEAT} is ready: JupyterLab answers on 127.0.0.1"}]
        assert signals.content_types == [None]
        # deploy/publish_token.sh wrote it after reading the parameter, and its timer, run as root
        # from the commit's root-owned copy, puts it back whenever the parameter holds anything else.
        assert calls[-2][:3] == ["aws", "ssm", "get-parameter"]
        token_unit = (lab["systemd"] / "workshop-token.service").read_text()
        assert f"ExecStart=/bin/bash {lab['idle']}/deploy/publish_token.sh" in token_unit
        assert "User=" not in token_unit and (lab["systemd"] / "workshop-token.timer.enabled").exists()

        # The idle-stop unit's own command, run against this JupyterLab: idle, not stopping. It
        # runs as root, so nothing in it is the learner's: its code is a copy of the commit
        # outside the clone that only its owner may write, its interpreter the DLAMI venv's.
        idle_unit = (lab["systemd"] / "workshop-idle.service").read_text()
        command = shlex.split(re.search(r"^ExecStart=(.*)$", idle_unit, re.M).group(1))
        workdir = Path(re.search(r"^WorkingDirectory=(.*)$", idle_unit, re.M).group(1))
        assert "User=" not in idle_unit and workdir == lab["idle"]
        assert command[:5] == [str(dlami / "bin" / "python"), "-E", "-s", "-m", "deploy.idle_stop"]
        copied = [workdir / "deploy" / "idle_stop.py", workdir / "helpers" / "setup" / "core_holders.py"]
        assert all(f.read_bytes() == (lab["repo"] / f.relative_to(workdir)).read_bytes() for f in copied)
        assert not any(p.stat().st_mode & 0o022 for p in [workdir, *workdir.rglob("*")])
        assert command[command.index("--idle-minutes") + 1] == "60"
        assert "OnUnitActiveSec=1min" in (lab["systemd"] / "workshop-idle.timer").read_text()
        checked = subprocess.run(command + ["--dry-run", "--state", str(tmp_path / "idle.json")],
                                 cwd=workdir, env={**os.environ, "JUPYTER_TOKEN": token,
                                                       "PYTHONPATH": ""},
                                 capture_output=True, text=True, timeout=300)
        assert checked.returncode == 0, checked.stderr
        # idle (how long depends on the machine's load: below the 60 minutes, whatever it is)
        assert re.fullmatch(r"idle for \d+\.\d min of 60 \(0 kernel\(s\), 0 terminal\(s\), "
                            r"no NeuronCore held\)\n", checked.stdout)
    finally:
        stop_units(lab["systemd"] if "lab" in locals() else tmp_path / "systemd")


BAD_DLAMI = {**NEURON_PACKAGES, "neuronx_cc": "2.25.3371.0"}  # a Neuron 2.30 DLAMI's compiler


@pytest.mark.parametrize("case, at, says, status", [
    ("no AWS CLI", "installing the AWS CLI", "cannot install aws with", 1),
    ("a commit the repository lacks", "cloning", "cannot clone", 1),
    ("no DLAMI", "1/5 the DLAMI venv", "is missing: this is not the Neuron 2.31", 1),
    ("another DLAMI", "2/5 make venv data", "holds neuronx-cc 2.25.3371.0 (pinned 2.26.6360.0)", 2),
    pytest.param("a broken cache archive", "3/5 the classroom compile cache",  # after make venv data
                 "is not a readable tar archive", 2, marks=pytest.mark.e2e),
])
def test_a_failure_at_each_boot_step_signals_failure_at_once_with_its_reason(
        tmp_path, mnist_root, case, at, says, status):
    dlami = None if case == "no DLAMI" else write_dlami(
        tmp_path / "opt", BAD_DLAMI if case == "another DLAMI" else NEURON_PACKAGES)
    archive = None
    if case == "a broken cache archive":
        archive = tmp_path / "classroom-cache.tar.gz"
        archive.write_bytes(b"not a gzip archive\n")
    with SignalServer() as signals:
        result, lab = boot(tmp_path, mnist_root, signals, dlami=dlami, archive=archive,
                           commit="f" * 40 if case.startswith("a commit") else None,
                           without_aws=case == "no AWS CLI", timeout=600,
                           bundled=case == "a broken cache archive")  # inside a class bundle: no index
    log = result.stdout + result.stderr
    assert result.returncode == status, log[-3000:]
    assert "workshop lab: FAILED" in log and lab["log"].stat().st_size > 0
    assert not (lab["systemd"] / "workshop-lab.service").exists()
    (signal,) = signals.signals
    # CloudFormation gets a SUCCESS (a FAILURE would fail the stack, every lab with it); the
    # seat's LabNNStatus output shows the data.
    assert signal["Status"] == "SUCCESS" and signal["UniqueId"] == f"Lab{SEAT}", signal
    assert signal["Data"].startswith(f"FAILED: {signal['Reason']} | the log's last lines: "), signal
    assert says in signal["Data"] and len(signal["Data"]) < 4096, signal
    assert signal["Reason"].startswith(f"Lab{SEAT} failed at ") and at in signal["Reason"], signal
    assert f"(exit status {status})" in signal["Reason"] and says in signal["Reason"] + signal["Data"]
    assert len(signal["Reason"]) < 1024, signal
    assert not any(call[:3] == ["aws", "ssm", "put-parameter"] for call in recorded_calls(lab["calls"]))

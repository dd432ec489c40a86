"""Setup checks and the checklist widget, against real file layouts built here and the real /proc."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.setup.checklist import FAIL_COLOUR, OK_COLOUR, Checklist, CheckResult
from helpers.setup.core_holders import DeviceHolder, neuron_device_holders
from helpers.setup.environment_checks import (
    FREE_CORES_FIX,
    check_backend,
    check_compile_cache,
    check_mnist,
    check_neuron_cores_free,
    check_neuron_cores_visible,
    check_neuron_tools,
    check_pins,
    check_platform,
    check_tools_on_path,
    check_torchrun,
    read_os_release,
)
from mnist_mlp.common.backend import Backend
from mnist_mlp.common.mnist_files import IDX_MD5, default_data_dir
from mnist_mlp.common.paths import REPO_ROOT
from mnist_mlp.common.paths import repo_relative as shown_path
from tests.proc_trees import KERNEL_CMDLINE, fake_process


@pytest.fixture
def machine(tmp_path):
    """A /dev with two Neuron devices and a /proc with a kernel holding both, a training script
    holding one, and processes that hold other things."""
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    for name in ("neuron0", "neuron1", "null", "neuron_fake"):
        (dev / name).touch()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "neuron0").touch()
    fake_process(proc, 100, KERNEL_CMDLINE,
                 {0: dev / "null", 5: dev / "neuron0", 6: dev / "neuron1", 7: dev / "neuron0"})
    fake_process(proc, 200, ["python", "train.py"], {3: dev / "neuron1"},
                 {"PATH": "/usr/bin", "NEURON_RT_VISIBLE_CORES": "1"})
    fake_process(proc, 300, ["cat"], {1: dev / "neuron_fake", 2: tmp_path / "elsewhere" / "neuron0"})
    (proc / "400").mkdir()  # a process that exited while we looked: no fd/ any more
    (proc / "self").symlink_to(proc / "200")
    return proc, dev


def test_holders_found_with_pid_cmdline_devices_and_kernel_flag(machine):
    proc, dev = machine
    scan = neuron_device_holders(proc, dev, self_pid=200)
    assert scan.holders == [
        DeviceHolder(100, " ".join(KERNEL_CMDLINE), ("/dev/neuron0", "/dev/neuron1"),
                     is_jupyter_kernel=True, is_this_process=False),
        DeviceHolder(200, "python train.py", ("/dev/neuron1",),
                     is_jupyter_kernel=False, is_this_process=True,
                     core_env=(("NEURON_RT_VISIBLE_CORES", "1"),)),
    ]
    assert scan.holders[1].cores == "NEURON_RT_VISIBLE_CORES=1"
    assert "cores: unknown" in scan.holders[0].describe()  # no environ readable
    assert [h.pid for h in scan.others] == [100]
    assert "Jupyter kernel" in scan.others[0].describe()


def test_cores_held_by_another_kernel_is_red_with_the_fix(machine):
    proc, dev = machine
    result = check_neuron_cores_free(proc, dev, self_pid=200)
    assert not result.ok
    assert "pid 100, a Jupyter kernel" in result.message
    assert result.message.startswith("NeuronCores are held by another process")
    assert "ipykernel_launcher" in result.message
    assert result.fix == FREE_CORES_FIX
    assert "NEURON_RT_VISIBLE_CORES" in result.fix and "shut that kernel down" in result.fix
    assert "NeuronCore(s) not available - Requested:" in result.fix


def test_monitors_hold_no_core(tmp_path):
    """neuron-monitor and neuron-ls open the device to read it (neuron-ls --show-all-procs lists
    such readers, runtime version NA) and are not counted; neuron-top is (the troubleshooting
    guide says to terminate its sessions when cores are not available)."""
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    (dev / "neuron0").touch()
    fake_process(proc, 10, ["/opt/aws/neuron/bin/neuron-monitor", "-c", "m.json"], {3: dev / "neuron0"})
    fake_process(proc, 11, ["neuron-top"], {3: dev / "neuron0"})
    fake_process(proc, 12, ["/opt/aws/neuron/bin/neuron-ls", "--show-all-procs"], {4: dev / "neuron0"})
    fake_process(proc, 13, ["python3", "/usr/local/bin/neuron-profile", "view"], {4: dev / "neuron0"})
    fake_process(proc, 20, ["python", "my-neuron-top-clone.py"], {3: dev / "neuron0"}, {})
    scan = neuron_device_holders(proc, dev, self_pid=1)
    assert [h.pid for h in scan.monitors] == [10, 12, 13]
    assert [h.pid for h in scan.others] == [11, 20]
    assert "not pinned" in scan.others[1].cores  # environ readable, no core variable
    for pid in (11, 20):
        (proc / str(pid) / "fd" / "3").unlink()  # only the readers are left
    result = check_neuron_cores_free(proc, dev, self_pid=1, allow_self=False)
    assert result.ok, result
    assert "pid 10 neuron-monitor" in result.message and "pid 12 neuron-ls" in result.message


def test_a_profiler_capture_holds_cores_and_its_view_does_not(tmp_path):
    """`neuron-profile capture` / `neuron-explorer capture` execute a NEFF on the device
    ("standalone NEFF profiling", Neuron Explorer migration FAQ): holders, not monitors."""
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    (dev / "neuron0").touch()
    fake_process(proc, 30, ["/opt/aws/neuron/bin/neuron-profile", "capture", "-n", "file.neff",
                            "-s", "profile.ntff"], {5: dev / "neuron0"},
                 {"NEURON_RT_VISIBLE_CORES": "1"})
    fake_process(proc, 31, ["neuron-explorer", "--verbose", "capture", "-n", "f.neff"],
                 {5: dev / "neuron0"}, {})
    fake_process(proc, 32, ["/opt/aws/neuron/bin/neuron-explorer", "view", "-d", "out"],
                 {6: dev / "neuron0"})
    scan = neuron_device_holders(proc, dev, self_pid=1)
    assert [h.pid for h in scan.others] == [30, 31]
    assert [h.pid for h in scan.monitors] == [32]
    assert scan.others[0].cores == "NEURON_RT_VISIBLE_CORES=1"
    result = check_neuron_cores_free(proc, dev, self_pid=1)
    assert not result.ok and "pid 30" in result.message and "neuron-profile capture" in result.message


def test_cores_held_only_by_this_process_is_green(machine):
    proc, dev = machine
    for link in (proc / "100" / "fd").iterdir():
        link.unlink()
    result = check_neuron_cores_free(proc, dev, self_pid=200)
    assert result.ok, result
    assert "this process has them open itself" in result.message
    # Before launching workers that need every core, holding them ourselves is the problem.
    result = check_neuron_cores_free(proc, dev, self_pid=200, allow_self=False)
    assert not result.ok
    assert "pid 200, this process" in result.message and "restart the kernel" in result.fix
    assert "cores: NEURON_RT_VISIBLE_CORES=1" in result.message  # which core it holds


def test_holders_in_the_real_proc(tmp_path):
    # This process and a child really open a file named like a Neuron device.
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "neuron3").touch()
    with open(dev / "neuron3"), open(dev / "neuron3") as child_stdin:
        child = subprocess.Popen(["sleep", "30"], stdin=child_stdin)
        try:
            scan = neuron_device_holders(Path("/proc"), dev)
        finally:
            child.kill()
            child.wait()
    by_pid = {h.pid: h for h in scan.holders}
    assert set(by_pid) == {os.getpid(), child.pid}
    assert by_pid[os.getpid()].is_this_process
    assert by_pid[child.pid].cmdline == "sleep 30"
    assert by_pid[child.pid].devices == ("/dev/neuron3",)


def test_no_neuron_devices_is_green_and_says_so(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "dev").mkdir()
    result = check_neuron_cores_free(tmp_path / "proc", tmp_path / "dev")
    assert result.ok
    assert "no Neuron devices on this machine" in result.message


def backend(name, reason, neuronx=None, cores=0):
    return Backend(name, reason, "2.9.0", "2.9.0", neuronx, cores)


@pytest.mark.parametrize("chosen, ok", [
    (backend("neuron", "torch-neuronx is installed and NeuronCores are visible", "2.9.0.2", 2), True),
    (backend("xla-cpu", "torch-neuronx is not installed (no Trainium here)"), True),
    (backend("xla-cpu", "PJRT_DEVICE=CPU was set", "2.9.0.2", 2), True),
    (backend("xla-cpu", "torch-neuronx is installed but no NeuronCore is visible", "2.9.0.2"), False),
    (backend("cpu", "torch-xla is not installed"), False),
])
def test_backend_check(chosen, ok):
    result = check_backend(chosen)
    assert result.ok is ok
    assert chosen.reason in result.message
    assert bool(result.fix) is not ok


def test_pins_that_match_the_installed_packages_pass(tmp_path):
    import torch
    import torchvision

    reqs = tmp_path / "requirements.txt"
    reqs.write_text(f"# comment\n--extra-index-url https://example.invalid\n"
                    f"torch=={torch.__version__.split('+')[0]}\n"
                    f"torchvision=={torchvision.__version__.split('+')[0]}  # pinned\nnumpy\n")
    neuron = tmp_path / "requirements-neuron.txt"
    neuron.write_text("torch-neuronx==2.9.*\n")  # not installed here: the Neuron extras are optional
    result = check_pins([reqs, neuron], packages=("torch", "torchvision", "torch-neuronx"))
    assert result.ok, result
    assert "torch " in result.message and "torchvision " in result.message


def test_wrong_or_missing_pins_are_red_with_the_install_command(tmp_path):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("torch==1.0.0\nno-such-package-for-this-test==1.0\n")
    result = check_pins([reqs], packages=("torch", "no-such-package-for-this-test"))
    assert not result.ok
    assert "requirements.txt pins ==1.0.0" in result.message
    assert "no-such-package-for-this-test is not installed" in result.message
    assert f"pip install -r {reqs}" in result.fix


def test_the_repo_pins_hold_in_this_venv():
    assert check_pins().ok, check_pins().message


@pytest.mark.parametrize("visible, instance, neuronx, ok, text", [
    (2, "trn1.2xlarge", True, True, "2 NeuronCore(s) on trn1.2xlarge (torchrun worker counts: 1, 2)"),
    (0, None, False, True, "the CPU stand-in needs none"),
    (0, "trn1.2xlarge", True, False, "no NeuronCore is visible on trn1.2xlarge"),
    (4, "trn2.3xlarge", True, True,
     "(torchrun worker counts: 1, 4; inferred: the AWS MLP tutorial does not list this instance)"),
])
def test_neuron_cores_visible(visible, instance, neuronx, ok, text):
    result = check_neuron_cores_visible(visible, instance, neuronx)
    assert result.ok is ok
    assert text in result.message


def test_mnist_missing_or_corrupt_is_red(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte").write_bytes(b"not mnist")
    result = check_mnist(tmp_path)
    assert not result.ok
    assert "train-images-idx3-ubyte: md5" in result.message
    assert "t10k-labels-idx1-ubyte: missing" in result.message
    assert "make data" in result.fix


def test_mnist_verified_files_are_green(tmp_path):
    real = default_data_dir() / "MNIST" / "raw"
    assert all((real / name).is_file() for name in IDX_MD5), f"no MNIST in {real}: run `make data`"
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in IDX_MD5:
        (raw / name).symlink_to(real / name)
    result = check_mnist(tmp_path)
    assert result.ok, result
    assert "md5s verified" in result.message


def test_compile_cache_writable_or_not(tmp_path):
    cache = tmp_path / "cache" / "neuron"
    result = check_compile_cache({"NEURON_COMPILE_CACHE_URL": str(cache)}, stand_in=False)
    assert result.ok and str(cache) in result.message and "NEURON_COMPILE_CACHE_URL" in result.message
    assert not cache.exists()  # checking creates nothing

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = check_compile_cache({"NEURON_CC_FLAGS": f"--cache_dir={blocker}/cache",
                                  "NEURON_COMPILE_CACHE_URL": str(cache)}, stand_in=False)
    assert not result.ok
    assert "--cache_dir in NEURON_CC_FLAGS" in result.message and "is not a directory" in result.message
    assert "NEURON_COMPILE_CACHE_URL" in result.fix

    result = check_compile_cache({"NEURON_COMPILE_CACHE_URL": "s3://bucket/cache"}, stand_in=True)
    assert result.ok and "remote" in result.message and "does not use it" in result.message


def test_torchrun_check():
    result = check_torchrun()
    assert result.ok and "python -m torch.distributed.run" in result.message


def fake_venv(root: Path, tools=("torchrun", "neuronx-cc")) -> Path:
    """<root>/bin with a python (a symlink, as venv makes it) and executable tool scripts."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def test_tools_on_path_green_when_the_venv_comes_first(tmp_path):
    venv_bin = fake_venv(tmp_path / "venv")
    result = check_tools_on_path(str(venv_bin / "python"), path=f"{venv_bin}:/usr/bin:/bin")
    assert result.ok, result
    assert result.message.startswith(f"neuronx-cc, torchrun: {venv_bin}'s")
    assert "neuron_parallel_compile: not installed" in result.message


def test_tools_on_path_red_when_neuronx_cc_is_not_found_by_name(tmp_path):
    # JupyterLab started without the venv: the kernel's torch-neuronx cannot run neuronx-cc.
    venv_bin = fake_venv(tmp_path / "venv")
    result = check_tools_on_path(str(venv_bin / "python"), path="/usr/bin:/bin")
    assert not result.ok
    assert "`neuronx-cc` is not found" in result.message
    assert "make lab" in result.fix and "activate" in result.fix
    # torchrun alone off PATH is fine: the workbook starts it with the venv first
    stand_in = fake_venv(tmp_path / "stand-in", tools=("torchrun",))
    result = check_tools_on_path(str(stand_in / "python"), path="/usr/bin:/bin")
    assert result.ok and "torchrun: not on this PATH, but the workbook starts" in result.message


def test_tools_on_path_red_when_another_environment_comes_first(tmp_path):
    venv_bin = fake_venv(tmp_path / "venv")
    other_bin = fake_venv(tmp_path / "dlami-venv")
    result = check_tools_on_path(str(venv_bin / "python"), path=f"{other_bin}:{venv_bin}")
    assert not result.ok
    assert f"`torchrun` is {other_bin / 'torchrun'}" in result.message
    assert f"`neuronx-cc` is {other_bin / 'neuronx-cc'}" in result.message


# /etc/os-release as these systems ship it (abridged to the fields that matter plus a few others).
OS_RELEASES = {
    "ubuntu-24.04": """PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.1 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
""",
    "ubuntu-22.04": """PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=jammy
""",
    "al2023": """NAME="Amazon Linux"
VERSION="2023"
ID="amzn"
ID_LIKE="fedora"
VERSION_ID="2023"
PLATFORM_ID="platform:al2023"
PRETTY_NAME="Amazon Linux 2023.5.20240805"
ANSI_COLOR="0;33"
CPE_NAME="cpe:2.3:o:amazon:amazon_linux:2023"
SUPPORT_END="2028-03-15"
""",
    "al2": """NAME="Amazon Linux"
VERSION="2"
ID="amzn"
ID_LIKE="centos rhel fedora"
VERSION_ID="2"
PRETTY_NAME="Amazon Linux 2"
CPE_NAME="cpe:2.3:o:amazon:amazon_linux:2"
""",
}
NEURON_2_31 = "2.9.0.2.15.32035+de43f57c"  # as pip shows the Neuron 2.31 wheel (local build tag)


@pytest.fixture
def os_release(tmp_path):
    def write(name):
        path = tmp_path / name
        path.write_text(OS_RELEASES[name])
        return path
    return write


def test_read_os_release_unquotes_and_survives_a_missing_file(os_release, tmp_path):
    fields = read_os_release(os_release("al2023"))
    assert fields["ID"] == "amzn" and fields["VERSION_ID"] == "2023"
    assert fields["PRETTY_NAME"] == "Amazon Linux 2023.5.20240805"
    assert read_os_release(tmp_path / "missing") == {}


def test_platform_ubuntu_24_04_with_the_pinned_torch_neuronx_is_green(os_release):
    result = check_platform(os_release("ubuntu-24.04"), (3, 12), NEURON_2_31, neuron_host=True)
    assert result.ok, result
    assert result.message == f"Ubuntu 24.04.1 LTS, Python 3.12, torch-neuronx {NEURON_2_31}"


def test_platform_ubuntu_22_04_is_green_with_what_ended_said(os_release):
    # What ended is the 22.04 DLAMIs and containers, not Neuron's support of the OS.
    result = check_platform(os_release("ubuntu-22.04"), (3, 13), NEURON_2_31, neuron_host=True)
    assert result.ok and "no 22.04 DLAMIs or containers" in result.message
    assert "still supports Ubuntu 22.04" in result.message and "Ubuntu 24.04" in result.message


@pytest.mark.parametrize("system, complaint", [
    ("al2023", "PyTorch 2.9 (torch-neuronx) is not available on Amazon Linux 2023"),
    ("al2", "Amazon Linux 2 is not an OS that Neuron 2.31's PyTorch 2.9 supports"),
])
def test_platform_amazon_linux_is_red_and_says_where_to_start(os_release, system, complaint):
    result = check_platform(os_release(system), (3, 11), NEURON_2_31, neuron_host=True)
    assert not result.ok
    assert complaint in result.message
    assert "Ubuntu 24.04" in result.fix and "Deep Learning AMI Neuron PyTorch 2.9" in result.fix


@pytest.mark.parametrize("python", [(3, 10), (3, 14)])
def test_platform_python_outside_3_11_to_3_13_is_red(os_release, python):
    result = check_platform(os_release("ubuntu-24.04"), python, NEURON_2_31, neuron_host=True)
    assert not result.ok
    assert f"supports Python 3.11-3.13, not {python[0]}.{python[1]}" in result.message
    assert "make clean-venv && make venv PYTHON=python3.12" in result.fix


@pytest.mark.parametrize("version, complaint", [
    ("2.14.3.0", "is TorchNeuron (native PyTorch, device='neuron', trn2/trn3 only), not PyTorch/XLA"),
    ("2.7.0.2.8.6734", "is not the PyTorch 2.9 (XLA) line"),
    (None, "torch-neuronx is not installed"),
])
def test_platform_torch_neuronx_outside_the_xla_line_is_red(os_release, version, complaint):
    result = check_platform(os_release("ubuntu-24.04"), (3, 12), version, neuron_host=True)
    assert not result.ok
    assert complaint in result.message
    assert "-r requirements-neuron.txt" in result.fix


def test_platform_off_trainium_reports_without_judging(os_release, tmp_path):
    # No torch-neuronx, no /dev/neuron*: the stand-in runs on anything, Amazon Linux included.
    (tmp_path / "dev").mkdir()
    result = check_platform(os_release("al2023"), (3, 11), None, dev_root=tmp_path / "dev")
    assert result.ok and "not a Trainium host" in result.message
    assert "Amazon Linux" not in result.message  # the same message on every stand-in machine
    # A Neuron device but no torch-neuronx: a Trainium host that still needs it.
    (tmp_path / "dev" / "neuron0").touch()
    result = check_platform(os_release("ubuntu-24.04"), (3, 12), None, dev_root=tmp_path / "dev")
    assert not result.ok and "torch-neuronx is not installed" in result.message


def test_platform_of_this_machine():
    result = check_platform()
    assert result.ok, result  # the CPU stand-in here: no Neuron device, no torch-neuronx


def test_shown_path():
    assert shown_path(REPO_ROOT / "data" / "MNIST") == "data/MNIST"
    assert shown_path("/var/tmp/x") == "/var/tmp/x"


def test_checklist_shows_red_then_green_after_check_again(tmp_path):
    fixed = tmp_path / "fixed"

    def checks():
        return [CheckResult("Always fine", True, "all good", ""),
                CheckResult("Needs a file", fixed.exists(), "the file is " +
                            ("there" if fixed.exists() else "missing"), f"touch {fixed}")]

    checklist = Checklist(checks)
    good, bad = checklist.rows.children
    assert "checklist-ok" in good._dom_classes and OK_COLOUR in good.value
    assert "checklist-fail" in bad._dom_classes and FAIL_COLOUR in bad.value
    assert f"touch {fixed}" in bad.value and "the file is missing" in bad.value
    assert not checklist.all_ok

    bundle = checklist._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "<table>" in bundle["text/html"] and FAIL_COLOUR in bundle["text/html"]
    assert bundle["text/plain"].splitlines() == [
        "[OK ] Always fine: all good", "[FIX] Needs a file: the file is missing",
        f"      fix: touch {fixed}"]

    fixed.touch()
    checklist.button.click()
    assert checklist.all_ok
    assert all("checklist-ok" in row._dom_classes for row in checklist.rows.children)
    assert "the file is there" in checklist.rows.children[1].value
    assert FAIL_COLOUR not in checklist._repr_mimebundle_()["text/html"]


def test_neuron_tools_must_be_on_path(tmp_path):
    tools = tmp_path / "opt-aws-neuron-bin"
    tools.mkdir()
    for tool in ("neuron-ls", "neuron-top", "neuron-monitor"):
        (tools / tool).write_text("#!/bin/sh\n")
        (tools / tool).chmod(0o755)
    off = check_neuron_tools(True, path="/usr/bin", tools_dir=tools)
    assert not off.ok and "not on PATH" in off.message
    assert off.fix.startswith(f"export PATH={tools}:$PATH")
    assert check_neuron_tools(True, path=f"/usr/bin:{tools}", tools_dir=tools).ok
    absent = check_neuron_tools(True, path="/usr/bin", tools_dir=tmp_path / "none")
    assert not absent.ok and "aws-neuronx-tools" in absent.message
    assert check_neuron_tools(False, path="").ok  # the stand-in needs none

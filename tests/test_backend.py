"""Backend selection against real file layouts: a sysfs tree, /dev nodes, a DMI file, and a
torch_neuronx package on the path, each built in the test."""
import importlib.metadata
import importlib.util
import os
import sys
import types

import pytest

from mnist_mlp.common.backend import (
    check_worker_count,
    device_core_counts,
    instance_type,
    logical_neuron_cores,
    parse_core_list,
    visible_neuron_cores,
)


def make_sysfs(root, cores_per_device):
    for i, n in enumerate(cores_per_device):
        dev = root / f"neuron{i}"
        dev.mkdir(parents=True)
        (dev / "core_count").write_text(f"{n}\n")
    return root


def test_parse_core_list_takes_indices_ranges_or_both_contiguous():
    """The runtime developer guide's forms (docs/sources.md)."""
    assert parse_core_list("0") == [0]
    assert parse_core_list("0-1") == [0, 1]
    assert parse_core_list(" 4-7 ") == [4, 5, 6, 7]
    assert parse_core_list("3,4,5,6") == parse_core_list("3-5,6") == [3, 4, 5, 6]
    for bad in ("a", "1-", "", "0,,1"):
        with pytest.raises(ValueError, match="NEURON_RT_VISIBLE_CORES.*indices, ranges or both"):
            parse_core_list(bad)
    for gap in ("3,5,6", "1,0"):  # "this is not valid: NEURON_RT_VISIBLE_CORES=3,5,6"
        with pytest.raises(ValueError, match="contiguous and increasing"):
            parse_core_list(gap)
    with pytest.raises(ValueError, match="runs backwards; write '1-3'"):
        parse_core_list("3-1")


def test_cores_from_sysfs(tmp_path):
    sysfs = make_sysfs(tmp_path / "sys", [2])  # trn1.2xlarge: one device, two cores
    assert sum(device_core_counts(sysfs, tmp_path / "nodev")) == 2
    sysfs16 = make_sysfs(tmp_path / "sys16", [2] * 16)  # trn1.32xlarge
    assert sum(device_core_counts(sysfs16, tmp_path / "nodev")) == 32


def test_cores_from_dev_nodes_without_sysfs(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("neuron0", "neuron1", "null", "neuron_x"):
        (dev / name).touch()
    assert sum(device_core_counts(tmp_path / "nosys", dev)) == 4
    assert sum(device_core_counts(tmp_path / "nosys", tmp_path / "empty")) == 0


def test_visible_cores_respect_neuron_rt_visible_cores(tmp_path):
    sysfs = make_sysfs(tmp_path / "sys", [2, 2])
    nodev = tmp_path / "nodev"
    assert visible_neuron_cores({}, sysfs, nodev) == 4
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "1"}, sysfs, nodev) == 1
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "2-3"}, sysfs, nodev) == 2
    # cores the machine does not have do not count
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "3-9"}, sysfs, nodev) == 1
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "0,1"}, sysfs, nodev) == 2
    # The runtime's other variables: a count of free cores (0: all), and torchrun's narrowing
    assert visible_neuron_cores({"NEURON_RT_NUM_CORES": "3"}, sysfs, nodev) == 3
    assert visible_neuron_cores({"NEURON_RT_NUM_CORES": "0"}, sysfs, nodev) == 4
    assert visible_neuron_cores({"NEURON_RT_NUM_CORES": "9"}, sysfs, nodev) == 4
    assert visible_neuron_cores({"TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "1"}, sysfs, nodev) == 1
    # a torchrun worker that inherited a range: the set-up remaps it to its LOCAL_RANK's core
    assert visible_neuron_cores({"TORCHELASTIC_RUN_ID": "x", "NEURON_RT_VISIBLE_CORES": "0-3"}, sysfs, nodev) == 1
    assert visible_neuron_cores({"TORCHELASTIC_RUN_ID": "x", "XLA_USE_SPMD": "1"}, sysfs, nodev) == 4
    with pytest.raises(ValueError, match="not '0,2'"):
        visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "0,2"}, sysfs, nodev)


def test_trainium2_cores_are_counted_logically(tmp_path):
    # A Trainium2 device reports 8 physical cores; the runtime pairs them by default (LNC=2).
    trn2_3xl = make_sysfs(tmp_path / "trn2-3xl", [8])
    nodev = tmp_path / "nodev"
    assert sum(device_core_counts(trn2_3xl, nodev)) == 8
    assert logical_neuron_cores({}, trn2_3xl, nodev) == 4
    assert logical_neuron_cores({"NEURON_LOGICAL_NC_CONFIG": "1"}, trn2_3xl, nodev) == 8
    trn2_48xl = make_sysfs(tmp_path / "trn2-48xl", [8] * 16)
    assert visible_neuron_cores({}, trn2_48xl, nodev) == 64
    # NEURON_RT_VISIBLE_CORES indexes logical cores: 60-63 are the last four of 64, 64 does not exist
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "60-64"}, trn2_48xl, nodev) == 4
    # trn1 devices (2 cores) are not grouped, whatever the variable says
    trn1 = make_sysfs(tmp_path / "trn1", [2])
    assert logical_neuron_cores({"NEURON_LOGICAL_NC_CONFIG": "2"}, trn1, nodev) == 2
    with pytest.raises(ValueError, match="NEURON_LOGICAL_NC_CONFIG='4': .* accepts 1 or 2"):
        logical_neuron_cores({"NEURON_LOGICAL_NC_CONFIG": "4"}, trn2_3xl, nodev)


def test_instance_type_from_dmi(tmp_path):
    dmi = tmp_path / "product_name"
    dmi.write_text("trn1.2xlarge\n")
    assert instance_type(dmi) == "trn1.2xlarge"
    assert instance_type(tmp_path / "missing") is None


@pytest.mark.parametrize("instance,good,bad", [
    ("trn1.2xlarge", [1, 2], [3, 4, 8]),
    ("trn1.32xlarge", [1, 2, 8, 32], [4, 16, 64]),
    ("trn2.3xlarge", [1, 4], [2, 3, 8]),
    ("trn2.48xlarge", [1, 4, 16, 64], [2, 8, 32]),
])
def test_worker_counts(instance, good, bad):
    for n in good:
        check_worker_count(n, instance)
    for n in bad:
        with pytest.raises(ValueError, match=rf"{instance} supports .* not {n}.*--nproc_per_node"):
            check_worker_count(n, instance)


def test_worker_count_must_be_positive_and_unknown_instances_pass():
    with pytest.raises(ValueError, match="at least 1"):
        check_worker_count(0, "trn1.2xlarge")
    check_worker_count(3, None)  # off EC2 / unknown type: the runtime judges


@pytest.fixture
def select(monkeypatch):
    """select_backend(**kwargs) in this process as a fresh script would meet it: no PJRT_DEVICE
    or NEURON_RT_VISIBLE_CORES set (unless `env` says), and `extra_path` (a torch_neuronx) first
    on the path. Returns (first line, summary): name, PJRT_DEVICE it left set, NeuronCores; its
    summary. Whatever it changes (os.environ, sys.path, sys.modules) is undone afterwards."""
    from mnist_mlp.common.backend import select_backend

    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # recorded: removed again afterwards
    del sys.modules["torch_neuronx"]  # not imported: looked for on the path

    def run(*args, extra_path=None, env=None, **kwargs):
        for name in ("PJRT_DEVICE", "NEURON_RT_VISIBLE_CORES"):
            monkeypatch.delenv(name, raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        if extra_path is not None:
            monkeypatch.syspath_prepend(str(extra_path))  # also clears the import caches
        b = select_backend(*args, **kwargs)
        return f"{b.name} {os.environ.get('PJRT_DEVICE')} {b.neuron_cores}", b.summary()

    return run


def no_cores(tmp_path):
    return dict(sysfs=tmp_path / "nosys", dev_dir=tmp_path / "nodev")


def test_stand_in_selected_without_neuron(tmp_path, select):
    first, summary = select(**no_cores(tmp_path))
    assert first == "xla-cpu CPU 0"
    assert "XLA on CPU" in summary and "torch-neuronx is not installed" in summary
    assert "torch 2.9.0" in summary and "torch-xla 2.9.0" in summary


def fake_torch_neuronx(tmp_path):
    pkg = tmp_path / "site" / "torch_neuronx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("IMPORTED = True\n")
    return tmp_path / "site"


def test_neuron_selected_with_torch_neuronx_and_cores(tmp_path, select):
    sysfs = make_sysfs(tmp_path / "sys", [2])
    first, summary = select(sysfs=sysfs, dev_dir=tmp_path / "nodev",
                            extra_path=fake_torch_neuronx(tmp_path))
    assert first == "neuron NEURON 2"
    assert summary.startswith("Backend: Neuron") and "NeuronCores visible: 2 | why: torch-neuronx is installed and NeuronCores are visible" in summary
    # Not imported: torch_xla's import runs torch-neuronx's set-up, after the kernel's cores are set
    assert "torch_neuronx" not in sys.modules


def test_neuron_package_without_cores_falls_back_to_stand_in(tmp_path, select):
    first, summary = select(**no_cores(tmp_path), extra_path=fake_torch_neuronx(tmp_path))
    assert first == "xla-cpu CPU 0"
    assert "no NeuronCore is visible" in summary


def test_pjrt_device_cpu_forces_stand_in_even_with_cores(tmp_path, select):
    sysfs = make_sysfs(tmp_path / "sys", [2])
    first, summary = select(sysfs=sysfs, dev_dir=tmp_path / "nodev",
                            extra_path=fake_torch_neuronx(tmp_path), env={"PJRT_DEVICE": "CPU"})
    assert first == "xla-cpu CPU 2" and "PJRT_DEVICE=CPU was set" in summary


def test_plain_cpu_without_torch_xla(tmp_path, select, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_xla", None)  # the documented way to block an import
    first, summary = select(**no_cores(tmp_path))
    assert first == "cpu None 0"
    assert "plain PyTorch on CPU" in summary and "torch-xla is not installed" in summary


def test_cpu_stage_choice(tmp_path, select):
    assert select(False, **no_cores(tmp_path))[0] == "cpu None 0"


def test_a_torch_xla_started_for_another_device_is_refused(tmp_path, select, monkeypatch):
    if "torch_xla" not in sys.modules:  # as if a cell had imported it before select_backend
        imported = types.ModuleType("torch_xla")
        imported.__spec__ = importlib.util.find_spec("torch_xla")
        monkeypatch.setitem(sys.modules, "torch_xla", imported)
    with pytest.raises(RuntimeError, match="imported with PJRT_DEVICE=NEURON; restart the kernel"):
        select(**no_cores(tmp_path), env={"PJRT_DEVICE": "NEURON"})


def test_lnc_2_is_accepted_and_read_from_this_process_by_default(tmp_path, monkeypatch):
    trn2_3xl = make_sysfs(tmp_path / "trn2-3xl", [8])
    assert logical_neuron_cores({"NEURON_LOGICAL_NC_CONFIG": "2"}, trn2_3xl, tmp_path / "nodev") == 4
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")  # no env given: os.environ's
    assert logical_neuron_cores(None, trn2_3xl, tmp_path / "nodev") == 8


def test_a_refused_worker_count_names_every_supported_one():
    with pytest.raises(ValueError) as err:
        check_worker_count(3, "trn1.2xlarge")
    assert str(err.value) == ("trn1.2xlarge supports 1, 2 worker(s) per node, not 3: run torchrun "
                              "--nproc_per_node=N with N in {1, 2}.")


# ---- the words a reader sees, and the edges of the core counts (docs/mutation-testing.md)

TORCH = importlib.metadata.version("torch").split("+")[0]
TORCH_XLA = importlib.metadata.version("torch-xla")


def with_dist_info(site, name="torch_neuronx", version="2.9.0.2.11.19912"):
    """The installed-package record pip writes beside a package: its version is read from it."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                   f"Version: {version}\n")
    return site


@pytest.mark.parametrize("case, expected", [
    ("stand-in", "Backend: XLA on CPU (PJRT_DEVICE=CPU stand-in; no NeuronCore) | torch {torch}, "
                 "torch-xla {xla}, torch-neuronx not installed | NeuronCores visible: 0 | why: "
                 "torch-neuronx is not installed (no Trainium here)"),
    ("cpu stage", "Backend: plain PyTorch on CPU | torch {torch}, torch-xla {xla}, torch-neuronx "
                  "not installed | NeuronCores visible: 0 | why: this stage trains with plain "
                  "PyTorch on the CPU"),
    ("no torch-xla", "Backend: plain PyTorch on CPU | torch {torch}, torch-xla {xla}, "
                     "torch-neuronx not installed | NeuronCores visible: 0 | why: torch-xla is "
                     "not installed"),
    ("neuron, one core", "Backend: Neuron (Trainium NeuronCore through PyTorch/XLA) | torch "
                         "{torch}, torch-xla {xla}, torch-neuronx 2.9.0.2.11.19912 | NeuronCores "
                         "visible: 1 | why: torch-neuronx is installed and NeuronCores are "
                         "visible"),
    ("neuron, no core", "Backend: XLA on CPU (PJRT_DEVICE=CPU stand-in; no NeuronCore) | torch "
                        "{torch}, torch-xla {xla}, torch-neuronx 2.9.0.2.11.19912 | NeuronCores "
                        "visible: 0 | why: torch-neuronx is installed but no NeuronCore is "
                        "visible"),
    ("forced", "Backend: XLA on CPU (PJRT_DEVICE=CPU stand-in; no NeuronCore) | torch {torch}, "
               "torch-xla {xla}, torch-neuronx 2.9.0.2.11.19912 | NeuronCores visible: 2 | why: "
               "PJRT_DEVICE=CPU was set (forces the stand-in)"),
])
def test_each_backend_summary_word_for_word(case, expected, tmp_path, select, monkeypatch):
    """The one line every notebook and script prints first. A torch build's local label
    (+cu128, +cpu) is not shown; one visible NeuronCore is enough for Neuron."""
    monkeypatch.setattr("torch.__version__", f"{TORCH}+cpu")
    sysfs, nodev = make_sysfs(tmp_path / "sys", [2]), tmp_path / "nodev"
    neuronx = with_dist_info(fake_torch_neuronx(tmp_path))
    xla = TORCH_XLA
    if case == "stand-in":
        _, summary = select(**no_cores(tmp_path))
    elif case == "cpu stage":
        _, summary = select(False, **no_cores(tmp_path))
    elif case == "no torch-xla":
        monkeypatch.setitem(sys.modules, "torch_xla", None)
        monkeypatch.setattr(importlib.metadata, "version", lambda name: None)
        xla = "not installed"
        _, summary = select(**no_cores(tmp_path))
    elif case == "neuron, one core":
        _, summary = select(sysfs=sysfs, dev_dir=nodev, extra_path=neuronx,
                            env={"NEURON_RT_VISIBLE_CORES": "1"})
    elif case == "neuron, no core":
        _, summary = select(**no_cores(tmp_path), extra_path=neuronx)
    else:
        _, summary = select(sysfs=sysfs, dev_dir=nodev, extra_path=neuronx,
                            env={"PJRT_DEVICE": "CPU"})
    assert summary == expected.format(torch=TORCH, xla=xla)


def test_a_torch_xla_started_for_another_device_is_refused_with_what_to_do(tmp_path, select,
                                                                            monkeypatch):
    if "torch_xla" not in sys.modules:
        imported = types.ModuleType("torch_xla")
        imported.__spec__ = importlib.util.find_spec("torch_xla")
        monkeypatch.setitem(sys.modules, "torch_xla", imported)
    with pytest.raises(RuntimeError) as err:
        select(**no_cores(tmp_path), env={"PJRT_DEVICE": "neuron"})
    assert str(err.value) == ("torch_xla was imported with PJRT_DEVICE=neuron; restart the kernel "
                              "and call select_backend() first")


def test_the_xla_stages_without_torch_xla_say_what_to_run(monkeypatch):
    from mnist_mlp.common.backend import select_xla_backend

    monkeypatch.setitem(sys.modules, "torch_xla", None)
    with pytest.raises(SystemExit) as err:
        select_xla_backend()
    assert str(err.value) == (
        "error: this stage runs on an XLA device (a NeuronCore, or PyTorch/XLA's CPU stand-in) and "
        "torch-xla is not installed: run `make venv` (or pip install -r requirements.txt), or "
        "train on the CPU with train_cpu.py.")


def test_a_module_without_a_spec_is_not_taken_for_an_installed_package(monkeypatch):
    """importlib raises ValueError for a module object in sys.modules that has no __spec__:
    that is not an installed package to start a backend with."""
    from mnist_mlp.common.backend import _installed

    monkeypatch.setitem(sys.modules, "torch_neuronx", types.ModuleType("torch_neuronx"))
    assert _installed("torch_neuronx") is False
    assert _installed("torch") is True


def test_core_counts_at_their_edges(tmp_path, monkeypatch):
    """An unreadable core_count skips that device only; without sysfs, the /dev nodes given are
    the ones counted; only 8-core (Trainium2/3) devices are grouped; counts are whole numbers;
    the variables are read from the env given; a core index the machine lacks counts nothing."""
    sysfs = tmp_path / "sys"
    make_sysfs(sysfs, [2, 2])
    (sysfs / "neuron0" / "core_count").write_text("unknown\n")
    assert device_core_counts(sysfs, tmp_path / "nodev") == [2]
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("neuron0", "neuron1"):
        (dev / name).touch()
    nosys = tmp_path / "nosys"
    assert logical_neuron_cores({}, nosys, dev) == visible_neuron_cores({}, nosys, dev) == 4
    mixed = make_sysfs(tmp_path / "mixed", [8, 2])
    assert logical_neuron_cores({}, mixed, dev) == 6
    assert type(visible_neuron_cores({}, make_sysfs(tmp_path / "trn2", [8]), dev)) is int
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    assert visible_neuron_cores({"NEURON_LOGICAL_NC_CONFIG": "1"}, tmp_path / "trn2", dev) == 8
    one = make_sysfs(tmp_path / "one", [1])
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "1"}, one, dev) == 0
    assert visible_neuron_cores({"NEURON_RT_VISIBLE_CORES": "0"}, one, dev) == 1


def test_without_sysfs_the_dev_nodes_given_decide(tmp_path, select):
    """An old driver without the sysfs tree: select_backend counts the /dev nodes it is given."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "neuron0").touch()
    first, _ = select(sysfs=tmp_path / "nosys", dev_dir=dev,
                      extra_path=fake_torch_neuronx(tmp_path))
    assert first == "neuron NEURON 2"

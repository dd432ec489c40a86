"""mnist_mlp/train_bf16.py on a stand-in trn1.2xlarge (tests/neuron_trees.py), in this process:
what it sets for the Neuron runtime and compiler before the NeuronCore opens. Its runs on the CPU
stand-in are tests/test_bf16_script.py's."""
import os

import pytest


class DeviceOpened(Exception):
    """Raised where a NeuronCore would be opened: none exists here."""


NEURON_VARIABLES = ("PJRT_DEVICE", "NEURON_RT_STOCHASTIC_ROUNDING_EN", "NEURON_CC_FLAGS")
USERS_FLAGS = "--model-type=transformer --auto-cast matmult"  # set by the user before the run


@pytest.mark.parametrize("precision,rounding,flags", [
    ("bf16-sr", "1", USERS_FLAGS),
    ("autocast", "0", "--model-type=transformer --auto-cast=none"),
    ("bf16", "0", USERS_FLAGS),
    ("fp32", "0", USERS_FLAGS),
])
def test_on_neuron_the_runtime_and_compiler_settings_are_made_before_the_device_opens(
        precision, rounding, flags, tmp_path, monkeypatch, capsys):
    """train_bf16.py's main() on a stand-in trn1.2xlarge (tests/neuron_trees.py: the real
    select_backend() picks Neuron), stopped where torch_xla would open the NeuronCore: by then
    the runtime's stochastic rounding is on for bf16-sr alone (off otherwise, whatever was set
    before), and autocast alone replaces the compiler's --auto-cast with none, keeping the
    user's other flags. The runtime and the compiler read both when the device opens."""
    import importlib
    import sys

    import torch_xla

    import mnist_mlp
    import mnist_mlp.train_bf16 as stand_in_script  # this process's: put back afterwards
    from tests.neuron_trees import on_neuron_host

    monkeypatch.setattr(mnist_mlp, "train_bf16", stand_in_script)
    monkeypatch.setitem(sys.modules, "mnist_mlp.train_bf16", stand_in_script)
    on_neuron_host(monkeypatch, tmp_path)
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "0" if rounding == "1" else "1")
    monkeypatch.setenv("NEURON_CC_FLAGS", USERS_FLAGS)
    seen = {}

    def open_device():
        seen.update((name, os.environ.get(name)) for name in NEURON_VARIABLES)
        raise DeviceOpened

    monkeypatch.setattr(torch_xla, "device", open_device)
    del sys.modules["mnist_mlp.train_bf16"]
    script = importlib.import_module("mnist_mlp.train_bf16")  # as `python train_bf16.py` starts
    assert script.backend.name == "neuron"
    with pytest.raises(DeviceOpened):
        script.main(["--precision", precision, "--checkpoint-dir", str(tmp_path / "out")])
    assert seen == {"PJRT_DEVICE": "NEURON", "NEURON_RT_STOCHASTIC_ROUNDING_EN": rounding,
                    "NEURON_CC_FLAGS": flags}
    out = capsys.readouterr().out
    assert out.startswith("Backend: Neuron") and f"Precision: {precision} |" in out
    assert ("the NeuronCore rounds stochastically" in out) is (precision == "bf16-sr")
    assert "EMULATED" not in out

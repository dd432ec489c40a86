import json
import os
import subprocess
import sys

import pytest
import torch

from helpers.checkpoint import atomic_save, atomic_write_json
from tests.conftest import REPO_ROOT


def test_atomic_save_roundtrip(tmp_path):
    path = tmp_path / "sub" / "ck.pt"
    atomic_save({"w": torch.arange(3)}, path)
    assert torch.equal(torch.load(path)["w"], torch.arange(3))
    assert os.listdir(path.parent) == ["ck.pt"]  # no temp file left behind


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "ck.pt"
    atomic_save({"w": torch.ones(2)}, path)
    with pytest.raises(Exception):
        atomic_save({"w": lambda: None}, path)  # a lambda does not pickle
    assert torch.equal(torch.load(path)["w"], torch.ones(2))
    assert os.listdir(tmp_path) == ["ck.pt"]


def test_atomic_write_json(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json({"b": 1, "a": [1, 2]}, path)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    with pytest.raises(TypeError):
        atomic_write_json({"x": object()}, path)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_xla_save_loads_on_cpu(tmp_path):
    """xm.save of XLA tensors (CPU stand-in) gives a file plain torch.load reads on the CPU."""
    path = tmp_path / "xla.pt"
    code = (
        "import sys, torch; from helpers.backend import select_backend; b = select_backend();"
        "assert b.uses_xla; from helpers.checkpoint import atomic_save;"
        "t = torch.arange(4.0, device=b.device) * 2;"
        f"atomic_save({{'t': t}}, {str(path)!r}, xla=True)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO_ROOT)
    loaded = torch.load(path)
    assert loaded["t"].device.type == "cpu"
    assert torch.equal(loaded["t"], torch.tensor([0.0, 2.0, 4.0, 6.0]))

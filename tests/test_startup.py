"""Importing the runtime changes no global state; the start-up call a script's main() makes does."""
import json
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

# Every runtime module but the XLA stage scripts (train.py, train_bf16.py, train_torchrun.py):
# they choose the XLA backend at import, before `import torch_xla`, as the lesson shows.
SIDE_EFFECT_FREE = ["mnist_mlp", "mnist_mlp.backend", "mnist_mlp.atomic_files", "mnist_mlp.cli",
                    "mnist_mlp.data", "mnist_mlp.distributed", "mnist_mlp.download", "mnist_mlp.errors",
                    "mnist_mlp.evaluation", "mnist_mlp.mnist_files", "mnist_mlp.mnist_sources",
                    "mnist_mlp.model", "mnist_mlp.nielsen_idx", "mnist_mlp.observe", "mnist_mlp.paths",
                    "mnist_mlp.precision", "mnist_mlp.results", "mnist_mlp.startup", "mnist_mlp.tracking",
                    "mnist_mlp.child_process", "mnist_mlp.train_cpu", "mnist_mlp.xla_metrics",
                    "tests.xla_stand_in"]

CHILD = """
import gc, importlib, json, os, sys
env = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
after_import = dict(frozen=gc.get_freeze_count(), env_changed=sorted(k for k in set(env) | set(os.environ)
                    if env.get(k) != os.environ.get(k)), torch_xla="torch_xla" in sys.modules)
from mnist_mlp.cli import one_line_errors
one_line_errors(lambda: None)()
frozen_once = gc.get_freeze_count()
keep = [[] for _ in range(10)]  # new objects a second freeze would exempt
one_line_errors(lambda: None)()
print(json.dumps(dict(after_import, after_main=frozen_once > 0, again=gc.get_freeze_count() == frozen_once)))
"""


@pytest.mark.e2e  # a fresh Python process: this one has imported and run everything already
def test_importing_the_runtime_changes_nothing_and_main_freezes_once():
    env = {"PATH": "/usr/bin:/bin"}  # no PJRT_DEVICE: importing must not set it
    proc = subprocess.run([sys.executable, "-c", CHILD, *SIDE_EFFECT_FREE], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == dict(
        frozen=0, env_changed=[], torch_xla=False, after_main=True, again=True)


HELPERS_CHILD = """
import gc, importlib, json, os, pkgutil, sys
import helpers
env = dict(os.environ)
names = [m.name for m in pkgutil.walk_packages(helpers.__path__, "helpers.")
         if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps(dict(modules=len(names), frozen=gc.get_freeze_count(), torch_xla="torch_xla" in sys.modules,
                      env_changed=sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k)))))
"""


@pytest.mark.e2e
def test_importing_every_helpers_module_changes_nothing():
    proc = subprocess.run([sys.executable, "-c", HELPERS_CHILD], cwd=REPO_ROOT,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["modules"] >= 40
    assert seen == dict(modules=seen["modules"], frozen=0, torch_xla=False, env_changed=[])

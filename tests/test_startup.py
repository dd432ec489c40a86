"""Importing the runtime changes no global state; the start-up call a script's main() makes does."""
import json
import subprocess
import sys

import pytest

from tests.architecture_page import module_files, read_page
from tests.paths import REPO_ROOT

# Every runtime module (found on disk, so a new one is held too) but the ones docs/architecture.md
# names as changing global state when imported: the XLA stage scripts, which choose the XLA
# backend at import, before `import torch_xla`, as the lesson shows.
IMPORT_EXCEPTIONS = read_page().import_exceptions
SIDE_EFFECT_FREE = [name for name in module_files(("mnist_mlp",)) if name not in IMPORT_EXCEPTIONS]
SIDE_EFFECT_FREE.append("tests.xla_stand_in")


def test_the_exceptions_are_the_xla_stage_scripts_and_the_rest_is_imported():
    # Pinned here too: a longer exception list is a decision, not a page edit.
    assert sorted(IMPORT_EXCEPTIONS) == ["mnist_mlp.train", "mnist_mlp.train_bf16",
                                         "mnist_mlp.train_torchrun"]
    assert {"mnist_mlp", "mnist_mlp.common.platform_paths", "mnist_mlp.train_cpu",
            "mnist_mlp.common.child_process"} <= set(SIDE_EFFECT_FREE)


CHILD = """
import gc, importlib, json, os, sys
env = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
after_import = dict(frozen=gc.get_freeze_count(), env_changed=sorted(k for k in set(env) | set(os.environ)
                    if env.get(k) != os.environ.get(k)), torch_xla="torch_xla" in sys.modules)
from mnist_mlp.common.cli import one_line_errors
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

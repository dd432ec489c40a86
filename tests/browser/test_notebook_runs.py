"""What the scripts that the session's execution of the notebooks started wrote, read where
their kernels put it (the copy's checkpoint directory: conftest.kernel_env), in place of a
second run of the same command line in tests/script_runs.py. Runs in the notebook group, after
the notebooks (it takes `executed_notebooks`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from tests.browser.conftest import kernel_env

# mnist_mlp/common/distributed.py's line for a job whose XLA runtime spans every worker, behind
# torchrun's rank prefix (helpers/launch/processes.py's RANK_PREFIX_TEMPLATE)
XLA_REDUCE = re.compile(r"^\[rank0\]: Gradient all-reduce: xm\.optimizer_step over (\d+) XLA worker\(s\)\.$",
                        re.M)


def test_torchrun_one_worker_uses_xla_reduce(executed_notebooks, lab_notebooks):
    """Notebook 04's one-worker torchrun run (900 steps; its whole log in torchrun_w1.log): on
    the stand-in one worker's XLA runtime is the whole job, so xm.optimizer_step reduces, and
    the run says so and records it."""
    executed_notebooks("04_torchrun_data_parallel.ipynb")
    checkpoints = Path(kernel_env(lab_notebooks)["CHECKPOINT_DIR"])  # where its kernel's runs write
    log = (checkpoints / "torchrun_w1.log").read_text()
    assert XLA_REDUCE.findall(log) == ["1"], log[-3000:]
    results = json.loads((checkpoints / "results_torchrun_w1.json").read_text())
    assert results["world_size"] == 1 and results["gradient_reduce"] == "xla"

"""The committed picture of notebook 06's Trace Viewer, notebooks/images/06_trace_viewer.png: a
live viewer is blank on GitHub and in a saved copy, so the notebook also shows this picture.

It is taken from the real viewer: a short profiled `train.py` run on the CPU stand-in, TensorBoard
on its directory, Chromium on the profile plugin's Trace Viewer page once it has drawn the
`python` thread. The picture is the viewer's top, zoomed out: the runtime's threads, one burst per
step (06's caption says so; the `python` thread's rows lie below). `make notebooks` refreshes it (python -m tests.browser.trace_viewer_png); the
browser test of notebook 06 takes the same view through JupyterLab.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.inside.tensorboard import TensorBoard, trace_viewer_path
from tests.browser.conftest import CHROMIUM_ARGS
from tests.browser.find_browser import HOW_TO_GET_ONE, find_chromium
from tests.paths import REPO_ROOT

PICTURE = REPO_ROOT / "notebooks" / "images" / "06_trace_viewer.png"
SIZE = {"width": 1200, "height": 560}


def profiled_run(logdir: Path) -> None:
    """30 steps of train.py, steps 3-22 traced: what notebook 06's first run records."""
    subprocess.run([sys.executable, str(REPO_ROOT / "mnist_mlp" / "train.py"), "--steps-this-run",
                    "30", "--profile", str(logdir), "--profile-steps", "20",
                    "--checkpoint-dir", str(logdir / "checkpoints")],
                   check=True, capture_output=True, text=True,
                   env={**os.environ, "PJRT_DEVICE": "CPU"})


def take(out: Path = PICTURE) -> Path:
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit(f"no Chromium to take the Trace Viewer picture with: {HOW_TO_GET_ONE}")
    with tempfile.TemporaryDirectory(prefix="trace-viewer-") as work:
        logdir = Path(work)
        profiled_run(logdir)
        with TensorBoard(logdir).start() as board:
            run = board.wait_for("profile", board.profile_runs)[0]
            host = board.profile_hosts(run)[0]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(chromium), headless=True,
                                                     args=CHROMIUM_ARGS)
                page = browser.new_page(viewport=SIZE)
                page.goto(board.local_url(trace_viewer_path(run, host)))
                page.wait_for_selector("text=python", timeout=60_000)
                page.wait_for_timeout(1500)  # the tracks finish drawing after the labels
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out))
                browser.close()
    return out


if __name__ == "__main__":
    print("Trace Viewer picture:", take(Path(sys.argv[1]) if len(sys.argv) > 1 else PICTURE))

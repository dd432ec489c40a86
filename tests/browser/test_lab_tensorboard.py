"""Notebook 06 in JupyterLab: after Run All, its TensorBoard answers through the Jupyter server's
/proxy/<port>/ (jupyter-server-proxy), with the run's scalars and profiler trace; the inline
Trace Viewer draws; the live utilization widget redrew while torchrun trained."""
from __future__ import annotations

import gzip
import json
import re
import urllib.parse
import urllib.request

from tests.browser.conftest import SCREENSHOTS
from tests.browser.test_lab_notebooks import notebook_using, ran_clean
from tests.browser.widget_clicks import code_cell, wait_for

LOSS_TAG = "train/loss"  # mnist_mlp.common.observe.LOSS_TAG: what the scripts write
PORT_LINE = re.compile(r"TensorBoard on 127\.0\.0\.1:(\d+)")


def through_proxy(lab, port: int, path: str, timeout: float = 60.0, **query):
    """GET a TensorBoard path as the browser would: the Jupyter server's /proxy/<port>/."""
    url = lab.url(f"proxy/{port}/{path}")  # ends with ?token=...
    if query:
        url += "&" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":  # the profile plugin always gzips
            body = gzip.decompress(body)
    return json.loads(body)


def test_tensorboard_through_the_proxy_and_live_utilization(notebook_runs, lab):
    name = notebook_using("TensorBoard")
    run = notebook_runs.get(name, keep_open=True)
    try:
        ran_clean(run)
        page = run.page
        started = code_cell(page, "TensorBoard(runs).start()")
        port = int(PORT_LINE.search(started.inner_text()).group(1))

        tags = through_proxy(lab, port, "data/plugin/scalars/tags")
        assert LOSS_TAG in tags.get("train", {}), tags
        runs = through_proxy(lab, port, "data/plugin/profile/runs")
        assert runs, "the profile plugin lists the trace"
        train = next(r for r in runs if r.startswith("train/"))
        hosts = through_proxy(lab, port, "data/plugin/profile/hosts", run=train, tag="trace_viewer")
        trace = through_proxy(lab, port, "data/plugin/profile/data", run=train,
                              tag="trace_viewer@", host=hosts[0]["hostname"])
        names = {e.get("name") for e in trace["traceEvents"]}
        assert "train_step 3" in names and "train_step 22" in names

        # The inline Trace Viewer: its frame, under /proxy/<port>/, has drawn the python thread.
        cell = code_cell(page, "board.show_trace(train_profile")
        cell.scroll_into_view_if_needed()
        frame = wait_for(lambda: next((f for f in page.frames
                                       if f"/proxy/{port}/data/plugin/profile/trace_viewer_index"
                                       in f.url), None), "the Trace Viewer's frame")
        frame.wait_for_selector("text=python", timeout=60_000)
        cell.locator("iframe").first.screenshot(path=str(SCREENSHOTS / f"{name[:-6]}_trace_viewer.png"))
        scalars = code_cell(page, 'board.show("#scalars"')
        link = scalars.locator("a", has_text="Open TensorBoard in a new tab")
        assert link.get_attribute("href") == f"/proxy/{port}/#scalars"
        scalars.screenshot(path=str(SCREENSHOTS / f"{name[:-6]}_scalars.png"))

        # The utilization widget redrew while the run went: the count it shows.
        widget = code_cell(page, "UtilizationMonitor(backend")
        widget.scroll_into_view_if_needed()
        updates = re.search(r"updates: (\d+)", widget.inner_text())
        assert updates and int(updates.group(1)) >= 2, widget.inner_text()[-400:]
        widget.locator(".widget-vbox").first.screenshot(
            path=str(SCREENSHOTS / f"{name[:-6]}_utilization.png"))
    finally:
        notebook_runs.finish(name)

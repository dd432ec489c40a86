"""book/workbook_site.py's static outputs, without Sphinx: a widget drawn from the state JupyterLab
saved (hidden parts left out, an image from its buffer), a widget it cannot draw left to its
text/plain form, an output that only a running kernel serves replaced by a sentence, and no widget
state or view left for a script. The whole site is read in a browser by tests/browser/test_book.py."""
from __future__ import annotations

import importlib.util

from tests.paths import REPO_ROOT

spec = importlib.util.spec_from_file_location("workbook_site", REPO_ROOT / "book" / "workbook_site.py")
workbook_site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(workbook_site)

VIEW, STATE = workbook_site.WIDGET_VIEW, workbook_site.WIDGET_STATE


def model(name: str, module: str = "@jupyter-widgets/controls", buffers=(), **state) -> dict:
    return {"model_name": name, "model_module": module, "state": state, "buffers": list(buffers)}


def notebook(state: dict, *outputs: dict) -> dict:
    return {"metadata": {"widgets": {STATE: {"state": state, "version_major": 2, "version_minor": 0}}},
            "cells": [{"cell_type": "code", "outputs": list(outputs)}]}


def view(model_id: str, plain: str) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {VIEW: {"model_id": model_id, "version_major": 2}, "text/plain": plain}}


def test_a_box_is_drawn_from_its_saved_state_without_its_hidden_children():
    state = {"box": model("VBoxModel", children=["IPY_MODEL_text", "IPY_MODEL_gone", "IPY_MODEL_bar"]),
             "text": model("HTMLModel", value="<b>14 readings</b>"),
             "gone": model("HTMLModel", value="secret", layout="IPY_MODEL_hidden"),
             "hidden": model("LayoutModel", "@jupyter-widgets/base", display="none"),
             "bar": model("FloatProgressModel", min=0, max=10, value=5, description="training")}
    result = workbook_site.static_outputs(notebook(state, view("box", "VBox(children=(...))")))
    data = result["cells"][0]["outputs"][0]["data"]
    assert VIEW not in data and "widgets" not in result["metadata"]
    assert "<b>14 readings</b>" in data["text/html"] and "secret" not in data["text/html"]
    assert '<progress max="10" value="5">' in data["text/html"] and "training" in data["text/html"]


def test_an_image_widget_shows_its_saved_buffer():
    state = {"img": model("ImageModel", buffers=[{"path": ["value"], "encoding": "base64", "data": "iVBORw0K"}],
                          format="png")}
    data = workbook_site.static_outputs(notebook(state, view("img", "Image(...)")))["cells"][0]["outputs"][0]["data"]
    assert 'src="data:image/png;base64,iVBORw0K"' in data["text/html"]


def test_a_widget_it_cannot_draw_keeps_its_plain_text_and_a_static_html_form_is_kept():
    state = {"box": model("HBoxModel", children=["IPY_MODEL_odd"]), "odd": model("ColorPickerModel", value="#fff")}
    checklist = view("x", "[OK ] Backend")
    checklist["data"]["text/html"] = "<table><tr><td>OK</td></tr></table>"
    result = workbook_site.static_outputs(notebook(state, view("box", "HBox(...)"), checklist))
    drawn, kept = (output["data"] for output in result["cells"][0]["outputs"])
    assert drawn == {"text/plain": "HBox(...)"}
    assert kept == {"text/plain": "[OK ] Backend", "text/html": "<table><tr><td>OK</td></tr></table>"}


def test_an_output_only_a_running_kernel_serves_becomes_a_sentence():
    frame = {"output_type": "display_data", "metadata": {},
             "data": {"text/html": '<iframe src="/proxy/42223/data/plugin/profile/x"></iframe>', "text/plain": "IFrame"}}
    link = {"output_type": "display_data", "metadata": {},
            "data": {"text/html": '<a href="/proxy/42223/#scalars">Open TensorBoard</a>', "text/plain": "HTML"}}
    result = workbook_site.static_outputs(notebook({}, frame, link))
    frame_html, link_html = (o["data"]["text/html"] for o in result["cells"][0]["outputs"])
    assert "/proxy/" not in frame_html + link_html
    assert "TensorBoard's live view" in frame_html and "a link that opens TensorBoard" in link_html


def test_the_front_page_links_each_notebook_it_names_but_not_inside_fenced_code(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "02_single_core_xla.ipynb").write_text("{}")
    markdown = ("| 2 | `notebooks/02_single_core_xla.ipynb` | `notebooks/09_missing.ipynb` |\n\n"
                "```bash\necho `notebooks/02_single_core_xla.ipynb`\n```\n")
    linked = workbook_site.link_notebooks(markdown, tmp_path)
    assert linked.startswith("| 2 | [`notebooks/02_single_core_xla.ipynb`](notebooks/02_single_core_xla.ipynb) | "
                             "`notebooks/09_missing.ipynb` |")
    assert linked.endswith("```bash\necho `notebooks/02_single_core_xla.ipynb`\n```\n")


def test_a_notebook_page_links_its_source_on_github_only_when_the_build_names_the_repository():
    # GitHub Actions names the repository (GITHUB_REPOSITORY); a local build links the site's own copy.
    on_github = workbook_site.source_note("notebooks/02_single_core_xla", repository="someone/workbook")
    assert "(https://github.com/someone/workbook/blob/main/notebooks/02_single_core_xla.ipynb)" in on_github
    local = workbook_site.source_note("notebooks/02_single_core_xla", repository=None)
    assert "`02_single_core_xla.ipynb` (the download button above gives it)" in local and "github" not in local

"""What the workbook's website adds to Sphinx and myst-nb (a Sphinx extension; book/conf.py).

- The lesson's order: a hidden toctree appended to the front page (the README, unchanged on GitHub),
  and each notebook the front page names as code a link to its page.
- Widgets as their static form. A page of a notebook would show each widget's saved state only
  through @jupyter-widgets/html-manager, which myst-nb loads from a CDN; the site loads nothing
  from another host. So each widget output is rendered here, from the state JupyterLab saved in
  the notebook, as the HTML it showed (text, tables, images, a progress bar, controls drawn
  disabled); what cannot be drawn keeps its text/plain form. No widget script is left to load.
- An output that a running kernel serves (TensorBoard through JupyterLab's /proxy/<port>/), dead
  on a website, becomes a sentence saying what JupyterLab shows there.
- A line under each notebook's title: it is the committed run on the CPU stand-in, its source
  (on GitHub when the build knows the repository, else the page's download button), and how to run it.
- Links to files that are not pages (a script, the Makefile) go to the file on GitHub instead of
  a download, when the build knows the repository.

The repository is GITHUB_REPOSITORY, which GitHub Actions sets (the Pages workflow builds there);
elsewhere none is assumed: the workbook names no owner, so a local build links to no GitHub address.
"""
from __future__ import annotations

import html
import json
import os
import posixpath
import re
from pathlib import Path

# owner/name on GitHub, set by GitHub Actions; None elsewhere (no owner is made up).
REPOSITORY = os.environ.get("GITHUB_REPOSITORY") or None
BRANCH = "main"

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# docs/ pages in reading order: the learner's path first, then the instructor's, then how the
# workbook is built and checked. A page not named here follows, alphabetically.
DOCS_ORDER = ["setup", "trn1", "platform", "scripts", "reliability", "cache-tool", "cache-archive",
              "bf16", "inside-a-run", "multi-node", "parallelcluster", "instructor",
              "workshop-stack", "sources", "architecture", "testing", "mutation-testing"]


def lesson_order(root: Path) -> dict[str, list[str]]:
    """Caption -> document names, in the order the sidebar lists them."""
    notebooks = sorted(p.stem for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    docs = {p.stem for p in (root / "docs").glob("*.md")}
    ordered = [d for d in DOCS_ORDER if d in docs] + sorted(docs - set(DOCS_ORDER))
    return {"The lessons": [f"notebooks/{n}" for n in notebooks],
            "Teaching it": ["notebooks/README"],
            "Reference": [f"docs/{d}" for d in ordered]}


def toctree_markdown(toc: dict[str, list[str]]) -> str:
    return "".join(f"\n\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n" + "\n".join(names) + "\n```\n"
                   for caption, names in toc.items())


# ---- widgets: the saved state drawn as static HTML

def widget_html(model_id: str, state: dict) -> str | None:
    """The HTML of widget model_id as saved, or None when it (or a part of it) cannot be drawn."""
    model = state.get(model_id)
    if model is None:
        return None
    values = model.get("state", {})
    layout = state.get(str(values.get("layout", "")).removeprefix("IPY_MODEL_"), {}).get("state", {})
    if layout.get("display") == "none" or layout.get("visibility") == "hidden":
        return ""
    drawn = draw(model["model_name"], values, model.get("buffers", []), state)
    if drawn is None:
        return None
    description = values.get("description") or ""
    if description and model["model_name"] not in ("ButtonModel", "CheckboxModel", "ToggleButtonModel"):
        drawn = f'<span class="workbook-widget-description">{html.escape(description)}</span> {drawn}'
    return drawn


def children_html(values: dict, state: dict) -> list[str] | None:
    drawn = [widget_html(str(child).removeprefix("IPY_MODEL_"), state) for child in values.get("children", [])]
    return None if any(part is None for part in drawn) else drawn


def draw(name: str, values: dict, buffers: list[dict], state: dict) -> str | None:
    if name in ("HTMLModel", "HTMLMathModel"):
        return f'<div class="workbook-widget-html">{values.get("value", "")}</div>'
    if name == "LabelModel":
        return f"<span>{html.escape(str(values.get('value', '')))}</span>"
    if name in ("VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel", "AccordionModel", "TabModel"):
        parts = children_html(values, state)
        if parts is None:
            return None
        direction = "row" if name == "HBoxModel" else "column"
        titles = values.get("titles") or []
        parts = [(f"<b>{html.escape(titles[i])}</b>" if i < len(titles) and titles[i] else "") + part
                 for i, part in enumerate(parts)]
        return (f'<div class="workbook-widget-box workbook-widget-{direction}">'
                + "".join(f"<div>{part}</div>" for part in parts) + "</div>")
    if name == "ImageModel":
        image = next((b for b in buffers if b.get("path") == ["value"] and b.get("encoding") == "base64"), None)
        if image is None:
            return None
        kind = values.get("format") or "png"
        width = f' width="{html.escape(str(values["width"]))}"' if values.get("width") else ""
        return f'<img class="workbook-widget-image" alt="" src="data:image/{kind};base64,{image["data"]}"{width}>'
    if name in ("FloatProgressModel", "IntProgressModel"):
        low, high, value = (values.get(k, 0) for k in ("min", "max", "value"))
        return f'<progress max="{high - low}" value="{value - low}"></progress>'
    if name in ("ButtonModel", "ToggleButtonModel"):
        return f'<button type="button" disabled>{html.escape(values.get("description") or "")}</button>'
    if name == "CheckboxModel":
        checked = " checked" if values.get("value") else ""
        return (f'<label><input type="checkbox" disabled{checked}> '
                f'{html.escape(values.get("description") or "")}</label>')
    if name in ("DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel",
                "SelectMultipleModel"):
        labels = values.get("_options_labels", [])
        index = values.get("index")
        chosen = index if isinstance(index, list) else [] if index is None else [index]
        options = "".join(f"<option{' selected' if i in chosen else ''}>{html.escape(label)}</option>"
                          for i, label in enumerate(labels))
        multiple = " multiple" if name == "SelectMultipleModel" else ""
        return f"<select disabled{multiple}>{options}</select>"
    if name in ("TextModel", "TextareaModel", "IntTextModel", "FloatTextModel", "BoundedIntTextModel",
                "BoundedFloatTextModel", "PasswordModel"):
        return f'<input type="text" disabled value="{html.escape(str(values.get("value", "")))}">'
    return None


# An output that only a running kernel serves: TensorBoard through the Jupyter server's /proxy/<port>/.
LIVE_SERVER = re.compile(r"""(src|href)=["']/proxy/\d+/""")


def live_output_note(page: str) -> str:
    shown = "TensorBoard's live view" if "<iframe" in page else "a link that opens TensorBoard in its own tab"
    return (f'<p class="workbook-live-output">In JupyterLab this output is {shown}. TensorBoard runs only '
            "while this notebook's kernel runs, so a website cannot show it.</p>")


def static_outputs(notebook: dict) -> dict:
    """The notebook with each widget output replaced by its static HTML (or left to its
    text/plain form when it cannot be drawn), no widget state for myst-nb to load, and each
    output that a running kernel serves replaced by a sentence saying so."""
    state = notebook.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            page = "".join(data.get("text/html", ""))
            if LIVE_SERVER.search(page):
                data["text/html"] = live_output_note(page)
            view = data.pop(WIDGET_VIEW, None)
            if view is None or "text/html" in data or "image/png" in data:
                continue
            drawn = widget_html(view.get("model_id", ""), state)
            if drawn:
                data["text/html"] = f'<div class="workbook-widget">{drawn}</div>'
    return notebook


# ---- the line under a notebook's title

def source_note(docname: str, repository: str | None = REPOSITORY) -> str:
    """The line under a notebook's title. Its source: on GitHub when the build knows the repository;
    else the page's download button, which offers the copy the site carries (_sources/)."""
    name = posixpath.basename(docname)
    if repository:
        source = f"[`{name}.ipynb`](https://github.com/{repository}/blob/{BRANCH}/{docname}.ipynb)"
    else:
        source = f"`{name}.ipynb` (the download button above gives it)"
    return (f"*This page is the notebook {source} with the outputs of a run on the CPU "
            "stand-in (PyTorch/XLA's CPU backend). To run it yourself, on a trn1.2xlarge or any CPU, "
            "follow [Where to run it](../README.md#where-to-run-it), then `make lab`.*")


def add_source_note(notebook: dict, docname: str) -> dict:
    cells = notebook.get("cells", [])
    title = next((i for i, c in enumerate(cells)
                  if c.get("cell_type") == "markdown" and "".join(c.get("source", "")).lstrip().startswith("# ")),
                 None)
    note = {"cell_type": "markdown", "id": "workbook-source-note", "metadata": {}, "source": source_note(docname)}
    if title is not None:
        cells.insert(title + 1, note)
    return notebook


# `notebooks/02_single_core_xla.ipynb` written as code in the README's stages table.
NOTEBOOK_NAMED = re.compile(r"`(notebooks/\d\d_\w+\.ipynb)`")


def link_notebooks(markdown: str, root: Path) -> str:
    """Each notebook the front page names as code becomes a link to its page (outside fenced code)."""
    parts = re.split(r"(^```.*?^```)", markdown, flags=re.S | re.M)
    return "".join(part if part.startswith("```") else NOTEBOOK_NAMED.sub(
        lambda m: f"[`{m[1]}`]({m[1]})" if (root / m[1]).is_file() else m[0], part) for part in parts)


def on_source_read(app, docname: str, source: list[str]) -> None:
    if docname == app.config.root_doc:
        source[0] = link_notebooks(source[0], Path(app.srcdir)) + toctree_markdown(app.config.workbook_toc)
    elif app.env.doc2path(docname).suffix == ".ipynb":
        notebook = add_source_note(static_outputs(json.loads(source[0])), docname)
        source[0] = json.dumps(notebook)


# ---- links to files that are not pages

def files_to_github(app, doctree) -> None:
    """A link to a repository file that is not a page becomes a link to it on GitHub (with no
    repository known, it stays Sphinx's download of the file)."""
    if not REPOSITORY:
        return
    # Imported here: the rest of this module (the widgets) is tested without Sphinx installed.
    from docutils import nodes
    from sphinx import addnodes

    docdir = posixpath.dirname(app.env.docname)
    for node in list(doctree.findall(addnodes.download_reference)):
        target = node.get("reftarget", "")
        if re.match(r"^[a-z]+:", target):
            continue
        # "/x" is from the repository's root, anything else from the page's own folder.
        path = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(docdir, target))
        link = nodes.reference("", "", *node.children, refuri=f"https://github.com/{REPOSITORY}/blob/{BRANCH}/{path}",
                               internal=False)
        node.replace_self(link)


# ---- the site's address: GitHub Pages serves index.html, the front page is README.html

def index_page(app, exception) -> None:
    if exception is None and app.builder.format == "html" and app.config.root_doc != "index":
        page = f"{app.config.root_doc}.html"
        (Path(app.outdir) / "index.html").write_text(
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(app.config.project)}</title>'
            f'<meta http-equiv="refresh" content="0; url={page}"><link rel="canonical" href="{page}"></head>'
            f'<body><a href="{page}">{html.escape(app.config.project)}</a></body></html>\n', encoding="utf-8")


def setup(app):
    app.add_config_value("workbook_toc", {}, "env")
    app.connect("source-read", on_source_read)
    app.connect("doctree-read", files_to_github)
    app.connect("build-finished", index_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

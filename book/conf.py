"""Sphinx configuration of the workbook's website (`make book`: sphinx-build -c book . build/book/html).

The source directory is the repository root, so that every link the README, the notebooks and
docs/ already hold (docs/setup.md, ../notebooks/README.md#timings) resolves as it does on GitHub;
include_patterns picks the pages. Nothing is executed: the notebooks show their committed outputs.
The site loads nothing from another host (workbook_site.py says how; the browser test checks it).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from workbook_site import REPOSITORY, lesson_order  # noqa: E402  (the path above first)

project = "PyTorch on AWS Trainium: a workbook"
author = "the workbook's authors"
copyright = "the workbook's authors"
extensions = ["myst_nb", "workbook_site"]

root_doc = "README"
include_patterns = ["README.md", "notebooks/README.md", "notebooks/[0-9][0-9]_*.ipynb", "docs/*.md"]
exclude_patterns = ["build", ".venv", "mutants", "**/.ipynb_checkpoints"]
# The lesson's order in the sidebar, read by workbook_site.py (a hidden toctree in the front page).
workbook_toc = lesson_order(Path(__file__).parent.parent)

# Executing nothing: the committed outputs are the ones the site shows.
nb_execution_mode = "off"
# myst-nb's default loads RequireJS and the widget manager from a CDN. The pages hold no widget
# state any more (workbook_site.py renders each widget's saved state as static HTML instead).
nb_ipywidgets_js = {}
# Links such as notebooks/README.md#timings use GitHub's heading slugs.
myst_heading_anchors = 6
# Links to files that are not pages (a script, the Makefile) become links to GitHub, not
# downloads (workbook_site.py); make book's -W fails the build on a link to a missing page or heading.

html_theme = "sphinx_book_theme"
html_title = "PyTorch on AWS Trainium"
html_static_path = ["static"]
html_css_files = ["workbook.css"]
html_copy_source = True  # the theme's download button offers the .ipynb / .md from the site
html_sourcelink_suffix = ""  # _sources/notebooks/02_single_core_xla.ipynb: the download button gives the notebook itself
html_last_updated_fmt = None
# The theme's colour mode before a reader picks one (left empty, its script logs an error).
html_context = {"default_mode": "auto"}
# The repository buttons only where the build knows the repository (GitHub Actions): no owner is made up.
html_theme_options = {
    **({"repository_url": f"https://github.com/{REPOSITORY}", "repository_branch": "main", "path_to_docs": ""}
       if REPOSITORY else {}),
    "use_repository_button": bool(REPOSITORY),
    "use_source_button": bool(REPOSITORY),
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    # No launch buttons (Binder, Colab, JupyterHub): the notebooks need a trn1 or the stand-in's venv.
    "launch_buttons": {},
    # The pydata theme's icon links and analytics load nothing when left empty.
    "icon_links": [],
}
# No dollarmath: Sphinx loads MathJax (from a CDN) only on a page with math, and a `$` in these
# pages is a shell prompt or a price, never math. The browser test fails on any request off the site.
myst_enable_extensions: list[str] = []

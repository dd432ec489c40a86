"""The workbook's website (`make book`), read as a learner reads it: built once from the working
tree, served on 127.0.0.1 and opened page by page in headless Chromium.

Every page loads with no console error and every image loads; every link inside the site reaches
a page (or file) and an anchor that exist; no request leaves the site (each one to another host
is refused and named); no output cell renders empty and no widget is left for a script to draw;
every page has the search box, and the search finds NEFF on the page that defines it."""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest

from tests.browser.find_browser import in_ci
from tests.built_once import built_once
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

SCREENSHOTS = REPO_ROOT / "build" / "screenshots" / "book"
# The site builder's own venv (`make book-venv`, which make test runs; requirements-book.txt).
BOOK_PYTHON = REPO_ROOT / "build" / "book-venv" / "bin" / "python"
# A sentence that defines the term: "compiles it into a NEFF, the NeuronCore's program",
# "a NEFF (Neuron Executable File Format)", "NEFF is ...", "NEFF: ...".
DEFINES_NEFF = re.compile(r"\bNEFF\b(,| is| \(|:)\s*(the|a|an|Neuron)\b")


def build_site(directory: Path) -> None:
    # -W: a link to a page or heading that does not exist fails the build, with its name.
    result = subprocess.run(
        [str(BOOK_PYTHON), "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html", "-c", "book",
         "-d", str(directory / "doctrees"), ".", str(directory / "html")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not BOOK_PYTHON.exists():
        message = f"the site builder is missing ({BOOK_PYTHON}): `make book-venv` installs it"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return built_once(tmp_path_factory, "book", build_site) / "html"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A browser that closed its connection before the reply was written (Chromium's request
        # for a favicon the site has none of): the test's output, not the site, would show it.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def served(site) -> str:
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class SiteBrowser:
    """The session's Chromium context (tests/browser/conftest.py: one Playwright per process, since
    a second sync Playwright in the same worker refuses to start), each page routed to the site only
    and every request elsewhere aborted and kept."""

    def __init__(self, context, served: str):
        self.context, self.served, self.left_the_site = context, served, []

    def _only_the_site(self, route):
        if route.request.url.startswith(self.served):
            route.continue_()
        else:
            self.left_the_site.append(route.request.url)
            route.abort()

    def new_page(self):
        page = self.context.new_page()
        page.route("**/*", self._only_the_site)
        return page


@pytest.fixture(scope="module")
def browser(served, chromium):
    return SiteBrowser(chromium, served)


PAGE_FACTS = """() => ({
  text: document.querySelector('main') ? document.querySelector('main').innerText : document.body.innerText,
  ids: Array.from(document.querySelectorAll('[id]'), e => e.id)
        .concat(Array.from(document.querySelectorAll('a[name]'), e => e.name)),
  links: Array.from(document.querySelectorAll('a[href]'), a => a.href),
  brokenImages: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
        .map(i => i.currentSrc || i.src.slice(0, 80)),
  images: document.images.length,
  searchBox: !!document.querySelector('form[action$="search.html"] input[name="q"], .search-button-field'),
  emptyOutputs: Array.from(document.querySelectorAll('.cell_output > *')).filter(o => {
      const r = o.getBoundingClientRect();
      const drawn = o.matches('img, svg, table, progress') || o.querySelector('img, svg, table, progress');
      return r.height === 0 || (o.innerText.trim() === '' && !drawn);
  }).map(o => o.className + ': ' + o.outerHTML.slice(0, 120)),
  outputs: document.querySelectorAll('.cell_output > *').length,
  widgetScripts: document.querySelectorAll('script[type^="application/vnd.jupyter.widget"]').length,
})"""


@pytest.fixture(scope="module")
def crawl(site, served, browser) -> dict[str, dict]:
    """Every page of the site opened once: what each holds, and what went wrong while it loaded."""
    pages = {}
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("response", lambda response: response.status >= 400
            and errors.append(f"HTTP {response.status}: {response.url}"))
    for path in sorted(site.rglob("*.html")):
        name = path.relative_to(site).as_posix()
        if name.startswith("_") or name == "index.html":
            continue  # sphinx's own copies (_sources/, _static/); the address's redirect (tested below)
        errors.clear()
        page.goto(served + name, wait_until="load")
        facts = page.evaluate(PAGE_FACTS)
        facts["errors"] = list(errors)
        pages[name] = facts
        if name in ("README.html", "notebooks/02_single_core_xla.html", "notebooks/06_inside_a_run.html"):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / name.replace("/", "_").replace(".html", ".png")))
    page.close()
    return pages


def test_the_site_has_the_front_page_every_notebook_and_every_doc(crawl):
    expected = {"README.html", "notebooks/README.html",
                *(f"notebooks/{p.stem}.html" for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")),
                *(f"docs/{p.stem}.html" for p in (REPO_ROOT / "docs").glob("*.md"))}
    assert expected <= set(crawl), f"missing pages: {sorted(expected - set(crawl))}"


def test_the_sites_address_opens_the_front_page(crawl, served, browser):
    page = browser.new_page()
    page.goto(served)  # GitHub Pages serves index.html at the site's address
    page.wait_for_url(served + "README.html", timeout=10_000)
    assert page.title().startswith("PyTorch on AWS Trainium")
    page.close()


def test_the_readme_says_how_to_open_the_site_on_its_first_screen_and_names_no_made_up_address():
    # The workbook names no GitHub owner: the README says how to build the site and which workflow
    # publishes it (its deploy step prints the address); no page or builder carries a Pages address.
    first_screen = "\n".join((REPO_ROOT / "README.md").read_text().splitlines()[:20])
    assert "`make book`" in first_screen and "build/book/html/README.html" in first_screen
    assert re.search(r"Pages\s+workflow \(`\.github/workflows/book\.yml`\)", first_screen)
    instructor = (REPO_ROOT / "docs" / "instructor.md").read_text()
    assert re.search(r"week before the class, send the class the website", instructor)
    assert re.search(r"deploy step prints the address", instructor)
    for path in ("README.md", "docs/instructor.md", "book/workbook_site.py", "book/conf.py"):
        text = (REPO_ROOT / path).read_text()
        assert not re.search(r"github\.io|\bOWNER\b", text), f"{path} names a made-up address or owner"


def test_every_page_links_to_its_source(crawl, served):
    # On GitHub when the build knows the repository (GITHUB_REPOSITORY, set by GitHub Actions),
    # else the copy of the source the site carries: no link names a repository nobody named.
    repository = os.environ.get("GITHUB_REPOSITORY")
    sources = {"README.html": "README.md", "notebooks/README.html": "notebooks/README.md",
               **{f"notebooks/{p.stem}.html": f"notebooks/{p.name}" for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")},
               **{f"docs/{p.stem}.html": f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md")}}
    home = rf"https://github\.com/{re.escape(repository)}/blob/main/" if repository else rf"{re.escape(served)}_sources/"
    missing = [name for name, source in sources.items()
               if not any(re.match(rf"{home}{re.escape(source)}(\?|$)", link) for link in crawl[name]["links"])]
    assert not missing, f"pages without a link to their source: {missing}"


def test_every_page_loads_without_a_console_error_and_with_every_image(crawl):
    problems = {name: facts["errors"] + [f"image not loaded: {src}" for src in facts["brokenImages"]]
                for name, facts in crawl.items() if facts["errors"] or facts["brokenImages"]}
    assert not problems, problems
    assert sum(facts["images"] for facts in crawl.values()) >= 10  # the notebooks' plots are there


def test_no_request_leaves_the_site(crawl, browser):
    assert not browser.left_the_site, f"requests to other hosts: {sorted(set(browser.left_the_site))}"


def test_every_internal_link_reaches_a_page_and_an_anchor_that_exist(crawl, site, served):
    broken = []
    for name, facts in crawl.items():
        for link in facts["links"]:
            if not link.startswith(served):
                continue
            target, anchor = urldefrag(link)
            path = unquote(urlsplit(target).path).lstrip("/") or "index.html"
            if not (site / path).is_file():
                broken.append(f"{name} -> {link}: no such file")
            elif anchor and path in crawl and unquote(anchor) not in crawl[path]["ids"]:
                broken.append(f"{name} -> {link}: no anchor #{anchor}")
    assert not broken, "\n".join(broken)


def test_no_output_cell_renders_empty_and_no_widget_waits_for_a_script(crawl):
    notebooks = {name: facts for name, facts in crawl.items() if re.match(r"notebooks/\d\d_", name)}
    assert notebooks and all(facts["outputs"] for facts in notebooks.values())
    empty = {name: facts["emptyOutputs"] for name, facts in notebooks.items() if facts["emptyOutputs"]}
    assert not empty, empty
    assert not any(facts["widgetScripts"] for facts in crawl.values())
    reprs = {name: found[0] for name, facts in notebooks.items()
             if (found := re.search(r"\b[HV]Box\(children=|<IPython\.\w+|IFrame at 0x", facts["text"]))}
    assert not reprs, f"a widget or display object shown as its Python repr: {reprs}"


def test_every_page_has_the_search_box_and_the_search_finds_neff_where_it_is_defined(crawl, served, browser):
    assert [name for name, facts in crawl.items() if not facts["searchBox"]] == []
    lessons = sorted(name for name in crawl if re.match(r"notebooks/\d\d_", name))
    defining = [name for name in lessons + sorted(set(crawl) - set(lessons))
                if DEFINES_NEFF.search(crawl[name]["text"])]
    assert defining, "no page defines NEFF (a sentence such as 'a NEFF, the NeuronCore's program')"
    page = browser.new_page()
    page.goto(served + "search.html?q=NEFF")
    page.wait_for_selector("#search-results .search-summary", timeout=20_000)
    found = [urldefrag(href)[0].removeprefix(served)
             for href in page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")]
    page.close()
    assert defining[0] in found, f"search for NEFF found {found}, not {defining[0]}, the page that defines it"

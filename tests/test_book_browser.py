"""Every page of the built book, opened in headless Chromium with the network cut off, shows no defect a reader sees.

One test per defect class, parametrised over the pages of `_toc.yml`. One browser visits each page once and
measures everything (`facts`), so the module runs in seconds once the book is built. The viewport is 1280 px
wide, a common laptop screen: the theme's content column is then about 690 px (at 1440 px and wider, 790 px).
GRADALIGN_BOOK_HTML=/path/to/html tests an existing build instead of building one (see conftest.book_html).
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from gradalign.book import toc_files
from gradalign.environment import project_root

PAGES = [f"{entry}.html" for entry in toc_files(project_root())]
NOT_PAGES = {"genindex.html", "search.html", "index.html"}  # Sphinx's own pages; index.html only redirects
MAX_SHRINK = 1.25  # an output image shown narrower than natural width / 1.25 has illegible text
RAW_TABLE = re.compile(r"\|\s*:?(?:-{3,}|[—–]-*)")  # the typographer turns --- into an em dash
RAW_TEX = re.compile(r"\$\$?[^$\n]{1,80}?\$\$?|\\[()\[\]]|\\[A-Za-z]{2,}")
ERROR = re.compile(r"Traceback|\b\w*(?:Error|Exception)\b")

MEASURE = """async () => {
  if (document.querySelector('span.math, div.math') && window.MathJax) {  // let MathJax finish (v2 or v3)
    const timeout = new Promise(done => setTimeout(done, 20000));
    if (MathJax.Hub) await Promise.race([timeout, new Promise(done => MathJax.Hub.Register.StartupHook('End', done))]);
    else if (MathJax.startup) await Promise.race([timeout, MathJax.startup.promise]);
  }
  await document.fonts.ready;
  document.querySelectorAll('details').forEach(d => { d.open = true; });  // what a reader can unfold counts
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const style = getComputedStyle(article);
  const column = article.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const code = 'pre, code, script, style, .MathJax, .MathJax_Display, .MathJax_Preview, .MJX_Assistive_MathML, '
    + 'mjx-container';
  const prose = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (node.data.trim() && !parent.closest(code) && parent.checkVisibility({checkVisibilityCSS: true}))
      prose.push(node.data.trim());
  }
  const typeset = '.MathJax, .MathJax_Display, .MathJax_SVG, .MathJax_CHTML, mjx-container';
  return {
    text: document.body.innerText,
    prose: prose.join('\\n'),
    outputs: [...article.querySelectorAll('.cell_output')].map(o => o.innerText),
    untypeset: [...document.querySelectorAll('span.math, div.math')]  // Sphinx's, not MathJax's own span.math
      .filter(m => !m.parentElement.closest(typeset) && !m.querySelector(typeset))
      .map(m => m.textContent.trim()),
    column,
    tables: [...article.querySelectorAll('table')].filter(t => !t.closest(typeset)).map(t => ({
      width: Math.max(t.getBoundingClientRect().width, t.scrollWidth),
      head: t.innerText.trim().slice(0, 60)})),
    cut: [...article.querySelectorAll('.cell_output pre')].filter(p => p.scrollWidth > p.clientWidth + 1)
      .map(p => p.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 100)),
    images: [...article.querySelectorAll('.cell_output img')].map(i => ({
      src: i.getAttribute('src'), natural: i.naturalWidth, shown: i.getBoundingClientRect().width})),
    links: [...document.querySelectorAll('a[href], img[src]')].map(e => e.href || e.src),
  };
}"""


@pytest.fixture(scope="module")
def browser_page():
    """One headless Chromium page (the system's, never a downloaded one) that can reach only file:// URLs."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium not installed (make browser installs it)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route(
            "**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort()
        )
        context.set_offline(True)
        yield context.new_page()
        browser.close()


@pytest.fixture(scope="module")
def facts(book_html, browser_page):
    """facts(page) -> what the page shows, measured on the first call and remembered."""
    seen = {}

    def measure(name):
        if name not in seen:
            path = book_html / name
            if not path.exists():
                pytest.fail(f"{name}: page missing from the build at {book_html}")
            browser_page.goto(path.as_uri(), wait_until="load")
            seen[name] = browser_page.evaluate(MEASURE)
            seen[name]["screenshot"] = browser_page.screenshot()
        return seen[name]

    return measure


def snippets(pattern: re.Pattern, text: str) -> list[str]:
    """The first few matches of `pattern` in `text`, each with a little context, for failure messages."""
    found, end = [], -1
    for m in pattern.finditer(text):
        if m.start() > end:  # one snippet per place, not one per cell of the same raw table
            found.append(repr(text[max(m.start() - 30, 0) : m.end() + 30]))
            end = m.end() + 30
    return found[:3]


def test_every_page_is_checked(book_html):
    built = {p.relative_to(book_html).as_posix() for p in book_html.rglob("*.html")}
    pages = {p for p in built if not p.startswith(("_static/", "_sources/")) and p not in NOT_PAGES}
    assert pages <= set(PAGES), f"pages built but not in _toc.yml (not checked): {sorted(pages - set(PAGES))}"


def test_index_redirects_to_a_page(book_html):
    target = re.search(r'url=([^"]+)"', (book_html / "index.html").read_text())
    assert target and (book_html / target[1]).is_file(), "index.html does not redirect to a built page"


@pytest.mark.parametrize("page", PAGES)
def test_renders_something(facts, page):
    from PIL import Image

    seen = facts(page)
    assert len(seen["text"]) > 200, f"{page}: the page shows almost no text: {seen['text']!r}"
    image = Image.open(io.BytesIO(seen["screenshot"])).convert("L")
    low, high = image.getextrema()
    assert high - low > 100 and sum(1 for n in image.histogram() if n) > 20, f"{page}: the screenshot is blank"


@pytest.mark.parametrize("page", PAGES)
def test_no_raw_markdown_tables(facts, page):
    found = snippets(RAW_TABLE, facts(page)["text"])
    assert not found, f"{page}: Markdown table shown as text (not rendered): {found}"


@pytest.mark.parametrize("page", PAGES)
def test_math_is_typeset_offline(facts, page):
    seen = facts(page)
    untypeset = seen["untypeset"]
    assert not untypeset, f"{page}: {len(untypeset)} math spans not typeset by MathJax, e.g. {untypeset[:3]}"
    found = snippets(RAW_TEX, seen["prose"])
    assert not found, f"{page}: raw TeX in the text: {found}"


@pytest.mark.parametrize("page", PAGES)
def test_tables_fit_the_column(facts, page):
    seen = facts(page)
    wide = [f"{t['width']:.0f} px: {t['head']!r}" for t in seen["tables"] if t["width"] > seen["column"] + 1]
    assert not wide, f"{page}: tables wider than the {seen['column']:.0f} px content column: {wide}"


@pytest.mark.parametrize("page", PAGES)
def test_printed_outputs_fit_the_column(facts, page):
    seen = facts(page)
    assert not seen["cut"], f"{page}: printed lines cut off by the {seen['column']:.0f} px column: {seen['cut']}"


@pytest.mark.parametrize("page", PAGES)
def test_no_errors_in_outputs(facts, page):
    found = [s for text in facts(page)["outputs"] for s in snippets(ERROR, text)]
    assert not found, f"{page}: error text in the outputs: {found}"


@pytest.mark.parametrize("page", PAGES)
def test_figures_are_not_shrunk(facts, page):
    shrunk = [
        f"{i['src']} ({i['natural']} px shown at {i['shown']:.0f} px)"
        for i in facts(page)["images"]
        if i["natural"] > MAX_SHRINK * i["shown"]
    ]
    assert not shrunk, f"{page}: output images shrunk by more than {MAX_SHRINK}x, their text is illegible: {shrunk}"


@pytest.mark.parametrize("page", PAGES)
def test_no_dead_internal_links(facts, book_html, page):
    root = book_html.resolve()
    dead = set()
    for url in facts(page)["links"]:
        parsed = urlparse(url)
        if parsed.scheme == "file":
            target = Path(unquote(parsed.path)).resolve()
            if not target.is_file() or not target.is_relative_to(root):
                dead.add(url.removeprefix(root.as_uri() + "/"))
    assert not dead, f"{page}: links to files missing from the book: {sorted(dead)}"

"""Every page of the built book, opened in headless Chromium with the network cut off, shows no defect a reader sees.

One test per defect class, parametrised over the pages of `_toc.yml` and two window widths: 1280 px, a common
laptop screen (the theme's content column is then about 690 px; at 1440 px and wider, 790 px), and 390 px, a
phone (a column of about 360 px). One browser visits each page once per width and measures everything
(`facts`), so the module runs in a minute or two once the book is built.
What a reader must be able to reach, at both widths: every display equation (whole, or by scrolling inside the
column: never clipped, never spilling out of it), every table (in the column, or scrolling inside it, with no
cell wider than the column), every figure (at its design size or larger, so that its smallest text, 9 pt in
`gradalign.book.plotting`, stays at least 9 pt; rendered at 2x or as SVG so that it is sharp).
GRADALIGN_BOOK_HTML=/path/to/html tests an existing build instead of building one (see conftest.book_html).
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from gradalign.book import plotting
from gradalign.book.build import toc_files
from gradalign.environment import project_root

PAGES = [f"{entry}.html" for entry in toc_files(project_root())]
NOT_PAGES = {"genindex.html", "search.html", "index.html"}  # Sphinx's own pages; index.html only redirects
WIDTHS = {"1280px": (1280, 900), "390px": (390, 844)}  # laptop, phone
RAW_TABLE = re.compile(r"\|\s*:?(?:-{3,}|[—–]-*)")  # the typographer turns --- into an em dash
RAW_TEX = re.compile(r"\$\$?[^$\n]{1,80}?\$\$?|\\[()\[\]]|\\[A-Za-z]{2,}")
ERROR = re.compile(r"Traceback|\b\w*(?:Error|Exception)\b")
# a figure's smallest text is plotting.SMALL_PT at plotting.DPI px per inch of its design size; shown at `scale`
# times that size it measures SMALL_PT * DPI / 96 * scale CSS points (96 CSS px per inch)
MIN_TEXT_PT = 9.0
MIN_SCALE = MIN_TEXT_PT * 96 / (plotting.SMALL_PT * plotting.DPI)
RETINA = 1.9  # a PNG holds at least this many pixels per CSS pixel it is shown at (2x, less rounding)

MEASURE = """async () => {
  if (document.querySelector('span.math, div.math') && window.MathJax) {  // let MathJax finish (v2 or v3)
    const timeout = new Promise(done => setTimeout(done, 20000));
    if (MathJax.Hub) await Promise.race([timeout, new Promise(done => MathJax.Hub.Register.StartupHook('End', done))]);
    else if (MathJax.startup) await Promise.race([timeout, MathJax.startup.promise]);
  }
  await document.fonts.ready;
  await Promise.all([...document.images].map(i => i.complete ? null
    : new Promise(done => { i.onload = i.onerror = done; })));
  document.querySelectorAll('details').forEach(d => { d.open = true; });  // what a reader can unfold counts
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));  // the page reacts to it
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const style = getComputedStyle(article);
  const box = article.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft), right = box.right - parseFloat(style.paddingRight);
  const column = right - left;
  // Can a reader see all of `rect` (the extent of an element's content)? Walk up to the article: a box that clips
  // (overflow hidden) must hold it; a box that scrolls makes it reachable, and then the scroll box itself must be
  // reachable (so the walk goes on with the scroll box's extent); at the article, it must lie in the column.
  // Returns '' or why not.
  const unreachable = (el, rect) => {
    for (let a = el.parentElement; a && a !== article; a = a.parentElement) {
      const r = a.getBoundingClientRect(), o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') {
        rect = {left: r.left, right: r.right, width: r.width};
        continue;
      }
      if ((o === 'hidden' || o === 'clip') && (rect.left < r.left - 1 || rect.right > r.right + 1))
        return `cut off: ${rect.width.toFixed(0)} px shown in ${r.width.toFixed(0)} px with no scrolling`;
    }
    if (rect.left < left - 1 || rect.right > right + 1)
      return `spills out of the ${column.toFixed(0)} px column (${rect.width.toFixed(0)} px wide)`;
    return '';
  };
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
  const mathRoots = [...article.querySelectorAll('.MathJax, mjx-container')]
    .filter(m => m.checkVisibility() && !m.parentElement.closest('.MathJax, mjx-container'));
  return {
    text: document.body.innerText,
    prose: prose.join('\\n'),
    outputs: [...article.querySelectorAll('.cell_output')].map(o => o.innerText),
    cells: [...article.querySelectorAll('table td, table th')].filter(c => !c.closest(typeset)).map(c => c.innerText),
    untypeset: [...document.querySelectorAll('span.math, div.math')]  // Sphinx's, not MathJax's own span.math
      .filter(m => !m.parentElement.closest(typeset) && !m.querySelector(typeset))
      .map(m => m.textContent.trim()),
    column,
    pageWidth: document.documentElement.scrollWidth,
    viewport: window.innerWidth,
    math: mathRoots.map(m => {
      // the formula's extent: its drawn parts (MathJax 2 lets them overflow its own box), not the hidden MathML copy
      let l = Infinity, r = -Infinity;
      for (const e of [m, ...m.querySelectorAll('*')]) {
        if (e.closest('.MJX_Assistive_MathML, mjx-assistive-mml')) continue;
        const q = e.getBoundingClientRect();
        if (q.width > 0 && q.height > 0) { l = Math.min(l, q.left); r = Math.max(r, q.right); }
      }
      const tex = m.parentElement.closest('div.math, span.math');
      return {tex: (tex ? tex.textContent : m.textContent).trim().slice(0, 80),
              why: r > l ? unreachable(m, {left: l, right: r, width: r - l}) : ''};
    }).filter(m => m.why),
    mathText: mathRoots.map(m => m.innerText).join('\\n'),
    tables: [...article.querySelectorAll('table')].filter(t => !t.closest(typeset)).map(t => {
      const r = t.getBoundingClientRect();
      let box = t.parentElement;  // the box it scrolls in, if any: framed, with a visible hint above it
      while (box && box !== article && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX))
        box = box.parentElement;
      const scrolls = box && box !== article && box.scrollWidth > box.clientWidth + 1;
      const frame = scrolls ? getComputedStyle(box) : null;
      const hint = scrolls ? box.previousElementSibling : null;
      return {
        scrolls: !!scrolls,
        framed: !!frame && parseFloat(frame.borderLeftWidth) > 0 && frame.borderLeftStyle !== 'none',
        hinted: !!hint && hint.checkVisibility() && /scroll/.test(hint.innerText),
        width: Math.max(r.width, t.scrollWidth),
        widest: Math.max(0, ...[...t.querySelectorAll('td, th')].map(c => c.getBoundingClientRect().width)),
        why: unreachable(t, {left: r.left, right: r.left + Math.max(r.width, t.scrollWidth),
                             width: Math.max(r.width, t.scrollWidth)}),
        head: t.innerText.trim().slice(0, 60)};
    }),
    cut: [...article.querySelectorAll('.cell_output pre')].filter(p => p.scrollWidth > p.clientWidth + 1)
      .map(p => p.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 100)),
    images: [...article.querySelectorAll('.cell_output img')].map(i => {
      const r = i.getBoundingClientRect(), link = i.closest('a[href]');
      return {src: i.getAttribute('src'), natural: i.naturalWidth, shown: r.width, height: r.height,
              naturalHeight: i.naturalHeight, opens: link ? link.href === i.src : false,
              design: parseFloat(i.getAttribute('width') || i.style.width) || null,  // the retina PNG's design size
              why: unreachable(i, r)};
    }),
    // numbers in table cells that wrap onto two lines ("6.67e- / 04")
    splitNumbers: [...article.querySelectorAll('table td, table th')].filter(c => c.checkVisibility()).flatMap(c => {
      const out = [], walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        if (n.parentElement.closest(code)) continue;
        for (const m of n.data.matchAll(/[-+\\u2212]?\\d+(?:[.,]\\d+)*(?:[eE][-+\\u2212]?\\d+)?/g)) {
          const range = document.createRange();
          range.setStart(n, m.index);
          range.setEnd(n, m.index + m[0].length);
          const tops = [...range.getClientRects()].filter(q => q.width > 0).map(q => q.top);
          if (tops.length && Math.max(...tops) - Math.min(...tops) > 2)
            out.push(`${m[0]} in ${c.innerText.slice(0, 40)}`);
        }
      }
      return out;
    }),
    // inline formulas whose baseline is off the text's: MathJax 2 draws each on a zero-height box at its baseline,
    // and a zero-height box beside the formula sits on the text's (before it or after it, whichever shares its
    // line); a formula as wide as the column has no text beside it. The marks go beside every formula at once and
    // are read after one layout (one mark at a time took two layouts per formula: 6 s on sgr/01's 282 formulas).
    mathBaseline: (() => {
      const formulas = [...article.querySelectorAll('span.math')]
        .filter(m => !m.parentElement.closest('.MathJax') && m.checkVisibility())
        .map(m => ({m, drawn: m.querySelector('.MathJax nobr > span.math > span')}))
        .filter(f => f.drawn && f.m.getBoundingClientRect().width < column - 1);
      const mark = () => {
        const e = document.createElement('span');
        e.style.cssText = 'display: inline-block; width: 0; height: 0;';
        return e;
      };
      for (const f of formulas) {
        f.marks = [mark(), mark()];
        f.m.before(f.marks[0]);
        f.m.after(f.marks[1]);
      }
      const off = formulas.map(({m, drawn, marks}) => {
        const bottom = drawn.getBoundingClientRect().bottom;
        const d = marks.map(k => bottom - k.getBoundingClientRect().bottom)
          .reduce((a, b) => (Math.abs(a) <= Math.abs(b) ? a : b));
        return Math.abs(d) > 1 ? `${m.textContent.trim().slice(-40)}: ${d.toFixed(1)} px` : null;
      }).filter(x => x);
      formulas.forEach(f => f.marks.forEach(k => k.remove()));
      return off;
    })(),
    links: [...document.querySelectorAll('a[href], img[src]')].map(e => e.href || e.src),
    header: [...document.querySelectorAll('.article-header-buttons a, .header-article-items a')]
      .map(a => ({href: a.href, text: a.innerText.trim(), title: a.getAttribute('title') || ''})),
  };
}"""


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (the system's, never a downloaded one)."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium not installed (make browser installs it)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def facts(book_html, browser):
    """facts(page, width="1280px") -> what the page shows in a window that wide, measured once and remembered.
    One browser tab per width, offline: it reaches only file:// URLs."""
    seen, tabs = {}, {}

    def tab(width):
        if width not in tabs:
            w, h = WIDTHS[width]
            context = browser.new_context(viewport={"width": w, "height": h})
            # no network: a request beyond file:// fails (offline emulation; a route handler that passed each
            # request through Python took 15 % of the page loads)
            context.set_offline(True)
            tabs[width] = context.new_page()
        return tabs[width]

    def measure(name, width="1280px"):
        if (name, width) not in seen:
            path = book_html / name
            if not path.exists():
                pytest.fail(f"{name}: page missing from the build at {book_html}")
            page = tab(width)
            page.goto(path.as_uri(), wait_until="load")
            seen[name, width] = page.evaluate(MEASURE)
            if width == "1280px":  # test_renders_something's, at the laptop width only
                seen[name, width]["screenshot"] = page.screenshot()
        return seen[name, width]

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
def test_tables_fit_the_laptop_column(facts, page):
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


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_display_math_is_never_cut_off(facts, page, width):
    """Every typeset formula can be read whole, at once or by scrolling inside the column."""
    bad = [f"{m['tex']!r}: {m['why']}" for m in facts(page, width)["math"]]
    assert not bad, f"{page} at {width}: {len(bad)} formulas a reader cannot see whole, e.g. {bad[:3]}"


@pytest.mark.parametrize("page", ["notebooks/metagrad/02_algorithm2.html"])
def test_code_names_in_formulas_keep_their_underscores(facts, page):
    """`\\texttt{kl\\_div}` in MathJax 2 showed "kl\\di": text inside a formula is not TeX."""
    text = facts(page)["mathText"]
    assert "kl_div" in text.replace("\n", "") and "kl\\" not in text, f"{page}: kl_div mangled in {text[:200]!r}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_tables_are_readable(facts, page, width):
    """A table fits the column or scrolls inside it, and no cell is wider than the column (a reader would have
    to scroll to read one cell)."""
    seen = facts(page, width)
    bad = [f"{t['head']!r}: {t['why']}" for t in seen["tables"] if t["why"]]
    bad += [
        f"{t['head']!r}: a cell {t['widest']:.0f} px wide" for t in seen["tables"] if t["widest"] > seen["column"] + 1
    ]
    assert not bad, f"{page} at {width}: tables a reader cannot read in the {seen['column']:.0f} px column: {bad[:4]}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_page_does_not_scroll_sideways(facts, page, width):
    seen = facts(page, width)
    assert seen["pageWidth"] <= seen["viewport"] + 1, (
        f"{page} at {width}: the whole page is {seen['pageWidth']} px wide in a {seen['viewport']} px window"
    )


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_figures_are_sharp_and_legible(facts, page, width):
    """Each figure is an SVG, or a PNG with 2 pixels per CSS pixel, fits the column whole (no part cut off, its
    proportions kept), and is shown at no less than its design size (so its 9 pt text stays 9 pt) or, where the
    column is narrower (a phone), opens at full size on a tap."""
    bad = []
    seen = facts(page, width)
    for i in seen["images"]:
        name = i["src"].rsplit("/", 1)[-1][:16]
        svg = i["src"].endswith(".svg")
        design = i["design"] or (i["natural"] if svg else None)
        if not svg and i["natural"] < RETINA * i["shown"]:
            bad.append(f"{name}: {i['natural']} px PNG shown at {i['shown']:.0f} px (not 2x)")
        elif design and i["shown"] < MIN_SCALE * design and not i["opens"]:
            text = plotting.SMALL_PT * plotting.DPI / 96 * i["shown"] / design
            bad.append(
                f"{name}: shown at {i['shown']:.0f} of {design:.0f} px, its smallest text {text:.1f} pt, "
                "and a tap does not open it full size"
            )
        if i["shown"] > seen["column"] + 1 or i["why"]:
            bad.append(f"{name}: {i['shown']:.0f} px wide in the {seen['column']:.0f} px column {i['why']}")
        if i["natural"] and i["naturalHeight"] and i["height"]:
            stretch = (i["shown"] / i["height"]) / (i["natural"] / i["naturalHeight"])
            if abs(stretch - 1) > 0.02:
                bad.append(f"{name}: its proportions changed by {stretch:.2f}x")
    assert not bad, f"{page} at {width}: figures a reader cannot read: {bad[:4]}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_numbers_never_break_inside_a_table_cell(facts, page, width):
    split = facts(page, width)["splitNumbers"]
    assert not split, f"{page} at {width}: {len(split)} numbers broken across lines in table cells: {split[:4]}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_inline_math_sits_on_the_baseline(facts, page, width):
    off = facts(page, width)["mathBaseline"]
    assert not off, f"{page} at {width}: {len(off)} inline formulas off the text's baseline: {off[:4]}"


def test_the_baseline_check_sees_formulas_drawn_off_the_text(book_html, browser):
    """The failing case of the check above: the same page with every inline formula drawn 6 px high."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_offline(True)
    try:
        page = context.new_page()
        page.goto((book_html / "notebooks/lga/01_linear_regression.html").as_uri(), wait_until="load")
        page.add_style_tag(content="span.math > .MathJax { position: relative !important; top: -6px !important; }")
        off = page.evaluate(MEASURE)["mathBaseline"]
    finally:
        context.close()
    pixels = [float(o.rsplit(": ", 1)[1].removesuffix(" px")) for o in off]
    assert len(off) >= 10 and all(abs(p + 6) <= 1 for p in pixels), off[:4]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_wide_tables_scroll_in_a_visible_frame(facts, page, width):
    """A table wider than the column scrolls inside a box with a border and a hint above it that says so."""
    bad = [t["head"][:30] for t in facts(page, width)["tables"] if t["scrolls"] and not (t["framed"] and t["hinted"])]
    assert not bad, f"{page} at {width}: {len(bad)} tables scroll sideways with no frame or hint: {bad[:4]}"


@pytest.mark.parametrize("page", PAGES)
def test_header_links_the_code(facts, book_html, page):
    target = (book_html / "book" / "get_the_code.html").as_uri()
    links = [h["href"] for h in facts(page)["header"] if h["href"].split("#")[0] == target]
    assert links, f"{page}: no 'Get the code' link in the page header: {facts(page)['header']}"


NAV_PAGE = "notebooks/lga/01_linear_regression.html"
PANELS = """() => {
  const shown = (el) => !!el && el.checkVisibility({checkVisibilityCSS: true}) && el.getBoundingClientRect().width > 50
    && el.getBoundingClientRect().right > 50 && el.getBoundingClientRect().left < window.innerWidth - 50;
  const primary = document.getElementById('pst-primary-sidebar-modal');
  const secondary = document.getElementById('pst-secondary-sidebar-modal');
  return {
    primary: (primary.open && shown(primary) && primary.querySelectorAll('a.reference').length > 5)
      || shown(document.getElementById('pst-primary-sidebar')),
    secondary: (secondary.open && shown(secondary) && secondary.querySelectorAll('a').length > 2)
      || shown(document.getElementById('pst-secondary-sidebar')),
  };
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_sidebar_buttons_open_their_panels(browser, book_html, width):
    """The ☰ (site navigation) and "on this page" buttons a reader sees open their panels: the theme bound its
    handlers to hidden copies of them (pydata-sphinx-theme #2451); gradalign.book.script passes the click on.
    On a wide screen the panels are open from the start, and ☰ hides the primary sidebar and shows it again."""
    w, h = WIDTHS[width]
    context = browser.new_context(viewport={"width": w, "height": h})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    try:
        page.goto((book_html / NAV_PAGE).as_uri(), wait_until="load")
        page.wait_for_function("document.readyState === 'complete'")
        for kind in ("primary", "secondary"):
            buttons = [b for b in page.query_selector_all(f".{kind}-toggle") if b.is_visible()]
            before = page.evaluate(PANELS)[kind]
            if not buttons:  # a wide screen shows the panel itself, with no button
                assert before, f"{NAV_PAGE} at {width}: no {kind} button and no {kind} panel"
                continue
            if before:  # open on a wide screen: the button hides it, and a second tap shows it again
                buttons[0].click()
                page.wait_for_timeout(300)
                assert not page.evaluate(PANELS)[kind], f"{NAV_PAGE} at {width}: the {kind} button did not hide it"
            buttons[0].click()
            page.wait_for_timeout(300)
            assert page.evaluate(PANELS)[kind], f"{NAV_PAGE} at {width}: tapping the {kind} button opened nothing"
            page.keyboard.press("Escape")
            page.wait_for_timeout(200)
    finally:
        context.close()


RAW_DICT = re.compile(r"\{[a-z_]+: ")  # a Python dict printed as text: `{runs: 3, worst: 4.53}`
RAW_CELL = re.compile(r"^\s*(?:nan|NaN)\s*$|\d\.\d{6,}")  # a missing value or a raw float, in a table cell


@pytest.mark.parametrize("page", PAGES)
def test_no_raw_data_structures_or_numbers(facts, page):
    """What a check measured reads as words and numbers (`gradalign.book.measured`), and a table cell shows neither
    `nan` nor a raw six-decimal float."""
    seen = facts(page)
    found = snippets(RAW_DICT, seen["prose"])  # code cells may hold dict literals
    assert not found, f"{page}: a data structure printed as text: {found}"
    raw = [c for c in seen["cells"] if RAW_CELL.search(c)]
    assert not raw, f"{page}: {len(raw)} table cells show nan or a raw float, e.g. {raw[:4]}"

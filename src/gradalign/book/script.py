"""The book's own JavaScript (`_static/gradalign.js`, added to every page by `gradalign.book.static`).

What the theme leaves undone on a page, each measured by tests/test_book_browser.py at 1280 and 390 px:

- **Sidebar buttons.** pydata-sphinx-theme binds its ☰ and "on this page" handlers to the *first* `.primary-toggle`
  and `.secondary-toggle` of the page (pydata-sphinx-theme #2451, sphinx-book-theme #988), which
  sphinx-book-theme hides in its own header; the buttons a reader sees did nothing. A click on a visible button
  is passed on to the first one, whose handlers open the panel (a dialog on a narrow screen) or, on a wide screen,
  hide and show the primary sidebar (sphinx-book-theme's own handler).
- **Numbers in table cells** are wrapped in `span.gradalign-num`, which the style sheet keeps on one line: a cell
  may wrap between words and after the underscores of a long name, never inside "6.67e-04" or "+0.11".
- **Inline formulas** wider than the column (a phone) scroll inside it; the others sit on the text's baseline.
- **Figures** scale down to the column (style sheet); each opens at full size in a new tab on a tap.
- **Wide tables** that scroll inside the column get a frame and a one-line hint above them.
"""

from __future__ import annotations

JS_NAME = "gradalign.js"
NUMBER = r"[-+\u2212]?\d+(?:[.,]\d+)*(?:[eE][-+\u2212]?\d+)?(?:\u2009?%)?"
"""A number as the book prints one (a minus sign, thousands separators, an exponent, a percent sign)."""

BOOK_JS = (
    """/* gradalign: what the theme leaves to the page (tests/test_book_browser.py checks it at 1280, 390 px) */
(() => {
  "use strict";
  const NUMBER = new RegExp(String.raw`"""
    + NUMBER
    + """`, "g");

  // The theme's handlers sit on the first (hidden) toggle of each kind: pass a click on a visible one on to it.
  function fixToggles() {
    for (const kind of [".primary-toggle", ".secondary-toggle"]) {
      const all = [...document.querySelectorAll(kind)];
      const first = all[0];
      for (const button of all.slice(1)) {
        button.addEventListener("click", (event) => {
          event.preventDefault();
          event.stopPropagation();
          button.blur();
          first.click();
        });
      }
    }
  }

  // Each number in a table cell becomes <span class="gradalign-num">, which does not wrap; a long name may wrap
  // after each underscore (<wbr>), as code spans do (their zero-width spaces), instead of widening the table.
  function withBreaks(text, parts) {
    text.split(/(?<=_)(?=[^_])/).forEach((piece, i) => {
      if (i) parts.append(document.createElement("wbr"));
      parts.append(piece);
    });
  }
  function keepNumbersWhole() {
    const cells = document.querySelectorAll("article table td, article table th");
    for (const cell of cells) {
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      const nodes = [];
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        // formulas are TeX until MathJax typesets them: left whole
        if (!n.parentElement.closest(".math, .MathJax, .MathJax_Preview, script, .gradalign-num")) nodes.push(n);
      }
      for (const node of nodes) {
        const text = node.data;
        const numbers = [...text.matchAll(NUMBER)];
        if (!numbers.length && !/_[^_]/.test(text)) continue;
        const parts = document.createDocumentFragment();
        let at = 0;
        for (const m of numbers) {
          withBreaks(text.slice(at, m.index), parts);
          const span = document.createElement("span");
          span.className = "gradalign-num";
          span.textContent = m[0];
          parts.append(span);
          at = m.index + m[0].length;
        }
        withBreaks(text.slice(at), parts);
        node.replaceWith(parts);
      }
    }
  }

  // An inline formula wider than the column scrolls inside it (on its own line); the others stay inline boxes on
  // the text's baseline (a box that scrolls would take its bottom edge as its baseline).
  function scrollWideInlineMath() {
    for (const math of document.querySelectorAll("article span.math")) {
      if (math.parentElement.closest(".MathJax")) continue;
      const column = math.closest("p, li, td, th, dd, div") || math.parentElement;
      math.classList.remove("gradalign-wide-math");
      if (math.getBoundingClientRect().width > column.clientWidth) math.classList.add("gradalign-wide-math");
    }
  }

  // A figure shrunk to the column opens at full size on a tap.
  function figuresOpenFullSize() {
    for (const img of document.querySelectorAll("article .cell_output img")) {
      if (img.closest("a")) continue;
      const link = document.createElement("a");
      link.href = img.getAttribute("src");
      link.target = "_blank";
      link.className = "gradalign-figure";
      link.title = "Open the figure at full size";
      img.replaceWith(link);
      link.append(img);
    }
  }

  // A table wider than the column scrolls inside a frame, with a hint above it; measured again whenever the box or
  // its table changes size (a window resized, a folded section opened, formulas typeset).
  const BOXES = "article .pst-scrollable-table-container, article .cell_output .output.text_html";
  function frame(box) {
    const wide = box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1;
    box.classList.toggle("gradalign-scrolls", wide);
    let hint = box.previousElementSibling;
    if (!hint || !hint.classList.contains("gradalign-scroll-hint")) {
      if (!wide) return;
      hint = document.createElement("div");
      hint.className = "gradalign-scroll-hint";
      hint.textContent = "\u2194 the table scrolls sideways";
      box.before(hint);
    }
    hint.hidden = !wide;
  }
  function frameWideTables() {
    const boxOf = new Map();
    const observer = new ResizeObserver((entries) => {
      for (const entry of entries) frame(boxOf.get(entry.target));
    });
    for (const box of document.querySelectorAll(BOXES)) {
      const table = box.querySelector("table");
      if (!table || box.parentElement.closest(BOXES)) continue;
      for (const target of [box, table]) {
        boxOf.set(target, box);
        observer.observe(target);
      }
    }
  }

  function ready() {
    fixToggles();
    keepNumbersWhole();
    figuresOpenFullSize();
    frameWideTables();
    const measure = scrollWideInlineMath;
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(measure, 100);
    });
    // widths are known once MathJax (loaded asynchronously) has typeset the formulas
    const started = Date.now();
    const whenTypeset = () => {
      if (window.MathJax && MathJax.Hub && MathJax.Hub.Register) MathJax.Hub.Register.StartupHook("End", measure);
      else if (Date.now() - started < 30000) setTimeout(whenTypeset, 50);
    };
    measure();
    whenTypeset();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
"""
)

"""Where a page's elements lie in a real browser at a given screen size, and screenshots at
that size: the page inside a frame of exactly that size, in headless Chromium (support.browser).

Headless Chromium lays a page out at least 500 CSS px wide, whatever `--window-size` says (a
390 px screenshot is a 500 px layout, cropped). So the page goes into an `<iframe srcdoc>` of
the asked width and height at the top left of a wrapper page: inside it, the page's viewport is
exactly that size. For `positions`, the copy loses its Content-Security-Policy meta and the
wrapper's script, once the frame has loaded, writes each chosen element's box into the
wrapper's DOM, which `--dump-dom` gives back. The page itself runs nothing.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from pathlib import Path
from typing import TypedDict

from support.browser import BrowserError, dump_dom, screenshot

_CSP_META = re.compile(r"<meta\s+http-equiv=[\"']?Content-Security-Policy[^>]*>", re.IGNORECASE)

_MEASURE = """
const frame = document.getElementById("page");
frame.addEventListener("load", () => {
  const win = frame.contentWindow, doc = frame.contentDocument;
  win.scrollTo(0, 0);
  const boxes = [];
  for (const e of doc.querySelectorAll(SELECTOR)) {
    const r = e.getBoundingClientRect(), attrs = {};
    for (const a of e.attributes) attrs[a.name] = a.value;
    boxes.push({tag: e.tagName.toLowerCase(), attrs: attrs, text: e.textContent.slice(0, 200),
      left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width,
      height: r.height, scroll_width: e.scrollWidth || 0, client_width: e.clientWidth || 0});
  }
  const out = {viewport: [win.innerWidth, win.innerHeight], boxes: boxes};
  document.getElementById("out").textContent = JSON.stringify(out);
});
"""


class Box(TypedDict):
    """One element as laid out: its box in CSS px from the viewport's top left (the page
    scrolled to its top), how wide its content is against its box (scroll_width > client_width:
    it scrolls sideways; 0 for an SVG shape), its tag, attributes and first 200 characters."""

    tag: str
    attrs: dict[str, str]
    text: str
    left: float
    right: float
    top: float
    bottom: float
    width: float
    height: float
    scroll_width: int
    client_width: int


def framed(html_text: str, width: int, height: int, script: str = "") -> str:
    """A wrapper page holding `html_text` in a frame of `width` x `height` CSS px at its top left
    (the frame's viewport is exactly that), then `script`."""
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><style>html,body{margin:0;padding:0;'
        "overflow:hidden}iframe{border:0;display:block}</style></head><body>"
        f'<iframe id="page" width="{width}" height="{height}" scrolling="no" '
        f'srcdoc="{html.escape(html_text, quote=True)}"></iframe><pre id="out"></pre>'
        f"<script>{script}</script></body></html>\n"
    )


def positions(html_text: str, tmp_path: Path, width: int, height: int, selector: str) -> list[Box]:
    """The box of every element matching the CSS `selector` (a list, `a, b`, works) in the page
    laid out in a `width` x `height` viewport, in document order. `html` selects the page
    itself: its scroll_width over its client_width is a page that scrolls sideways."""
    page = _CSP_META.sub("", html_text)
    script = _MEASURE.replace("SELECTOR", json.dumps(selector).replace("</", "<\\/"))
    wrapper = tmp_path / f"positions-{uuid.uuid4().hex}.html"
    wrapper.write_text(framed(page, width, height, script), encoding="utf-8")
    dom = dump_dom(wrapper)
    found = re.search(r'<pre id="out">(.*?)</pre>', dom, re.DOTALL)
    if found is None or not found.group(1):
        raise BrowserError(f"no positions measured in {wrapper}: the frame did not load")
    out = json.loads(html.unescape(found.group(1)))
    if out["viewport"] != [width, height]:
        raise BrowserError(f"the frame's viewport is {out['viewport']}, not {[width, height]}")
    boxes: list[Box] = out["boxes"]
    return boxes


def framed_screenshot(html_text: str, tmp_path: Path, out: Path, width: int, height: int) -> Path:
    """A PNG of the page's first `width` x `height` CSS px as a screen of that size shows it
    (the page as it is, its policy kept), written to `out`."""
    wrapper = tmp_path / f"framed-{uuid.uuid4().hex}.html"
    wrapper.write_text(framed(html_text, width, height), encoding="utf-8")
    return screenshot(wrapper, out, (width, height))

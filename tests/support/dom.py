"""The pages' documents as a browser's DOM dump or the server's HTML: every element, with the
timeline lane and the groups it is in, the table rows, the request rects of each lane, and
whether a document is self-contained (loads and runs nothing)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    lane: str | None  # data-node of the lane it is in
    groups: tuple[str, ...]  # classes of the <g> elements it is in
    text: str = ""  # its own text and its children's (a rect's <title>)


class Page(HTMLParser):
    """Every element of a document, with the lane and groups it is in."""

    VOID = frozenset({"meta", "link", "br", "img", "input", "hr", "wbr", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        lane = next((e.attrs.get("data-node") for e in reversed(self.open) if is_lane(e)), None)
        groups = tuple(e.attrs.get("class", "") for e in self.open if e.tag == "g")
        el = Element(tag, {k: v or "" for k, v in attrs}, lane, groups)
        self.elements.append(el)
        if tag not in self.VOID:
            self.open.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.open.pop()

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for el in self.open:
            el.text += data

    def find(self, tag: str, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.elements
            if e.tag == tag and (cls is None or e.attrs.get("class") == cls)
        ]

    def rows(self) -> list[list[str]]:
        """The text of each table row's cells (th or td)."""
        rows: list[list[str]] = []
        for e in self.elements:
            if e.tag == "tr":
                rows.append([])
            elif e.tag in ("td", "th") and rows:
                rows[-1].append(e.text)
        return rows

    def lanes(self) -> list[str]:
        return [e.attrs["data-node"] for e in self.elements if is_lane(e)]

    def in_group(self, tag: str, group: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag and group in e.groups]


def is_lane(e: Element) -> bool:
    return e.tag == "g" and e.attrs.get("class") == "lane"


def parse(doc: str | bytes) -> Page:
    page = Page()
    page.feed(doc.decode() if isinstance(doc, bytes) else doc)
    page.close()
    return page


def self_contained_problems(doc: str) -> list[str]:
    """What would make a document load or run something: a URL, an element that loads or
    runs, an attribute that names something to load, a style that imports."""
    problems = [m for m in ("http://", "https://", "<script", "@import") if m in doc]
    problems += [m.group(0) for m in re.finditer(r"url\((?!\s*['\"]?data:)[^)]*\)", doc)]
    for e in parse(doc).elements:
        if e.tag in ("script", "iframe", "object", "embed", "link", "img", "image", "use"):
            problems.append(f"<{e.tag}>")
        problems += [
            f"{e.tag} {a}=" for a in e.attrs if a in ("src", "href", "xlink:href", "srcset")
        ]
        problems += [f"{e.tag} {a}=" for a in e.attrs if a.startswith("on")]
    return problems


def request_rects(page: Page) -> dict[str, Counter[tuple[str, str]]]:
    """Per lane, the request rects by (kind, outcome)."""
    out: dict[str, Counter[tuple[str, str]]] = {}
    for e in page.find("rect", "request"):
        assert e.lane is not None, e.attrs
        out.setdefault(e.lane, Counter())[e.attrs["data-kind"], e.attrs["data-outcome"]] += 1
    return out

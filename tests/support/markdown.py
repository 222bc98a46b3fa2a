"""Markdown as the docs tests read it: headings and their GitHub anchors, links and images, prose
sentences, words.

Small on purpose: what the repository's pages use, read line by line.
- Code: fenced blocks (``` or ~~~) and indented blocks (4 spaces more than the list item they
  are in, if any, where no paragraph goes on) are code; HTML comments are skipped (not shown).
- Anchors: GitHub's rule. A heading's shown text (code spans, links and emphasis as their text),
  lower-case, everything dropped but letters, digits, spaces, `-` and `_`, spaces to `-`; the
  second of a name is `NAME-1`, the third `NAME-2`. An HTML `id=`/`name=` is an anchor too.
- Links: `[t](target)`, `![alt](target)`, reference definitions `[r]: target`, HTML `href=` and
  `src=`; never inside code.
- Prose: paragraphs and list items (a list item is a paragraph of its own), outside code,
  tables, headings, HTML and comments. Sentences split after `.`, `?` or `!` followed by a space
  (or the paragraph's end); `:` is no split. A code span is one word, a link its text, an image
  nothing. A word is a token with a letter or a digit in it.
- `words`: what `wc -w` counts (runs of characters that are not ASCII whitespace), whole file.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])([ \t]+|$)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_THEMATIC = re.compile(r"^ {0,3}([-*_])([ \t]*\1){2,}[ \t]*$")
_REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*<?([^\s>]+)>?")
_HTML_BLOCK = re.compile(r"^ {0,3}</?[A-Za-z][\w-]*(\s|/?>|$)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)")
_LINK_TARGET = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REF_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\[[^\]]*\]")
_AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^\s>]+)>", re.IGNORECASE)
_HTML_ATTR = re.compile(r"""<[A-Za-z][^>]*?\b(href|src)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_HTML_ANCHOR = re.compile(r"""<[A-Za-z][^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_WC_WORD = re.compile(r"[^ \t\n\r\f\v]+")


@dataclass(frozen=True)
class Link:
    """A link or image's target as written, on its 1-based line."""

    line: int
    target: str
    image: bool = False


@dataclass
class Page:
    """A Markdown text read: its headings, anchors, links, prose paragraphs and the lines that are
    not code (each paragraph: its first line, its text joined by spaces)."""

    headings: list[tuple[int, int, str]] = field(default_factory=list)  # (line, level, text)
    anchors: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    paragraphs: list[tuple[int, str]] = field(default_factory=list)
    not_code: list[tuple[int, str]] = field(default_factory=list)  # (line, text) outside code
    fenced: list[tuple[int, str, str]] = field(default_factory=list)  # (line, info, text)

    @property
    def sentences(self) -> list[str]:
        """Every prose sentence, in order (inline code one word, links their text)."""
        found: list[str] = []
        for _, text in self.paragraphs:
            shown = plain(text)
            found += [s for s in _SENTENCE_END.split(shown) if sentence_words(s)]
        return found

    def median_sentence(self) -> float:
        """The median prose sentence's words (0 when there is no prose)."""
        lengths = [sentence_words(s) for s in self.sentences]
        return statistics.median(lengths) if lengths else 0.0


def words(text: str) -> int:
    """Words as `wc -w` counts them."""
    return len(_WC_WORD.findall(text))


def sentence_words(sentence: str) -> int:
    """A sentence's words: its tokens with a letter or a digit (a dash alone is none)."""
    return sum(1 for t in sentence.split() if any(c.isalnum() for c in t))


def plain(text: str) -> str:
    """Inline Markdown as a reader sees its words: a code span one word, an image nothing, a
    link its text, HTML tags and emphasis marks dropped."""
    text = _CODE_SPAN.sub("CODE", text)
    text = _IMAGE.sub("", text)
    text = _AUTOLINK.sub("URL", text)
    for _ in range(2):  # (a link in a link's text)
        text = _LINK.sub(r"\1", text)
        text = _REF_LINK.sub(r"\1", text)
    text = _HTML_TAG.sub("", text)
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)
    return " ".join(text.split())


def heading_text(raw: str) -> str:
    """A heading's shown text: code spans as their content, links and images as their text,
    HTML tags dropped."""
    text = _CODE_SPAN.sub(lambda m: m.group(2).strip(), raw)
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)
    for _ in range(2):
        text = _LINK.sub(r"\1", text)
    return _HTML_TAG.sub("", text).strip()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (before a duplicate's `-N`)."""
    text = heading_text(heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def read(path: Path) -> Page:
    """The Markdown file at `path`, read."""
    return parse(path.read_text(encoding="utf-8"))


def parse(text: str) -> Page:
    """Markdown text read into a Page."""
    return _Reader(text).page


class _Reader:
    """One pass over the lines; each kind of block's lines handled by its method."""

    def __init__(self, text: str) -> None:
        self.page = Page()
        self.lines = text.splitlines()
        self.seen: dict[str, int] = {}  # anchor -> how many headings gave it
        self.fence: str | None = None  # the open fence's marker
        self.comment = False  # inside <!-- ... -->
        self.code = False  # inside an indented code block
        self.blank = True  # the line before was blank (or there was none)
        self.list_indent: int | None = None  # the open list item's content column
        self.table = False
        self.paragraph: list[str] = []
        self.paragraph_line = 0
        self.code_lines: list[str] = []  # the open fenced block's lines
        for number, line in enumerate(self.lines, start=1):
            self.line(number, line)
            if self.code_lines and self.fence is None:
                self.flush()
        self.flush()
        self.close()

    def flush(self) -> None:
        """The fenced block just closed (or open at the end): its text into its entry."""
        if self.code_lines:
            start, info, _ = self.page.fenced[-1]
            self.page.fenced[-1] = (start, info, "\n".join(self.code_lines) + "\n")
        self.code_lines = []

    def line(self, number: int, line: str) -> None:
        if self.fence is not None:
            m = _FENCE.match(line.lstrip())
            closing = m and m.group(1)[0] == self.fence[0] and len(m.group(1)) >= len(self.fence)
            if closing and not line.strip().lstrip(self.fence[0]):
                self.fence = None
            else:
                self.code_lines.append(line)
            return
        if self.comment:
            if "-->" in line:
                self.comment = False
            return
        stripped = line.strip()
        indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))
        code_column = 4 if self.list_indent is None else self.list_indent + 4
        if self.code:
            if not stripped or indent >= code_column:
                return
            self.code = False
        if not stripped:
            self.close()
            self.blank, self.table = True, False
            return
        if indent >= code_column and not self.paragraph:  # (no paragraph it would go on)
            self.code, self.blank = True, False
            return
        was_blank, self.blank = self.blank, False
        fence = _FENCE.match(line.lstrip())
        if fence:
            self.close()
            self.fence = fence.group(1)
            self.code_lines = []
            info = line.lstrip()[len(self.fence) :].strip()
            self.page.fenced.append((number, info, ""))
            return
        if stripped.startswith("<!--"):
            self.close()
            self.comment = "-->" not in stripped[4:]
            return
        self.page.not_code.append((number, line))
        for name in _HTML_ANCHOR.findall(line):
            self.anchor(name)
        _collect_links(self.page, number, line)
        self.block(number, line, stripped, indent, was_blank)

    def block(self, number: int, line: str, stripped: str, indent: int, was_blank: bool) -> None:
        """A line outside code and comments: a heading, a table's, HTML, or prose."""
        item = _LIST_ITEM.match(line)
        if self.list_indent is not None and was_blank and indent < self.list_indent and not item:
            self.list_indent = None  # the list ended
        h = _ATX.match(line)
        if h and (h.group(2) is not None or not line.strip("# \t")):
            self.close()
            self.heading(number, len(h.group(1)), h.group(2) or "")
            self.table, self.list_indent = False, None
            return
        s = _SETEXT.match(line)
        if s and len(self.paragraph) == 1 and self.list_indent is None:
            title = self.paragraph.pop()
            self.heading(self.paragraph_line, 1 if s.group(1)[0] == "=" else 2, title)
            return
        if _THEMATIC.match(line):
            self.close()
            self.list_indent = None
            return
        if self.table or ("|" in stripped and _next_is_rule(self.lines, number)):
            self.close()
            self.table = True
            return
        if _REF_DEF.match(line) or _HTML_BLOCK.match(line):
            self.close()
            return
        content = stripped
        while content.startswith(">"):  # a quote: its text is prose
            content = content[1:].lstrip()
        if item:
            self.list_indent = len(item.group(0).expandtabs(4))
            self.start(number, line[len(item.group(0)) :].strip())
        elif self.paragraph and not was_blank:
            self.paragraph.append(content)
        else:
            self.start(number, content)

    def heading(self, number: int, level: int, title: str) -> None:
        self.page.headings.append((number, level, title))
        self.anchor(slug(title))

    def anchor(self, name: str) -> None:
        n = self.seen.get(name, 0)
        self.page.anchors.append(name if n == 0 else f"{name}-{n}")
        self.seen[name] = n + 1

    def start(self, number: int, content: str) -> None:
        self.close()
        self.paragraph_line = number
        self.paragraph.append(content)

    def close(self) -> None:
        if self.paragraph:
            self.page.paragraphs.append((self.paragraph_line, " ".join(self.paragraph)))
        self.paragraph = []


def _next_is_rule(lines: list[str], number: int) -> bool:
    """Whether the line after line `number` (1-based) is a table's rule (`|---|:--|`)."""
    return number < len(lines) and "-" in lines[number] and bool(_TABLE_RULE.match(lines[number]))


def _collect_links(page: Page, number: int, line: str) -> None:
    """The line's links and images, outside its code spans."""
    shown = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
    for m in _LINK_TARGET.finditer(shown):
        before = shown[: m.start()]
        opening = before.rfind("[")
        image = opening > 0 and before[opening - 1] == "!"
        page.links.append(Link(number, m.group(1), image))
    d = _REF_DEF.match(shown)
    if d:
        page.links.append(Link(number, d.group(2)))
    for kind, target in _HTML_ATTR.findall(shown):
        page.links.append(Link(number, target, kind.lower() == "src"))
    for target in _AUTOLINK.findall(shown):
        page.links.append(Link(number, target))

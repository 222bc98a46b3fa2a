"""The docs hold to the rules of issue 30: every link and anchor resolves; README.md is short and
plain (at most 2,500 words, its median sentence under 20 words); every docs/ page is in the
index and the README; operator pages name no test or bench file and tell no history; "the seed"
only where it is defined; the README's config is one the checker accepts; the screenshots shown
are there and made by tests.

The figures (words, median sentence) of README.md and every page are printed on each run.
Each check is a function of the checkout's root, so it can be tried on a broken copy.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

from exporter.config.errors import ConfigError
from exporter.sources.file import FileNode
from exporter.sources.journal import JournalNode
from exporter.sources.ssh import SshNode

from support import markdown
from support.configs import good
from support.tools import REPO

MAX_README_WORDS = 2500
MAX_MEDIAN_SENTENCE = 20  # (words; the median must be under it)
HISTORY = ("is gone", "new series", "no longer", "used to", "before this wave", "is now")
# A test or bench file named: the test tree, a bench script, a test module.
TEST_FILE = re.compile(r"\btests/|\bbench/[\w./-]*\.py\b|\btest_\w*\.py\b")
SEED = re.compile(r"\bthe seed\b", re.IGNORECASE)
SEED_DEFINED = ("docs/glossary.md", "docs/report.md")
SCREENSHOTS = "docs/screenshots"
LINE_ANCHOR = re.compile(r"L\d+(-L\d+)?")  # (GitHub's anchor for a file's lines)
SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:|//")


def pages(root: Path) -> list[str]:
    """Every Markdown page whose links are checked, relative to `root`."""
    found = ["README.md", *sorted(f"docs/{p.name}" for p in (root / "docs").glob("*.md"))]
    found += ["deploy/README.md", "bench/README.md", "tests/testdata/README.md"]
    return [p for p in found if (root / p).is_file()]


def operator_pages(root: Path) -> list[str]:
    """The pages an operator reads: README.md, deploy/README.md, docs/ but the design."""
    found = ["README.md", "deploy/README.md"]
    found += sorted(f"docs/{p.name}" for p in (root / "docs").glob("*.md") if p.name != "design.md")
    return [p for p in found if (root / p).is_file()]


@cache
def _read(path: Path, mtime: float) -> markdown.Page:
    del mtime  # (a key: a page rewritten is read again)
    return markdown.read(path)


def read(path: Path) -> markdown.Page:
    return _read(path, path.stat().st_mtime)


def not_code(root: Path, page: str) -> str:
    """A page's text outside code blocks and comments, its lines joined by spaces."""
    return " ".join(" ".join(line.split()) for _, line in read(root / page).not_code)


def resolved(root: Path, page: str, target: str) -> tuple[Path, str] | None:
    """(The file a relative link's target names, its anchor); None for a URL."""
    if SCHEME.match(target):
        return None
    path, _, anchor = target.partition("#")
    path = unquote(path)
    if not path:
        return root / page, anchor
    base = root if path.startswith("/") else (root / page).parent
    return Path(os.path.normpath(base / path.lstrip("/"))), anchor


# -- the checks: each a function of the root, returning what is wrong -------------------------


def broken_links(root: Path, page: str) -> list[str]:
    """Every relative link or image of `page` that names no file in the checkout, or an anchor
    that is no heading of the page it names."""
    broken = []
    for link in read(root / page).links:
        where = f"{page}:{link.line}: {link.target or '(empty)'}"
        if not link.target:
            broken.append(f"{where}: no target")
            continue
        found = resolved(root, page, link.target)
        if found is None:
            continue
        path, anchor = found
        if not path.is_relative_to(root):
            broken.append(f"{where}: outside the checkout")
        elif not path.exists():
            broken.append(f"{where}: no such file")
        elif anchor and path.suffix == ".md" and path.is_file():
            if anchor not in read(path).anchors:
                broken.append(f"{where}: no heading #{anchor} in {path.relative_to(root)}")
        elif anchor and not LINE_ANCHOR.fullmatch(anchor):
            broken.append(f"{where}: an anchor into a file that is not Markdown")
    return broken


def linked_files(root: Path, page: str) -> set[Path]:
    """The files `page` links to (anchors aside)."""
    found = (resolved(root, page, link.target) for link in read(root / page).links)
    return {f[0] for f in found if f is not None}


def unlinked_pages(root: Path) -> list[str]:
    """Every docs/ page that the index (docs/README.md) or README.md does not link to."""
    index = root / "docs" / "README.md"
    if not index.is_file():
        return ["docs/README.md: there is no index"]
    missing = []
    for linking in ("docs/README.md", "README.md"):
        links = linked_files(root, linking)
        for page in sorted((root / "docs").glob("*.md")):
            if page != index and page not in links:
                missing.append(f"{linking} does not link docs/{page.name}")
    return missing


def readme_figures(root: Path) -> tuple[int, float]:
    """README.md's words (as `wc -w` counts them) and its median prose sentence's words."""
    path = root / "README.md"
    return markdown.words(path.read_text(encoding="utf-8")), read(path).median_sentence()


def files_of_tests_named(root: Path, page: str) -> list[str]:
    """The test and bench files a page names (anywhere: prose, code, link targets)."""
    text = (root / page).read_text(encoding="utf-8")
    return [
        f"{page}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for m in TEST_FILE.finditer(text)
    ]


def history_told(root: Path, page: str) -> list[str]:
    """The history phrases a page's text (outside code) holds, each with its context."""
    text = not_code(root, page)
    found = []
    for phrase in HISTORY:
        for m in re.finditer(rf"\b{phrase}\b", text, re.IGNORECASE):
            found.append(f"{page}: {phrase!r}: ...{text[max(0, m.start() - 50) : m.end() + 30]}...")
    return found


def seed_named(root: Path) -> list[str]:
    """Every operator page but the glossary and the report page that says "the seed"."""
    return [
        f"{page}: ...{text[max(0, m.start() - 50) : m.end() + 30]}..."
        for page in operator_pages(root)
        if page not in SEED_DEFINED
        for text in [not_code(root, page)]
        for m in SEED.finditer(text)
    ]


def readme_config(root: Path) -> str:
    """The first ```yaml block of README.md."""
    blocks = [t for _, info, t in read(root / "README.md").fenced if info.split()[:1] == ["yaml"]]
    assert blocks, "README.md has no ```yaml block"
    return blocks[0]


def config_problems(text: str, credentials: Path) -> list[str]:
    """What the checker finds wrong in a config's text (its keys and values, as check-config
    reads them; the paths it names are this machine's, so not checked), and what a complete
    small config must hold that it lacks: an SSH node, a local journal and a dump."""
    try:
        cfg = good(text, {"CREDENTIALS_DIRECTORY": str(credentials)})
    except ConfigError as e:
        return list(e.problems)
    have = {type(n) for n in cfg.nodes}
    kinds = (("ssh", SshNode), ("journal", JournalNode), ("file", FileNode))
    return [f"no {kind} node" for kind, node in kinds if node not in have]


def screenshots_shown(root: Path) -> dict[str, set[Path]]:
    """The screenshots README.md and docs/ pages show: page -> the files."""
    shots = (root / SCREENSHOTS).resolve()
    shown: dict[str, set[Path]] = {}
    for page in ["README.md", *(p for p in pages(root) if p.startswith("docs/"))]:
        for link in read(root / page).links:
            found = resolved(root, page, link.target)
            if found is not None and found[0].resolve().is_relative_to(shots):
                shown.setdefault(page, set()).add(found[0])
    return shown


def screenshot_problems(root: Path) -> list[str]:
    """Each screenshot shown must be there and made by a test (tests/e2e/); at least four are
    shown, and README.md shows the status page's."""
    shown = screenshots_shown(root)
    every = set().union(*shown.values()) if shown else set()
    problems = [] if len(every) >= 4 else [f"only {len(every)} screenshot(s) shown"]
    if not any("status-page" in p.name for p in shown.get("README.md", ())):
        problems.append("README.md shows no status page screenshot")
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (root / "tests").rglob("test_*.py"))
    for path in sorted(every):
        name = path.relative_to(root)
        if not path.is_file():
            problems.append(f"{name}: not there")
        # (by its name, or by its prefix and a variable: f"status-page-{name}.png")
        prefix = re.escape(path.stem.rsplit("-", 1)[0])
        if path.name not in tests and not re.search(rf"{prefix}-{{\w+}}\.png", tests):
            problems.append(f"{name}: no test makes it (tests/e2e/)")
    return problems


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("page", pages(REPO))
def test_every_link_and_anchor_resolves(page: str) -> None:
    assert broken_links(REPO, page) == []


def test_the_readme_is_short_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    """At most 2,500 words, the median sentence under 20; the figures of every page printed."""
    with capsys.disabled():
        print("\nwords (wc -w), median prose sentence (words), sentences:")
        for page in pages(REPO):
            path = REPO / page
            p = read(path)
            words = markdown.words(path.read_text(encoding="utf-8"))
            median, sentences = p.median_sentence(), len(p.sentences)
            print(f"  {page}: {words} words, median {median:.1f}, {sentences} sentences")
    words, median = readme_figures(REPO)
    assert words <= MAX_README_WORDS
    assert median < MAX_MEDIAN_SENTENCE


def test_every_docs_page_is_in_the_index_and_the_readme() -> None:
    assert unlinked_pages(REPO) == []


@pytest.mark.parametrize("page", operator_pages(REPO))
def test_operator_pages_name_no_test_or_bench_file(page: str) -> None:
    assert files_of_tests_named(REPO, page) == []


@pytest.mark.parametrize("page", operator_pages(REPO))
def test_operator_pages_tell_no_history(page: str) -> None:
    assert history_told(REPO, page) == []


def test_the_seed_is_named_only_where_it_is_defined() -> None:
    assert seed_named(REPO) == []


def test_the_readmes_config_is_complete_and_valid(tmp_path: Path) -> None:
    assert config_problems(readme_config(REPO), tmp_path) == []


def test_the_screenshots_shown_are_there_and_made_by_tests() -> None:
    assert screenshot_problems(REPO) == []


# -- the reader ---------------------------------------------------------------------------------


def test_the_reader_gives_githubs_anchors() -> None:
    page = markdown.parse(
        "# The status page (`/`) and `/api/status`\n"
        "## `smllm_node_busy_seconds_total`\n"
        "## Start-ups, and picking TimeoutStartSec\n"
        "## A [link](x.md) *here*\n"
        "## Twice\n## Twice\n## Twice\n"
        "```\n# not a heading\n```\n"
    )
    assert page.anchors == [
        "the-status-page--and-apistatus",
        "smllm_node_busy_seconds_total",
        "start-ups-and-picking-timeoutstartsec",
        "a-link-here",
        "twice",
        "twice-1",
        "twice-2",
    ]


def test_the_reader_finds_links_outside_code_only() -> None:
    page = markdown.parse(
        "See [a](a.md#x) and ![b](b.png 'title'), not `[c](c.md)`.\n\n"
        "    [d](d.md)\n\n"
        "```\n[e](e.md)\n```\n"
        '<img src="f.png" width="50%">\n'
        "<!-- [g](g.md) -->\n"
        "[h]: h.md\n"
    )
    assert [(link.target, link.image) for link in page.links] == [
        ("a.md#x", False),
        ("b.png", True),
        ("f.png", True),
        ("h.md", False),
    ]


def test_the_reader_splits_prose_into_sentences() -> None:
    page = markdown.parse(
        "One two three. Four: five `six seven` [eight nine](x.md)? Ten!\n"
        "Eleven twelve.\n\n"
        "- An item\n- Another, wrapped\n  over two lines\n\n"
        "| a table | row |\n|---|---|\n| not | prose |\n\n"
        "    code is not prose\n\n"
        "## Nor a heading\n<!-- nor a comment -->\n"
    )
    assert page.sentences == [
        "One two three.",
        "Four: five CODE eight nine?",
        "Ten!",
        "Eleven twelve.",
        "An item",
        "Another, wrapped over two lines",
    ]
    assert page.median_sentence() == 2.5  # (of 3, 4, 1, 2, 2 and 5)
    assert markdown.words("a  b\tc\n`d e`\u00a0f") == 5  # (as wc -w: a no-break space joins)


def test_the_readme_lists_every_debian_package_make_test_installs() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    m = re.search(r"^DEB_PACKAGES \?= (.+)$", makefile, re.MULTILINE)
    assert m, "the Makefile sets no DEB_PACKAGES"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    prerequisites = re.search(r"^## Prerequisites\n(.*?)^## ", readme, re.MULTILINE | re.DOTALL)
    assert prerequisites, "README.md has no ## Prerequisites section"
    listed = set(re.findall(r"`([a-z0-9][a-z0-9.+-]*)`", prerequisites.group(1)))
    missing = [p for p in m.group(1).split() if p not in listed]
    assert not missing, f"README.md's prerequisites do not name {missing}"

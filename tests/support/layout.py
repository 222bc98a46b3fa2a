"""The package's layout as docs/design.md lists it, and as the tree has it: folder, module, job.

A module's job is the first line of its docstring. The design's "Layout" section lists every
folder under a `### \\`exporter/<folder>/\\`` heading and every module as
`` - `<name>.py`: <job> ``; the top-level modules under `### \\`exporter/\\``.
"""

from __future__ import annotations

import ast
import re

from support.tools import REPO

DESIGN = REPO / "docs" / "design.md"
PACKAGE = REPO / "exporter"
SECTION = "## Layout"
_FOLDER = re.compile(r"^### `exporter/(?:([a-z_]+)/)?`")
_MODULE = re.compile(r"^- `([a-z_0-9]+\.py)`: (.*)$")


def job(path: str) -> str:
    """The first line of a module's docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / path).read_text(encoding="utf-8"))) or ""
    return doc.splitlines()[0].strip() if doc else ""


def in_tree() -> dict[str, str]:
    """Every module of the package (relative to exporter/) and its job; `__init__.py`s and
    `__main__.py` are the folders' and the command's own and not listed."""
    return {
        str(p.relative_to(PACKAGE)): job(str(p.relative_to(PACKAGE)))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
    }


def section(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(SECTION)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def in_design(text: str | None = None) -> dict[str, str]:
    """Every module the design's Layout section lists, and the job it gives it."""
    listed: dict[str, str] = {}
    folder = None
    for line in section(DESIGN.read_text(encoding="utf-8") if text is None else text):
        if m := _FOLDER.match(line):
            folder = m.group(1) or ""
        elif (m := _MODULE.match(line)) and folder is not None:
            listed[f"{folder}/{m.group(1)}" if folder else m.group(1)] = m.group(2)
    return listed


def rewritten(text: str) -> str:
    """The design with its Layout lists made from the tree: folders in the order the section
    has them (new ones at its end, with their package docstring), modules by name."""
    tree = in_tree()
    folders: dict[str, list[str]] = {}
    for path in tree:
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        folders.setdefault(folder, []).append(path)
    lines = text.splitlines()
    old = section(text)
    start = lines.index(SECTION)
    head: list[str] = []
    for line in old:
        if _FOLDER.match(line):
            break
        head.append(line)
    order = [m.group(1) or "" for line in old if (m := _FOLDER.match(line))]
    order = [f for f in order if f in folders] + sorted(set(folders) - set(order))
    out = head[:]
    for folder in order:
        init = PACKAGE / folder / "__init__.py"
        what = job(str(init.relative_to(PACKAGE))) if folder else ""
        title = f"### `exporter/{folder}/`" if folder else "### `exporter/`"
        out += [title, ""] + ([what, ""] if what else [])
        for path in folders[folder]:
            out.append(f"- `{path.rsplit('/', 1)[-1]}`: {tree[path]}")
        out.append("")
    return "\n".join([*lines[:start], *out, *lines[start + len(old) :]]) + "\n"

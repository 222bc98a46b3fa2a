"""The config's YAML read within bounds: its value, and a Checker that knows each key's line.

A config is a few KiB and a few hundred values; the bounds here keep what a hostile or mistaken
one can make the loader do (issue 14): past them the document is one problem, never a hang, an
exhausted memory or a RecursionError from PyYAML's recursive composer. This is the one module
that imports `yaml`; the web config (web/webconfig.py) is read through it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from exporter.config.checker import Checker
from exporter.config.errors import ConfigError, Unreadable
from exporter.config.files import read_regular, why_not
from exporter.config.redact import printable

MAX_BYTES = 1 << 20
MAX_DEPTH = 64  # collections inside collections, through aliases too
MAX_VALUES = 100_000  # every scalar and collection, an alias counting as all it stands for
_MAX_INT_CHARS = 100  # longer, YAML 1.1's base-60 ints (1:2:3...) take quadratic time


class _Refused(yaml.MarkedYAMLError):
    """A document past one of the bounds above, at the mark where it went past."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader that leaves timestamps as text (`since` is checked like every other value),
    refuses a document past MAX_DEPTH or MAX_VALUES, or with an alias inside the collection it
    names, while composing it (before it recurses any deeper), and turns a tag's constructor
    choking on its text (`!!int x`) into a ConstructorError at the node's line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._open_anchors: set[str] = set()
        # node -> (values, depth) as its aliases expand: a post-order memo, so each node of the
        # composed graph is measured once, however often an alias repeats it
        self._measured: dict[yaml.Node, tuple[int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]  # (untyped in the stubs)
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise _Refused(
                    "an alias inside the collection it names (a cycle)", event.start_mark
                )
            return super().compose_node(parent, index)  # a node measured already
        opens = isinstance(event, yaml.CollectionStartEvent)
        if opens:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
            if event.anchor is not None:
                self._open_anchors.add(event.anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            if opens:
                self._depth -= 1
                self._open_anchors.discard(event.anchor)
        if node is not None:
            self._measure(node)
        return node

    def _measure(self, node: yaml.Node) -> None:
        """Record `node`'s expanded size and depth; its children, composed before it, are
        measured already (an alias names a finished collection: cycles are refused)."""
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            self._measured[node] = (1, 0)
            return
        sizes = [self._measured[child] for child in children]
        values = 1 + sum(v for v, _ in sizes)
        depth = 1 + max((d for _, d in sizes), default=0)
        if values > MAX_VALUES:
            raise _Refused(
                f"expands to more than {MAX_VALUES:,} values "
                "(an alias counts as all it stands for)",
                node.start_mark,
            )
        if depth > MAX_DEPTH:
            raise _Refused(
                f"nested deeper than {MAX_DEPTH} levels through its aliases", node.start_mark
            )
        self._measured[node] = (values, depth)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if (
            node.tag == "tag:yaml.org,2002:int"
            and isinstance(node, yaml.ScalarNode)
            and len(node.value) > _MAX_INT_CHARS
        ):
            raise yaml.constructor.ConstructorError(
                problem=f"an integer written in more than {_MAX_INT_CHARS} characters",
                problem_mark=node.start_mark,
            )
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception:  # ValueError, KeyError ...: the text is not of its tag
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise yaml.constructor.ConstructorError(
                problem=f"the value does not read as {tag}", problem_mark=node.start_mark
            ) from None


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_text(path: Path) -> str:
    """A config file's text: a regular file only (a FIFO or a device there is refused, never
    waited on: `check-config /dev/zero` ends too), bounded; ConfigError else."""
    try:
        raw = read_regular(path, MAX_BYTES + 1)
    except OSError as e:
        raise Unreadable(str(path), f"{path}: cannot read: {why_not(e)}") from None
    return decode(raw, str(path))


def decode(raw: bytes, source: str) -> str:
    """A config's bytes (read with at most MAX_BYTES + 1 of them) as text; ConfigError when
    there are more, or they are no UTF-8."""
    if len(raw) > MAX_BYTES:
        raise Unreadable(source, f"{source}: over {MAX_BYTES:,} bytes: not a config")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(source, f"{source}: cannot read: {e}") from None


def document(text: str, source: str, env: Mapping[str, str] = os.environ) -> tuple[Any, Checker]:
    """A YAML file read as the config is (the config, the web config): its value, and a Checker
    that holds its keys given twice already and places later problems at their lines.
    ConfigError when it is no YAML (or too big)."""
    if len(text) > MAX_BYTES:
        raise Unreadable(source, f"{source}: over {MAX_BYTES:,} characters: not a config")
    try:
        node, data, duplicates = _compose_and_construct(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, [printable(_yaml_problem(e, text, source))]) from None
    checker = Checker(source, _index_lines(node) if node is not None else {}, env)
    for path, first, second in duplicates:
        where = f"on line {first}" if first == second else f"on lines {first} and {second}"
        checker.problem(path, f"given twice, {where} (which one?)")
    return data, checker


def _compose_and_construct(
    text: str,
) -> tuple[yaml.Node | None, Any, list[tuple[str, int, int]]]:
    """The document's node graph (for the lines), its Python value, and its keys given twice
    (found before it is built: building a merge key `<<` writes the merged keys into the
    graph)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}, []
        duplicates = list(_duplicates(node))
        return node, loader.construct_document(node), duplicates
    finally:
        loader.dispose()


def _yaml_problem(e: yaml.YAMLError, text: str, source: str) -> str:
    """The one problem of a document PyYAML cannot read or `_Loader` refused, at its line."""
    if isinstance(e, yaml.reader.ReaderError):  # raised before any mark exists
        line = len(_YAML_LINE_BREAK.findall(text, 0, e.position)) + 1
        return (
            f"{source}:{line}: not valid YAML: unacceptable character "
            f"#x{e.character:04x}: {e.reason}"
        )
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{source}:{mark.line + 1}" if mark is not None else source
    if isinstance(e, _Refused):
        return f"{where}: {e.problem}"
    what = " ".join(
        str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x
    ) or str(e)
    return f"{where}: not valid YAML: {_unquote(' '.join(what.split()))}"


_YAML_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # what PyYAML's marks count
# PyYAML quotes the text it stumbled on; an alias, tag or anchor name there may be a password
# pasted after `*`, `!` or `&`. A single character (a tab, a stray `@`) is shown, as are token
# names like '<block end>'; anything longer is not.
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
_SHOWN_QUOTE = re.compile(r"""(['"])(?:[^\\]|\\(?:x..|u....|U........|.)|<[a-z ]+>)\1""")


def _unquote(text: str) -> str:
    return _QUOTED.sub(
        lambda m: m.group() if _SHOWN_QUOTE.fullmatch(m.group()) else "(text not shown)", text
    )


def _index_lines(root: yaml.Node) -> dict[str, int]:
    """Key path -> line, for the problems. Iterative, walking aliases as they expand: the
    loader bounded that walk to MAX_VALUES nodes and MAX_DEPTH levels."""
    out: dict[str, int] = {}
    todo: list[tuple[yaml.Node, str, int | None]] = [(root, "", None)]
    while todo:
        node, path, key_line = todo.pop()
        if key_line is not None:
            out[path] = key_line
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                sub = f"{path}.{name}" if path else str(name)
                todo.append((value, sub, key.start_mark.line + 1))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(
                (node.value[i], f"{path}[{i}]", None) for i in reversed(range(len(node.value)))
            )
    return out


def _duplicates(root: yaml.Node) -> Iterator[tuple[str, int, int]]:
    """(key path, first line, second line) of every key a mapping gives twice (YAML would let
    the last win, silently)."""
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while todo:
        node, path = todo.pop()
        if id(node) in seen:  # (an alias: walked once)
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                sub = f"{path}.{name}" if path else str(name)
                line = key.start_mark.line + 1
                if name in first and isinstance(key, yaml.ScalarNode):
                    yield sub, first[name], line
                first.setdefault(name, line)
                todo.append((value, sub))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))

"""Types of the compiled fast paths in `_speedups.c` (built by setup.py where a C compiler is).

Each hands back what it does not read exactly (raw bytes, None, an index) and raises only on
arguments of the wrong type: never on the bytes, text or line values it is given.
`check_layouts` raises ValueError on Python layouts other than those it was built for
(exporter.compiled.switch hands them over at import).
"""

from collections.abc import Sequence
from typing import ClassVar, overload

from exporter.base.records import LogLine

class Lines(Sequence[LogLine]):
    """A chunk's keyword lines, each LogLine made when first asked for."""

    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __len__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    @overload
    def __getitem__(self, index: int, /) -> LogLine: ...
    @overload
    def __getitem__(self, index: slice, /) -> Sequence[LogLine]: ...

def scan(
    data: bytes,
    keywords: tuple[bytes, ...],
    node: str,
    since_us: int,
    line_type: type[LogLine],
    max_line: int,
    /,
) -> tuple[Lines | list[bytes | LogLine], int, int]: ...

class Reading:
    """A file's next bytes, read and scanned in a thread of their own (see read_ahead)."""

    def result(self) -> tuple[int, int, Lines | list[bytes | LogLine] | None, int, int]: ...
    def wait(self) -> tuple[int, int]: ...

def read_ahead(
    fd: int,
    offset: int,
    buffer: bytearray,
    tail: bytes,
    keywords: tuple[bytes, ...],
    node: str,
    since_us: int,
    line_type: type[LogLine],
    max_line: int,
    split: bool = True,
    /,
) -> Reading: ...
def join(parts: Sequence[Sequence[LogLine]], /) -> Sequence[LogLine]: ...
def tokenize(msg: str, /) -> tuple[int, int | None, int | None, int | None, int | None] | None: ...
def feed(
    parser: object,
    lines: Sequence[LogLine],
    start: int,
    out: list[object],
    types: tuple[object, ...],
    max_started: int,
    /,
) -> int: ...
def check_layouts(layouts: dict[str, tuple[str, ...]], /) -> None: ...

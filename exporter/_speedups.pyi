"""Types of the compiled fast paths in `_speedups.c` (built by setup.py where a C compiler is).

Each hands back what it does not read exactly (raw bytes, None, an index) and raises only on
arguments of the wrong type: never on the bytes, text or line values it is given.
"""

from exporter.logline import LogLine

def scan(
    data: bytes,
    keywords: tuple[bytes, ...],
    node: str,
    since_us: int,
    line_type: type[LogLine],
    max_line: int,
    /,
) -> tuple[list[bytes | LogLine], int, int]: ...
def tokenize(msg: str, /) -> tuple[int, int | None, int | None, int | None, int | None] | None: ...
def feed(
    parser: object,
    lines: tuple[LogLine, ...],
    start: int,
    out: list[object],
    types: tuple[object, ...],
    max_started: int,
    /,
) -> int: ...

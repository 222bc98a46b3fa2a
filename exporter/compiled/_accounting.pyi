"""Types of the compiled fast paths in `_accounting.c` (built by setup.py where a C compiler is)."""

from collections.abc import Sequence

def check_layouts(layouts: dict[str, tuple[str, ...]], /) -> None: ...
def add_all(
    recs: Sequence[object], start: int, accounting: object, types: tuple[object, ...], /
) -> int: ...
def keep_recent(
    rings: dict[str, object],
    recs: Sequence[object],
    interval_type: type,
    lost: str,
    since: int | None,
    /,
) -> None: ...
def window_run(
    recs: Sequence[object],
    start: int,
    since_us: int,
    until_us: int,
    counted: dict[int | None, list[int]],
    interval_type: type,
    event_type: type,
    parse_error: object,
    /,
) -> int: ...
def sweep(
    pending: list[tuple[int, int, int, int]],
    lo: int,
    hi: int,
    n_nodes: int,
    n_kinds: int,
    /,
) -> tuple[list[tuple[int, int, int, int]], list[int], list[int], list[int], list[int]] | None: ...

"""Types of the compiled fast paths in `_accounting.c` (built by setup.py where a C compiler is)."""

from collections.abc import Sequence

def add_all(
    recs: Sequence[object],
    start: int,
    interval_type: type[tuple[object, ...]],
    event_type: type[tuple[object, ...]],
    started: object,
    nodes: dict[str, object],
    node_index: dict[str, int],
    kind_of: dict[int | None, str],
    kind_bit: dict[str, int],
    buckets_us: tuple[int, ...],
    origin_us: int,
    watermark_us: int,
    pending: list[tuple[int, int, int, int]],
    sorted_kinds: tuple[str, ...],
    kind_cache: bytearray,
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

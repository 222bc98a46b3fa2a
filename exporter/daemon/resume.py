"""The daemon's state as its checkpoint holds it, and its take-up at start.

The checkpoint is restored into an accounting built from the current config; each node resumes
right after its saved position, a node the checkpoint knows without one at the checkpoint's
origin; a new node starts at `since`, a removed node's counters are dropped. A checkpoint that
is unreadable or does not fit is set aside, never fatal: every node starts from `since`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from exporter.accounting.accounting import Accounting
from exporter.base.times import iso
from exporter.checkpoint.codec import load, restore, state, state_in_steps
from exporter.checkpoint.store import Checkpoint, CheckpointError
from exporter.daemon.core import Core, accounting_for
from exporter.daemon.logger import log
from exporter.daemon.nodes import parser_for
from exporter.parse.parser import Parser


def state_values(core: Core, checkpoint_errors: int) -> dict[str, Any]:
    """Everything to resume from, as fresh JSON-ready values: nothing in it is shared with
    what the loop goes on changing, so it can be encoded in a worker thread."""
    return state(*_what_is_saved(core, checkpoint_errors))


def state_steps(core: Core, checkpoint_errors: int) -> Generator[None, None, dict[str, Any]]:
    """`state_values`, taken a few nodes at a time (`codec.state_in_steps`)."""
    return state_in_steps(*_what_is_saved(core, checkpoint_errors))


def _what_is_saved(
    core: Core, checkpoint_errors: int
) -> tuple[Accounting, dict[str, Parser], dict[str, str], dict[str, str], int, int]:
    nodes = core.nodes.values()
    return (
        core.acc,
        {n.name: n.parser for n in nodes},
        {n.name: n.position for n in nodes},
        {n.name: n.position_kind for n in nodes if n.position_kind is not None},
        checkpoint_errors,
        core.now_us(),
    )


def resume(core: Core, checkpoint: Checkpoint) -> int | None:
    """Take up where the checkpoint left off; returns its count of failed writes, or None when
    there was no checkpoint to take up (none, or one set aside)."""
    checkpoint.remove_stale_temps()
    try:
        saved = load(checkpoint)
    except CheckpointError as e:
        _refuse(core, checkpoint, str(e))
        return None
    if saved is None:
        log.info(
            "no checkpoint in %s: every node starts at since=%s",
            checkpoint.path.parent,
            core.config.since,
        )
        return None
    try:
        notes = restore(core.acc, saved["accounting"])
        parsers = {
            n: parser_for(n, core.config, st)
            for n, st in saved["parsers"].items()
            if n in core.nodes
        }
        positions = {n: str(p) for n, p in saved["positions"].items() if n in core.nodes}
        errors = int(saved["checkpoint_errors"])
    except Exception as e:  # any misfit of its structure: refuse it, never crash on it
        core.acc = accounting_for(core.config, core.since_us)
        _refuse(core, checkpoint, f"{checkpoint.path}: does not fit ({type(e).__name__}: {e})")
        return None
    _take_nodes(core, saved, parsers, positions)
    for note in notes:
        log.warning("checkpoint %s: %s", checkpoint.path, note)
    log.info(
        "resuming from checkpoint %s (%d nodes, accounted until %s)",
        checkpoint.path,
        len(positions),
        iso(core.acc.watermark_us),
    )
    return errors


def _take_nodes(
    core: Core, saved: dict[str, Any], parsers: dict[str, Parser], positions: dict[str, str]
) -> None:
    """Each node's saved parser, position and its kind of source into its record; a node the
    checkpoint knows starts, without a position, at the checkpoint's origin."""
    kinds: dict[str, str] = saved["sources"]  # (a position of no kind saved: its node's)
    for name, node in core.nodes.items():
        if name in parsers:
            node.parser = parsers[name]
        if name in positions:
            node.position = positions[name]
        if name in saved["parsers"]:
            node.since_us = core.acc.origin_us
        if node.position:
            node.position_kind = kinds.get(name, node.config.source)


def _refuse(core: Core, checkpoint: Checkpoint, why: str) -> None:
    aside = checkpoint.set_aside()
    log.error(
        "%s; starting every node from since=%s instead%s",
        why,
        core.config.since,
        f" (the file is kept as {aside})" if aside else "",
    )

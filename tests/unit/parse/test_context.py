"""The per-PID context: a block matches its own request only, and a copy shares nothing."""

from __future__ import annotations

from exporter.parse.context import NO_BLOCK, Block, ServerContext, copy_block


def test_a_block_matches_what_it_does_not_contradict() -> None:
    block = Block(slot=1, task=7)
    assert block.matches(1, 7) and block.matches(None, None) and block.matches(None, 7)
    assert not block.matches(2, 7) and not block.matches(1, 8)
    assert NO_BLOCK.matches(3, 9)


def test_a_copy_of_a_context_shares_nothing_that_changes() -> None:
    server = ServerContext(Block(0, 1, 2, 3), {(0, 1): 5}, {0: 1}, {(0, 2): 6}, 4, 10)
    server.task_reasons[2] = "cancelled"
    copy = server.copy()
    assert copy == server
    copy.block.prompt_us = 99
    copy.pending_stops.clear()
    copy.task_reasons.clear()
    assert server.block.prompt_us == 2 and server.pending_stops and server.task_reasons
    assert copy_block(NO_BLOCK) is NO_BLOCK

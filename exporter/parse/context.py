"""The parser's context per llama-server PID: its timing block and its requests not yet ended.

The timing block being read, and the requests of that server that have launched, been released
or been told a reason (a cancel or error line) and not yet ended.

A `Parser` holds the context of the PID logging now in its own attributes (the hot path reads
them there) and keeps each other PID's in a `ServerContext`: an old server's last lines may
interleave with the new one's, and two servers may run under one unit (docs/design.md,
"Line shapes by llama.cpp era").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Block:
    """What the lines before a total line said about the request they belong to."""

    slot: int | None = None
    task: int | None = None
    prompt_us: int | None = None
    prompt_tokens: int | None = None
    generation_us: int | None = None
    generated_tokens: int | None = None

    def matches(self, slot: int | None, task: int | None) -> bool:
        return (self.task is None or task is None or self.task == task) and (
            self.slot is None or slot is None or self.slot == slot
        )


NO_BLOCK = Block()  # the block before any of its lines came (shared; never changed)


def copy_block(b: Block) -> Block:
    if b is NO_BLOCK:
        return b
    return Block(b.slot, b.task, b.prompt_us, b.prompt_tokens, b.generation_us, b.generated_tokens)


@dataclass(slots=True)
class ServerContext:
    """The context of a llama-server PID that is not the one logging now but may still log: an
    old server's last lines interleaved with the new one's, or two servers under one unit."""

    block: Block
    pending_stops: dict[tuple[int, int], int]  # (slot, task) -> when it was released
    last_timed: dict[int, int]  # slot -> task of its last timing block
    started: dict[tuple[int, int], int]  # (slot, task) -> when it launched, not yet ended
    n_slots: int
    since_us: int  # journal time it last was the one logging
    second: bool = False  # it logged well after the newest began: a second server
    # task -> the reason its release without timing will have (a cancel or error line's)
    task_reasons: dict[int, str] = field(default_factory=dict)
    children: dict[tuple[int, int], None] = field(default_factory=dict)  # n_cmpl children

    def copy(self) -> ServerContext:
        return ServerContext(
            copy_block(self.block),
            dict(self.pending_stops),
            dict(self.last_timed),
            dict(self.started),
            self.n_slots,
            self.since_us,
            self.second,
            dict(self.task_reasons),
            dict(self.children),
        )

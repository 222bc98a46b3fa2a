"""What llama-server's other lines say: sleep, draft acceptance, live decode, the router's queue.

Beside its requests and start-ups, a llama-server at its default verbosity logs when it goes to
sleep and wakes (`--sleep-idle-seconds`), how many draft tokens each request's target model
accepted (speculative decoding), how fast a long generation decodes (every 3 s), and, as a
router, when a request waits in line for a model instance (docs/log-formats.md).
`tokens.classify` sorts these lines; the readers here read their figures. Each runs in time
linear in the line, and a figure that does not read is a ParseError (a counted parse error).
"""

from __future__ import annotations

import re

from exporter.parse.router import model_name
from exporter.parse.tokens import (
    JOINED_WORD,
    MAX_TOKENS,
    QUEUED_WORD,
    WAITING_WORD,
    ParseError,
)

# `slot print_timing: id  0 | task 2 | draft acceptance = 0.00758 (    1 accepted /   132
# generated), mean len =  1.02`: the fifth line of a timing block
_DRAFT = re.compile(r"draft acceptance = \S+ \( *(\d{1,10}) accepted / *(\d{1,10}) generated\)")
# `slot print_timing: id  0 | task 5 | n_gen =    400, tg = 812.55 t/s, tg_3s = 790.10 t/s`
_DECODE = re.compile(r"n_gen = +\d{1,10}, tg = +\S+ t/s, tg_3s = +(\d{1,12})\.(\d\d) t/s")
MAX_SPEED = 10**9  # hundredths of a token per second: beyond is a garbled line
# the router's queue (server-models.cpp): a request that found no instance of its model, as
# `request for name=X queued at position N`, `request for name=X joined the queue, N waiting`
# (a request for a model already queued), then `waiting until model name=X is fully loaded...`
_FOR_NAME, _LOADED = "request for name=", " is fully loaded..."
QUEUED, JOINED, WAITING = "queued", "joined", "waiting"  # (what a queue line says)


def draft(msg: str) -> tuple[int, int]:
    """A draft acceptance line's (accepted, drafted) tokens."""
    m = _DRAFT.search(msg)
    if m is None:
        raise ParseError("a draft acceptance line without `(N accepted / N generated)`")
    accepted, drafted = int(m.group(1)), int(m.group(2))
    if accepted > drafted or drafted > MAX_TOKENS:
        raise ParseError(f"not draft token counts: {accepted} accepted of {drafted}")
    return accepted, drafted


def decode_speed(msg: str) -> int:
    """An `n_gen` line's speed over its last 3 s, in hundredths of a token per second."""
    m = _DECODE.search(msg)
    if m is None:
        raise ParseError("an n_gen line without `tg_3s = N.NN t/s`")
    speed = int(m.group(1)) * 100 + int(m.group(2))
    if speed > MAX_SPEED:
        raise ParseError(f"not a decode speed: {speed / 100} t/s")
    return speed


def queue(msg: str) -> tuple[str, str, int | None] | None:
    """A router's queue line: (QUEUED, model, position), (JOINED, model, None) or (WAITING,
    model, None); None for a line of another shape."""
    head, sep, tail = msg.rpartition(QUEUED_WORD)
    if sep:
        at = head.find(_FOR_NAME)
        if at < 0 or not (tail.isascii() and tail.isdigit()) or len(tail) > 10:
            return None
        name = model_name(head[at + len(_FOR_NAME) :])
        return (QUEUED, name, int(tail)) if name else None
    head, sep, tail = msg.rpartition(JOINED_WORD)
    if sep:
        at = head.find(_FOR_NAME)
        count = tail.removesuffix(" waiting")
        if at < 0 or count == tail or not (count.isascii() and count.isdigit()):
            return None
        name = model_name(head[at + len(_FOR_NAME) :])
        return (JOINED, name, None) if name else None
    at = msg.find(WAITING_WORD)
    if at < 0 or not msg.endswith(_LOADED):
        return None
    name = model_name(msg[at + len(WAITING_WORD) : len(msg) - len(_LOADED)])
    return (WAITING, name, None) if name else None

"""A batch or a tick applied to the node records, and what the daemon logs of its outcome.

A batch goes through its node's parser into the accounting (`ingest.step.apply_batch`); its
outcome is logged (the first parse errors, restarts and aborted requests in summary, a clock
skew's start and end, models spilled), its position kept for the next source to start from.
A tick flushes each node's parser up to what the node has read, moves the watermark, and
watches what holds the figures back.
"""

from __future__ import annotations

from exporter.accounting.figures import MAX_MODELS
from exporter.base.records import Batch, EventKind
from exporter.base.times import SECOND, iso
from exporter.daemon.core import Core
from exporter.daemon.logger import log
from exporter.daemon.nodes import Node
from exporter.daemon.watch import QUIET_UNIT_S, HolderWatch, UnitWatch
from exporter.ingest.step import Outcome, apply_batch, flush
from exporter.parse.router import OTHER_MODELS
from exporter.web.fleet import StatusView

ERRORS_LOGGED = 5  # parse errors logged per node before going quiet (they are all counted)
RESTARTS = "llama-server restarts"  # (the repeated events a node's log line sums up)
ABORTED = "requests in flight aborted"


class Applier:
    """Applies batches and ticks to `core` (see the module docstring). `caught_up` is set when
    a source has caught up (the loop publishes soon after), cleared by whoever reads it."""

    def __init__(self, core: Core, quiet_unit_seconds: float = QUIET_UNIT_S) -> None:
        self.core = core
        self.caught_up = False
        self.holder = HolderWatch()
        self.units = UnitWatch(quiet_unit_seconds)

    def apply(self, batch: Batch, now_us: int) -> None:
        core = self.core
        node = core.nodes.get(batch.node)
        if node is None:  # (a node a reload removed: what it had queued)
            return
        if core.now.suspected and batch.newest_us is not None:  # (does it bear the step out?)
            allowance_s = core.acc.clock_allowance_us / SECOND
            if core.now.journal_time(batch.newest_us / SECOND, allowance_s):
                now_us = core.now_us()
        outcome = apply_batch(batch, node.parser, core.acc, now_us)
        if outcome.caught_up:
            self.caught_up = True
        core.recent.add_all(outcome.records, since_us=now_us - StatusView.window_us)
        _say(node, outcome, now_us)
        if batch.position:
            node.position = batch.position
            if node.running_kind is not None:
                node.position_kind = node.running_kind
        if node.ended is not None and node.ended[0] is batch:
            node.ended[1].set()
        if not batch.up and batch.error and node.down_reason != batch.error:
            node.down_reason = batch.error
        elif batch.up and node.down_reason is not None:
            node.down_reason = None
            log.info("node %s: following its journal again", node.name)

    def tick(self, now_us: int) -> None:
        """Each node's parser flushed up to what it has read, the watermark moved to now."""
        core = self.core
        for node in core.nodes.values():
            outcome = flush(node.parser, core.acc, now_us)
            if outcome.records:
                core.recent.add_all(outcome.records, since_us=now_us - StatusView.window_us)
                if outcome.aborted:
                    _say_events(node, outcome)
        core.acc.advance(now_us)
        self.holder.watch(core.acc, now_us)
        for node in core.nodes.values():
            node.repeats.flush()
        self.units.watch(core.nodes.values(), core.acc)


def _say(node: Node, outcome: Outcome, now_us: int) -> None:
    """Log what a batch did that is news (each once: the checkpoint keeps what a batch did)."""
    if outcome.models_spilled:
        log.warning(
            "node %s: more than %d models: the requests of the others count under model=%s",
            node.name,
            MAX_MODELS,
            OTHER_MODELS,
        )
    if outcome.skew_ended:  # once per episode, at its start and its end
        log.info("node %s: its journal times are in line with this clock again", node.name)
    elif outcome.skew_began_us is not None:
        ahead_us = outcome.skew_began_us
        log.warning(
            "node %s: journal entry stamped %s, %.0f s ahead of this clock: counted as "
            "it is, but the watermark does not go past now (clock skew, or a corrupted "
            "entry; see smllm_source_clock_skew_seconds)",
            node.name,
            iso(now_us + ahead_us),
            ahead_us / SECOND,
        )
    if outcome.events or outcome.aborted:  # (rare)
        _say_events(node, outcome)


def _say_events(node: Node, outcome: Outcome) -> None:
    """Log the first parse errors among what a batch added, and its restarts and aborted
    requests (in summary when they come often: `Repeats`)."""
    for ev in outcome.events:
        if ev.kind is EventKind.PARSE_ERROR:
            node.errors_logged += 1
            if node.errors_logged <= ERRORS_LOGGED:
                log.warning(
                    "node %s: parse error: %s%s",
                    node.name,
                    ev.detail,
                    " (further parse errors are counted, not logged)"
                    if node.errors_logged == ERRORS_LOGGED
                    else "",
                )
        elif ev.kind is EventKind.RESTART:
            node.repeats.note(RESTARTS, 1, f"llama-server restarted ({ev.detail})", ev.detail)
    if outcome.aborted:
        node.repeats.note(
            ABORTED,
            outcome.aborted,
            f"{outcome.aborted} requests in flight aborted: their llama-server has exited",
        )

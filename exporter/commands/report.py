"""The `report` command: a past window of the nodes' journals as tables, JSON, HTML or start-ups.

`--format openmetrics` replays the window as the backfill (`commands/backfill.py`);
`--init-timeline` reads a vllm-omni engine's files instead (`commands/init_timeline.py`).

The window is read from the configured nodes, or from the `--input` dumps, up to
`until + max_request_seconds` (a request ending later may have begun in it). Its figures come
from `report.window.Builder`; a backfill's from `report.openmetrics.Replay`, fed the same
Batches. What could not be read is logged and makes the exit code 1, after the report of what
was read; options the report refuses make it 2 before anything is read.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.base.kinds import Kinds, split_rules
from exporter.base.records import L_TIME_US, Batch
from exporter.base.times import iso
from exporter.commands.loading import load_config
from exporter.commands.output import put
from exporter.commands.report_options import START_UP_FORMATS, ReportOptions
from exporter.config.schema import DEFAULT_PATH, Config
from exporter.ingest.memory import tune_gc
from exporter.ingest.settings import settings
from exporter.report import text
from exporter.report.window import Builder, Report
from exporter.sources import registry as sources
from exporter.sources.file import FileNode
from exporter.sources.registry import NodeConfig
from exporter.startup import tables

if TYPE_CHECKING:
    from exporter.report import openmetrics

log = logging.getLogger(__name__)

STDIN = Path("-")  # an --input read from standard input


class Refused(Exception):
    """Options the report refuses, before anything is read: why (the exit code is 2)."""


def main(o: ReportOptions) -> int:
    """The report `o` asks for: 0; 1 when a node or the config could not be read or the output
    not written; 2 when the options are refused."""
    try:
        return _report(o)
    except Refused as e:
        log.error("%s", e)
        return 2


def _report(o: ReportOptions) -> int:
    _check(o)
    # The init timeline and the OpenMetrics replay are imported when asked for: a text, json or
    # html report starts without them (the report is timed from its process's start).
    if o.init_timeline:
        from exporter.commands import init_timeline

        return init_timeline.main(o.init_timeline, o.factor, o.format, o.output)
    assert o.since_us is not None and o.until_us is not None
    cfg = Config() if o.config is None and o.inputs else _loaded(o.config)
    if cfg is None:
        return 1
    nodes = _nodes(o.inputs) if o.inputs else cfg.nodes
    kinds = Kinds(split_rules(o.split_tokens)) if o.split_tokens is not None else cfg.kinds
    s = settings(cfg, kinds, o.max_request_seconds)
    tune_gc(long_lived=False)
    names = [n.name for n in nodes]
    builder = Builder(names, s, o.since_us, o.until_us, timeline=o.format == "html")
    replay = None
    if o.output_dir is not None and o.format != "openmetrics":
        raise Refused("--output-dir is for --format openmetrics (the others write --output FILE)")
    if o.format == "openmetrics":
        from exporter.commands import backfill
        from exporter.report import openmetrics

        why = backfill.refusal(names, s, o.since_us, o.until_us, o.step_us, o.output, o.output_dir)
        if why:
            raise Refused(why)
        replay = openmetrics.Replay(names, s, o.since_us, o.until_us, o.step_us)
    failed, found = _read(nodes, o.since_us, o.until_us, s.max_request_us, builder, replay)
    r = builder.finish()
    _tell(r, failed, found, len(nodes))
    code = 1 if failed else 0
    if replay is not None:
        from exporter.commands import backfill

        return backfill.write(replay, o.output, o.output_dir) or code
    return put(_text(r, o, cfg), o.output) or code


def _check(o: ReportOptions) -> None:
    """Refused: options that do not go together, or a window without its ends."""
    if (o.startups or o.init_timeline) and o.format not in START_UP_FORMATS:
        raise Refused(f"--startups and --init-timeline print text or json, not {o.format}")
    if o.init_timeline:
        if o.startups or o.inputs or o.since_us is not None or o.until_us is not None:
            raise Refused("--init-timeline reads only its files: no --since, --until, --input")
        return
    if o.since_us is None or o.until_us is None:
        raise Refused("report needs --since and --until (or --init-timeline PATH)")
    if o.until_us <= o.since_us:
        raise Refused("--until must be after --since")


def _loaded(path: Path | None) -> Config | None:
    """The config (`--config`, else the default), or None with its problems logged."""
    return load_config(path or DEFAULT_PATH, from_shell=True)


def _nodes(inputs: tuple[tuple[str, Path], ...]) -> tuple[NodeConfig, ...]:
    """The `--input` dumps as file nodes; Refused: a node twice, standard input twice, or a
    file that is not there."""
    names = [node for node, _ in inputs]
    if len(set(names)) != len(names):
        raise Refused(f"a node is given twice in --input: {', '.join(names)}")
    if [path for _, path in inputs].count(STDIN) > 1:
        raise Refused("only one --input can be - (standard input)")
    missing = [f"{n}: no such file: {p}" for n, p in inputs if p != STDIN and not p.exists()]
    if missing:
        raise Refused("; ".join(missing))
    return tuple(FileNode(node, path) for node, path in inputs)


def _read(
    nodes: tuple[NodeConfig, ...],
    since_us: int,
    until_us: int,
    past_us: int,
    builder: Builder,
    replay: openmetrics.Replay | None,
) -> tuple[dict[str, str], bool]:
    """Every node's window into the builder (and the replay): the nodes that could not be
    read (why, by node), and whether any line read lies in [since, until] (a dump is read
    whole: its entries outside the window do not count)."""
    found = False

    def add(batch: Batch) -> None:
        nonlocal found
        if not found and (batch.newest_us is None or batch.newest_us >= since_us):
            found = any(since_us <= line[L_TIME_US] <= until_us for line in batch.lines)
        builder.add(batch)
        if replay is not None:
            replay.add(batch)

    progress = _progress if sys.stderr.isatty() else None
    read_until = until_us + past_us
    failed = asyncio.run(sources.read_windows(nodes, since_us, read_until, add, progress))
    return failed, found


def _progress(node: str, entries: int, reached_us: int | None) -> None:
    """A progress line per node on a terminal: entries read, journal time reached."""
    when = "" if reached_us is None else " reached " + iso(reached_us)
    sys.stderr.write(f"\r  {node}: {entries:,} entries{when}\x1b[K\n\x1b[1A")
    sys.stderr.flush()


def _tell(r: Report, failed: dict[str, str], found: bool, nodes: int) -> None:
    """Logs what the report's figures do not show: an empty window, the lines that did not
    parse, the nodes that could not be read."""
    if not failed and not found:
        log.warning(
            "the window %s .. %s holds no journal entries of any node, none that may hold a "
            "request (check --since, --until and the nodes' unit)",
            iso(r.since_us),
            iso(r.until_us),
        )
    for n in r.snapshot.nodes:
        if n.parse_errors:
            log.warning(
                "node %s: %d lines looked like timing lines but did not parse%s",
                n.name,
                n.parse_errors,
                "; the first:" if r.errors[n.name] else "",
            )
            for error in r.errors[n.name]:
                log.warning("  %s", error)
    for why in failed.values():
        log.error("%s", why)
    if failed:
        log.error(
            "could not read %d of %d nodes (%s); the report shows what was read",
            len(failed),
            nodes,
            ", ".join(failed),
        )


def _text(r: Report, o: ReportOptions, cfg: Config) -> str:
    """The report in the format asked for: the start-ups' tables, HTML, text or JSON."""
    if o.startups:
        if o.format == "json":
            return tables.startups_json(r.startups, o.factor, cfg.unit, r.since_us, r.until_us)
        return tables.startups_text(r.startups, o.factor, cfg.unit)
    if o.format == "html":
        from exporter.web import report_page as pages  # (the text and JSON need none of it

        return pages.report_html(r)
    return text.render(r, o.format)

"""The `sm-llm-exporter` command line: its arguments parsed, logging set up, the command called.

Each command's work is its module in `exporter/commands/`: `run`, `check_config`,
`known_hosts`, `demo` and `report` (with `backfill` and `init_timeline`); this module only reads
the arguments (their types check ranges and forms, as argparse errors, exit code 2) and hands
them over.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from exporter import __version__
from exporter.base import logs
from exporter.base.times import SECOND, since_us
from exporter.commands import check_config, known_hosts, report, run
from exporter.config.schema import DEFAULT_PATH, DEFAULTS
from exporter.config.values import listen_address
from exporter.daemon import hup
from exporter.startup.phases import DEFAULT_FACTOR

log = logging.getLogger(__name__)

DAY_S = 86_400


def _time(text: str) -> int:
    try:
        return since_us(text, int(datetime.now(UTC).timestamp() * SECOND))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ISO 8601 like 2026-09-22T07:32:55, UTC without an offset; "
            f"now; or -30m, -24h, -7d)"
        ) from None


def _step(text: str) -> int:
    """A step like 15s, 1m, 2h (or seconds) -> microseconds: 1 s .. 1 day."""
    m = re.fullmatch(r"(\d+)([smh]?)", text.strip())
    us = 0 if m is None else int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[m[2]] * SECOND
    if not SECOND <= us <= DAY_S * SECOND:
        raise argparse.ArgumentTypeError(f"--step must be 1s .. 24h (15s, 1m), got {text!r}")
    return us


def _ranged(lo: int, hi: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer lo..hi, else a message naming the range."""

    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = lo - 1
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{what} must be an integer {lo}..{hi}, got {text!r}")
        return value

    return read


def _listen(text: str) -> tuple[str, int]:
    try:
        return listen_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'expected HOST:PORT or :PORT (IPv6 as "[::1]:10027"), got {text!r}'
        ) from None


def _input(text: str) -> tuple[str, Path]:
    node, sep, path = text.partition("=")
    if not sep or not node or not path:
        raise argparse.ArgumentTypeError(f"expected NODE=FILE (or NODE=- for stdin), got {text!r}")
    return node, Path(path)


LOG_LEVELS = ["debug", "info", "warning", "error"]


MAX_FACTOR = 1e6  # (a factor this large measures a short run off the floors, in tests)


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= MAX_FACTOR:
        raise argparse.ArgumentTypeError(f"must be a number 1..{MAX_FACTOR:g}, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sm-llm-exporter",
        description="Exact busy time, requests and tokens of llama.cpp (sm-llm) nodes, "
        "from their journals.",
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    ap.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="default: info")
    # ... and after the command too (`run --log-level debug`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS, help="default: info"
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_run(sub.add_parser, common)
    _add_check_config(sub.add_parser, common)
    _add_known_hosts(sub.add_parser, common)
    _add_demo(sub.add_parser, common)
    _add_report(sub.add_parser, common)
    return ap


def _add_run(add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    run = add(
        "run",
        parents=[common],
        help="the daemon: follow every node's journal and serve /metrics",
        description="Follow every configured node's journal and serve /metrics, /-/healthy "
        "and /-/ready. SIGTERM or SIGINT stop it cleanly.",
    )
    run.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_PATH,
        metavar="FILE",
        help=f"default: {DEFAULT_PATH}",
    )
    run.add_argument(
        "--listen",
        type=_listen,
        metavar="ADDR",
        help="HOST:PORT or :PORT to serve on, instead of the config's listen",
    )
    run.add_argument(
        "--web.config.file",
        dest="web_config_file",
        type=Path,
        metavar="FILE",
        help="exporter-toolkit web config (TLS, client certificates, basic auth, headers), "
        "instead of the config's web_config_file; read again for every connection",
    )


def _add_check_config(
    add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    check = add(
        "check-config",
        parents=[common],
        help="check a config file; every problem at once",
        description="Check a config file and list every problem with its key path and line. "
        "Exit 0 only when it is valid.",
    )
    check.add_argument(
        "file", type=Path, nargs="?", metavar="FILE", help="the config (or give it as --config)"
    )
    check.add_argument(
        "--config",
        type=Path,
        dest="config_option",
        metavar="FILE",
        help=f"default: {DEFAULT_PATH}",
    )
    check.add_argument(
        "--web.config.file",
        dest="web_config_file",
        type=Path,
        metavar="FILE",
        help="check this web config too (the config's web_config_file is checked anyway)",
    )
    check.add_argument(
        "--as-service",
        action="store_true",
        help="check the paths as the unit's dynamic user sees them: credentials under "
        "$CREDENTIALS_DIRECTORY (their sources in /etc/sm-llm-exporter), other files readable "
        "by a user that owns none of them",
    )


def _add_known_hosts(
    add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    kh = add(
        "known-hosts",
        parents=[common],
        help="fetch and print SSH nodes' host keys with fingerprints, for review",
        description="Connect to each named SSH node (all when none is named), fetch its host "
        "key without trusting it, and print known_hosts lines with their SHA256 fingerprints. "
        "Check each fingerprint out of band, then append the lines to the node's known_hosts.",
    )
    kh.add_argument("nodes", nargs="*", metavar="NODE")
    kh.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_PATH,
        metavar="FILE",
        help=f"default: {DEFAULT_PATH}",
    )


def _add_demo(add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    dm = add(
        "demo",
        parents=[common],
        help="the daemon on three demo nodes (no sm-llm unit or SSH needed)",
        description="Write the last hour of a seeded three-node workload as journal dumps, "
        "append each later line as its time comes, and run the daemon on them.",
    )
    dm.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="where the demo journals go (default: a new temporary directory)",
    )
    dm.add_argument(
        "--listen",
        type=_listen,
        default=f"127.0.0.1:{DEFAULTS.listen_port}",
        metavar="HOST:PORT",
        help=f"default: 127.0.0.1:{DEFAULTS.listen_port} (this host only)",
    )


def _add_report(
    add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    rp = add(
        "report",
        parents=[common],
        help="how busy the nodes were over a past window (the seed's tables)",
        description="Read the nodes' journals over [--since, --until] and print how busy each "
        "node was, how many worked at once and how the work split by kind. Requests count by "
        "their end in the window; busy and concurrency seconds are exact, clipped to the window. "
        "With --startups: how long each llama-server start-up took, phase by phase, and the "
        "TimeoutStartSec= that covers them; with --init-timeline: a vllm-omni init timeline's.",
    )
    rp.add_argument(
        "--since",
        type=_time,
        metavar="T",
        help="window start: ISO 8601 (UTC when it has no offset), now, or -30m, -24h, -7d "
        "(required unless --init-timeline is given)",
    )
    rp.add_argument("--until", type=_time, metavar="T", help="window end, in the same forms")
    rp.add_argument(
        "--startups",
        action="store_true",
        help="the llama-server start-ups that began in the window instead: each one's phases "
        "(vllm-omni's init-timeline table) and the TimeoutStartSec= that would have covered "
        "them all (text or json)",
    )
    rp.add_argument(
        "--init-timeline",
        action="append",
        type=Path,
        metavar="PATH",
        help="a vllm-omni init timeline instead: its dump (VLLM_OMNI_INIT_TIMELINE), its run "
        "directory of worker_*.jsonl (VLLM_OMNI_INIT_TIMELINE_DIR), or both (repeat); the "
        "phase table, the stages' spans and the suggested timeouts (text or json)",
    )
    rp.add_argument(
        "--factor",
        type=_factor,
        default=DEFAULT_FACTOR,
        metavar="F",
        help=f"--startups, --init-timeline: the headroom of a suggested timeout over the "
        f"longest span (default {DEFAULT_FACTOR})",
    )
    rp.add_argument(
        "--input",
        action="append",
        type=_input,
        metavar="NODE=FILE",
        help="a node's journal dump (journalctl -o json or -o short-iso-precise, plain or gzip; "
        "- for standard input, or a pipe), instead of the configured nodes; repeat per node",
    )
    rp.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"the nodes, kinds and max_request_seconds (default "
        f"{DEFAULT_PATH} when no --input is given)",
    )
    rp.add_argument(
        "--split-tokens",
        type=_ranged(1, 1_000_000_000, "--split-tokens"),
        metavar="N",
        help="two kinds: extraction at or above N tokens, reconcile below (default 600)",
    )
    rp.add_argument(
        "--max-request-seconds",
        type=_ranged(1, 7 * DAY_S, "--max-request-seconds"),
        metavar="S",
        help=f"longest request expected (default: the config's, {DEFAULTS.max_request_seconds})",
    )
    rp.add_argument(
        "--format",
        choices=list(report.FORMATS),
        default="text",
        help="text (the seed's tables), json, html (one self-contained page with the tables, "
        "the timeline and the charts), or openmetrics (what /metrics would have served at every "
        "--step, timestamped, for `promtool tsdb create-blocks-from openmetrics`; with --output "
        "or --output-dir). Default: text",
    )
    rp.add_argument(
        "--step",
        type=_step,
        default=15 * SECOND,
        metavar="DURATION",
        help="openmetrics: a sample every DURATION (15s, 1m; default 15s)",
    )
    rp.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="openmetrics: one file per two hours (promtool's block), each valid on its own",
    )
    rp.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the report here instead of to standard output: a regular file is replaced "
        "atomically, a device or FIFO written in place; a symbolic link is refused unless it "
        "is root's or yours and leads to a device or FIFO (as /dev/stdout)",
    )


def _relative_times(argv: Sequence[str]) -> list[str]:
    """`--since -7d` as `--since=-7d` (argparse takes a value starting with `-` for an
    option)."""
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("--since", "--until"):
            value = next(it, None)
            if value is None:
                out.append(arg)
            elif value[:1] == "-" and value[1:2].isdigit():
                out.append(f"{arg}={value}")
            else:
                out += [arg, value]
            continue
        out.append(arg)
    return out


DAEMONS = ("run", "demo")  # the commands that take SIGHUP up as a reload


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(_relative_times(sys.argv[1:] if argv is None else argv))
    if args.command not in DAEMONS and argv is None:  # (a hang-up ends a command run by hand)
        hup.release()
    logs.setup(args.log_level)
    if args.command == "report":
        return report.main(_report_options(args))
    if args.command == "check-config":
        if args.file is not None and args.config_option is not None:
            log.error("give the config once: as FILE or as --config")
            return 2
        return check_config.main(
            args.file or args.config_option or DEFAULT_PATH,
            as_service=args.as_service,
            web_config=args.web_config_file,
        )
    if args.command == "run":
        return run.main(args.config, args.listen, args.web_config_file)
    if args.command == "known-hosts":
        return known_hosts.main(args.config, args.nodes)
    if args.command == "demo":
        from exporter.commands import demo  # (the daemon, for the demo only

        return demo.main(args.dir, args.listen)
    return 2


def _report_options(args: argparse.Namespace) -> report.ReportOptions:
    return report.ReportOptions(
        since_us=args.since,
        until_us=args.until,
        startups=args.startups,
        init_timeline=tuple(args.init_timeline or ()),
        factor=args.factor,
        inputs=tuple(args.input or ()),
        config=args.config,
        split_tokens=args.split_tokens,
        max_request_seconds=args.max_request_seconds,
        format=args.format,
        step_us=args.step,
        output_dir=args.output_dir,
        output=args.output,
    )

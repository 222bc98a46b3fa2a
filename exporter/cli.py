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
from exporter.commands.report_options import FORMATS, ReportOptions
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


# The help texts below the options (argparse's epilog), kept as written: what each command
# serves or needs, and an example. tools/manpages.py puts them in the man page too.
RAW = argparse.RawDescriptionHelpFormatter

EPILOG = f"""\
The config: {DEFAULT_PATH} (man 5 sm-llm-exporter.yaml).
A command's options and an example: sm-llm-exporter COMMAND --help.

example:
  sm-llm-exporter check-config --as-service \\
      {DEFAULT_PATH}
"""

RUN_EPILOG = f"""\
serves, on the config's listen address (default :{DEFAULTS.listen_port}):
  /             the status page (HTML)
  /api/status   the status page's data (JSON)
  /metrics      the metrics, for Prometheus
  /-/healthy    200 while the server answers
  /-/ready      200 once every source has started

signals:
  SIGHUP        re-read the config (systemctl reload sm-llm-exporter);
                a config that does not validate is refused, and the
                one in force stays
  SIGTERM       stop cleanly, with a last checkpoint (SIGINT too)

requires: a valid config, and a state_dir it can write (default
{DEFAULTS.state_dir}). Without them it does not start (exit 1).

example:
  sm-llm-exporter run --config {DEFAULT_PATH}
"""

CHECK_CONFIG_EPILOG = f"""\
checks: every key and value; every path the config names (dump files, journal
directories, known_hosts, client keys, password and passphrase files) is there
and readable; state_dir can be written; the web config and its files. A dump
file that does not exist yet is a warning only. FILE - reads standard input.

--as-service checks the paths as the unit's dynamic user will see them. A path
under ${{CREDENTIALS_DIRECTORY}} is the file the unit loads as that credential
(/etc/sm-llm-exporter/ssh/FILE as ssh_FILE). Every other file must be readable
by a user that owns none of them. Run it before starting the service.

example:
  sm-llm-exporter check-config --as-service \\
      {DEFAULT_PATH}
"""

KNOWN_HOSTS_EPILOG = """\
requires: a config with SSH nodes; only their host and port are used. Nothing
is trusted or written. Exit 1 when a host could not be reached (the others
are printed all the same), 2 when a NODE is no node of the config.

example:
  sm-llm-exporter known-hosts node0
then check the fingerprint out of band, and append the line to
/etc/sm-llm-exporter/ssh/known_hosts (the default known_hosts).
"""

DEMO_EPILOG = f"""\
serves what run serves (/, /api/status, /metrics), on 127.0.0.1:{DEFAULTS.listen_port} by
default. Ctrl-C stops it and removes the temporary directory (a --dir stays).

example:
  sm-llm-exporter demo
then open http://127.0.0.1:{DEFAULTS.listen_port}/ in a browser.
"""

REPORT_EPILOG = f"""\
requires: --since and --until, unless --init-timeline is given (it takes
neither). The nodes are the config's (--config, default
{DEFAULT_PATH}) or the --input dumps. Times: ISO 8601 (UTC
without an offset), now, or -30m, -24h, -7d. Exit 1 when a node could not be
read (after the report of what was read), 2 for options that do not go
together.

examples:
  sm-llm-exporter report --since -24h --until now
  sm-llm-exporter report --since -7d --until now \\
      --format html --output week.html
  sm-llm-exporter report --since 2026-09-22T07:32:55 \\
      --until 2026-09-22T08:45:10 --input node0=node0.json
"""


def parser() -> argparse.ArgumentParser:
    """The whole command line (tools/manpages.py writes the man page from it too)."""
    ap = argparse.ArgumentParser(
        prog="sm-llm-exporter",
        formatter_class=RAW,
        description="Exact busy time, requests and tokens of llama.cpp (sm-llm) nodes,\n"
        "from their journals.",
        epilog=EPILOG,
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    ap.add_argument(
        "--log-level", default="info", choices=LOG_LEVELS, help="how much to log (default: info)"
    )
    # ... and after the command too (`run --log-level debug`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        choices=LOG_LEVELS,
        help="how much to log (default: info)",
    )
    sub = ap.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

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
        formatter_class=RAW,
        help="the daemon: follow the nodes' journals, serve the status page and /metrics",
        description="The daemon, as the systemd unit runs it. It follows every configured node's\n"
        "journal, turns each request into a busy interval, and serves the status page\n"
        "and the metrics.",
        epilog=RUN_EPILOG,
    )
    run.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_PATH,
        metavar="FILE",
        help=f"the config (default: {DEFAULT_PATH})",
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
        formatter_class=RAW,
        help="check a config file; every problem at once",
        description="Check a config file and list every problem at once, each as FILE:LINE: KEY:\n"
        "what is wrong. Exit 0 only when the config is valid.",
        epilog=CHECK_CONFIG_EPILOG,
    )
    check.add_argument(
        "file", type=Path, nargs="?", metavar="FILE", help="the config (or give it as --config)"
    )
    check.add_argument(
        "--config",
        type=Path,
        dest="config_option",
        metavar="FILE",
        help=f"the config, instead of FILE (default: {DEFAULT_PATH})",
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
        formatter_class=RAW,
        help="fetch and print SSH nodes' host keys with fingerprints, for review",
        description="Connect to each named SSH node (every SSH node when none is named), fetch\n"
        "its host key without trusting it, and print known_hosts lines with their SHA256\n"
        "fingerprints. Check each fingerprint out of band, then append the lines to the\n"
        "node's known_hosts.",
        epilog=KNOWN_HOSTS_EPILOG,
    )
    kh.add_argument("nodes", nargs="*", metavar="NODE", help="a node's name in the config")
    kh.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_PATH,
        metavar="FILE",
        help=f"the config (default: {DEFAULT_PATH})",
    )


def _add_demo(add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    dm = add(
        "demo",
        parents=[common],
        formatter_class=RAW,
        help="the daemon on three demo nodes (no llama-server, sm-llm unit or SSH needed)",
        description="Write the last hour of a made-up three-node workload as journal dumps,\n"
        "append each later line as its time comes, and run the daemon on them. No\n"
        "llama-server, sm-llm unit or SSH is needed.",
        epilog=DEMO_EPILOG,
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
        help=f"where to serve (default: 127.0.0.1:{DEFAULTS.listen_port}, this host only)",
    )


def _add_report(
    add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    rp = add(
        "report",
        parents=[common],
        formatter_class=RAW,
        help="how busy the nodes were over a past window (the operators' timeline.py tables)",
        description="Read the nodes' journals over [--since, --until] and print how busy each\n"
        "node was, how many worked at once and how the work split by kind. Requests\n"
        "count by their end in the window. Busy and concurrency seconds are exact,\n"
        "clipped to the window.\n"
        "\n"
        "With --startups: how long each llama-server start-up (and wake-up from sleep)\n"
        "took, phase by phase, and the TimeoutStartSec= that covers the starts. With\n"
        "--init-timeline: the same for a vllm-omni init timeline.",
        epilog=REPORT_EPILOG,
    )
    rp.add_argument(
        "--since",
        type=_time,
        metavar="T",
        help="window start: ISO 8601 (UTC when it has no offset), now, or -30m, -24h, -7d "
        "(required unless --init-timeline is given)",
    )
    rp.add_argument(
        "--until",
        type=_time,
        metavar="T",
        help="window end, in the same forms (required unless --init-timeline is given)",
    )
    rp.add_argument(
        "--startups",
        action="store_true",
        help="the llama-server start-ups (and wake-ups from sleep) that began in the window "
        "instead: each one's phases (vllm-omni's init-timeline table) and the "
        "TimeoutStartSec= that would have covered every start (text or json)",
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
        choices=list(FORMATS),
        default="text",
        help="text (the tables of the operators' timeline.py), json, html (one self-contained "
        "page with the tables, the timeline and the charts), or openmetrics (what /metrics "
        "would have served at every --step, timestamped, for `promtool tsdb "
        "create-blocks-from openmetrics`; with --output or --output-dir). Default: text",
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


# A command's module is imported when it runs: a process loads only its own command, so `run`
# and `report` start sooner.
DAEMONS = ("run", "demo")  # the commands that take SIGHUP up as a reload


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(_relative_times(sys.argv[1:] if argv is None else argv))
    if args.command not in DAEMONS and argv is None:  # (a hang-up ends a command run by hand)
        hup.release()
    logs.setup(args.log_level)
    if args.command == "report":
        from exporter.commands import report

        return report.main(_report_options(args))
    if args.command == "check-config":
        if args.file is not None and args.config_option is not None:
            log.error("give the config once: as FILE or as --config")
            return 2
        from exporter.commands import check_config

        return check_config.main(
            args.file or args.config_option or DEFAULT_PATH,
            as_service=args.as_service,
            web_config=args.web_config_file,
        )
    if args.command == "run":
        from exporter.commands import run

        return run.main(args.config, args.listen, args.web_config_file)
    if args.command == "known-hosts":
        from exporter.commands import known_hosts

        return known_hosts.main(args.config, args.nodes)
    if args.command == "demo":
        from exporter.commands import demo  # (the daemon, for the demo only

        return demo.main(args.dir, args.listen)
    return 2


def _report_options(args: argparse.Namespace) -> ReportOptions:
    return ReportOptions(
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

"""The `sm-llm-exporter` command: argument parsing and logging set-up, no logic of its own."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from exporter import __version__
from exporter.base import logs, outfile
from exporter.base.kinds import Kinds, split_rules
from exporter.base.records import Batch
from exporter.base.times import SECOND, iso, since_us
from exporter.commands import preflight
from exporter.config import config
from exporter.daemon import hup
from exporter.ingest.step import tune_gc
from exporter.report import openmetrics as backfill
from exporter.report import window as report
from exporter.sources import registry as sources
from exporter.startup import tables as startreport
from exporter.startup import vllm as inittimeline
from exporter.startup.phases import DEFAULT_FACTOR
from exporter.web import tls as webtls
from exporter.web import webconfig

log = logging.getLogger(__name__)


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
    if not SECOND <= us <= 86_400 * SECOND:
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
        return config.listen_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'expected HOST:PORT or :PORT (IPv6 as "[::1]:10027"), got {text!r}'
        ) from None


def _input(text: str) -> tuple[str, Path]:
    node, sep, path = text.partition("=")
    if not sep or not node or not path:
        raise argparse.ArgumentTypeError(f"expected NODE=FILE (or NODE=- for stdin), got {text!r}")
    return node, Path(path)


_Node = TypeVar("_Node", bound=config.NodeConfig | config.InitTimelineNode)
LOG_LEVELS = ["debug", "info", "warning", "error"]
# Where systemd puts the service's credentials: what `${CREDENTIALS_DIRECTORY}` in a config's
# paths means in the service, for the commands an operator runs from a shell.
SERVICE_CREDENTIALS = str(preflight.SERVICE_CREDENTIALS)


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

    run = sub.add_parser(
        "run",
        parents=[common],
        help="the daemon: follow every node's journal and serve /metrics",
        description="Follow every configured node's journal and serve /metrics, /-/healthy "
        "and /-/ready. SIGTERM or SIGINT stop it cleanly.",
    )
    run.add_argument(
        "--config",
        type=Path,
        default=config.DEFAULT_PATH,
        metavar="FILE",
        help=f"default: {config.DEFAULT_PATH}",
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

    check = sub.add_parser(
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
        help=f"default: {config.DEFAULT_PATH}",
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

    kh = sub.add_parser(
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
        default=config.DEFAULT_PATH,
        metavar="FILE",
        help=f"default: {config.DEFAULT_PATH}",
    )

    dm = sub.add_parser(
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
        default="127.0.0.1:10027",
        metavar="HOST:PORT",
        help="default: 127.0.0.1:10027 (this host only)",
    )

    rp = sub.add_parser(
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
        f"{config.DEFAULT_PATH} when no --input is given)",
    )
    rp.add_argument(
        "--split-tokens",
        type=_ranged(1, 1_000_000_000, "--split-tokens"),
        metavar="N",
        help="two kinds: extraction at or above N tokens, reconcile below (default 600)",
    )
    rp.add_argument(
        "--max-request-seconds",
        type=_ranged(1, 7 * 86_400, "--max-request-seconds"),
        metavar="S",
        help="longest request expected (default: the config's, 600)",
    )
    rp.add_argument(
        "--format",
        choices=["text", "json", "html", "openmetrics"],
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
    return ap


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
        return _report(args)
    if args.command == "check-config":
        if args.file is not None and args.config_option is not None:
            log.error("give the config once: as FILE or as --config")
            return 2
        return _check_config(
            args.file or args.config_option or config.DEFAULT_PATH,
            as_service=args.as_service,
            web_config=args.web_config_file,
        )
    if args.command == "run":
        return _run(args.config, args.listen, args.web_config_file)
    if args.command == "known-hosts":
        return _known_hosts(args.config, args.nodes)
    if args.command == "demo":
        return _demo(args.dir, args.listen)
    return 2


def _demo(given: Path | None, listen: tuple[str, int]) -> int:
    from exporter.commands import demo  # (the daemon, for the demo only

    with demo.demo_directory(given) as directory:
        try:
            asyncio.run(demo.run_demo(directory, listen))
        except OSError as e:  # the port taken, the directory not writable: no traceback
            log.error("cannot run the demo: %s", e)
            return 1
    return 0


class _ServiceEnv(Mapping[str, str]):
    """The environment, with `$CREDENTIALS_DIRECTORY` the service's where it is not set; tells
    whether that stand-in was read."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env, self.stood_in = env, False

    def __getitem__(self, name: str) -> str:
        if name == "CREDENTIALS_DIRECTORY" and name not in self.env:
            self.stood_in = True
            return SERVICE_CREDENTIALS
        return self.env[name]

    def __contains__(self, name: object) -> bool:
        return name == "CREDENTIALS_DIRECTORY" or name in self.env

    def __iter__(self) -> Iterator[str]:
        return iter({*self.env, "CREDENTIALS_DIRECTORY"})

    def __len__(self) -> int:
        return len({*self.env, "CREDENTIALS_DIRECTORY"})


def _load(
    path: Path, *, as_service: bool = False, from_shell: bool = False
) -> config.Config | None:
    """The config at `path`, or None with its problems logged. `as_service`: read an unset
    `${CREDENTIALS_DIRECTORY}` as the service will see it (for checks run from a shell);
    `from_shell`: that too, and the service's credentials read where the unit takes them from
    (for a report run from a shell)."""
    env = _ServiceEnv(os.environ) if as_service or from_shell else os.environ
    try:
        text = config.read_text(path)
        cfg = config.parse(text, str(path), env, available=sources.AVAILABLE)
    except config.ConfigError as e:
        log.error("%s", e, extra=logs.LINES)
        return None
    if isinstance(env, _ServiceEnv) and env.stood_in and _names_credentials(text, str(path)):
        log.info(
            "$CREDENTIALS_DIRECTORY is not set: read as the service's, %s%s",
            SERVICE_CREDENTIALS,
            f" (its credentials read from their sources: {_credential_sources()})"
            if from_shell
            else "",
        )
    return _credentials_at_their_sources(cfg) if from_shell else cfg


_CREDENTIALS_NAMED = re.compile(r"\$(\{CREDENTIALS_DIRECTORY\}|CREDENTIALS_DIRECTORY\b)")


def _credential_sources() -> str:
    """Where the unit takes its credentials from: `ssh_FILE from /etc/sm-llm-exporter/ssh/FILE`,
    ..."""
    return ", ".join(f"{p}FILE from {d}/FILE" for p, d in preflight.CREDENTIAL_DIRECTORIES)


def _names_credentials(text: str, source: str) -> bool:
    """Whether some value of the config (not a comment) names `$CREDENTIALS_DIRECTORY`."""
    todo: list[object] = [config.document(text, source)[0]]
    while todo:
        value = todo.pop()
        if isinstance(value, str) and _CREDENTIALS_NAMED.search(value):
            return True
        if isinstance(value, dict):
            todo += value.values()
        elif isinstance(value, list):
            todo += value
    return False


def _credentials_at_their_sources(cfg: config.Config) -> config.Config:
    """Every path of the nodes that is a service's credential (under its credentials directory,
    which is not here) as the file the unit takes it from (preflight.seen_here)."""
    nodes = tuple(_seen_here(n) for n in cfg.nodes)
    timelines = tuple(_seen_here(t) for t in cfg.init_timelines)
    return dataclasses.replace(cfg, nodes=nodes, init_timelines=timelines)


def _seen_here(node: _Node) -> _Node:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Path):
            changes[f.name] = preflight.seen_here(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Path) for v in value):
            changes[f.name] = tuple(preflight.seen_here(v) for v in value)
    return dataclasses.replace(node, **changes)


def _progress(node: str, entries: int, reached_us: int | None) -> None:
    """A progress line per node on a terminal: entries read, journal time reached."""
    when = "" if reached_us is None else " reached " + iso(reached_us)
    sys.stderr.write(f"\r  {node}: {entries:,} entries{when}\x1b[K\n\x1b[1A")
    sys.stderr.flush()


def _known_hosts(path: Path, names: list[str]) -> int:
    cfg = _load(path, as_service=True)  # (only hosts and ports are used)
    if cfg is None:
        return 1
    unknown = sorted(set(names) - {n.name for n in cfg.nodes})
    if unknown:
        log.error("not nodes of %s: %s", path, ", ".join(unknown))
        return 2
    chosen = [n for n in cfg.nodes if not names or n.name in names]
    if not names and not any(isinstance(n, config.SshNode) for n in chosen):
        log.warning("%s has no ssh nodes: no host keys to fetch", path)
        return 0
    lines, problems = asyncio.run(sources.host_keys(chosen, named=bool(names)))
    if lines:
        print("\n".join(lines))
    for problem in problems:
        log.error("%s", problem)
    return 1 if problems else 0


def _check_config(path: Path, *, as_service: bool = False, web_config: Path | None = None) -> int:
    """Every problem of the config at `path` (`-`: standard input), its paths and its web
    configs, in one list; 0 only when there is none."""
    env = _ServiceEnv(os.environ)
    checked = preflight.check(
        path, env, sources.AVAILABLE, as_service=as_service, web_config=web_config
    )
    if env.stood_in and (as_service or _names_credentials_at(path)):
        log.info(
            "$CREDENTIALS_DIRECTORY is not set: read as the service's, %s", SERVICE_CREDENTIALS
        )
    found = checked.problems
    if checked.config is None and len(found) == 1:  # (it cannot be read, or is no YAML)
        log.error("%s", found[0])
    elif found:
        log.error(
            "%s: %d problem(s):\n%s",
            checked.source,
            len(found),
            "\n".join(found),
            extra=logs.LINES,  # (one a line, each escaped)
        )
    for warning in checked.warnings:
        log.warning("%s", warning)
    if found or checked.config is None:
        return 1
    cfg = checked.config
    print(f"{checked.source}: valid, {len(cfg.nodes) + len(cfg.init_timelines)} node(s)")
    for line in config.describe(cfg):
        print(f"  {line}")
    for line in checked.web:
        print(line)
    return 0


def _names_credentials_at(path: Path) -> bool:
    """Whether the config file at `path` names `$CREDENTIALS_DIRECTORY` (False for `-`, or
    when it cannot be read again)."""
    if str(path) == "-":
        return False
    try:
        return _names_credentials(config.read_text(path), str(path))
    except config.ConfigError:
        return False


def _with_options(
    cfg: config.Config, listen: tuple[str, int] | None, web_config: Path | None
) -> config.Config:
    """The config with run's options over it; ConfigError when its web config is bad."""
    if listen is not None:
        cfg = dataclasses.replace(cfg, listen_host=listen[0], listen_port=listen[1])
    if web_config is not None:
        cfg = dataclasses.replace(cfg, web_config_file=web_config)
    if cfg.web_config_file is not None:
        web = webtls.load(cfg.web_config_file)
        log.info("web config %s: %s", web.path, webconfig.describe(web))
        for warning in webconfig.warnings(web):
            log.warning("%s", warning)
    return cfg


def _run(path: Path, listen: tuple[str, int] | None = None, web_config: Path | None = None) -> int:
    loaded = _load(path)
    if loaded is None:
        return 1
    try:
        cfg = _with_options(loaded, listen, web_config)
    except config.ConfigError as e:
        log.error("%s", e, extra=logs.LINES)
        return 1

    def reloader() -> config.Config:
        """The config re-read (SIGHUP), the options still over it; ConfigError else."""
        new = config.load(path, os.environ, available=sources.AVAILABLE)
        return _with_options(new, listen, web_config)

    from exporter.daemon import daemon  # (the report and the checks need none of it

    log.info("sm-llm-exporter %s starting with %s", __version__, path)
    for line in config.describe(cfg):
        log.info("%s", line)
    try:
        asyncio.run(daemon.Daemon(cfg, reloader=reloader).run_until_signalled())
    except (OSError, config.ConfigError) as e:  # the port taken, the state directory not
        # writable, the web config not read in time (a hung mount): one line, no traceback
        log.error("cannot run: %s", e)
        return 1
    return 0


MAX_FACTOR = 1e6  # (a factor this large measures a short run off the floors, in tests)


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= MAX_FACTOR:
        raise argparse.ArgumentTypeError(f"must be a number 1..{MAX_FACTOR:g}, got {text!r}")
    return value


def _report(args: argparse.Namespace) -> int:
    start_ups = args.startups or args.init_timeline
    if start_ups and args.format not in ("text", "json"):
        log.error("--startups and --init-timeline print text or json, not %s", args.format)
        return 2
    if args.init_timeline:
        if args.startups or args.input or args.since is not None or args.until is not None:
            log.error("--init-timeline reads only its files: no --since, --until, --input")
            return 2
        return _init_timeline(args.init_timeline, args.factor, args.format, args.output)
    if args.since is None or args.until is None:
        log.error("report needs --since and --until (or --init-timeline PATH)")
        return 2
    if args.until <= args.since:
        log.error("--until must be after --since")
        return 2
    cfg = config.Config()
    if args.config is not None or not args.input:
        loaded = _load(args.config or config.DEFAULT_PATH, from_shell=True)
        if loaded is None:
            return 1
        cfg = loaded
    nodes: tuple[config.NodeConfig, ...] = cfg.nodes
    if args.input:
        names = [node for node, _ in args.input]
        if len(set(names)) != len(names):
            log.error("a node is given twice in --input: %s", ", ".join(names))
            return 2
        paths = [path for _, path in args.input]
        if paths.count(Path("-")) > 1:
            log.error("only one --input can be - (standard input)")
            return 2
        missing = [
            f"{n}: no such file: {p}" for n, p in args.input if p != Path("-") and not p.exists()
        ]
        if missing:
            log.error("%s", "; ".join(missing))
            return 2
        nodes = tuple(config.FileNode(node, path) for node, path in args.input)
    kinds = Kinds(split_rules(args.split_tokens)) if args.split_tokens is not None else cfg.kinds
    max_request_s = args.max_request_seconds or cfg.max_request_seconds
    max_request_us = max_request_s * SECOND
    progress = _progress if sys.stderr.isatty() else None
    tune_gc()
    builder = report.Builder(
        [n.name for n in nodes],
        kinds,
        args.since,
        args.until,
        max_request_us=max_request_us,
        slots=cfg.slots,
        timeline=args.format == "html",
    )
    entries = 0
    replay = None
    if args.output_dir is not None and args.format != "openmetrics":
        log.error("--output-dir is for --format openmetrics (the others write --output FILE)")
        return 2
    if args.format == "openmetrics":
        settings = backfill.Settings.of(cfg, kinds, max_request_s)
        names = [n.name for n in nodes]
        refusal = _backfill_refusal(args, names, settings)
        if refusal:
            log.error("%s", refusal)
            return 2
        replay = backfill.Replay(names, settings, args.since, args.until, args.step)

    def add(batch: Batch) -> None:
        nonlocal entries
        entries += batch.entries
        builder.add(batch)
        if replay is not None:
            replay.add(batch)

    failed = asyncio.run(
        sources.read_windows(nodes, args.since, args.until + max_request_us, add, progress)
    )
    r = builder.finish()
    if not failed and not entries:
        log.warning(
            "the window %s .. %s holds no journal entries of any node (check --since, --until "
            "and the nodes' unit)",
            iso(args.since),
            iso(args.until),
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
            len(nodes),
            ", ".join(failed),
        )
    if replay is not None:
        return _backfill(replay, args.output, args.output_dir) or (1 if failed else 0)
    if args.startups:
        if args.format == "json":
            text = startreport.startups_json(
                r.startups, args.factor, cfg.unit, r.since_us, r.until_us
            )
        else:
            text = startreport.startups_text(r.startups, args.factor, cfg.unit)
    elif args.format == "html":
        from exporter.web import pages  # (the text and JSON need none of it

        text = pages.report_html(r)
    else:
        text = report.render(r, args.format)
    return _put(text, args.output) or (1 if failed else 0)


BLOCK_HEAD_S = 3 * 3600  # what Prometheus's head block holds: promtool's blocks must not


def _backfill_refusal(args: argparse.Namespace, nodes: list[str], s: backfill.Settings) -> str:
    """Why the backfill the arguments ask for is refused (before anything is read or
    written), or ""; warns of an --until within the head block's hours."""
    if args.output is not None and args.output_dir is not None:
        return "give --output FILE or --output-dir DIR, not both"
    if args.output is None and args.output_dir is None:
        return "--format openmetrics writes files: give --output FILE or --output-dir DIR"
    if args.output_dir is not None and any(args.output_dir.glob("smllm-*.om")):
        return (
            f"{outfile.shown(args.output_dir)} holds the files of another backfill "
            "(smllm-*.om): remove them or give another directory (promtool would take them all)"
        )
    now_us = int(time.time() * SECOND)
    if args.until > now_us + s.clock_allowance_us:
        return (
            f"--until {iso(args.until)} is ahead of now ({iso(now_us)}): a backfill holds what "
            "the journals hold, up to now at the latest (samples ahead of now would stand for "
            "what has not happened)"
        )
    size = backfill.estimate(nodes, s, args.since, args.until, args.step)
    too_big = backfill.too_big(size, outfile.room(args.output or args.output_dir))
    if too_big:
        return too_big
    if args.until > now_us - BLOCK_HEAD_S * SECOND:
        log.warning(
            "--until is within 3 hours of now: blocks there overlap Prometheus's head "
            "block, and promtool's blocks must not (leave the last 3 hours to scraping)"
        )
    return ""


def _put(text: str, output: Path | None) -> int:
    """The report to standard output, or to `output` (outfile.opened): 0, or 1 when it cannot
    be written."""
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        outfile.write_text(output, text)
    except OSError as e:
        log.error("cannot write %s", _why(output, e))
        return 1
    log.info("wrote %s (%d bytes)", outfile.shown(output), len(text.encode()))
    return 0


def _why(path: Path, e: OSError) -> str:
    """An OSError of writing `path`: `PATH: why`, one line (an OutputError is that already)."""
    if isinstance(e, outfile.OutputError):
        return str(e)
    return f"{outfile.shown(path)}: {e.strerror or e}"


def _init_timeline(paths: list[Path], factor: float, fmt: str, output: Path | None) -> int:
    """`report --init-timeline PATH...`: the merged timeline's table, spans and timeouts."""
    try:
        loaded = inittimeline.load(paths)
    except inittimeline.InitTimelineError as e:
        log.error("%s", e)
        return 1
    for why in loaded.skipped:
        log.warning("skipped a malformed record: %s", why)
    now = time.time()
    t = loaded.timeline
    if fmt == "json":
        text = startreport.timeline_json(t, factor, now, loaded.skipped)
    else:
        text = startreport.timeline_text(t, factor, now, loaded.skipped)
    return _put(text, output)


def _backfill(replay: backfill.Replay, output: Path | None, directory: Path | None) -> int:
    """The replay's samples into `output`, or one file a part into `directory`."""
    target = output if directory is None else directory
    assert target is not None
    try:
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            files = backfill.write(
                replay.snapshots(),
                lambda part: directory / f"smllm-{part:05d}.om",
                __version__,
                backfill.BLOCK_S,
            )
        else:
            files = backfill.write(replay.snapshots(), lambda _: target, __version__)
    except OSError as e:
        log.error("cannot write the backfill to %s", _why(target, e))
        return 1
    shown = ", ".join(outfile.shown(f) for f in files[:3])
    log.info("wrote %d file(s): %s", len(files), shown)
    return 0

"""llama-server start-ups from the journal: phases, metrics, checkpoint and `report --startups`.

On the recorded real llama-server runs (tests/testdata/llama-server), every start-up the parser
and the tracker make equals the one an independent reading of the same journal makes (plain
regular expressions over MESSAGE: systemd's `Started` line, the server's prefixed start-up
lines placed at min(journal time - prefix) + prefix), with how it ended: listening, or the unit
going down first (the real abort of `embeddings_mean_abort` while loading). Their tables and
suggested timeouts are vllm-omni's own `format_table()` and `suggest_timeouts()` (the seed, run)
on the same phases, line for line, also through the CLI. systemd's unit lines (recorded shapes
of systemd 252) in the orders the unit types give are built by hand here: Type=simple,
Type=exec (`Started` after the server's first line), a start killed at TimeoutStartSec, a
crash loop, a plain log file without PIDs; and arbitrary sequences never break the tracker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import MILESTONES, Event, EventKind, Interval, LogLine
from exporter.base.times import SECOND
from exporter.checkpoint.codec import restore, state_of
from exporter.parse.parser import Parser
from exporter.parse.prefix import clock
from exporter.startup.llama import DONE, REPLACED, RUNNING, STOPPED, Startup, Tracker
from exporter.startup.phases import Timeline

from support.recorded import FIXTURES, RUNS, entries
from support.settings import default_settings
from support.startups import Done
from support.tools import examples
from support.vllm_timeline import load_seed, needs_seed

T0 = 1_790_000_000 * SECOND


_PREFIX = re.compile(r"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) I srv +(.*)$")


_SERVER = (  # (the line's words, its milestone), in the order llama-server logs them
    ("llama_server: initializing", "initializing"),
    ("load_model: loading model", "loading"),
    ("load_model: initializing, n_slots = ", "slots"),
    ("llama_server: model loaded", "loaded"),
    ("llama_server: listening on", "listening"),
)


_DOWN = re.compile(r"(Stopping |Stopped |: Deactivated successfully|: Failed with result |: Main)")


@dataclass
class Seen:
    pid: int
    start_us: int
    milestones: list[tuple[str, int, int]]  # (milestone, journal time, prefix us)
    end: str = ""
    end_us: int = 0


def read_startups(run: str) -> list[Seen]:
    """The run's start-ups as its lines say them (the router's instances' aside)."""
    out: list[Seen] = []
    unit_start: int | None = None
    current: Seen | None = None
    for e in entries(run):
        t, pid, msg = int(e["__REALTIME_TIMESTAMP"]), int(e["_PID"]), e["MESSAGE"]
        if pid == 1:
            if msg.startswith("Started "):
                unit_start = t
            elif _DOWN.search(msg) and current is not None and not current.end:
                current.end, current.end_us = STOPPED, t
            continue
        m = _PREFIX.match(msg)
        if m is None:
            continue
        mins, secs, ms, us = (int(g) for g in m.groups()[:4])
        at = ((mins * 60 + secs) * 1000 + ms) * 1000 + us
        milestone = next((mk for words, mk in _SERVER if m.group(5).startswith(words)), None)
        if milestone is None:
            continue
        if current is None or current.pid != pid:
            current = Seen(pid, unit_start if unit_start is not None else t, [])
            unit_start = None
            out.append(current)
        if not current.end and all(mk != milestone for mk, _, _ in current.milestones):
            current.milestones.append((milestone, t, at))
            if milestone == "listening":
                current.end = DONE
    return out


def placed(seen: Seen) -> list[tuple[str, int]]:
    anchor = min(t - at for _, t, at in seen.milestones)
    return [(milestone, anchor + at) for milestone, _, at in seen.milestones]


def journal_lines(run: str, node: str = "n") -> list[LogLine]:
    return [
        LogLine(node, int(e["__REALTIME_TIMESTAMP"]), e["__CURSOR"], int(e["_PID"]), e["MESSAGE"])
        for e in entries(run)
    ]


def tracked(lines: list[LogLine]) -> tuple[list[Startup], Accounting]:
    """The lines through a parser into an accounting: the start-ups that ended, in order."""
    ended: list[Startup] = []
    acc = Accounting(
        [lines[0].node], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0, startups=ended
    )
    parser = Parser(lines[0].node)
    acc.add_all(parser.feed_all(lines) + parser.flush(lines[-1].time_us + 60 * SECOND))
    return ended, acc


@pytest.mark.parametrize("run", RUNS)
def test_recorded_start_ups_are_what_their_lines_say(run: str) -> None:
    want = read_startups(run)
    got, acc = tracked(journal_lines(run))
    assert want, f"{run}: the recording holds a start-up"
    assert [(s.pid, s.end) for s in got] == [(w.pid, w.end) for w in want]
    for s, w in zip(got, want, strict=True):
        assert s.start_us == w.start_us
        server = [(m, t) for m, t in s.milestones if m not in ("starting", "started")]
        assert server == placed(w)
        if w.end == DONE:
            assert s.end_us == placed(w)[-1][1]
        else:
            assert s.end_us == w.end_us  # (the unit went down: systemd's line)
        names = [name for name, _, _ in s.phases()]
        assert names[0] == "unit" and names[1] == "initializing"
        assert all(end >= start for _, start, end in s.phases())
        assert sum(end - start for _, start, end in s.phases()) == s.end_us - s.start_us
    snap = acc.snapshot().nodes[0]
    done = [w for w in want if w.end == DONE]
    assert (snap.startup is not None) == bool(done)
    if done:
        assert snap.startup is not None and snap.startup.pid == done[-1].pid
    assert snap.starting_since_us is None  # (every recorded run ends stopped)


def test_the_recorded_abort_while_loading_is_a_start_up_that_never_listened() -> None:
    got, _ = tracked(journal_lines("embeddings_mean_abort"))
    assert len(got) == 1 and got[0].end == STOPPED
    assert [name for name, _, _ in got[0].phases()] == ["unit", "initializing", "load_model"]
    assert not got[0].done


def test_the_restart_run_has_two_start_ups_each_from_its_started_line() -> None:
    got, acc = tracked(journal_lines("restart"))
    starts = [int(e["__REALTIME_TIMESTAMP"]) for e in entries("restart")]
    started = [
        t
        for t, e in zip(starts, entries("restart"), strict=True)
        if e["_PID"] == "1" and e["MESSAGE"].startswith("Started ")
    ]
    assert [s.start_us for s in got] == started and len(started) == 2
    assert acc.snapshot().nodes[0].startup == got[-1]


def seed_timeline(t: Timeline) -> Any:
    seed = load_seed()
    tl = seed.InitTimeline(enabled=True, t0=t.t0)
    for p in t.phases:
        tl.record(
            seed.InitPhase(
                name=p.name,
                start=p.start,
                end=p.end,
                stage_id=p.stage_id,
                replica_id=p.replica_id,
                pid=p.pid,
                role=p.role,
            )
        )
    tl.t_end = t.t_end
    return tl


@needs_seed
@pytest.mark.parametrize("run", ["parallel", "restart", "embeddings_mean_abort", "router"])
def test_a_start_ups_table_and_timeouts_are_the_seeds(run: str) -> None:
    got, _ = tracked(journal_lines(run))
    for s in got:
        t = s.timeline()
        seed = seed_timeline(t)
        assert t.table() == seed.format_table()
        for factor in (1.0, 1.5, 3.0, 1e5):
            assert t.suggest_timeouts(factor) == seed.suggest_timeouts(factor)


STARTING = "Starting sm-llm.service - sm-llm llama-server..."


STARTED = "Started sm-llm.service - sm-llm llama-server."


PID = 4242


def server(at_us: int, text: str) -> str:
    mins, rest = divmod(at_us, 60 * SECOND)
    return f"{mins}.{rest // SECOND:02d}.{rest // 1000 % 1000:03d}.{rest % 1000:03d} I srv  {text}"


START_UP = [  # (prefix us, text): a server that loads its model for 300 s
    (1_500, "llama_server: initializing ..."),
    (5_000, "  load_model: loading model 'big.gguf'"),
    (300 * SECOND, "  load_model: initializing, n_slots = 2, n_ctx_slot = 4096"),
    (300 * SECOND + 3_000, "llama_server: model loaded"),
    (300 * SECOND + 3_100, "llama_server: listening on http://0.0.0.0:8080"),
]


def lines_of(*items: tuple[int, int, str]) -> list[LogLine]:
    return [LogLine("n", T0 + t, "", pid, msg) for t, pid, msg in items]


def server_lines(begin_us: int, pid: int = PID, upto: int = 5) -> list[tuple[int, int, str]]:
    # journald stamps each line 200 us after it was written, the second one 5 ms after
    delays = [200, 5_000, 200, 200, 200]
    return [
        (begin_us + at + delays[i], pid, server(at, text))
        for i, (at, text) in enumerate(START_UP[:upto])
    ]


def test_type_simple_starts_at_started_and_places_lines_by_their_prefix() -> None:
    got, acc = tracked(lines_of((0, 1, STARTED), *server_lines(10_000)))
    (s,) = got
    assert s.end == DONE and s.pid == PID and s.start_us == T0
    # anchored at the lines stamped soonest (200 us late): each line at 10.2 ms + its prefix
    phases = {name: (start - T0, end - start) for name, start, end in s.phases()}
    assert phases == {
        "unit": (0, 11_700),
        "initializing": (11_700, 3_500),
        "load_model": (15_200, 300 * SECOND - 5_000),
        "init_slots": (300 * SECOND + 10_200, 3_000),
        "start_http": (300 * SECOND + 13_200, 100),
    }
    assert s.seconds == pytest.approx(300.0133)
    snap = acc.snapshot().nodes[0]
    assert snap.startup == s and snap.last_start_us == T0 and snap.starting_since_us is None


def test_type_exec_started_after_the_first_line_and_a_late_started_line_start_nothing() -> None:
    got, acc = tracked(
        lines_of(
            (0, 1, STARTING),
            *server_lines(10_000, upto=1),
            (12_000, 1, STARTED),  # (Type=exec: once the exec succeeded)
            *server_lines(10_000)[1:],
        )
    )
    (s,) = got
    assert s.start_us == T0 and [m for m, _ in s.milestones][:2] == ["starting", "initializing"]
    # Type=simple with a fast server: `Started` can come after `listening on`; it is the same
    # start-up's (the unit began with `Starting`), no new one
    got, acc = tracked(
        lines_of((0, 1, STARTING), *server_lines(10_000), (301 * SECOND, 1, STARTED))
    )
    assert len(got) == 1 and acc.snapshot().nodes[0].starting_since_us is None


def test_a_start_killed_at_its_timeout_never_listened_and_the_next_is_its_own() -> None:
    got, acc = tracked(
        lines_of(
            (0, 1, STARTING),
            *server_lines(10_000, upto=2),
            (90 * SECOND, 1, "sm-llm.service: start operation timed out. Terminating."),
            (90 * SECOND + 5, 1, "sm-llm.service: Failed with result 'timeout'."),
            (95 * SECOND, 1, STARTING),
        )
    )
    (killed,) = got
    assert killed.end == STOPPED and killed.end_us == T0 + 90 * SECOND + 5 and not killed.done
    assert killed.phases()[-1][0] == "load_model"
    snap = acc.snapshot().nodes[0]
    assert snap.startup is None  # (none listened)
    assert snap.starting_since_us == T0 + 95 * SECOND and snap.last_start_us == T0 + 95 * SECOND
    acc.source_state("n", up=True, caught_up=True, now_us=T0 + 100 * SECOND, lag_us=0)
    acc.advance(T0 + 100 * SECOND)
    assert acc.snapshot().nodes[0].starting_us == 5 * SECOND


def test_a_failure_after_a_stop_ends_the_start_up_in_progress() -> None:
    # (the server was down already: `Starting` leaves that unsaid, so the failure is news)
    got, _ = tracked(
        lines_of(
            (0, 1, "Stopped sm-llm.service - sm-llm llama-server."),
            (10, 1, STARTING),
            (20, 1, "sm-llm.service: Failed with result 'exit-code'."),
        )
    )
    assert [(s.end, s.pid, [name for name, _, _ in s.phases()]) for s in got] == [
        (STOPPED, 0, ["unit"])
    ]


def test_a_new_pid_before_listening_replaces_the_start_up() -> None:
    got, _ = tracked(
        lines_of(*server_lines(0, pid=100, upto=2), *server_lines(SECOND, pid=200, upto=5))
    )
    assert [(s.pid, s.end) for s in got] == [(100, REPLACED), (200, DONE)]
    assert got[0].end_us == got[1].start_us  # (its first line ended the one before)


def test_without_pids_a_start_up_begins_at_initializing_and_strays_start_none() -> None:
    got, acc = tracked(
        lines_of(
            *server_lines(0, pid=0),
            (400 * SECOND, 0, server(401 * SECOND, "llama_server: model loaded")),
        )
    )
    assert [(s.pid, s.end) for s in got] == [(0, DONE)]
    assert acc.snapshot().nodes[0].starting_since_us is None


def test_a_server_that_serves_without_listening_is_no_longer_starting() -> None:
    _, acc = tracked(lines_of(*server_lines(0, upto=3)))
    assert acc.snapshot().nodes[0].starting_since_us == T0 + 1_700
    acc.add(Interval("n", T0 + 301 * SECOND, T0 + 302 * SECOND, tokens=10))
    assert acc.snapshot().nodes[0].starting_since_us is None


def test_start_ups_are_checkpointed() -> None:
    lines = lines_of((0, 1, STARTED), *server_lines(0), (400 * SECOND, 1, STARTING))
    lines += lines_of(*server_lines(401 * SECOND, pid=PID + 1, upto=2))
    _, acc = tracked(lines)
    saved = json.loads(json.dumps(state_of(acc)))
    again = Accounting(["n"], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0)
    assert restore(again, saved) == []
    a, b = acc.snapshot().nodes[0], again.snapshot().nodes[0]
    assert (b.startup, b.starting_since_us, b.last_start_us) == (
        a.startup,
        a.starting_since_us,
        a.last_start_us,
    )
    assert b.startup is not None and b.starting_since_us == T0 + 400 * SECOND
    # the start-up in progress goes on where it was: its listening line ends it
    ended: list[Startup] = []
    again.startups = ended
    parser = Parser("n", pid=PID + 1)
    again.add_all(parser.feed_all(lines_of(*server_lines(401 * SECOND, pid=PID + 1)[2:])))
    assert [(s.start_us, s.end) for s in ended] == [(T0 + 400 * SECOND, DONE)]
    assert ended[0].milestones[0][0] == "starting" and len(ended[0].milestones) == 6
    # a saved start-up that does not fit is refused (the daemon then sets the checkpoint aside)
    saved["nodes"]["n"]["startups"]["last"][3] = "exploded"
    with pytest.raises(ValueError, match="start-up"):
        restore(Accounting(["n"], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0), saved)


def test_a_prefix_is_read_as_the_server_logs_it() -> None:
    assert clock("0.00.001.587 I srv  llama_server: initializing ...") == 1_587
    assert clock("12.34.567.890 W x") == ((12 * 60 + 34) * 1000 + 567) * 1000 + 890
    wall = clock("2025-11-15 14:23:35.060 I srv  load_model: loading model 'm'")
    later = clock("2025-11-16 00:00:00.000 I srv  llama_server: model loaded")
    assert wall is not None and later is not None
    assert later - wall == ((9 * 60 + 36) * 60 + 24) * SECOND + 940_000
    assert clock("srv  llama_server: initializing ...") is None
    assert clock("99999999999.00.000.000 I huge") is None  # (beyond 2**53 us: garbled)


EVENTS = st.lists(
    st.tuples(
        st.integers(0, 5 * SECOND),
        st.sampled_from([*MILESTONES, "down", "bogus"]),
        st.sampled_from([0, 1, 100, 200]),
        st.one_of(st.none(), st.integers(0, 2**40)),
    ),
    max_size=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(EVENTS)
def test_any_sequence_of_milestones_makes_sound_start_ups_and_survives_a_checkpoint(
    items: list[tuple[int, str, int, int | None]],
) -> None:
    tracker = Tracker("n")
    t = T0
    ended: list[Startup] = []
    for gap, milestone, pid, prefix in items:
        t += gap
        if milestone == "down":
            ev = Event("n", t, EventKind.SERVER_DOWN, 1)
        else:
            ev = Event("n", t, EventKind.PHASE, pid, None, prefix, milestone)
        done = tracker.add(ev)
        if done is not None:
            ended.append(done)
        again = Tracker.from_state("n", json.loads(json.dumps(tracker.state())))
        assert again.state() == tracker.state()
        tracker = again
    still = tracker.in_progress()
    for s in [*ended, *([still] if still is not None else [])]:
        times = [s.start_us, *(at for _, at in s.milestones), s.end_us]
        assert times == sorted(times), s
        assert s.end in (DONE, STOPPED, REPLACED, RUNNING)
        assert sum(end - start for _, start, end in s.phases()) == s.end_us - s.start_us
        assert Startup.from_state("n", s.state()) == s


def short_iso(lines: list[LogLine]) -> str:
    from datetime import UTC, datetime

    out = []
    for x in lines:
        stamp = datetime.fromtimestamp(x.time_us // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        who = "systemd[1]" if x.pid == 1 else f"sm-llm[{x.pid}]"
        out.append(f"{stamp}.{x.time_us % SECOND:06d}+0000 vm {who}: {x.message}\n")
    return "".join(out)


@needs_seed
@pytest.mark.parametrize("factor", [None, "2.5"])
def test_report_startups_prints_the_seeds_tables_and_timeout_start_sec(
    report: Callable[..., Done], tmp_path: Path, factor: str | None
) -> None:
    slow = lines_of((0, 1, STARTED), *server_lines(10_000))
    dump = tmp_path / "slow.log"
    dump.write_text(short_iso(slow), encoding="utf-8")
    window = ["--since", "2026-01-01", "--until", "2027-01-01"]
    args = [*window, "--startups", "--input", f"slow={dump}"]
    args += ["--input", f"rec={FIXTURES / 'restart.journal.json'}"]
    args += ["--input", f"abort={FIXTURES / 'embeddings_mean_abort.journal.json'}"]
    if factor is not None:
        args += ["--factor", factor]
    done = report(*args)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    expected = [
        *tracked(lines_of_node("slow", lines_of((0, 1, STARTED), *server_lines(10_000))))[0],
        *tracked(journal_lines("restart", "rec"))[0],
        *tracked(journal_lines("embeddings_mean_abort", "abort"))[0],
    ]
    assert len(expected) == 4
    f = float(factor or 1.5)
    blocks = text.split("\n\n")
    for s in sorted(expected, key=lambda s: (s.start_us, s.node)):
        block = blocks.pop(0).splitlines()
        assert block[0].startswith(f"{s.node}: start-up at ")
        assert "\n".join(block[1:]) == seed_timeline(s.timeline()).format_table()
    suggested = {"stage_init_timeout": 0, "init_timeout": 0}
    for s in expected:
        for k, v in seed_timeline(s.timeline()).suggest_timeouts(f).items():
            suggested[k] = max(suggested[k], v)
    assert suggested["init_timeout"] == max(600, -(-300.0133 * f // 1))  # (the slow one)
    tail = blocks.pop(0).splitlines()
    assert f"  stage_init_timeout={suggested['stage_init_timeout']} " in "\n".join(tail) + " "
    assert tail[-1] == f"    TimeoutStartSec={suggested['init_timeout']}"
    assert "1 never listened" in tail[1]
    # the JSON carries the same
    js = report(*args, "--format", "json")
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    assert [r["ended"] for r in doc["startups"]] == [
        s.end for s in sorted(expected, key=lambda s: (s.start_us, s.node))
    ]
    assert doc["suggested"] == {**suggested, "TimeoutStartSec": suggested["init_timeout"]}
    assert [r["table"] for r in doc["startups"]] == [
        seed_timeline(s.timeline()).format_table()
        for s in sorted(expected, key=lambda s: (s.start_us, s.node))
    ]


def lines_of_node(node: str, lines: list[LogLine]) -> list[LogLine]:
    return [x._replace(node=node) for x in lines]


def test_report_startups_refuses_formats_it_has_not(
    report: Callable[..., Done],
) -> None:
    done = report("--since", "-1h", "--until", "now", "--startups", "--format", "html")
    assert done.returncode == 2 and "--startups and --init-timeline print text or json" in (
        done.stderr
    )
    done = report("--init-timeline", "/nonexistent/run")
    assert done.returncode == 1 and "/nonexistent/run" in done.stderr
    done = report("--startups", "--input", "a=/dev/null")
    assert done.returncode == 2 and "needs --since and --until" in done.stderr


def test_the_status_page_says_a_server_is_starting_and_how_long_it_took() -> None:
    from exporter.web import status_api
    from exporter.web import status_page as pages
    from exporter.web.fleet import StatusView

    from support.dom import parse

    def view(acc: Accounting, now_us: int) -> StatusView:
        return StatusView(
            now_us=now_us,
            snapshot=acc.snapshot(),
            kinds=Kinds(DEFAULT_RULES),
            recent={"n": ()},
            in_flight={"n": ()},
            errors={},
            version="9",
        )

    _, acc = tracked(lines_of((0, 1, STARTED), *server_lines(10_000, upto=3)))

    def server(page: bytes) -> str:
        (cell,) = [e for e in parse(page).find("td") if e.attrs.get("class") == "server"]
        return cell.text

    assert server(pages.status_html(view(acc, T0 + 42 * SECOND))) == "starting (42 s)"
    data = json.loads(status_api.status_json(view(acc, T0 + 42 * SECOND)))["nodes"][0]
    assert data["starting_since"] == T0 / SECOND and data["last_startup_seconds"] is None
    _, acc = tracked(lines_of((0, 1, STARTED), *server_lines(10_000)))
    assert server(pages.status_html(view(acc, T0 + 400 * SECOND))) == "up (came up in 5.0 min)"
    data = json.loads(status_api.status_json(view(acc, T0 + 400 * SECOND)))["nodes"][0]
    assert data["starting_since"] is None and data["last_startup_seconds"] == pytest.approx(
        300.0133
    )


def test_era_b_serves_from_model_loaded_and_plain_logs_restart_apart() -> None:
    """2024's server listened before loading (`HTTP server listening`, then `model loaded`):
    its start-up is done at `model loaded`. Without PIDs, `initializing` again is a new
    server: the one before it never listened, and each is placed by its own prefix."""
    got, acc = tracked(
        lines_of(
            (0, 1, STARTED),
            (10, 0, 'INFO [                    main] HTTP server listening | port="8080"'),
            (9 * SECOND, 0, 'INFO [                    main] model loaded | tid="1" timestamp=1'),
        )
    )
    assert [(s.end, s.end_us - T0) for s in got] == [(DONE, 9 * SECOND)]
    assert acc.snapshot().nodes[0].starting_since_us is None
    got, _ = tracked(
        lines_of(*server_lines(0, pid=0, upto=2), *server_lines(200 * SECOND, pid=0, upto=5))
    )
    assert [(s.end, s.start_us - T0) for s in got] == [
        (REPLACED, 1_700),
        (DONE, 200 * SECOND + 1_700),
    ]
    assert got[1].end_us - got[1].start_us == 300 * SECOND + 3_100 - 1_500


def test_report_startups_ends_a_start_up_where_the_unit_went_down_after_the_window(
    report: Callable[..., Done],
    tmp_path: Path,
) -> None:
    """A start-up that began in the window and was killed after it (its lines read up to
    `--until` + max_request_seconds) is the start-up it was, not one cut at the window's end;
    one still loading when the reading ends runs to there."""
    killed = lines_of(
        (0, 1, STARTING),
        *server_lines(10_000, upto=2),
        (500 * SECOND, 1, "sm-llm.service: start operation timed out. Terminating."),
        (500 * SECOND + 5, 1, "sm-llm.service: Failed with result 'timeout'."),
    )
    loading = lines_of(
        (0, 1, STARTING), *server_lines(10_000, upto=2), (400 * SECOND, 7, "x n_slots")
    )
    for name, lines in (("killed", killed), ("loading", loading)):
        (tmp_path / f"{name}.log").write_text(short_iso(lines), encoding="utf-8")
    from datetime import UTC, datetime

    until = datetime.fromtimestamp(T0 / SECOND + 40, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    done = report(
        "--since", "2026-01-01", "--until", until, "--startups", "--format", "json",
        "--input", f"killed={tmp_path / 'killed.log'}",
        "--input", f"loading={tmp_path / 'loading.log'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {r["node"]: r for r in json.loads(done.stdout)["startups"]}
    assert rows["killed"]["ended"] == STOPPED
    assert rows["killed"]["seconds"] == pytest.approx(500.000005)
    assert rows["loading"]["ended"] == RUNNING
    assert rows["loading"]["seconds"] == pytest.approx(400.0)
    assert json.loads(done.stdout)["suggested"]["init_timeout"] == 751


def test_a_start_ups_age_runs_as_far_as_its_journal_was_read_while_it_catches_up() -> None:
    _, acc = tracked(lines_of((0, 1, STARTED), *server_lines(10_000, upto=2)))
    acc.line_read("n", T0 + 30 * SECOND, 1)
    acc.source_state("n", up=True, caught_up=False, now_us=T0 + 3600 * SECOND, lag_us=0)
    acc.advance(T0 + 3600 * SECOND)
    assert acc.snapshot().nodes[0].starting_us == 30 * SECOND  # (not the hour behind it)
    acc.source_state("n", up=True, caught_up=True, now_us=T0 + 3600 * SECOND, lag_us=0)
    assert acc.snapshot().nodes[0].starting_us == 3600 * SECOND


def test_report_startups_suggests_nothing_without_a_start_up(
    report: Callable[..., Done], tmp_path: Path
) -> None:
    dump = tmp_path / "quiet.log"
    dump.write_text(short_iso(lines_of((10, PID, "slot launch_slot_: id  0 | task 1 |"))))
    window = ["--since", "2026-01-01", "--until", "2027-01-01", "--startups"]
    done = report(*window, "--input", f"q={dump}", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert (
        json.loads(done.stdout)["startups"] == [] and json.loads(done.stdout)["suggested"] is None
    )
    text = report(*window, "--input", f"q={dump}").stdout
    assert "no llama-server start-up began in the window" in text
    assert "TimeoutStartSec=" not in text

"""`source: init-timeline` nodes in the daemon: a vllm-omni engine's start-up, served.

support/vllm_timeline.py records a real start-up with vllm-omni's own init_timeline.py (the
seed): an engine and two worker processes, a JSON dump and worker_<pid>.jsonl files it then
damages (a duplicate line, a blank one, two malformed ones, a truncated last line). The daemon
runs as a real process with that run as an init-timeline node beside an ordinary `file` node:
- what it serves of the node is computed here independently: the phases from the dump and the
  worker files read with plain `json` and merged with the seed's key (pid, name, start), the
  seed's own `suggest_timeouts()` and its count of damaged lines; the node is in no
  llama-server figure (no `smllm_source_up`, one concurrency row per llama-server node and 0);
- a worker phase appended to a file shows within a deadline; the run gone, the node goes down
  (its path logged) while the file node carries on; the run back, the node is up again;
- a reload adds a second init-timeline node with the first one's figures served throughout
  (in-process too, with the first node's re-read held back, so the carried-over figures are
  all there is to serve), and a reload that drops the first node drops its series;
- check-config refuses a malformed init-timeline node, every problem at its key and line.
Without the seed file (and CI unset) the seed tests skip; in CI they fail.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND
from exporter.commands.demo import DemoLine, short_iso
from exporter.config.load import load
from exporter.daemon.daemon import Daemon
from exporter.sources.inittimeline import InitTimelineNode
from exporter.startup import vllmwatch
from exporter.startup.phases import Timeline
from exporter.startup.vllm import Loaded

from support.cli import Cli
from support.daemon_process import DaemonProcess
from support.daemon_thread import DaemonThread
from support.scrape import Samples, parse_metrics, sample, total
from support.tools import now_us, until_right, wait_for, yaml_text
from support.vllm_timeline import SeedRun, needs_seed, record_run, require_seed

FILE_NODE = "a"
NODE = "omni"  # the init-timeline node on the recorded run (its dump and run directory)
OTHER = "omni-workers"  # a second one, on the run directory alone
POLL_S = 0.2
DEADLINE_S = 15.0
LATE_PHASE = "compile_cuda_graphs_late"  # a phase name the seed's run has not
LATE_S = 400.0  # longer than the whole run: lifts stage_init_timeout off its floor of 300 s
PID = 4242  # the file node's llama-server

Key = tuple[str, str, str]  # (stage, role, phase)


@pytest.fixture
def run(tmp_path: Path) -> SeedRun:
    require_seed()
    return record_run(tmp_path / "recorded")


# -- what the daemon must serve, worked out from the files -------------------------------------


def _records(run: SeedRun, run_dir: Path, dump: bool) -> Iterator[tuple[dict[str, Any], str]]:
    """Every phase record with the role it defaults to: the dump's, then each worker file's
    (in name order, as the seed reads them), but for the lines no reader can take."""
    if dump:
        for d in json.loads(run.dump.read_text(encoding="utf-8"))["phases"]:
            yield d, "engine"
    for path in sorted(run_dir.glob("worker_*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                float(d["start"]), float(d["end"])
            except (ValueError, KeyError, TypeError):
                continue  # the malformed and the truncated lines
            yield d, "worker"


def expected_phases(run: SeedRun, *, dump: bool = True) -> dict[Key, float]:
    """The longest duration of each (stage, role, phase), the records merged with the seed's
    key (pid, name, start): the first record of a key counts, the others are duplicates."""
    seen: set[tuple[int, str, float]] = set()
    longest: dict[Key, float] = {}
    for d, role in _records(run, run.run_dir, dump):
        start, end = float(d["start"]), float(d["end"])
        merge_key = (int(d.get("pid", 0) or 0), str(d["name"]), start)
        if merge_key in seen:
            continue
        seen.add(merge_key)
        stage = "-" if d.get("stage_id") is None else str(d["stage_id"])
        key = (stage, str(d.get("role", role)), str(d["name"]))
        longest[key] = max(longest.get(key, 0.0), 0.0, end - start)
    return longest


def seeds_phases(run: SeedRun) -> dict[Key, float]:
    """The same, grouped from the seed's own InitTimeline over the files (its merge)."""
    longest: dict[Key, float] = {}
    for p in run.seed.phases:
        key = ("-" if p.stage_id is None else str(p.stage_id), p.role, p.name)
        longest[key] = max(longest.get(key, 0.0), p.dur_s)
    return longest


def damaged_lines(run: SeedRun) -> int:
    """The lines a reader must skip: the malformed ones and the truncated last one (the copy is
    a duplicate and the blank line is nothing: neither is skipped)."""
    return len(run.malformed) + 1


# -- what it serves ----------------------------------------------------------------------------


def labelled(samples: Samples, name: str, node: str) -> dict[tuple[tuple[str, str], ...], float]:
    """`name`'s samples of `node`, by their other labels."""
    return {
        tuple((k, v) for k, v in labels if k != "node"): value
        for (n, labels), value in samples.items()
        if n == name and dict(labels).get("node") == node
    }


def served_phases(samples: Samples, node: str) -> dict[Key, float]:
    return {
        (d["stage"], d["role"], d["phase"]): v
        for labels, v in labelled(samples, "smllm_init_phase_seconds", node).items()
        for d in [dict(labels)]
    }


def served_timeouts(samples: Samples, node: str) -> dict[str, float]:
    return {
        dict(labels)["timeout"]: v
        for labels, v in labelled(samples, "smllm_init_suggested_timeout_seconds", node).items()
    }


def init_series(samples: Samples, node: str) -> list[str]:
    """Every smllm_init_* sample of `node`."""
    return sorted(
        f"{n}{dict(labels)}"
        for (n, labels), _ in samples.items()
        if n.startswith("smllm_init_") and dict(labels).get("node") == node
    )


def nodes_labelled(samples: Samples, prefix: str = "smllm_") -> dict[str, set[str]]:
    """Family -> the `node` labels its samples carry."""
    out: dict[str, set[str]] = {}
    for (n, labels), _ in samples.items():
        node = dict(labels).get("node")
        if n.startswith(prefix) and node is not None:
            out.setdefault(n, set()).add(node)
    return out


def problems_of(samples: Samples, run: SeedRun, node: str = NODE) -> list[str]:
    """How what is served of the init-timeline node on `run` differs from what it must be."""
    dumped = json.loads(run.dump.read_text(encoding="utf-8"))
    t0, t_end = dumped["t0"], dumped["t_end"]
    want: list[tuple[str, object, object]] = [
        ("up", sample(samples, "smllm_init_source_up", node=node), 1.0),
        (
            "total",
            sample(samples, "smllm_init_total_seconds", node=node),
            Timeline.of(t0, t_end, ()).total_s(),
        ),
        ("t0", sample(samples, "smllm_init_start_timestamp_seconds", node=node), t0),
        ("phases", served_phases(samples, node), expected_phases(run)),
        ("timeouts", served_timeouts(samples, node), dict(run.seed.suggest_timeouts())),
        (
            "skipped",
            sample(samples, "smllm_init_skipped_records", node=node),
            float(damaged_lines(run)),
        ),
    ]
    return [
        f"{what}: served {got!r}, not {expected!r}"
        for what, got, expected in want
        if got != expected
    ]


# -- the file node: a llama-server's requests ------------------------------------------------


def request_lines(task: int, end_us: int) -> list[DemoLine]:
    """One request on slot 0, 2 ms long, ending at `end_us`: launch, timing block, release."""
    p = f"slot print_timing: id  0 | task {task} | "
    return [
        DemoLine(end_us - 3_000, PID, f"slot launch_slot_: id  0 | task {task} | processing task"),
        DemoLine(end_us, PID, p + "prompt eval time =       0.50 ms /   100 tokens"),
        DemoLine(end_us, PID, p + "       eval time =       1.50 ms /    10 tokens"),
        DemoLine(end_us, PID, p + "      total time =       2.00 ms /   110 tokens"),
        DemoLine(
            end_us + 10,
            PID,
            f"slot      release: id  0 | task {task} | stop processing: n_tokens = 110",
        ),
    ]


def append_requests(path: Path, tasks: range) -> None:
    end = now_us() - 5 * SECOND
    with path.open("a", encoding="utf-8") as f:
        for i, task in enumerate(tasks):
            lines = request_lines(task, end + i * 10_000)
            f.writelines(short_iso(FILE_NODE, line) + "\n" for line in lines)


def requests_of(samples: Samples) -> float:
    return total(samples, "smllm_requests_total", node=FILE_NODE)


# -- the daemon ------------------------------------------------------------------------------


def timeline_row(name: str, run: SeedRun, *, dump: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name,
        "source": "init-timeline",
        "path": str(run.run_dir),
        "poll_seconds": POLL_S,
    }
    if dump:
        row["dump"] = str(run.dump)
    return row


def start_daemon(tmp_path: Path, run: SeedRun) -> tuple[DaemonProcess, Path]:
    """A daemon with the file node (two requests in its dump) and the init-timeline node."""
    journal = tmp_path / f"{FILE_NODE}.log"
    journal.write_text("")
    append_requests(journal, range(1, 3))
    nodes = [{"name": FILE_NODE, "source": "file", "path": str(journal)}, timeline_row(NODE, run)]
    d = DaemonProcess(tmp_path / "daemon", {"since": "-1h", "nodes": nodes})
    d.start()
    return d, journal


def settled(d: DaemonProcess, right: Callable[[Samples], list[str]], what: str) -> Samples:
    """The first scrape `right` finds nothing wrong with (within the deadline)."""
    last: list[Samples] = [{}]

    def check() -> list[str]:
        last[0] = d.metrics()
        return right(last[0])

    until_right(check, DEADLINE_S, what, pause=0.05)
    return last[0]


def sighup(d: DaemonProcess, nodes: list[dict[str, Any]]) -> Callable[[], None]:
    """Rewrite the config with `nodes` and SIGHUP the daemon at once; a call that returns once
    it took the config up."""
    assert d.settings is not None
    settings = {**d.settings, "nodes": nodes, "listen": f"127.0.0.1:{d.port}"}
    d.config.write_text(json.dumps(settings))
    before = d.log_text().count("reload: ")
    os.kill(d.pid, signal.SIGHUP)

    def taken_up() -> None:
        wait_for(lambda: d.log_text().count("reload: ") > before, DEADLINE_S, "the reload")
        assert "reload refused" not in d.log_text()

    return taken_up


def worker_file(run: SeedRun) -> tuple[Path, dict[str, Any]]:
    """The worker file that ends with a newline (the other ends in a truncated line), and its
    first record."""
    path = run.duplicate[0]
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    first: dict[str, Any] = json.loads(text.split("\n", 1)[0])
    return path, first


def append_late_phase(run: SeedRun) -> Key:
    """A worker phase of a name the run has not, longer than any, and a shorter second run of
    the worker's first phase (what is served of that stays the longer one): appended as a
    worker writes them (a JSON line each); the new phase's (stage, role, phase)."""
    path, first = worker_file(run)
    stage_starts = [
        float(d["start"])
        for d, _ in _records(run, run.run_dir, dump=False)
        if d.get("stage_id") == first["stage_id"]
    ]
    start = min(stage_starts)
    again = float(first["end"]) + 1.0
    records = [
        (LATE_PHASE, start, start + LATE_S),
        (first["name"], again, again + (float(first["end"]) - float(first["start"])) / 2),
    ]
    with path.open("a", encoding="utf-8") as f:
        for name, begins, ends in records:
            record = {
                "name": name,
                "start": begins,
                "end": ends,
                "stage_id": first["stage_id"],
                "replica_id": 0,
                "pid": first["pid"],
                "role": "worker",
                "extra": {},
                "dur_s": ends - begins,
            }
            f.write(json.dumps(record) + "\n")
    assert run.seed.ingest_workers() == 2  # the seed's own timeline takes them in too
    return (str(first["stage_id"]), "worker", LATE_PHASE)


# -- 1. what is served -----------------------------------------------------------------------


@pytest.mark.slow
@needs_seed
def test_the_node_serves_the_seeds_start_up_and_no_llama_server_figure(
    tmp_path: Path, run: SeedRun
) -> None:
    # the independent readings agree with each other and with the seed before the daemon runs
    assert expected_phases(run) == seeds_phases(run)
    assert len({stage for stage, _, _ in expected_phases(run)}) == 3  # -, 0 and 1
    assert damaged_lines(run) == 3
    d, _ = start_daemon(tmp_path, run)
    with d:
        samples = settled(
            d,
            lambda s: [
                *problems_of(s, run),
                *([] if requests_of(s) == 2 else [f"file node: {requests_of(s)} requests, not 2"]),
            ],
            "the init-timeline node served",
        )
        assert sample(samples, "smllm_source_up", node=FILE_NODE) == 1
        # one series a phase: served phases are exactly the distinct (stage, role, phase)
        assert len(labelled(samples, "smllm_init_phase_seconds", NODE)) == len(expected_phases(run))
        # the init-timeline node is in no llama-server figure, the file node in no init one
        for family, nodes in nodes_labelled(samples).items():
            want = {NODE} if family.startswith("smllm_init_") else {FILE_NODE}
            assert nodes == want, (family, nodes)
        rows = {
            dict(labels)["nodes_busy"]
            for (n, labels) in samples
            if n == "smllm_concurrency_seconds_total"
        }
        assert rows == {"0", "1"}
        log = d.stop()
    assert f"init-timeline node {NODE}: read ({damaged_lines(run)} skipped)" in log


# -- 2. following the files ------------------------------------------------------------------


@pytest.mark.slow
@needs_seed
def test_the_node_follows_its_files_and_goes_down_alone(tmp_path: Path, run: SeedRun) -> None:
    d, journal = start_daemon(tmp_path, run)
    with d:
        settled(d, lambda s: problems_of(s, run), "the init-timeline node served")
        before = run.seed.suggest_timeouts()

        # a worker writes one phase more: within the deadline it is served, the seed's timeout
        # for it too
        phases_before = expected_phases(run)
        assert LATE_PHASE not in {phase for _, _, phase in served_phases(d.metrics(), NODE)}
        late = append_late_phase(run)
        assert expected_phases(run) == seeds_phases(run)
        assert expected_phases(run) == {**phases_before, late: LATE_S}  # (the repeat: shorter)
        assert run.seed.suggest_timeouts()["stage_init_timeout"] > before["stage_init_timeout"]
        samples = settled(d, lambda s: problems_of(s, run), "the appended phase served")
        assert served_phases(samples, NODE)[late] == LATE_S
        assert expected_phases(run)[late] == LATE_S

        # the run directory and the dump gone: the node is down, its path logged; the file node
        # carries on (it is up, and reads two more requests meanwhile)
        gone = [
            (run.run_dir, run.run_dir.with_name("run.gone")),
            (run.dump, run.dump.with_suffix(".gone")),
        ]
        for path, moved in gone:
            path.rename(moved)
        seen_up: list[float | None] = []

        def down(s: Samples) -> list[str]:
            seen_up.append(sample(s, "smllm_source_up", node=FILE_NODE))
            up = sample(s, "smllm_init_source_up", node=NODE)
            return [] if up == 0 else [f"smllm_init_source_up {up}"]

        samples = settled(d, down, "the node down")
        append_requests(journal, range(3, 5))
        samples = settled(
            d,
            lambda s: down(s) + ([] if requests_of(s) == 4 else [f"{requests_of(s)} requests"]),
            "the file node's requests counted while the init-timeline node is down",
        )
        assert seen_up and all(up == 1 for up in seen_up), seen_up
        warnings = [
            line
            for line in d.log_text().splitlines()
            if "WARNING exporter.daemon.daemon" in line
            and (str(run.run_dir) in line or str(run.dump) in line)
        ]
        assert warnings, d.log_text()[-3000:]

        # back: up again, with what it served before
        for path, moved in gone:
            moved.rename(path)
        samples = settled(d, lambda s: problems_of(s, run), "the node up again")
        assert served_phases(samples, NODE)[late] == LATE_S
        assert sample(samples, "smllm_source_up", node=FILE_NODE) == 1
        assert requests_of(samples) == 4
        log = d.stop()
    assert "Traceback" not in log
    assert log.count(f"init-timeline node {NODE}: read (") == 2  # (a change of state is logged)


@needs_seed
def test_a_missing_run_directory_is_named_as_missing(tmp_path: Path, run: SeedRun) -> None:
    """The dump still there, the run directory gone: the node is down, and why says so."""
    gone = run.run_dir.with_name("run.gone")
    run.run_dir.rename(gone)
    node = InitTimelineNode(NODE, run.run_dir, run.dump, POLL_S)
    figures = vllmwatch.figures(node, vllmwatch.read(node), time.time())
    assert not figures.up
    assert str(run.run_dir) in figures.error
    assert "no such file or directory" in figures.error, figures.error


# -- 3. reloads ------------------------------------------------------------------------------


@pytest.mark.slow
@needs_seed
def test_a_reload_adds_a_node_and_keeps_the_first_ones_figures_then_drops_it(
    tmp_path: Path, run: SeedRun
) -> None:
    d, journal = start_daemon(tmp_path, run)
    with d:
        settled(d, lambda s: problems_of(s, run), "the init-timeline node served")
        file_row = {"name": FILE_NODE, "source": "file", "path": str(journal)}
        workers = expected_phases(run, dump=False)
        assert {role for _, role, _ in workers} == {"worker"}

        def second(s: Samples) -> list[str]:
            if served_phases(s, OTHER) != workers:
                return [f"{OTHER}: {served_phases(s, OTHER)}"]
            return [] if sample(s, "smllm_init_source_up", node=OTHER) == 1 else [f"{OTHER} down"]

        # a second node added, nothing dropped: every scrape from the SIGHUP on serves the
        # first node's figures, until the second node is served too
        taken_up = sighup(
            d, [file_row, timeline_row(NODE, run), timeline_row(OTHER, run, dump=False)]
        )
        deadline, scrapes = time.monotonic() + DEADLINE_S, 0
        while True:
            samples = d.metrics()
            scrapes += 1
            assert problems_of(samples, run) == [], (scrapes, problems_of(samples, run))
            if not second(samples):
                break
            assert time.monotonic() < deadline, second(samples)
        taken_up()
        assert "reload: init_timelines changed" in d.log_text()
        assert sample(samples, "smllm_source_up", node=FILE_NODE) == 1

        # the first node dropped: its series go, the second's stay
        sighup(d, [file_row, timeline_row(OTHER, run, dump=False)])()
        samples = settled(
            d, lambda s: init_series(s, NODE), f"{NODE}'s series gone after the reload"
        )
        assert second(samples) == []
        # its watcher stopped with it: a change of the files both nodes read shows in the
        # second node alone
        late = append_late_phase(run)
        workers = expected_phases(run, dump=False)
        assert late in workers
        samples = settled(d, second, "the appended phase served by the second node")
        assert init_series(samples, NODE) == []
        assert requests_of(samples) == 2
        log = d.stop()
    assert "Traceback" not in log


@needs_seed
def test_a_reload_serves_the_figures_read_before_until_the_watcher_reads_again(
    tmp_path: Path, run: SeedRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, the first node's read after the reload held back: what is served of it
    meanwhile is what the daemon had read before (carried over), not nothing."""
    journal = tmp_path / f"{FILE_NODE}.log"
    journal.write_text("")
    path = tmp_path / "config.yaml"

    def write(rows: list[dict[str, Any]]) -> None:
        path.write_text(
            json.dumps(
                {
                    "listen": "127.0.0.1:0",
                    "state_dir": str(tmp_path / "state"),
                    "nodes": [{"name": FILE_NODE, "source": "file", "path": str(journal)}, *rows],
                }
            )
        )

    write([timeline_row(NODE, run)])
    reads: dict[str, int] = {}
    held = threading.Event()
    release = threading.Event()
    real_read = vllmwatch.read

    def read(node: InitTimelineNode) -> Loaded | str:
        reads[node.name] = reads.get(node.name, 0) + 1
        if node.name == NODE and held.is_set():
            assert release.wait(DEADLINE_S), "never released"
        return real_read(node)

    monkeypatch.setattr(vllmwatch, "read", read)
    daemon = Daemon(
        load(path),
        reloader=lambda: load(path),
        publish_seconds=0.05,
        tick_seconds=0.05,
    )

    def right() -> bool:
        return not problems_of(parse_metrics(dt.metrics()), run)

    def second_served() -> Samples | None:
        s = parse_metrics(dt.metrics())
        return s if sample(s, "smllm_init_source_up", node=OTHER) == 1 else None

    with DaemonThread(daemon) as dt:
        try:
            wait_for(right, DEADLINE_S, "the node served")
            assert reads == {NODE: 1}
            held.set()  # the first node's next read waits
            write([timeline_row(NODE, run), timeline_row(OTHER, run, dump=False)])
            assert dt._loop is not None
            dt._loop.call_soon_threadsafe(daemon.request_reload)
            wait_for(lambda: reads.get(NODE) == 2, DEADLINE_S, "its watcher reading again")
            samples = wait_for(second_served, DEADLINE_S, "the second node served")
            assert reads[NODE] == 2  # (still held)
            assert problems_of(samples, run) == []  # yet its figures are served, as read before
        finally:
            release.set()
        wait_for(right, DEADLINE_S, "the node read again")
        assert reads[NODE] == 2


# -- 4. check-config -------------------------------------------------------------------------


def test_check_config_lists_every_problem_of_a_malformed_init_timeline_node(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml_text(
            "nodes:",
            "  - name: a",
            "    source: file",
            f"    path: {tmp_path / 'a.log'}",
            "  - name: zero",
            "    source: init-timeline",
            f"    path: {tmp_path / 'run'}",
            "    poll_seconds: 0",
            "  - name: nowhere",
            "    source: init-timeline",
            f"    dump: {tmp_path / 'timeline.json'}",
            "  - name: five",
            "    source: init-timeline",
            "    path: 5",
            "  - {name: slow, source: init-timeline, path: /run/x, poll_seconds: 3601}",
            "  - {name: flag, source: init-timeline, path: /run/x, poll_seconds: true}",
            "  - name: typo",
            "    source: init-timeline",
            "    path: /run/x",
            "    poll_second: 1",
            "    unit: sm-llm.service",
        )
    )
    code, out, err = cli("check-config", str(path))
    assert code == 1, err
    problems = [line for line in err.splitlines() if line.startswith(f"{path}:")]
    assert problems == [
        f"{path}:8: nodes[1].poll_seconds: must be seconds 0.1..3600, got 0",
        f"{path}:9: nodes[2]: an init-timeline node needs a path (its run directory)",
        f"{path}:14: nodes[3].path: must be a path, got 5",
        f"{path}:15: nodes[4].poll_seconds: must be seconds 0.1..3600, got 3601",
        f"{path}:16: nodes[5].poll_seconds: must be seconds 0.1..3600, got True",
        f"{path}:20: nodes[6].poll_second: unknown key 'poll_second' (did you mean "
        "'poll_seconds'?)",
        f"{path}:21: nodes[6].unit: unknown key 'unit'",
    ], err
    assert f"{path}: {len(problems)} problem(s):" in err
    assert out == ""


def test_check_config_takes_the_bounds_of_poll_seconds(cli: Cli, tmp_path: Path) -> None:
    journal = tmp_path / "a.log"
    journal.write_text("")
    path = tmp_path / "good.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: a, source: file, path: {journal}}}",
            f"  - {{name: fast, source: init-timeline, path: {tmp_path}, poll_seconds: 0.1}}",
            f"  - {{name: slow, source: init-timeline, path: {tmp_path}, poll_seconds: 3600}}",
        )
    )
    loaded = load(path)
    assert [(n.name, n.poll_seconds) for n in loaded.init_timelines] == [
        ("fast", 0.1),
        ("slow", 3600.0),
    ]
    assert [n.name for n in loaded.nodes] == ["a"]
    code, out, err = cli("check-config", str(path))
    assert code == 0, err
    assert f"{path}: valid, 3 node(s)" in out  # (the init-timeline nodes count)

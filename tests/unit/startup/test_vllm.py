"""exporter.startup.vllm against vllm-omni's own init_timeline.py (the seed), run for real.

support/vllm_timeline.py execs the seed's source and records a real start-up with it: an engine
in this process and two worker processes (stages 0 and 1, overlapping phases), its JSON dump
and its worker_<pid>.jsonl files, which it then damages (a duplicate line, a blank one, two
malformed ones, a truncated last line). On that run ours must give the seed's `format_table()`
line for line, its `suggest_timeouts()` and `stage_spans()`; drop the duplicate, name each
malformed line by file and line number and skip nothing else; read the dump alone and the run
directory alone sensibly. Hypothesis checks that on arbitrary worker lines we take exactly the
phases the seed takes, but for the differences the skip reason names; that hostile text and
bytes raise nothing but InitTimelineError out of `load` (and nothing out of `parse_worker`);
that unreadable paths are named; and that `signature` changes exactly when a file does.
Without the seed file (and CI unset) the seed tests skip; in CI they fail.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from exporter.startup import vllm as inittimeline
from exporter.startup.phases import Phase, Timeline
from exporter.startup.vllm import (
    MAX_TIME_S,
    InitTimelineError,
    load,
    parse_dump,
    parse_worker,
    signature,
)

from support.cli import Cli
from support.settings import default_settings
from support.tools import examples
from support.vllm_timeline import (
    BAD_JSON,
    BAD_START,
    SeedRun,
    load_seed,
    needs_seed,
    record_run,
    require_seed,
)

FACTORS = (1.0, 1.5, 2.5, 1e4, 1e6)  # (the last two lift the timeouts off vllm-omni's floors)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> SeedRun:
    require_seed()
    return record_run(tmp_path_factory.mktemp("seed_run"))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scratch")


# -- the seed's own run ------------------------------------------------------------------------


@needs_seed
def test_table_timeouts_and_spans_are_the_seeds(run: SeedRun) -> None:
    loaded = load([run.dump, run.run_dir])
    assert loaded.timeline.table().splitlines() == run.seed.format_table().splitlines()
    for factor in FACTORS:
        assert loaded.timeline.suggest_timeouts(factor) == run.seed.suggest_timeouts(factor)
    assert run.seed.suggest_timeouts(1e6)["stage_init_timeout"] > 300  # (off the floor)
    assert loaded.timeline.stage_spans() == run.seed.stage_spans()
    assert set(loaded.timeline.stage_spans()) == {None, 0, 1}


@needs_seed
def test_the_run_overlaps_across_processes_and_stages(run: SeedRun) -> None:
    phases = load([run.dump]).timeline.phases
    loads = [p for p in phases if p.name == "load_weights"]
    assert sorted((p.stage_id, p.pid) for p in loads) == [
        (0, run.worker_pids[0]),
        (1, run.worker_pids[1]),
    ]
    (a, b) = loads
    assert max(a.start, b.start) < min(a.end, b.end)  # at once, in two processes
    (outer,) = [p for p in phases if p.name == "start_stages"]
    assert outer.pid == run.engine_pid and outer.role == "engine"
    assert all(outer.start <= p.start and p.end <= outer.end for p in loads)


@needs_seed
def test_damage_is_dropped_or_named_by_file_and_line(run: SeedRun) -> None:
    loaded = load([run.dump, run.run_dir])
    assert loaded.files == (str(run.dump), *map(str, run.worker_files))
    expected = [f"{path}:{line}: " for path, line in (*run.malformed, run.truncated)]
    assert [s[: len(e)] for s, e in zip(loaded.skipped, expected, strict=False)] == expected
    assert loaded.skipped_count == len(expected) == 3  # (not the duplicate, not the blank)
    for (path, line), text in zip(run.malformed, (BAD_START, BAD_JSON), strict=True):
        assert path.read_text(encoding="utf-8").split("\n")[line - 1] == text  # (1-based)
    assert run.duplicate[0] == run.malformed[0][0] and run.duplicate[1] < run.malformed[0][1]
    assert loaded.skipped[0].endswith("start is not a number: 'abc'")
    assert loaded.skipped[-1].endswith("truncated (still being written?)")
    # the dump holds every worker phase but the late ones: those and the copy are duplicates
    assert loaded.added == run.late == 2
    assert loaded.duplicates == run.worker_phases - run.late + 1
    alone = load([run.run_dir])
    assert alone.skipped == loaded.skipped
    assert (alone.added, alone.duplicates) == (run.worker_phases, 1)


@needs_seed
def test_the_dump_alone_is_the_dumps_phases(run: SeedRun) -> None:
    dumped = json.loads(run.dump.read_text(encoding="utf-8"))
    loaded = load([run.dump])
    assert (loaded.skipped, loaded.files, loaded.added, loaded.duplicates) == (
        (),
        (str(run.dump),),
        0,
        0,
    )
    assert (loaded.timeline.t0, loaded.timeline.t_end) == (dumped["t0"], dumped["t_end"])
    assert [p.to_dict() for p in loaded.timeline.phases] == dumped["phases"]
    assert loaded.timeline.total_s() == dumped["total_s"]
    assert len(dumped["phases"]) == 5 + run.worker_phases - run.late  # (5 engine phases)


@needs_seed
def test_the_run_dir_alone_holds_the_worker_phases(run: SeedRun) -> None:
    timeline = load([run.run_dir]).timeline
    assert len(timeline.phases) == run.worker_phases
    assert {p.pid for p in timeline.phases} == set(run.worker_pids)
    assert {p.role for p in timeline.phases} == {"worker"}
    assert timeline.t0 == min(p.start for p in timeline.phases) == timeline.phases[0].start
    assert timeline.t_end == max(p.end for p in timeline.phases)
    assert [p.start for p in timeline.phases] == sorted(p.start for p in timeline.phases)
    path = run.worker_files[1]  # a single worker file: worker_PID.jsonl
    one = load([path])  # (files sort by name: worker_10000 before worker_9999, not by stage)
    assert {p.pid for p in one.timeline.phases} == {int(path.stem.removeprefix("worker_"))}
    assert {p.pid for p in one.timeline.phases} < set(run.worker_pids)
    expected = [f"{path}:{line}: " for path, line in (run.malformed[1], run.truncated)]
    assert [s[: len(e)] for s, e in zip(one.skipped, expected, strict=False)] == expected
    assert len(one.skipped) == 2


# -- worker lines: the seed's reading, and where ours differs ----------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["1.5", " 7 ", "nan", "-inf", "1e400", "1_0", "0x10", "", 1.0, 10**400])
)
junk = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
GOOD = {  # what the seed writes
    "name": st.text(max_size=10),
    "start": st.floats(0, 2e9),
    "end": st.floats(0, 2e9),
    "stage_id": st.none() | st.integers(0, 3),
    "replica_id": st.integers(0, 3),
    "pid": st.integers(0, 2**22),
    "role": st.sampled_from(["worker", "engine"]),
    "extra": st.dictionaries(st.text(max_size=3), junk, max_size=2),
}
SPOILT = junk | st.sampled_from(  # (half of them: the values that tell the readers apart)
    [float("nan"), float("-inf"), "inf", 10**400, True, 1.0, [0], [["k", 1]], ["ab"], "x", {}]
)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """A record as the seed writes it (optional fields left out at times), then up to two of
    its fields spoilt or left out."""
    record = {
        k: draw(v) for k, v in GOOD.items() if k in ("name", "start", "end") or draw(st.booleans())
    }
    for key in draw(st.lists(st.sampled_from(sorted(GOOD)), max_size=2, unique=True)):
        if draw(st.integers(0, 4)):
            record[key] = draw(SPOILT)
        else:
            record.pop(key, None)
    return record


one_line = st.text(max_size=40).filter(lambda t: len((t + "x").splitlines()) == 1)
worker_lines = records().map(json.dumps) | junk.map(json.dumps) | one_line


def _seed_ingest(scratch: Path, line: str) -> list[Any] | BaseException:
    """What the seed's ingest_workers takes from a worker file of this one line (or its crash)."""
    seed = load_seed()
    run_dir = scratch / "parity"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "worker_1.jsonl").write_text(line + "\n", encoding="utf-8")
    tl = seed.InitTimeline(enabled=True, run_dir=run_dir, t0=0.0)
    try:
        tl.ingest_workers()
    except Exception as e:
        return e
    return list(tl.phases)


def _seed_would_misread(p: Any) -> bool:
    """A non-finite time, a time beyond any (MAX_TIME_S: spans would overflow), a bad stage."""
    bad_stage = p.stage_id is not None and (type(p.stage_id) is not int)
    times = (p.start, p.end)
    return bad_stage or not all(math.isfinite(t) and abs(t) <= MAX_TIME_S for t in times)


@needs_seed
@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=worker_lines)
def test_worker_lines_are_read_as_the_seed_reads_them(scratch: Path, line: str) -> None:
    phases, skipped = parse_worker(line + "\n", "w.jsonl")
    seed = _seed_ingest(scratch, line)
    if isinstance(seed, BaseException):  # the seed dies on it: ours skips it, and says so
        event(f"the seed crashes: {type(seed).__name__}")
        assert phases == [] and len(skipped) == 1 and "(the seed crashes)" in skipped[0]
    elif not seed:
        event("both skip")
        assert phases == [] and len(skipped) == (1 if line.strip() else 0)
        assert not any("the seed" in s for s in skipped)
    elif phases:
        event("both take")
        assert [repr(p.to_dict()) for p in phases] == [repr(p.to_dict()) for p in seed]
    else:  # the seed takes what it then misreads: ours skips it, and says so
        event("the seed takes, ours skips")
        assert len(skipped) == 1 and "(the seed takes it)" in skipped[0]
        assert _seed_would_misread(seed[0])


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({"start": float("nan")}, "start is not finite: nan (the seed takes it)"),
        ({"end": float("inf")}, "end is not finite: inf (the seed takes it)"),
        ({"start": "-inf"}, "start is not finite: -inf (the seed takes it)"),
        ({"start": 10**400}, "start is too large for a float (the seed crashes)"),
        ({"pid": float("inf")}, "pid is not finite (the seed crashes)"),
        ({"stage_id": True}, "stage_id is neither null nor an int: True (the seed takes it)"),
        ({"stage_id": 1.0}, "stage_id is neither null nor an int: 1.0 (the seed takes it)"),
        ({"stage_id": [0]}, "stage_id is neither null nor an int: [0] (the seed takes it)"),
        ({"replica_id": "x"}, "replica_id is not an int: 'x'"),
        ({"extra": "abc"}, "extra is not an object: 'abc'"),
        ({"name": None, "start": None}, "start is not a number: None"),
    ],
)
def test_what_ours_skips_and_why(record: dict[str, Any], why: str) -> None:
    line = json.dumps({"name": "n", "start": 1.0, "end": 2.0, **record})
    assert parse_worker(f"{line}\n", "w") == ([], [f"w:1: {why}"])


def test_default_roles_are_the_writers() -> None:
    record = {"name": "n", "start": 1.0, "end": 2.0}
    assert parse_worker(json.dumps(record), "w")[0][0].role == "worker"
    dump = json.dumps({"t0": 0.5, "t_end": 3.0, "phases": [record, {**record, "role": None}]})
    timeline, skipped = parse_dump(dump, "d")
    assert ([p.role for p in timeline.phases], skipped) == (["engine", "None"], [])  # (str(None))


def test_lines_blank_long_deep_and_truncated(monkeypatch: pytest.MonkeyPatch) -> None:
    good = json.dumps({"name": "a", "start": 1, "end": 2, "stage_id": 0, "extra": [["k", 1]]})
    deep = "[" * 100_000
    phases, skipped = parse_worker(f"\n  \r\n{good}\r\n{deep}\n{good[:-1]}", "w")
    assert [p.to_dict() for p in phases] == [
        Phase("a", 1.0, 2.0, 0, 0, 0, "worker", {"k": 1}).to_dict()
    ]
    assert skipped == [
        "w:4: nested too deeply (the seed crashes)",
        "w:5: truncated (still being written?)",
    ]
    assert parse_worker(good, "w") == (phases, [])  # a last line without newline that parses
    assert parse_worker(f"{good[:-1]}\n", "w")[1][0].startswith(
        "w:1: not JSON"
    )  # (has its newline)
    monkeypatch.setattr(inittimeline, "MAX_LINE_CHARS", len(good) - 1)
    assert parse_worker(f"{good}\n", "w") == (
        [],
        [f"w:1: line over 1 MiB ({len(good)} characters)"],
    )


@settings(max_examples=examples(300), deadline=None)
@given(text=st.text() | st.lists(worker_lines).map("\n".join))
def test_parse_worker_never_raises(text: str) -> None:
    phases, skipped = parse_worker(text, "w")
    assert all(math.isfinite(p.start) and math.isfinite(p.end) for p in phases)
    assert all(p.stage_id is None or type(p.stage_id) is int for p in phases)
    assert len(phases) + len(skipped) == sum(1 for line in text.split("\n") if line.strip())


# -- dumps and paths -----------------------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(
    value=junk,
    header=st.fixed_dictionaries(
        {"t0": st.floats(0, 2e9)},
        optional={"t_end": st.none() | st.floats(0, 2e9), "schema": st.just(1)},
    ),
    phases=st.lists(records() | junk, max_size=5),
)
def test_parse_dump_raises_only_init_timeline_error(
    value: Any, header: dict[str, Any], phases: list[Any]
) -> None:
    for text in (json.dumps(value), json.dumps({**header, "t0": value, "phases": phases})):
        try:
            parse_dump(text, "d.json")
        except InitTimelineError as e:
            assert str(e).startswith("d.json: ")
    timeline, skipped = parse_dump(json.dumps({**header, "phases": phases}), "d.json")
    assert len(timeline.phases) + len(skipped) == len(phases)
    assert all(s.startswith("d.json: phases[") for s in skipped)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "not JSON"),
        ("[" * 100_000, "not JSON (nested too deeply)"),
        ("[]", "not a timeline (a JSON list)"),
        ('{"t0": 1, "phases": [], "schema": 2}', "schema 2, not 1"),
        ('{"phases": []}', "t0 is not a finite number: None"),
        ('{"t0": NaN, "phases": []}', "t0 is not a finite number: nan"),
        ('{"t0": true, "phases": []}', "t0 is not a finite number: True"),
        ('{"t0": 1' + "0" * 400 + ', "phases": []}', "t0 is not a finite number"),
        ('{"t0": 1, "t_end": "2", "phases": []}', "t_end is neither null nor a finite number: '2'"),
        ('{"t0": 1, "phases": {}}', "not a timeline (no 'phases' list)"),
    ],
)
def test_a_dump_that_is_no_timeline(text: str, why: str) -> None:
    with pytest.raises(InitTimelineError, match=r"^d\.json: ") as raised:
        parse_dump(text, "d.json")
    assert why in str(raised.value)


@settings(max_examples=150, deadline=None)
@given(dump=st.binary(max_size=300), worker=st.binary(max_size=300), as_dir=st.booleans())
def test_load_raises_only_init_timeline_error(
    scratch: Path, dump: bytes, worker: bytes, as_dir: bool
) -> None:
    (scratch / "run").mkdir(exist_ok=True)
    (scratch / "d.json").write_bytes(dump)
    (scratch / "run" / "worker_7.jsonl").write_bytes(worker)
    paths = [scratch / "d.json", scratch / "run" if as_dir else scratch / "run" / "worker_7.jsonl"]
    try:
        loaded = load(paths)
    except InitTimelineError as e:
        assert str(scratch) in str(e)
        return
    assert loaded.timeline.t0 == parse_dump(dump.decode(errors="replace"), "d")[0].t0


def test_unreadable_paths_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(paths: list[Path], why: str) -> None:
        with pytest.raises(InitTimelineError) as raised:
            load(paths)
        assert str(paths[-1]) in str(raised.value) and why in str(raised.value)

    refused([tmp_path / "missing.json"], "no such file or directory")
    refused([tmp_path / "missing.jsonl"], "no such file or directory")
    refused([tmp_path], "no phases")
    (tmp_path / "file").write_text("x")
    refused([tmp_path / "file" / "under.json"], "cannot open")
    os.mkfifo(tmp_path / "fifo.json")
    refused([tmp_path / "fifo.json"], "not a regular file")  # (and does not block)
    (tmp_path / "worker_1.jsonl").write_text("junk\n")
    refused([tmp_path], "no phases (1 records skipped)")
    dump = tmp_path / "big.json"
    dump.write_text(json.dumps({"t0": 1.0, "t_end": None, "phases": []}))
    assert load([dump]).timeline == Timeline(1.0, None, ())  # a dump of no phases is a timeline
    refused([dump, dump], "two dumps")
    monkeypatch.setattr(inittimeline, "MAX_FILE_BYTES", dump.stat().st_size - 1)
    refused([dump], "larger than")
    if os.geteuid() != 0:  # (root reads anything)
        monkeypatch.undo()
        dump.chmod(0)
        refused([dump], "cannot open: Permission denied")


@needs_seed
def test_signature_changes_when_a_file_does(run: SeedRun, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(run.run_dir, run_dir)
    dump = Path(shutil.copy(run.dump, tmp_path / "timeline.json"))
    paths = [dump, run_dir]
    before = signature(paths)
    assert signature(paths) == before  # stable while nothing changes
    load(paths)
    assert signature(paths) == before  # (reading changes nothing)
    worker = run_dir / run.worker_files[0].name
    with worker.open("a", encoding="utf-8") as f:
        f.write('{"name": "more", "start": 1, "end": 2}\n')
    appended = signature(paths)
    assert appended != before
    assert signature(paths) == appended
    (run_dir / "worker_99.jsonl").write_text("")
    assert signature(paths) != appended
    missing = [tmp_path / "gone", Path("nul\0byte")]
    gone = signature(missing)  # (never raises)
    assert signature(missing) == gone
    (tmp_path / "gone").write_text("")
    assert signature(missing) != gone


def test_a_bad_byte_is_replaced_not_fatal(tmp_path: Path) -> None:
    """(The seed's strict read_text raises UnicodeDecodeError out of ingest_workers here.)"""
    (tmp_path / "worker_1.jsonl").write_bytes(b'{"name": "a\xff", "start": 1, "end": 2}\n\xfe\n')
    loaded = load([tmp_path])
    assert [p.name for p in loaded.timeline.phases] == ["a\ufffd"]
    assert loaded.skipped == (f"{tmp_path / 'worker_1.jsonl'}:2: not JSON (Expecting value)",)


# -- report --init-timeline --------------------------------------------------------------------


@needs_seed
@pytest.mark.parametrize("factor", ["1.5", "1e4"])
def test_report_init_timeline_prints_the_seeds_table_spans_and_timeouts(
    cli: Cli, run: SeedRun, factor: str
) -> None:
    """The CLI on the dump and the run directory: the seed's table line for line, each stage's
    span as the seed's stage_spans() gives it, its suggest_timeouts(); each skipped line named by
    file and line on stderr and in the output."""
    paths = ["--init-timeline", str(run.dump), "--init-timeline", str(run.run_dir)]
    code, out, err = cli("report", *paths, "--factor", factor)
    assert code == 0, err
    table = run.seed.format_table()
    assert out.startswith(table + "\n\nstage spans:\n")
    spans = run.seed.stage_spans()
    rows = out.split("stage spans:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(rows) == len(spans)
    for stage, (lo, hi) in spans.items():
        name = "-" if stage is None else str(stage)
        want = f"  stage {name:>5}: {hi - lo:9.2f} s  (start_s {lo - run.seed.t0:.2f} to "
        assert any(r.startswith(want) for r in rows), (want, rows)
    suggested = run.seed.suggest_timeouts(float(factor))
    line = " ".join(f"{k}={v}" for k, v in suggested.items())
    assert f"suggested timeouts (factor {float(factor):g}): {line}\n" in out
    bad = [*run.malformed, run.truncated]
    for path, number in bad:
        assert f"{path}:{number}: " in err
        assert f"  {path}:{number}: " in out
    assert f"skipped {len(bad)} malformed records:" in out
    # the JSON carries the same
    code, out, err = cli("report", *paths, "--factor", factor, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["table"] == table and doc["suggested"] == suggested
    assert {s["stage_id"]: (s["start"], s["end"]) for s in doc["stage_spans"]} == spans
    assert [s.split(": ", 1)[0] for s in doc["skipped"]] == [f"{p}:{n}" for p, n in bad]


# -- what the daemon makes of them ----------------------------------------------------------


def test_a_surrogate_or_a_time_beyond_any_span_neither_breaks_a_table_nor_a_scrape(
    tmp_path: Path,
) -> None:
    from exporter.accounting.accounting import Accounting
    from exporter.base.kinds import DEFAULT_RULES, Kinds
    from exporter.exposition.render import Renderer
    from exporter.startup.phases import Figures

    run = tmp_path / "run"
    run.mkdir()
    (run / "worker_9.jsonl").write_text(
        '{"name": "\\ud800x", "start": 1.0, "end": 2.0, "stage_id": 0, "role": "\\udfff"}\n'
        '{"name": "big", "start": -1e308, "end": 1e308, "stage_id": 0}\n',
        encoding="utf-8",
    )
    loaded = load([run])
    assert [(p.name, p.role) for p in loaded.timeline.phases] == [("?x", "?")]
    assert loaded.skipped == (
        f"{run / 'worker_9.jsonl'}:2: start is no time: -1e+308 s (the seed takes it)",
    )
    loaded.timeline.table().encode()
    acc = Accounting(["n"], default_settings(Kinds(DEFAULT_RULES)), origin_us=0)
    acc.init_timelines["omni"] = Figures.of("omni", loaded.timeline, loaded.skipped, 1.5, 3.0)
    text = Renderer("1").text(acc.snapshot())
    assert 'smllm_init_phase_seconds{node="omni",phase="?x",role="?",stage="0"} 1.0' in text
    dump = tmp_path / "dump.json"
    dump.write_text('{"schema": 1, "t0": -1e308, "t_end": 1e308, "phases": []}')
    with pytest.raises(InitTimelineError, match="t0 is not a finite number"):
        load([dump])

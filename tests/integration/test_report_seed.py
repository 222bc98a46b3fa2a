"""`sm-llm-exporter report` against an independent port of the seed's timeline.py (docs/report.md;
the port, support/seed.py, keeps the seed's arithmetic verbatim and reads the journal dump our
report reads, with the seed's own regex and timestamp handling).

On one-slot data from three nodes, with every edge on the 0.5 s grid counted from --since and
every counted interval inside the window, docs/report.md says the two agree line for line; so every
line the seed prints must start our output. Where the seed crashes (no extraction call: the
median of an empty list) ours must say there were no extraction calls instead, and the seed's
remaining lines (computed as if it had skipped that one) must follow.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from exporter import cli
from exporter.base.times import SECOND

from support.seed import SeedRequest, SeedRun, seed_fetch, seed_median, seed_timeline, seed_window
from support.tools import REPO

# timeline.py, in the project's shared folder beside the checkout (CI lays it there too)
SEED_SCRIPT = Path(
    os.environ.get("SMLLM_SEED_SCRIPT", REPO.parent / "shared/seeds/000_ea0a9e426640964a.txt")
)

HALF = SECOND // 2
BASE_SINCE = int(datetime(2026, 9, 22, 7, 32, 55, tzinfo=UTC).timestamp())
# era D: the total line alone, with its prompt/eval lines, with the 2026 log prefix; era C block
SHAPES = ("D", "D-block", "D-prefix", "C")
OFFSETS_MIN = (0, 0, 120, -300, 330)  # the dump's UTC offset (journalctl prints local time)


# -- grid data ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Req:
    """One request on the 0.5 s grid; times in half seconds."""

    gap: int  # idle before it (before the window: from its end to --since; after: from --until)
    dur: int  # 4..120: 2-60 s
    tokens: int
    shape: str  # one of SHAPES
    cancel_in_gap: bool = False  # a request launched and stopped without timing, in the gap


@dataclass(frozen=True)
class Node:
    reqs: tuple[Req, ...]  # one at a time, all inside the window
    before: Req | None = None  # one request ending before --since (neither side counts it)
    after: Req | None = None  # one starting at or after --until
    utc_offset_min: int = 0
    as_json: bool = False  # also give ours this node as `journalctl -o json`
    logs_begin_note: bool = False  # journalctl's `-- Logs begin at ... --` first line
    blob_noise: bool = False  # a non-UTF-8 noise entry per request (`[NB blob data]` as text)


@dataclass(frozen=True)
class Case:
    since_s: int  # whole seconds since the epoch
    tail: int  # half seconds from the last end to --until
    nodes: tuple[Node, ...]
    split: int | None = None  # --split-tokens, None for the default 600

    @property
    def window(self) -> int:
        """--until - --since, half seconds."""
        ends = [sum(r.gap + r.dur for r in n.reqs) for n in self.nodes]
        return max(1, max(ends, default=0) + self.tail)

    @property
    def since(self) -> str:
        return f"{datetime.fromtimestamp(self.since_s, UTC):%Y-%m-%dT%H:%M:%S}"

    @property
    def until(self) -> str:
        w = self.window
        text = f"{datetime.fromtimestamp(self.since_s + w // 2, UTC):%Y-%m-%dT%H:%M:%S}"
        return text + ".5" if w % 2 else text

    @property
    def split_tokens(self) -> int:
        return 600 if self.split is None else self.split


@dataclass
class Entries:
    """One node's journal entries, (time, MESSAGE) in journal order."""

    since_us: int
    items: list[tuple[int, str | bytes]] = field(default_factory=list)

    def add(self, t_us: int, msg: str | bytes, prefixed: bool = False) -> None:
        if prefixed and isinstance(msg, str):  # builds from 2026-05 on: elapsed time + level
            el = t_us - (self.since_us - 7200 * SECOND)
            msg = (
                f"{el // 60_000_000:02d}.{el // SECOND % 60:02d}.{el // 1000 % 1000:03d}."
                f"{el % 1000:03d} I {msg}"
            )
        self.items.append((t_us, msg))


def node_entries(case: Case, i: int) -> list[tuple[int, str | bytes]]:
    node = case.nodes[i]
    e = Entries(case.since_s * SECOND)
    task = 1000 * i + 7

    def cancelled(t_us: int) -> None:
        """A request its client gave up on at once: the seed never sees it, and it held its
        slot for no time, so the seed's figures stand (ours count it, as cancelled)."""
        nonlocal task
        e.add(t_us, f"slot launch_slot_: id  0 | task {task} | processing task")
        e.add(t_us, f"srv          stop: cancel task, id_task = {task}")
        e.add(
            t_us,
            f"slot      release: id  0 | task {task} | stop processing: n_tokens = 12, truncated = 0",
        )
        e.add(t_us + SECOND, "srv  update_slots: all slots are idle")
        task += 1

    def request(start: int, r: Req) -> None:
        nonlocal task
        s_us = e.since_us + start * HALF
        e_us = s_us + r.dur * HALF
        px = r.shape == "D-prefix"
        gen = max(1, min(r.tokens // 4, 300))
        prompt = r.tokens - gen
        ms = r.dur * 500.0
        p_ms = round(ms * prompt / r.tokens, 2)
        g_ms = ms - p_ms
        head = f"slot print_timing: id  0 | task {task} | "
        p_line = f"prompt eval time = {p_ms:10.2f} ms / {prompt:5d} tokens ({p_ms / prompt:8.2f} ms per token, {prompt * 1000 / p_ms:8.2f} tokens per second)"
        g_line = f"       eval time = {g_ms:10.2f} ms / {gen:5d} tokens ({g_ms / gen:8.2f} ms per token, {gen * 1000 / g_ms:8.2f} tokens per second)"
        t_line = f"      total time = {ms:10.2f} ms / {r.tokens:5d} tokens"
        release = f"slot      release: id  0 | task {task} | stop processing: n_tokens = {r.tokens}, truncated = 0"
        e.add(s_us, f"slot launch_slot_: id  0 | task {task} | processing task", px)
        e.add(
            s_us + 150,
            f"slot update_slots: id  0 | task {task} | new prompt, n_ctx_slot = 8192, n_keep = 0, n_prompt_tokens = {prompt}",
            px,
        )
        if node.blob_noise:
            e.add(s_us + 300, b"srv  log_server_r: request body: \xff\xfe\x00garbage")
        e.add(
            s_us + r.dur * HALF // 2,
            f"slot update_slots: id  0 | task {task} | prompt done, n_past = {prompt}, n_tokens = {prompt}",
            px,
        )
        if r.shape == "C":  # older servers: the stop line first, then the unprefixed block
            e.add(e_us - 10, release)
            e.add(e_us - 3, head)
            e.add(e_us - 2, p_line)
            e.add(e_us - 1, g_line)
            e.add(e_us, t_line)
        else:
            if r.shape == "D-block":
                e.add(e_us - 2, head + p_line)
                e.add(e_us - 1, head + g_line)
            e.add(e_us, head + t_line, px)
            if r.shape == "D-block":
                e.add(e_us, head + "graphs reused = 11")
            e.add(e_us, release, px)
        e.add(e_us, "srv  log_server_r: request: POST /completion 172.31.0.1 200", px)
        e.add(e_us, "srv  update_slots: all slots are idle", px)
        task += 1

    if node.before is not None:
        request(-(node.before.gap + node.before.dur), node.before)
    cursor = 0
    for r in node.reqs:
        if r.cancel_in_gap and r.gap >= 6:
            cancelled(e.since_us + cursor * HALF + SECOND)
        request(cursor + r.gap, r)
        cursor += r.gap + r.dur
    if node.after is not None:
        request(case.window + node.after.gap, node.after)
    return sorted(e.items, key=lambda item: item[0])  # stable: same-time entries keep their order


def pid(i: int) -> int:
    return 1234 + 1111 * i


def render_text(case: Case, i: int) -> str:
    """`journalctl -o short-iso-precise`, in the node's local time."""
    node = case.nodes[i]
    tz = timezone(timedelta(minutes=node.utc_offset_min))
    lines = (
        ["-- Logs begin at Mon 2026-09-21 06:00:01 UTC, end at Tue 2026-09-22 09:00:00 UTC. --"]
        if node.logs_begin_note
        else []
    )
    for t_us, msg in node_entries(case, i):
        dt = datetime.fromtimestamp(t_us // SECOND, tz)
        text = msg if isinstance(msg, str) else f"[{len(msg)}B blob data]"
        lines.append(
            f"{dt:%Y-%m-%dT%H:%M:%S}.{t_us % SECOND:06d}{dt:%z} node{i} sm-llm[{pid(i)}]: {text}"
        )
    return "\n".join(lines) + "\n"


def render_json(case: Case, i: int) -> str:
    """`journalctl -o json`: one object a line, binary fields as arrays of byte values."""
    boot = f"{0x5F3E1A2B + i:08x}" * 4
    boot_us = case.since_s * SECOND - 7200 * SECOND
    lines = []
    for n, (t_us, msg) in enumerate(node_entries(case, i), 1):
        rec: dict[str, Any] = {
            "__CURSOR": f"s=8c1d{i}f0a9e3b4c5d6e7f8091a2b3c4d5;i={n:x};b={boot};m={t_us - boot_us:x};t={t_us:x};x={n * 7919:x}",
            "__REALTIME_TIMESTAMP": str(t_us),
            "__MONOTONIC_TIMESTAMP": str(t_us - boot_us),
            "_BOOT_ID": boot,
            "PRIORITY": "6",
            "SYSLOG_FACILITY": "3",
            "_UID": "0",
            "_GID": "0",
            "_COMM": "llama-server",
            "_EXE": "/opt/sm-llm/bin/llama-server",
            "_HOSTNAME": f"node{i}",
            "_SYSTEMD_UNIT": "sm-llm.service",
            "SYSLOG_IDENTIFIER": "sm-llm",
            "_TRANSPORT": "stdout",
            "_PID": str(pid(i)),
            "MESSAGE": msg if isinstance(msg, str) else list(msg),
        }
        # older journalctl pretty-spaces its JSON, newer prints it compact
        lines.append(json.dumps(rec, separators=(", ", " : ") if i % 2 else (",", ":")))
    return "\n".join(lines) + "\n"


# hypothesis strategies
GAPS = st.one_of(st.integers(0, 40), st.integers(200, 1800))  # up to 20 s, or 100-900 s idle
ANY_TOKENS = st.integers(50, 1200)


def tokens_for(mode: str, split: int) -> st.SearchStrategy[int]:
    if mode == "no-extraction":
        return st.one_of(st.integers(50, split - 1), st.just(split - 1))
    if mode == "no-reconcile":
        return st.one_of(st.integers(split, 1200), st.just(split))
    return st.one_of(ANY_TOKENS, st.sampled_from([split - 1, split]))


def req_st(
    tokens: st.SearchStrategy[int], gaps: st.SearchStrategy[int] = GAPS
) -> st.SearchStrategy[Req]:
    return st.builds(
        Req,
        gap=gaps,
        dur=st.integers(4, 120),
        tokens=tokens,
        shape=st.sampled_from(SHAPES),
        cancel_in_gap=st.booleans(),
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    split = draw(st.one_of(st.sampled_from([None, 800]), st.integers(60, 1200)))
    mode = draw(st.sampled_from(["both", "no-extraction", "no-reconcile"]))
    tokens = tokens_for(mode, 600 if split is None else split)
    nodes = tuple(
        draw(
            st.builds(
                Node,
                reqs=st.lists(req_st(tokens), max_size=10).map(tuple),
                before=st.none() | req_st(ANY_TOKENS, st.integers(1, 200)),
                after=st.none() | req_st(ANY_TOKENS, st.integers(0, 200)),
                utc_offset_min=st.sampled_from(OFFSETS_MIN),
                as_json=st.booleans(),
                logs_begin_note=st.booleans(),
                blob_noise=st.booleans(),
            )
        )
        for _ in range(3)
    )
    since = BASE_SINCE + draw(st.integers(0, 60 * 86_400))
    tail = draw(st.one_of(st.just(0), st.integers(0, 1200)))
    return Case(since, tail, nodes, split)


def random_case(seed: int, mode: str, split: int | None = None) -> Case:
    """The same kind of data from a fixed seed; mode `idle` has no request in the window."""
    rng = random.Random(seed)
    s = 600 if split is None else split
    lo, hi = {"no-extraction": (50, s - 1), "no-reconcile": (s, 1200)}.get(mode, (50, 1200))

    def req(tokens: tuple[int, int], gap_lo: int = 0) -> Req:
        gap = rng.randint(200, 1800) if rng.random() < 0.15 else rng.randint(gap_lo, 40)
        return Req(
            gap, rng.randint(4, 120), rng.randint(*tokens), rng.choice(SHAPES), rng.random() < 0.2
        )

    nodes = tuple(
        Node(
            reqs=tuple(req((lo, hi)) for _ in range(0 if mode == "idle" else rng.randint(3, 14))),
            before=req((50, 1200), 1) if mode == "idle" or rng.random() < 0.5 else None,
            after=req((50, 1200)) if mode == "idle" or rng.random() < 0.5 else None,
            utc_offset_min=rng.choice(OFFSETS_MIN),
            as_json=rng.random() < 0.6,
            logs_begin_note=rng.random() < 0.3,
            blob_noise=rng.random() < 0.3,
        )
        for _ in range(3)
    )
    return Case(
        BASE_SINCE + rng.randint(0, 60 * 86_400),
        rng.choice([0, rng.randint(0, 1200)]),
        nodes,
        split,
    )


# -- running ours and comparing ---------------------------------------------------------------


def report_argv(case: Case, paths: list[Path], fmt: str) -> list[str]:
    argv = ["report", "--since", case.since, "--until", case.until]
    for i, p in enumerate(paths):
        argv += ["--input", f"node{i}={p}"]
    if case.split is not None:
        argv += ["--split-tokens", str(case.split)]
    return [*argv, "--format", fmt]


def run_ours(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def cancels(case: Case) -> int:
    """The requests cancelled at once in the case's window (see `cancelled`)."""
    return sum(1 for node in case.nodes for r in node.reqs if r.cancel_in_gap and r.gap >= 6)


def assert_text_agrees(run: SeedRun, out: str, cancelled: int = 0) -> None:
    ours = out.splitlines()
    # the one line the seed has no counterpart of: there only when there were such requests
    untimed = [line for line in ours if line.startswith("  untimed occupancy:")]
    assert untimed == (
        [f"  untimed occupancy: cancelled {cancelled} (0.0 node-min)"] if cancelled else []
    )
    ours = [line for line in ours if line not in untimed]
    n = len(run.lines)
    assert ours[:n] == run.lines
    if run.crashed:
        assert not run.ext
        assert ours[n] == ""
        assert re.fullmatch(r"\s*extraction:.*\bno\b.*\bcalls\b.*", ours[n + 1]), ours[n + 1]
        assert ours[n + 2 : n + 2 + len(run.after_crash)] == run.after_crash


def assert_json_agrees(run: SeedRun, j: dict[str, Any], split: int, cancelled: int = 0) -> None:
    # the seed's numbers, exactly: every figure is a multiple of 0.5 s, so floats hold them exactly
    assert j["window_seconds"] == run.wall
    assert sum(n["untimed"]["cancelled"]["requests"] for n in j["nodes"].values()) == cancelled
    assert list(j["nodes"]) == list(run.nodes)
    for name, reqs in run.nodes.items():
        node = j["nodes"][name]
        assert node["requests"] == len(reqs)
        assert node["kinds"] == {
            "extraction": sum(1 for r in reqs if r[2] >= split),
            "reconcile": sum(1 for r in reqs if r[2] < split),
        }
        assert node["busy_seconds"] == run.busy[name]
        assert node["tokens"] == sum(r[2] for r in reqs)
    assert j["concurrency_seconds"] == {str(k): v for k, v in enumerate(run.hist)}
    assert j["mix_seconds"] == {
        "idle": run.hist[0],
        "extraction": run.kinds["extract-only"],
        "reconcile": run.kinds["reconcile-only"],
        "extraction+reconcile": run.kinds["mixed"],
    }
    for kind, reqs, secs in (("extraction", run.ext, run.ext_s), ("reconcile", run.rec, run.rec_s)):
        assert j["kinds"][kind] == {
            "requests": len(reqs),
            "request_seconds": secs,
            "median_seconds": seed_median(reqs),
        }
    assert j["total_node_seconds"] == run.ext_s + run.rec_s
    assert j["ideal_seconds"] == run.ideal
    assert j["parse_errors"] == dict.fromkeys(run.nodes, 0)


def seed_run(case: Case) -> SeedRun:
    nodes = {f"node{i}": seed_fetch(render_text(case, i), case.since, case.until) for i in range(3)}
    # the generator and the port agree on what lies in the window
    assert [len(v) for v in nodes.values()] == [len(n.reqs) for n in case.nodes]
    return seed_timeline(nodes, *seed_window(case.since, case.until), case.split_tokens)


def check_case(case: Case, directory: Path, capsys: pytest.CaptureFixture[str]) -> SeedRun:
    text_paths, mixed_paths = [], []
    for i, node in enumerate(case.nodes):
        p = directory / f"node{i}.log"
        p.write_text(render_text(case, i), encoding="utf-8")
        text_paths.append(p)
        if node.as_json:
            p = directory / f"node{i}.json"
            p.write_text(render_json(case, i), encoding="utf-8")
        mixed_paths.append(p)
    run = seed_run(case)
    text = run_ours(capsys, report_argv(case, text_paths, "text"))
    assert_text_agrees(run, text, cancels(case))
    out_json = run_ours(capsys, report_argv(case, text_paths, "json"))
    assert_json_agrees(run, json.loads(out_json), case.split_tokens, cancels(case))
    if mixed_paths != text_paths:  # JSON dumps give ours the very same report
        assert run_ours(capsys, report_argv(case, mixed_paths, "text")) == text
        assert run_ours(capsys, report_argv(case, mixed_paths, "json")) == out_json
    return run


# -- tests ----------------------------------------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(case=cases())
def test_report_agrees_with_seed(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        run = check_case(case, Path(d), capsys)
    event("no extraction (the seed crashes)" if run.crashed else "extraction calls")
    event("reconcile calls" if run.rec else "no reconcile (the seed omits its line)")
    event(f"at most {max(k for k, v in enumerate(run.hist) if v)} nodes at once")
    event("some nodes as JSON" if any(n.as_json for n in case.nodes) else "text dumps only")


FIXED = [
    (1, "both"),
    (2, "both"),
    (3, "both"),
    (4, "no-extraction"),
    (5, "no-reconcile"),
    (6, "idle"),
]


@pytest.mark.parametrize(("seed", "mode"), FIXED)
def test_fixed_seeds(
    seed: int, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = random_case(seed, mode)
    run = check_case(case, tmp_path, capsys)
    assert run.crashed == (mode in ("no-extraction", "idle"))
    if mode == "both":
        assert run.ext and run.rec
        assert any(n.as_json for n in case.nodes)
        assert run.hist[0] > 0 and run.hist[2] + run.hist[3] > 0  # idle and overlapping stretches
    if mode == "no-reconcile":
        assert not run.rec and not any("reconcile:" in line for line in run.lines)


@pytest.mark.parametrize(
    ("seed", "mode"), [(11, "both"), (12, "both"), (13, "no-extraction"), (14, "no-reconcile")]
)
def test_split_tokens(
    seed: int, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = random_case(seed, mode, split=800)
    run = check_case(case, tmp_path, capsys)
    if mode == "both":  # the split moved requests between the kinds
        tokens = [r[2] for reqs in run.nodes.values() for r in reqs]
        assert any(600 <= t < 800 for t in tokens)
        assert run.ext and run.rec


def test_subprocess(tmp_path: Path) -> None:
    """`python -m exporter report` prints what the in-process call prints."""
    case = random_case(2, "both")
    paths = []
    for i in range(3):
        p = tmp_path / f"node{i}.log"
        p.write_text(render_text(case, i), encoding="utf-8")
        paths.append(p)
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", *report_argv(case, paths, "text")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=60,
    )
    assert_text_agrees(seed_run(case), proc.stdout, cancels(case))


SEED_ABSENT_OUTSIDE_CI = not SEED_SCRIPT.is_file() and not os.environ.get("CI")


@pytest.mark.skipif(SEED_ABSENT_OUTSIDE_CI, reason="no seed script here (in CI: fails)")
@pytest.mark.parametrize(
    ("seed", "mode", "split"),
    [(1, "both", None), (4, "no-extraction", None), (5, "no-reconcile", 800)],
)
def test_port_matches_seed_script(
    seed: int,
    mode: str,
    split: int | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The port prints what timeline.py itself prints, its fetch() fed the same dumps."""
    case = random_case(seed, mode, split)
    source = SEED_SCRIPT.read_text(encoding="utf-8").split("\n", 1)[1]  # first line: its name
    ns: dict[str, Any] = {"__name__": "timeline_seed"}
    exec(compile(source, "timeline.py", "exec"), ns)
    dumps = {f"172.31.{i + 1}.1": render_text(case, i) for i in range(3)}

    def fetch(ip: str, since: str, until: str) -> list[SeedRequest]:
        return seed_fetch(dumps[ip], since, until)

    ns["fetch"] = fetch
    argv = ["timeline.py", "--since", case.since, "--until", case.until]
    if split is not None:
        argv += ["--split-tokens", str(split)]
    monkeypatch.setattr(sys, "argv", argv)
    run = seed_run(case)
    capsys.readouterr()
    if run.crashed:
        with pytest.raises(IndexError):
            ns["main"]()
    else:
        ns["main"]()
    assert capsys.readouterr().out.splitlines() == run.lines

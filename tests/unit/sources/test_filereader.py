"""The followed dump file: appends, partial lines, truncation, replacement, a missing file,
`since`, resuming, the keyword filter (it must lose nothing the parser could use), bad lines,
small chunks, and `run()` on a real asyncio loop. Every test works on real files in tmp_path."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.base.records import Batch, Event, EventKind, Interval, LogLine, Record
from exporter.compiled.switch import speedups
from exporter.parse.parser import Parser
from exporter.parse.tokens import KEYWORDS, classify
from exporter.sources.entries import EntryDecoder
from exporter.sources.file import FilePosition
from exporter.sources.filereader import READ_AHEAD, FileSource
from exporter.sources.lines import find_lines
from exporter.sources.readahead import BACKLOG_READS, CHUNK

from support.fifos import fifo_writer, unblock
from support.tools import deadline, examples, wait_for

T0 = 1_790_062_264_127_792  # 2026-09-22T07:31:04.127792Z


MS = 1000


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


FORMATS = ("short", "json")


PID = 4242


D = "slot print_timing: id  0 | task 36 | "


PROMPT_C = "prompt eval time =    1171.24 ms /   381 tokens (    3.07 ms per token,   325.30 tokens per second)"


EVAL_C = "       eval time =    3364.22 ms /   124 tokens (   27.13 ms per token,    36.86 tokens per second)"


TOTAL_C = "      total time =    4535.45 ms /   505 tokens"


TOTAL_D = "slot print_timing: id  0 | task 36 |       total time =    4535.45 ms /   505 tokens"


LAUNCH = "slot launch_slot_: id  0 | task {t} | processing task"


RELEASE = "slot      release: id  0 | task {t} | stop processing: n_past = 505, truncated = 0"


B_TAIL = 'tid="123510069428224" timestamp=1748883151 id_slot=0 id_task={t}'


B_PROMPT = (
    "INFO [           print_timings] prompt eval time     =    1171.24 ms /   381 tokens "
    "(    3.07 ms per token,   325.30 tokens per second) | "
    + B_TAIL
    + " t_prompt_processing=1171.238 n_prompt_tokens_processed=381 t_token=3.07 n_tokens_second=325.29"
)


B_EVAL = (
    "INFO [           print_timings] generation eval time =    3364.22 ms /   124 runs   "
    "(   27.13 ms per token,    36.86 tokens per second) | "
    + B_TAIL
    + " t_token_generation=3364.215 n_decoded=124 t_token=27.13 n_tokens_second=36.85"
)


B_TOTAL = (
    "INFO [           print_timings]           total time =    4535.45 ms | "
    + B_TAIL
    + " t_prompt_processing=1171.238 t_token_generation=3364.215 t_total=4535.453"
)


B_START = "INFO [   launch_slot_with_task] slot is processing task | " + B_TAIL


B_RELEASED = (
    "INFO [            update_slots] slot released | "
    + B_TAIL
    + " n_ctx=40960 n_past=960 truncated=false"
)


NOISE = "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200"


NOISES = (
    NOISE,
    "srv  params_from_: Chat format: Content-only",
    "que    start_loop: processing new tasks",
    "srv  update_slots: all slots are idle",
    "srv  log_server_r: request: GET /health 127.0.0.1 200",
)


def _printable(msg: bytes) -> bool:
    """Whether journalctl -o json shows MESSAGE as a string (else as an array of byte values)."""
    try:
        text = msg.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F for c in text)


def render(form: str, t_us: int, msg: str | bytes, pid: int = PID, seq: int = 1) -> bytes:
    """One journal entry as `journalctl -o short-iso-precise` or `-o json` prints it."""
    raw = msg.encode() if isinstance(msg, str) else msg
    if form == "short":
        stamp = (EPOCH + timedelta(microseconds=t_us)).strftime("%Y-%m-%dT%H:%M:%S.%f%z")
        return f"{stamp} node0 sm-llm[{pid}]: ".encode() + raw
    rec: dict[str, object] = {
        "__CURSOR": f"s=0a1b;i={seq:x};b=77;m=1;t={t_us:x};x=9",
        "__REALTIME_TIMESTAMP": str(t_us),
        "_PID": str(pid),
        "_SYSTEMD_UNIT": "sm-llm.service",
        "MESSAGE": raw.decode() if _printable(raw) else list(raw),
    }
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()


def lines_of(*lines: bytes) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def position(path: Path, offset: int | None = None) -> str:
    info = os.stat(path)
    return str(FilePosition(info.st_dev, info.st_ino, info.st_size if offset is None else offset))


def step(src: FileSource) -> Batch:
    batch = src.step()
    assert batch is not None
    return batch


def drain(src: FileSource) -> list[Batch]:
    """Every batch until the source has nothing new (a bounded loop, not a wait)."""
    out: list[Batch] = []
    for _ in range(100_000):
        batch = src.step()
        if batch is None:
            return out
        out.append(batch)
    raise AssertionError("the source never ran out of new data")


def messages(batches: list[Batch]) -> list[str]:
    return [line.message for b in batches for line in b.lines]


@pytest.mark.parametrize("form", FORMATS)
def test_appends_arrive_in_next_step(tmp_path: Path, form: str) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(
        lines_of(
            render(form, T0, LAUNCH.format(t=36), seq=1),
            render(form, T0 + 1 * MS, NOISE, seq=2),
        )
    )
    src = FileSource("node0", path, since_us=0)

    first = step(src)
    assert [x.message for x in first.lines] == [LAUNCH.format(t=36)]
    assert first.lines[0].node == "node0" and first.lines[0].pid == PID
    assert first.entries == 2  # the irrelevant line is counted, not handed over
    assert first.newest_us == T0 + 1 * MS  # the last whole line, irrelevant or not
    assert first.position == position(path)
    assert first.up and first.caught_up and first.errors == ()
    assert src.step() is None  # nothing new: nothing to say

    append(
        path,
        lines_of(
            render(form, T0 + 4535 * MS, TOTAL_D, seq=3),
            render(form, T0 + 4536 * MS, RELEASE.format(t=36), seq=4),
            render(form, T0 + 4537 * MS, NOISE, seq=5),
        ),
    )
    second = step(src)
    assert [x.message for x in second.lines] == [TOTAL_D, RELEASE.format(t=36)]
    assert [x.time_us for x in second.lines] == [T0 + 4535 * MS, T0 + 4536 * MS]
    assert second.entries == 3
    assert second.newest_us == T0 + 4537 * MS
    assert second.position == position(path)
    assert second.caught_up
    assert src.step() is None


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize(
    "cuts",
    [
        [1],  # only the first byte of the line is there
        [-1],  # all but its newline
        ["total", "total time"],  # cut inside the keyword, then just after it
        [10, 20, 30, 40],  # dribbled in
    ],
    ids=["first-byte", "no-newline", "inside-keyword", "dribbled"],
)
def test_partial_line_waits_for_its_newline(
    tmp_path: Path, form: str, cuts: list[int | str]
) -> None:
    path = tmp_path / "node0.log"
    done = render(form, T0, NOISE, seq=1)
    line = render(form, T0 + 4535 * MS, TOTAL_D, seq=2)
    offsets = [
        line.index(c.encode()) + len(c) if isinstance(c, str) else c % len(line) for c in cuts
    ]
    path.write_bytes(lines_of(done))
    src = FileSource("node0", path, since_us=0)
    assert step(src).entries == 1

    written = 0
    for offset in offsets:
        append(path, line[written:offset])
        written = offset
        batch = src.step()
        if batch is not None:  # it may say "caught up", but hands over nothing
            assert batch.lines == () and batch.entries == 0
            assert batch.position in ("", position(path, len(done) + 1))
    append(path, line[written:] + b"\n")
    whole = step(src)
    assert [x.message for x in whole.lines] == [TOTAL_D]
    assert whole.lines[0].time_us == T0 + 4535 * MS
    assert whole.entries == 1 and whole.newest_us == T0 + 4535 * MS
    assert whole.position == position(path)
    assert src.step() is None  # once


@pytest.mark.parametrize("half_line", [False, True], ids=["whole-lines", "half-line-pending"])
@pytest.mark.parametrize("seen_empty", [True, False], ids=["seen-empty", "rewritten-at-once"])
def test_truncated_file_is_read_again_from_start(
    tmp_path: Path, seen_empty: bool, half_line: bool
) -> None:
    path = tmp_path / "node0.log"
    old = [render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(5)]
    path.write_bytes(lines_of(*old) + (old[0][:30] if half_line else b""))
    src = FileSource("node0", path, since_us=0)
    assert len(step(src).lines) == 5
    ino = os.stat(path).st_ino

    new = [render("short", T0 + 10_000 * MS, TOTAL_D), render("short", T0 + 10_001 * MS, NOISE)]
    with path.open("r+b") as f:
        f.truncate(0)
    if seen_empty:
        empty = step(src)
        assert empty.lines == () and empty.caught_up
        assert empty.position == position(path, 0)
    append(path, lines_of(*new))
    assert os.stat(path).st_ino == ino  # the same file, shorter than what was read of it

    batches = drain(src)
    assert messages(batches) == [TOTAL_D]  # nothing of the old file's rest glued on
    assert not any(b.errors for b in batches)
    assert sum(b.entries for b in batches) == 2
    assert batches[-1].position == position(path)
    assert batches[-1].caught_up


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize("gap", [False, True], ids=["new-file-at-once", "path-missing-a-while"])
def test_replaced_file_old_rest_then_new_from_start(tmp_path: Path, form: str, gap: bool) -> None:
    path = tmp_path / "node0.log"
    rotated = tmp_path / "node0.log.1"

    def entry(i: int) -> bytes:
        return render(form, T0 + i * MS, LAUNCH.format(t=i), seq=i)

    path.write_bytes(lines_of(entry(0), entry(1)))
    src = FileSource("node0", path, since_us=0)
    assert len(step(src).lines) == 2

    append(path, lines_of(entry(2)))  # written before the rotation, not read yet
    path.rename(rotated)
    append(rotated, lines_of(entry(3)))  # the writer still held the old file
    if gap:
        rest = step(src)  # the old file's rest comes even while nothing is at the path
        assert [x.message for x in rest.lines] == [LAUNCH.format(t=2), LAUNCH.format(t=3)]
        assert src.step() is None  # and then it waits, still up: no batch at all
    path.write_bytes(lines_of(entry(4), entry(5)))

    batches = drain(src)
    got = [LAUNCH.format(t=i) for i in range(2, 6)]
    assert messages(batches) == (got[2:] if gap else got)
    assert all(b.up for b in batches)
    assert batches[-1].position == position(path)  # the new inode, at its end
    assert batches[-1].caught_up

    append(path, lines_of(entry(6)))  # and the new file is followed
    assert [x.message for x in step(src).lines] == [LAUNCH.format(t=6)]


def test_replaced_file_with_unfinished_last_line(tmp_path: Path) -> None:
    """The old file's unfinished line never got its newline: it is not glued to the new file."""
    path = tmp_path / "node0.log"
    done = render("json", T0, LAUNCH.format(t=1))
    path.write_bytes(lines_of(done) + render("json", T0 + MS, TOTAL_D)[:40])
    src = FileSource("node0", path, since_us=0)
    assert [x.message for x in step(src).lines] == [LAUNCH.format(t=1)]

    path.rename(tmp_path / "node0.log.1")
    path.write_bytes(lines_of(render("json", T0 + 2 * MS, LAUNCH.format(t=2))))
    batches = drain(src)
    assert messages(batches) == [LAUNCH.format(t=2)]
    assert not any(b.errors for b in batches)
    assert sum(b.entries for b in batches) == 1
    assert batches[-1].position == position(path)


def test_missing_file_said_once_then_followed_from_start(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    src = FileSource("node0", path, since_us=0)

    down = step(src)
    assert not down.up and down.lines == () and str(path) in down.error
    for _ in range(3):
        assert src.step() is None  # said once, not at every poll

    path.write_bytes(lines_of(render("json", T0, TOTAL_D), render("json", T0 + MS, NOISE)))
    batches = drain(src)
    assert all(b.up for b in batches)
    assert messages(batches) == [TOTAL_D]
    assert sum(b.entries for b in batches) == 2
    assert batches[-1].position == position(path) and batches[-1].caught_up


@pytest.mark.parametrize(
    ("since_us", "tasks"),
    [
        (0, [0, 1, 2]),
        (T0, [0, 1, 2]),
        (T0 + 1, [1, 2]),
        (T0 + 1000 * MS, [1, 2]),  # `since` itself is in
        (T0 + 2000 * MS + 1, []),
    ],
)
def test_since_drops_older_lines_but_counts_them(
    tmp_path: Path, since_us: int, tasks: list[int]
) -> None:
    path = tmp_path / "node0.log"
    entries: list[bytes] = []
    for i in range(3):
        entries += [
            render("short", T0 + i * 1000 * MS, LAUNCH.format(t=i)),
            render("short", T0 + i * 1000 * MS + 1, NOISE),
        ]
    path.write_bytes(lines_of(*entries))
    batch = step(FileSource("node0", path, since_us=since_us))
    assert [x.message for x in batch.lines] == [LAUNCH.format(t=t) for t in tasks]
    assert batch.entries == 6
    assert batch.newest_us == T0 + 2000 * MS + 1
    assert batch.position == position(path)


def test_resume_continues_after_the_position(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(
        lines_of(*(render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(3)))
    )
    saved = step(FileSource("node0", path, since_us=0)).position
    append(path, lines_of(*(render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(3, 5))))

    batches = drain(FileSource("node0", path, since_us=0, position=saved))
    assert messages(batches) == [LAUNCH.format(t=3), LAUNCH.format(t=4)]
    assert sum(b.entries for b in batches) == 2
    assert batches[-1].position == position(path)


def test_resume_mid_file_position(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    lines = [render("json", T0 + i * MS, LAUNCH.format(t=i), seq=i) for i in range(4)]
    path.write_bytes(lines_of(*lines))
    at = len(lines_of(*lines[:2]))
    batches = drain(FileSource("node0", path, since_us=0, position=position(path, at)))
    assert messages(batches) == [LAUNCH.format(t=2), LAUNCH.format(t=3)]
    assert [x.cursor for b in batches for x in b.lines] == [
        json.loads(line)["__CURSOR"] for line in lines[2:]
    ]


@pytest.mark.parametrize("case", ["other-inode", "offset-past-end", "garbage", "empty"])
def test_resume_that_does_not_fit_starts_from_the_beginning(tmp_path: Path, case: str) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(
        lines_of(*(render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(3)))
    )
    saved = position(path)  # after all three lines of this inode
    if case == "other-inode":  # a longer file: the saved offset would fit in it
        path.rename(tmp_path / "node0.log.1")
        path.write_bytes(
            lines_of(*(render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(5, 10)))
        )
        expected = [LAUNCH.format(t=i) for i in range(5, 10)]
    else:
        expected = [LAUNCH.format(t=i) for i in range(3)]
        if case == "offset-past-end":
            saved = position(path, os.stat(path).st_size + 1)
        elif case == "garbage":
            saved = "not:a:position"
        else:
            saved = ""
    batches = drain(FileSource("node0", path, since_us=0, position=saved))
    assert messages(batches) == expected
    assert batches[-1].position == position(path)


# (ms after T0, pid, message): every era, starts, stops, a cancel, an error, a restart, the
# server's state, and noise between.
JOURNAL: list[tuple[int, int, str | bytes]] = [
    (0, 1, "Started sm-llm.service - llama-server."),  # systemd's: the server runs
    (0, PID, "srv    load_model: initializing slots, n_slots = 2"),
    (0, PID, LAUNCH.format(t=36)),
    (1, PID, NOISE),
    (
        2,
        PID,
        "slot update_slots: id  0 | task 36 | prompt processing progress, n_tokens = 4096, batch.n_tokens = 2048, progress = 0.819200",
    ),
    (3000, PID, "slot print_timing: id  0 | task 36 | n_decoded =    100, tg =  11.44 t/s"),
    (4535, PID, D + PROMPT_C),
    (4535, PID, D + EVAL_C),
    (4535, PID, TOTAL_D),
    (4535, PID, D + "   graphs reused =        122"),
    (4535, PID, RELEASE.format(t=36)),
    (4536, PID, NOISE),
    (5000, PID, LAUNCH.format(t=37)),
    (5099, PID, "W srv          stop: cancel task, id_task = 37"),
    (5100, PID, RELEASE.format(t=37)),  # never timed: a cancel
    *[(6000 + i, PID, NOISES[i % len(NOISES)]) for i in range(20)],
    (6500, PID, LAUNCH.format(t=39)),
    (
        6600,
        PID,
        "E srv    send_error: task id = 39, error: request (4804 tokens) exceeds the available "
        "context size (512 tokens), try increasing it",
    ),
    (6601, PID, RELEASE.format(t=39)),  # never timed: an error
    (
        6700,
        PID,
        'srv  log_server_r: request:  {"prompt": "slot print_timing: id  0 | task 99 |       '
        'total time =    1.00 ms /   5 tokens"}',  # a request body quoting one: no request
    ),
    (7000, PID, b"srv  \xff\xfe not utf-8 noise"),
    (8000, PID, LAUNCH.format(t=38).replace("id  0", "id  1")),
    (12535, PID, "slot print_timing: id  1 | task 38 | "),  # era C header, body with \r
    (12535, PID, "\r" + PROMPT_C),
    (12535, PID, "\r" + EVAL_C),
    (12535, PID, "\r" + TOTAL_C),
    (
        12536,
        PID,
        "slot      release: id  1 | task 38 | stop processing: n_past = 505, truncated = 0",
    ),
    (12537, PID, "slot get_availabl: id  0 | task -1 | selected slot by LRU, t_last = 12536"),
    *[(13000 + i, PID, NOISES[i % len(NOISES)]) for i in range(20)],
    # llama-server restarted (a new PID), an era B build
    (20000, 5151, B_START.format(t=408)),
    (20001, 5151, NOISE),
    (24535, 5151, B_PROMPT.format(t=408)),
    (24535, 5151, B_EVAL.format(t=408)),
    (24535, 5151, B_TOTAL.format(t=408)),
    (24536, 5151, B_RELEASED.format(t=408)),
    (30000, 5151, B_START.format(t=409)),
    (30100, 5151, B_RELEASED.format(t=409)),  # never timed: a cancel
    *[(31000 + i, 5151, NOISES[i % len(NOISES)]) for i in range(20)],
    (80000, 5151, "srv ... print_timing: ... total time = 47390.06 ms / 730 tokens"),
    (80001, 5151, NOISE),
]


def write_journal(path: Path, form: str) -> None:
    lines = [render(form, T0 + t * MS, msg, pid, seq) for seq, (t, pid, msg) in enumerate(JOURNAL)]
    if form == "short":  # journalctl's notes are lines too
        lines.insert(len(lines) // 2, b"-- Boot 4b1c2d0e8f --")
    path.write_bytes(lines_of(*lines))


def parse_all(lines: list[LogLine]) -> tuple[list[Interval], Counter[Record]]:
    """Intervals in order, and every record once the parser has decided its pending stops."""
    parser = Parser("node0")
    out: list[Record] = []
    for line in lines:
        out += parser.feed(line)
    out += parser.flush(T0 + 10**12)
    return [r for r in out if isinstance(r, Interval)], Counter(out)


def every_line(path: Path) -> list[LogLine]:
    decoder = EntryDecoder("node0")
    decoded = (decoder.decode(raw) for raw in path.read_bytes().split(b"\n"))
    return [line for line in decoded if line is not None]


@pytest.mark.parametrize("chunk", [CHUNK, 64])
@pytest.mark.parametrize("form", FORMATS)
def test_filtered_lines_parse_like_every_line(tmp_path: Path, form: str, chunk: int) -> None:
    path = tmp_path / "node0.log"
    write_journal(path, form)
    batches = drain(FileSource("node0", path, since_us=0, chunk=chunk))
    handed = [line for b in batches for line in b.lines]
    assert len(handed) < len(JOURNAL) // 2  # the filter did skip the noise

    intervals, records = parse_all(handed)
    want_intervals, want_records = parse_all(every_line(path))
    assert intervals == want_intervals
    assert records == want_records
    assert not any(b.errors for b in batches)
    # not a vacuous comparison: every era's request, the starts, cancels, the error, the server's
    # state and the restart are in (the cancels and the error from their launch to their release)
    assert [(i.task, i.tokens, i.duration_us, i.reason) for i in intervals] == [
        (36, 505, 4_535_450, ""),
        (37, None, 100_000, "cancelled"),
        (39, None, 101_000, "error"),
        (38, 505, 4_535_450, ""),
        (408, 505, 4_535_450, ""),
        (409, None, 100_000, "cancelled"),
        (None, 730, 47_390_060, ""),
    ]
    assert intervals[3].prompt_tokens == 381  # the \r body of era C, an array of bytes in JSON
    events = [r for r in records.elements() if isinstance(r, Event)]
    assert Counter((e.kind, e.task) for e in events) == Counter(
        {
            (EventKind.SERVER_UP, None): 1,
            (EventKind.SLOTS, None): 1,
            (EventKind.PHASE, None): 2,  # (start-up milestones: no prefix, no clock in `task`)
            (EventKind.STARTED, 36): 1,
            (EventKind.STARTED, 37): 1,
            (EventKind.STARTED, 38): 1,
            (EventKind.STARTED, 39): 1,
            (EventKind.STARTED, 408): 1,
            (EventKind.STARTED, 409): 1,
            (EventKind.RESTART, None): 1,
        }
    )
    (slots,) = [e for e in events if e.kind is EventKind.SLOTS]
    assert slots.slot == 2


def test_json_byte_array_message_is_handed_over_decoded(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    raw = render("json", T0, "\r" + TOTAL_C)
    assert b'"MESSAGE":[13,' in raw  # as journalctl prints a MESSAGE with a control character
    path.write_bytes(lines_of(raw, render("json", T0 + 1, b"\xffslot released \xfe")))
    batch = step(FileSource("node0", path, since_us=0))
    assert [x.message for x in batch.lines] == ["\r" + TOTAL_C, "\ufffdslot released \ufffd"]


FRAGMENTS = [
    *(k.decode() for k in KEYWORDS),
    "total",
    " time",
    "eval",
    "slot",
    " is processing",
    " task",
    " | ",
    "task ",
    " released",
    "time",
    "4535.45 ms",
    " = ",
    NOISE,
    " ",
    "\r",
    "\t",
    "\x7f",
    "é",
    '"',
    "\\",
    "MESSAGE",
    "[",
    ":",
]


messages_st = st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join)


entries_st = st.lists(st.tuples(messages_st, st.sampled_from(FORMATS)), min_size=1, max_size=6)


@settings(max_examples=examples(400), deadline=None)
@given(entries=entries_st)
def test_relevant_lines_hold_every_line_the_parser_could_use(
    entries: list[tuple[str, str]],
) -> None:
    raws = [render(form, T0 + i, msg, seq=i) for i, (msg, form) in enumerate(entries)]
    out = list(find_lines(lines_of(*raws)))
    decoder = EntryDecoder("node0")
    # whole lines, in order, each at most once
    rest = iter(raws)
    assert all(any(got == raw for raw in rest) for got in out)
    for raw in raws:
        line = decoder.decode(raw)
        assert line is not None
        if classify(line.message) is not None:
            assert raw in out, (line.message, raw)


@pytest.mark.parametrize(
    "bad",
    [
        [b'{"MESSAGE": "total time = 1.00 ms'],  # a JSON entry cut short
        [b"garbage with total time = 1.00 ms in it"],
        [b'{"MESSAGE": "slot released", "_PID": "1"}'],  # JSON, but no journal time
        [b"2026-13-45T99:99:99.1+0000 node0 sm-llm[1]: total time = 1.00 ms"],
        [b'{"MESSAGE": "eval time', b"and slot is processing task here"],
    ],
)
def test_unreadable_keyword_lines_are_errors_naming_the_file(
    tmp_path: Path, bad: list[bytes]
) -> None:
    path = tmp_path / "node0.log"
    good = [render("json", T0, LAUNCH.format(t=1)), render("short", T0 + MS, TOTAL_D)]
    skipped = b"garbage without any of the words"  # cannot matter: skipped unread
    path.write_bytes(lines_of(good[0], *bad, skipped, good[1]))
    batches = drain(FileSource("node0", path, since_us=0))  # does not raise
    assert messages(batches) == [LAUNCH.format(t=1), TOTAL_D]
    errors = [e for b in batches for e in b.errors]
    assert len(errors) == len(bad)
    # named by file and line number (the bad lines follow the first good one)
    assert [e.split(": ", 1)[0] for e in errors] == [f"{path}:{2 + i}" for i in range(len(bad))]
    assert sum(b.entries for b in batches) == len(bad) + 3
    assert batches[-1].newest_us == T0 + MS


@pytest.mark.parametrize("chunk", [64, 7])
def test_small_chunks_reassemble_lines_and_report_caught_up_at_the_end(
    tmp_path: Path, chunk: int
) -> None:
    path = tmp_path / "node0.log"
    write_journal(path, "json")
    data = path.read_bytes()
    big = drain(FileSource("node0", path, since_us=0))
    small = drain(FileSource("node0", path, since_us=0, chunk=chunk))

    assert len(big) == 1 and len(small) >= len(data) // (
        chunk * BACKLOG_READS
    )  # a backlog: larger reads
    assert [x for b in small for x in b.lines] == list(big[0].lines)
    assert sum(b.entries for b in small) == big[0].entries == len(JOURNAL)
    assert [b.caught_up for b in small] == [False] * (len(small) - 1) + [True]
    assert small[-1].position == big[0].position == position(path)
    parsed = [FilePosition.parse(b.position) for b in small]
    ends = [p.offset for p in parsed if p is not None]
    assert len(ends) == len(small) and ends == sorted(ends)
    assert all(end == 0 or data[end - 1 : end] == b"\n" for end in ends)  # at line ends only
    newest = [b.newest_us for b in small if b.entries]
    times = [t for t in newest if t is not None]
    assert len(times) == len(newest) and times == sorted(times)
    assert times[-1] == big[0].newest_us == T0 + 80001 * MS


def test_a_read_that_ends_at_the_end_exactly_is_told_caught_up_by_the_next(
    tmp_path: Path,
) -> None:
    """A full read does not ask the file's size (a backlog's reads would each give up the
    interpreter lock for it): when it ended at the end exactly, the next step finds nothing
    more and says the source caught up, at the same position."""
    path = tmp_path / "node0.log"
    data = lines_of(*(render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(4)))
    path.write_bytes(data)
    src = FileSource("node0", path, since_us=0, chunk=len(data))
    first, last = step(src), step(src)
    assert len(first.lines) == 4 and not first.caught_up
    assert first.position == last.position == position(path)
    assert last.caught_up and not last.lines and not last.entries
    assert src.step() is None


def test_nuls_that_end_a_full_read_at_the_end_are_held_back(tmp_path: Path) -> None:
    """A full read that ends in NULs asks the size: at the end of the file, the NULs are a
    gap a writer may fill yet, not read past."""
    path = tmp_path / "node0.log"
    line = lines_of(render("short", T0, LAUNCH.format(t=0)))
    path.write_bytes(line + b"\0" * 64)
    src = FileSource("node0", path, since_us=0, chunk=len(line) + 64)
    batch = step(src)
    assert messages([batch]) == [LAUNCH.format(t=0)]
    assert batch.caught_up
    assert batch.position == position(path, len(line))


def test_the_descriptors_offset_is_where_the_reading_is(tmp_path: Path) -> None:
    """What `lsof -o` and /proc/PID/fdinfo show of the open dump is how far it was read: after
    a read, after NULs held back at its end, and after it was rewritten in place."""
    path = tmp_path / "node0.log"
    line = lines_of(render("short", T0, LAUNCH.format(t=0)))
    path.write_bytes(line + b"\0" * 10)
    src = FileSource("node0", path, since_us=0)

    def offset() -> int:
        assert src._file is not None
        return os.lseek(src._file.fileno(), 0, os.SEEK_CUR)

    step(src)
    assert offset() == len(line)  # (the NULs not read past)
    more = lines_of(render("short", T0 + MS, LAUNCH.format(t=1)))
    with path.open("r+b") as f:
        f.seek(len(line))
        f.write(more)
    step(src)
    assert offset() == len(line + more) == os.path.getsize(path)
    path.write_bytes(more + line)  # (the same length, other bytes: rewritten in place)
    batch = step(src)
    assert messages([batch]) == [LAUNCH.format(t=1), LAUNCH.format(t=0)]
    assert offset() == len(more + line)


def wait_for_the_read_ahead(src: FileSource) -> None:
    """Compiled, a backlog's next read is under way in a thread after a step: waited for, so
    that what a test does to the file next comes after it (pure Python reads in the step)."""
    if src._ahead is not None:
        src._ahead.reading.wait()


def test_a_backlogs_next_read_is_under_way_after_a_step_where_compiled(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    want = backlog(path, 200)
    src = FileSource("node0", path, since_us=0, chunk=1024)
    first = step(src)
    assert (src._ahead is not None) == (speedups is not None)
    assert messages([first, *drain(src)]) == want


@pytest.mark.parametrize("change", ["rewritten", "truncated"])
def test_a_backlog_changed_in_place_while_read_ahead_is_read_again_from_its_start(
    tmp_path: Path, change: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The next read checks the bytes before it, as every read does: a backlog rewritten in
    place (or truncated and written again) after a read ahead is read again from its start;
    what was read before the change stays as it was read, nothing of it glued to the new."""
    path = tmp_path / "node0.log"
    old = backlog(path, 300)
    src = FileSource("node0", path, since_us=0, chunk=1024)
    first = messages([step(src)])
    wait_for_the_read_ahead(src)
    lines = 300 if change == "rewritten" else 5  # (shorter than the first read)
    new = [LAUNCH.format(t=1000 + i) for i in range(lines)]
    data = lines_of(*(render("short", T0 + (1000 + i) * MS, m) for i, m in enumerate(new)))
    if change == "rewritten":
        with path.open("r+b") as f:  # (the same inode, as long or longer, other bytes)
            f.write(data)
    else:
        path.write_bytes(data)
    got = first + messages(drain(src))
    kept = len(got) - len(new)
    assert kept >= len(first) and got == old[:kept] + new
    assert f"was {change}" in caplog.text


def test_nuls_inside_a_backlog_read_ahead_end_lines_as_in_one_read(tmp_path: Path) -> None:
    """A read ahead that holds a NUL is framed by the line layer: the same lines, entries and
    positions as one read of the whole file, and the descriptor left at its end."""
    path = tmp_path / "node0.log"
    lines = [render("short", T0 + i * MS, LAUNCH.format(t=i)) for i in range(300)]
    path.write_bytes(lines_of(*lines[:150]) + b"\0" * 5 + lines_of(*lines[150:]))
    whole = drain(FileSource("node0", path, since_us=0))
    src = FileSource("node0", path, since_us=0, chunk=1024)
    small = drain(src)
    assert len(whole) == 1 and len(small) > 2
    assert messages(small) == messages(whole) == [LAUNCH.format(t=i) for i in range(300)]
    assert sum(b.entries for b in small) == whole[0].entries == 300
    assert small[-1].position == whole[0].position == position(path)
    assert src._file is not None
    assert os.lseek(src._file.fileno(), 0, os.SEEK_CUR) == os.path.getsize(path)


def test_a_source_closed_with_a_read_under_way_closes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    backlog(path, 300)
    src = FileSource("node0", path, since_us=0, chunk=1024)
    step(src)
    src.close()
    assert src.closed and src._ahead is None


class CountingSource(FileSource):
    """A FileSource that counts its polls, so a test can wait for the next one."""

    steps = 0

    def step(self) -> Batch | None:
        self.steps += 1
        return super().step()


async def until(done: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Wait for a condition, failing at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


async def more_polls(src: CountingSource, n: int) -> None:
    target = src.steps + n
    await until(lambda: src.steps >= target, f"{n} more polls")


async def collect(
    queue: asyncio.Queue[Batch], got: list[Batch], done: Callable[[], bool], timeout: float = 5.0
) -> None:
    """Take batches from the queue until `done()`, or fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"timed out; got {messages(got)}")
        try:
            got.append(await asyncio.wait_for(queue.get(), remaining))
        except TimeoutError:
            raise AssertionError(f"timed out; got {messages(got)}") from None


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_run_follows_appends_until_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(
        lines_of(render("short", T0, LAUNCH.format(t=0)), render("short", T0 + 1, NOISE))
    )
    src = CountingSource("node0", path, since_us=0, poll_seconds=0.01)

    async def main() -> list[Batch]:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        task = asyncio.create_task(src.run(queue))
        got: list[Batch] = []
        await collect(queue, got, lambda: any(b.caught_up for b in got))
        want = [LAUNCH.format(t=0)]
        for i in range(1, 6):
            launch = render("short", T0 + i * MS, LAUNCH.format(t=i))
            half = len(launch) // 2
            append(path, lines_of(render("short", T0 + i * MS, NOISE)) + launch[:half])
            await more_polls(src, 2)  # at least one of them has seen the half line
            append(path, launch[half:] + b"\n")
            want.append(LAUNCH.format(t=i))
            await collect(queue, got, lambda: len(messages(got)) >= len(want))
        assert messages(got) == want  # each once, in order, whole
        assert not task.done()
        await stop(task)
        return got

    got = asyncio.run(main())
    assert src.closed
    assert got[-1].position == position(path)
    assert sum(b.entries for b in got) == 2 + 2 * 5
    assert all(b.up for b in got)


def backlog(path: Path, lines: int) -> list[str]:
    """A dump of `lines` launches (a backlog of many small chunks); their messages."""
    want = [LAUNCH.format(t=i) for i in range(lines)]
    path.write_bytes(lines_of(*(render("short", T0 + i * MS, m) for i, m in enumerate(want))))
    return want


def test_run_reads_a_backlog_ahead_while_nothing_else_is_queued(tmp_path: Path) -> None:
    """The next steps are under way before the loop takes a batch: with room for one batch in
    the queue and nobody taking it, the source still reads READ_AHEAD chunks beyond the first
    (without reading ahead it reads one: the batch that then waits to be put)."""
    path = tmp_path / "node0.log"
    want = backlog(path, 200)
    src = CountingSource("node0", path, since_us=0, chunk=256)

    async def main() -> list[Batch]:
        queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
        task = asyncio.create_task(src.run(queue))
        await until(lambda: src.steps >= 1 + READ_AHEAD, "the steps read ahead")
        assert queue.qsize() == 1
        got: list[Batch] = []
        await collect(queue, got, lambda: any(b.caught_up for b in got))
        await stop(task)
        return got

    got = asyncio.run(main())
    assert messages(got) == want  # in order, each once
    assert got[-1].position == position(path)
    assert src.closed


def test_run_cancelled_with_steps_read_ahead_stops_cleanly(tmp_path: Path) -> None:
    """Cancelled while steps it queued ahead are waiting: they are dropped (the next source
    reads from the position of the last batch applied) and the file is closed."""
    path = tmp_path / "node0.log"
    backlog(path, 200)
    src = CountingSource("node0", path, since_us=0, chunk=256)

    async def main() -> None:
        queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
        task = asyncio.create_task(src.run(queue))
        await until(lambda: src.steps >= 1 + READ_AHEAD, "the steps read ahead")
        await stop(task)
        await until(lambda: src.closed, "the file closed")

    asyncio.run(main())
    assert src.steps == 1 + READ_AHEAD  # (none ran after the cancel)


def test_run_waits_for_a_missing_file_saying_so_once(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    src = CountingSource("node0", path, since_us=0, poll_seconds=0.01)

    async def main() -> list[Batch]:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        task = asyncio.create_task(src.run(queue))
        got: list[Batch] = []
        await collect(queue, got, lambda: len(got) >= 1)
        await more_polls(src, 5)  # the missing file polled again and again
        path.write_bytes(lines_of(render("json", T0, TOTAL_D)))
        await collect(queue, got, lambda: TOTAL_D in messages(got))
        await stop(task)
        return got

    got = asyncio.run(main())
    assert not got[0].up and str(path) in got[0].error
    assert [b.up for b in got].count(False) == 1  # said once, though polled again and again
    assert messages(got) == [TOTAL_D]
    assert src.closed


@pytest.mark.parametrize("layout", ['"MESSAGE":{}', '"MESSAGE": {}', '"MESSAGE" : {}'])
def test_byte_array_message_found_in_every_json_layout(tmp_path: Path, layout: str) -> None:
    """Older journalctl (systemd 219) writes `{ "MESSAGE" : [...] }`; newer ones no spaces."""
    body = json.dumps(list(b"\r      total time =    4535.45 ms /   505 tokens"))
    rec = (
        '{ "__REALTIME_TIMESTAMP" : "1790000000000000", "_PID" : "7", ' + layout.format(body) + " }"
    )
    path = tmp_path / "old.json"
    path.write_text(rec + "\n")
    batch = FileSource("n", path, since_us=0).step()
    assert batch is not None and [line.message for line in batch.lines] == [
        "\r      total time =    4535.45 ms /   505 tokens"
    ]


def test_negative_offset_in_a_position_starts_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_bytes(lines_of(render("short", T0, TOTAL_D)))
    st = os.stat(path)
    batch = FileSource("n", path, since_us=0, position=f"{st.st_dev}:{st.st_ino}:-5").step()
    assert batch is not None and [line.message for line in batch.lines] == [TOTAL_D]


def test_fifo_with_no_writer_is_nothing_to_read_until_one_writes(tmp_path: Path) -> None:
    path = tmp_path / "node0.fifo"
    os.mkfifo(path)
    src = FileSource("node0", path, since_us=0)
    try:
        with deadline(5):
            first = src.step()  # no writer: neither the open nor the read waits for one
            assert first is not None and first.up and first.caught_up and not first.entries
            assert src.step() is None  # and polled again: still nothing, said once
            writer = fifo_writer(path)
            assert writer is not None  # the source holds the read end
            assert src.step() is None  # a writer that wrote nothing yet: nothing to read
            os.write(writer, lines_of(render("short", T0, LAUNCH.format(t=1))))
            os.write(writer, lines_of(render("short", T0 + MS, TOTAL_D))[:-20])
            got = src.step()
            assert got is not None and got.caught_up and messages([got]) == [LAUNCH.format(t=1)]
            os.write(writer, lines_of(render("short", T0 + MS, TOTAL_D))[-20:])
            os.close(writer)
            got = src.step()
            assert got is not None and messages([got]) == [TOTAL_D]
            assert src.step() is None  # the writer gone: nothing more, and no error
            # a writer that comes later is read as well
            writer = fifo_writer(path)
            assert writer is not None
            os.write(writer, lines_of(render("short", T0 + 2 * MS, LAUNCH.format(t=2))))
            os.close(writer)
            got = src.step()
            assert got is not None and messages([got]) == [LAUNCH.format(t=2)]
    finally:
        unblock(path)


def test_run_on_a_fifo_with_no_writer_stops_at_once_when_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "node0.fifo"
    os.mkfifo(path)
    src = CountingSource("node0", path, since_us=0, poll_seconds=0.01)

    async def main() -> float:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        task = asyncio.create_task(src.run(queue))
        try:
            await more_polls(src, 3)  # polling the FIFO, not stuck opening it
            began = time.monotonic()
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=1.0)
            assert done, "the source did not stop within 1 s of its cancellation"
            return time.monotonic() - began
        finally:
            unblock(path)
            await asyncio.wait([task])

    assert asyncio.run(main()) < 1.0
    assert src.closed


class StuckSource(FileSource):
    """A FileSource whose reads after the first hang until released (a hung file system)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.stuck = threading.Event()
        self.release = threading.Event()
        self.steps = 0

    def step(self) -> Batch | None:
        self.steps += 1
        if self.steps > 1:  # (the first opened the file)
            self.stuck.set()
            self.release.wait(10)
        return super().step()


def test_run_does_not_wait_for_a_read_that_never_returns(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(lines_of(render("short", T0, LAUNCH.format(t=0))))
    src = StuckSource("node0", path, since_us=0, poll_seconds=0.01)

    async def main() -> None:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        task = asyncio.create_task(src.run(queue))
        try:
            await until(src.stuck.is_set, "a read to hang")
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=1.0)
            assert done, "the source waited for its stuck read"
            assert not src.closed  # the read still holds the file ...
        finally:
            src.release.set()
            await asyncio.wait([task])

    asyncio.run(main())
    wait_for(lambda: src.closed, 5, "the file closed once the read returned")  # ... until now

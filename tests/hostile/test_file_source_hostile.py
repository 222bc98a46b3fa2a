"""The followed dump against what is not a dump, rewrites in place and NULs (issue 27):

- what is not a regular file or a FIFO (a device such as `/dev/zero`, through the operator's
  symlink or not, a socket, a directory) is refused unopened as the node's error, the path
  polled, and a dump there again read (the file it left goes on from where it was; another
  file is a new one, read from its start); the daemon as a process keeps the other nodes'
  figures going meanwhile;
- a dump truncated and rewritten in place (the same inode) to as long or longer between two
  polls is read again from its start, once; one appended to (or rewritten with the same bytes
  first) is never read again; a saved position that does not end a line is no place to resume;
- a run of NUL bytes (what a power cut leaves) ends the line before it, and the line after it
  is read: compiled and pure Python (`SMLLM_PURE_PYTHON=1`), the report and the daemon's path.

Every test works on real files, real devices, real sockets and real processes."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Batch
from exporter.base.times import SECOND, iso
from exporter.commands.demo import node_lines, short_iso
from exporter.ingest import step as pipeline
from exporter.parse.parser import Parser
from exporter.sources.file import FilePosition
from exporter.sources.filereader import FileSource
from exporter.sources.lines import MAX_LINE, Chunk, LineReader

from support.daemon_process import DaemonProcess, file_nodes
from support.dumps import LAUNCH, RELEASE, T0, TOTAL, short
from support.scrape import answer, sample, total
from support.settings import default_settings
from support.tools import REPO, deadline, wait_for

KINDS = Kinds(DEFAULT_RULES)
ZERO = Path("/dev/zero")
STEPS = 8  # steps a source gets to say what it does (a bound, not a wait)


def as_json(t_us: int, msg: str) -> bytes:
    rec = {"__REALTIME_TIMESTAMP": str(t_us), "_PID": "4242", "__CURSOR": "", "MESSAGE": msg}
    return json.dumps(rec).encode()


def request(i: int, form: str = "short", task: int | None = None) -> bytes:
    """Request `i` (task `task`, i by default), at T0 + 3 i s: its launch, timing line and
    release, as long as any other request's whose task has as many digits."""
    return request_at(T0 + i * 3 * SECOND, i if task is None else task, form)


def request_at(t_us: int, task: int, form: str = "short", pid: int = 4242, ms: int = 2500) -> bytes:
    """A request of `ms` milliseconds launched at `t_us`: its three lines."""
    end = t_us + ms * 1000
    return b"".join(
        (short(at, msg, pid) if form == "short" else as_json(at, msg)) + b"\n"
        for at, msg in (
            (t_us, LAUNCH.format(s=0, t=task)),
            (end, TOTAL.format(s=0, t=task, ms=ms, n=500)),
            (end + 100, RELEASE.format(s=0, t=task, n=500)),
        )
    )


def requests(numbers: range, form: str = "short") -> bytes:
    return b"".join(request(i, form) for i in numbers)


class Counted:
    """A followed dump read as the daemon reads it (FileSource, its node's parser, the
    accounting); `requests` and `parse_errors` as the node's figures count them."""

    def __init__(self, path: Path, chunk: int = 1 << 20, position: str = "") -> None:
        self.src = FileSource("node0", path, since_us=0, chunk=chunk, position=position)
        self.acc = Accounting(["node0"], default_settings(KINDS), origin_us=0)
        self.parser = Parser("node0")

    def drain(self) -> list[Batch]:
        """Every batch until the source has nothing new (a bounded loop, not a wait)."""
        got: list[Batch] = []
        for _ in range(10_000):
            batch = self.src.step()
            if batch is None:
                return got
            got.append(self.apply(batch))
        raise AssertionError("the source never ran out of new data")

    def steps(self, n: int = STEPS) -> list[Batch]:
        """What `n` steps say (with a deadline: a read that never returns fails the test)."""
        with deadline(10):
            return [self.apply(b) for _ in range(n) if (b := self.src.step()) is not None]

    def apply(self, batch: Batch) -> Batch:
        pipeline.apply_batch(batch, self.parser, self.acc, T0 + 10**12)
        return batch

    @property
    def requests(self) -> int:
        (node,) = self.acc.snapshot().nodes
        return sum(c.requests for c in node.kinds.values())

    @property
    def parse_errors(self) -> int:
        (node,) = self.acc.snapshot().nodes
        return node.parse_errors


def opened_by(pid: int, path: Path) -> bool:
    """Does process `pid` hold `path` open?"""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except FileNotFoundError:  # a descriptor closed while listed
        return False


def point(path: Path, target: Path) -> None:
    """Make `path` a symlink to `target` in one step (as `ln -sfT` does, by a rename)."""
    tmp = path.with_name(path.name + ".new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(path)


# -- 1. what is not a dump ---------------------------------------------------------------------


@contextmanager
def not_a_dump(path: Path, kind: str) -> Iterator[str]:
    """`path` made a `kind` that is no dump; what the source says of it."""
    if kind == "dev-zero":
        path.symlink_to(ZERO)
        yield f"{path} (a symlink to /dev/zero) is a character device, not a dump file: not read"
        path.unlink()
    elif kind == "directory":
        path.mkdir()
        yield f"{path} is a directory, not a dump file: not read"
        path.rmdir()
    else:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
            yield f"{path} is a socket, not a dump file: not read"
        path.unlink()


@pytest.mark.parametrize("kind", ["dev-zero", "directory", "socket"])
def test_what_is_not_a_dump_is_refused_unread_until_a_dump_is_there(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "node0.log"
    counted = Counted(path)
    with not_a_dump(path, kind) as why:
        down = counted.steps()
        # said once, as the node's error, and polled: never opened, let alone read
        assert [(b.up, b.error, b.entries) for b in down] == [(False, why, 0)]
        assert not opened_by(os.getpid(), ZERO)
    path.write_bytes(requests(range(3)))
    batches = counted.drain()
    assert all(b.up for b in batches) and batches[-1].caught_up
    assert counted.requests == 3
    assert batches[-1].position == str(FilePosition(*_id(path), path.stat().st_size))


def _id(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


@pytest.mark.parametrize("back", ["the-same-file", "another-file"])
def test_a_followed_dump_pointed_at_dev_zero_then_put_back(tmp_path: Path, back: str) -> None:
    path, kept = tmp_path / "node0.log", tmp_path / "node0.keep"
    path.write_bytes(requests(range(2)))
    counted = Counted(path)
    counted.drain()
    assert counted.requests == 2
    with path.open("ab") as f:
        f.write(request(2) + request(3)[:30])  # written before the switch, not read yet
    os.link(path, kept)
    point(path, ZERO)
    said = counted.steps()
    assert [b.up for b in said] == [True, False]  # the old file's rest, then the refusal
    assert "(a symlink to /dev/zero) is a character device" in said[-1].error
    assert counted.requests == 3
    if back == "the-same-file":  # written to meanwhile, and renamed back
        with kept.open("ab") as f:
            f.write(request(3)[30:] + request(4))
        kept.replace(path)
        want = 5  # where it was left: nothing read twice, nothing lost
    else:
        path.unlink()
        path.write_bytes(requests(range(10, 13)))  # a new file: all of it is new
        want = 3 + 3
    batches = counted.drain()
    assert all(b.up for b in batches) and batches[-1].caught_up
    assert counted.requests == want and counted.parse_errors == 0
    assert batches[-1].position == str(FilePosition(*_id(path), path.stat().st_size))


# -- 2. a rewrite in place ---------------------------------------------------------------------


def rewrite(path: Path, data: bytes) -> None:
    """Truncate `path` and write `data` into the same inode (as `cat new > path` does)."""
    ino = path.stat().st_ino
    with path.open("r+b") as f:
        f.truncate(0)
        f.write(data)
    assert path.stat().st_ino == ino


@pytest.mark.parametrize("size", ["same-size", "larger"])
@pytest.mark.parametrize("form", ["short", "json"])
def test_a_dump_rewritten_in_place_between_polls_is_read_again_once(
    tmp_path: Path, size: str, form: str
) -> None:
    path = tmp_path / "node0.log"
    old = requests(range(4), form)
    path.write_bytes(old)
    counted = Counted(path)
    counted.drain()
    assert counted.requests == 4
    # other requests, later (tasks 5..8: the same length), and two more when larger
    n = 4 if size == "same-size" else 6
    new = b"".join(request(10 + i, form, task=5 + i) for i in range(n))
    assert (len(new) == len(old)) == (size == "same-size")
    rewrite(path, new)
    batches = counted.drain()
    assert [x.message for b in batches for x in b.lines][1::3] == [
        TOTAL.format(s=0, t=5 + i, ms=2500.0, n=500) for i in range(n)
    ]
    assert counted.requests == 4 + n
    assert counted.parse_errors == 0
    assert batches[-1].position == str(FilePosition(*_id(path), len(new)))
    assert counted.src.step() is None  # and once: nothing of it read again


def test_a_dump_appended_to_or_rewritten_with_the_same_start_goes_on(tmp_path: Path) -> None:
    """(Guards the fix above: what was read stays read.)"""
    path = tmp_path / "node0.log"
    path.write_bytes(requests(range(3)))
    counted = Counted(path, chunk=1000)  # (the fingerprint checked between small reads too)
    counted.drain()
    with path.open("ab") as f:
        f.write(request(3))
    counted.drain()
    rewrite(path, requests(range(5)))  # the same bytes, and one more request
    counted.drain()
    assert counted.requests == 5 and counted.parse_errors == 0


def test_a_saved_position_that_ends_no_line_is_not_resumed(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(requests(range(3)))
    at = len(request(0)) * 2  # after request 1
    saved = str(FilePosition(*_id(path), at))
    new = requests(range(10, 12), "json")
    assert len(new) > at and new[at - 1 : at] != b"\n"  # (it would fit, but ends no line)
    rewrite(path, new)  # while the exporter was down
    counted = Counted(path, position=saved)
    batches = counted.drain()
    assert batches[0].gap  # said: what the old file held after the position is lost
    assert counted.requests == 2 and counted.parse_errors == 0


# -- 3. NUL bytes --------------------------------------------------------------------------------

# a JSON timing line cut short by the power cut (a parse error: it holds a keyword), the NULs
# the file system left, then the lines written after the restart
CUT = as_json(T0 + 9 * SECOND, TOTAL.format(s=0, t=3, ms=1.0, n=5))[:-12]
CUT_LINE = 11  # (after requests 0 to 2 and request 3's launch)
NUL_RUNS = {"a-few": 7, "a-page": 4096, "longer-than-a-line": MAX_LINE + 10}


def powercut_dump(nuls: int) -> bytes:
    """Request 3's timing block comes after the NULs; the last request is followed by some."""
    launch, timing = request(3).split(b"\n", 1)
    return (
        requests(range(3)) + launch + b"\n" + CUT + b"\0" * nuls + timing + request(4) + b"\0" * 5
    )


@pytest.mark.slow
@pytest.mark.parametrize("nuls", list(NUL_RUNS.values()), ids=list(NUL_RUNS))
@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
def test_the_report_reads_the_line_after_a_run_of_nuls(
    tmp_path: Path, nuls: int, pure: bool
) -> None:
    path = tmp_path / "node0.log"
    path.write_bytes(powercut_dump(nuls))
    env = {**os.environ, "SMLLM_PURE_PYTHON": "1" if pure else "0"}
    window = ["--since", iso(T0), "--until", iso(T0 + 60 * SECOND), "--format", "json"]
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "report", *window, "--input", f"node0={path}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["nodes"]["node0"]["requests"] == 5
    assert out["parse_errors"] == {"node0": 1}  # the cut line, named by its line number
    assert f"{path}:{CUT_LINE}: not a journal JSON entry".encode() in r.stderr


@pytest.mark.slow
def test_the_report_refuses_a_device_as_input(tmp_path: Path) -> None:
    """`report --input n=/dev/zero` read without end; a device is never opened."""
    zero = tmp_path / "zero.log"
    zero.symlink_to("/dev/zero")
    window = ["--since", iso(T0), "--until", iso(T0 + 60 * SECOND), "--format", "json"]
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "report", *window, "--input", f"node0={zero}"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    said = r.stderr.decode()
    assert "Traceback" not in said
    assert f"node node0: {zero} is a character device, not a dump file: not read" in said
    assert "could not read 1 of 1 nodes (node0)" in said


@pytest.mark.parametrize("form", ["short", "json"])
def test_a_gap_of_nuls_at_the_end_filled_later_is_read_where_it_lands(
    tmp_path: Path, form: str
) -> None:
    """A writer that reserves its space (or NFS, for a moment) shows NULs where its bytes will
    land: they are not read past, so the bytes that fill them are read there, once, and nothing
    before them is read again."""
    path = tmp_path / "node0.log"
    first, second = request(1, form), request(2, form)
    path.write_bytes(first + b"\0" * len(second))
    counted = Counted(path)
    counted.drain()
    assert counted.requests == 1
    with path.open("r+b") as f:  # the gap filled in place, then more appended
        f.seek(len(first))
        f.write(second)
        f.seek(0, os.SEEK_END)
        f.write(request(3, form))
    counted.drain()
    assert counted.requests == 3
    assert counted.parse_errors == 0
    assert counted.src.step() is None  # (and nothing more to say)


@pytest.mark.parametrize("nuls", list(NUL_RUNS.values()), ids=list(NUL_RUNS))
@pytest.mark.parametrize("chunk", [1 << 20, 4096, 333])
def test_the_daemons_path_reads_the_line_after_a_run_of_nuls(
    tmp_path: Path, nuls: int, chunk: int
) -> None:
    path = tmp_path / "node0.log"
    data = powercut_dump(nuls)
    path.write_bytes(data)
    counted = Counted(path, chunk=chunk)  # (small reads: a run across them)
    batches = counted.drain()
    assert counted.requests == 5 and counted.parse_errors == 1
    (error,) = [e for b in batches for e in b.errors]
    assert error.startswith(f"{path}:{CUT_LINE}: not a journal JSON entry")  # (not NULs)
    assert sum(b.entries for b in batches) == data.count(b"\n") == 5 * 3
    # (the NULs that end the file are not read past: a gap may be filled there yet)
    assert batches[-1].position == str(FilePosition(*_id(path), len(data.rstrip(b"\0"))))


def test_nuls_frame_lines_alike_however_the_bytes_are_cut() -> None:
    data = short(T0, "x") + b"\0\0junk total time\n" + powercut_dump(9)

    def read(cuts: list[int]) -> Chunk:
        reader, got, at = LineReader("node0", where="f"), Chunk(), 0
        for cut in [*cuts, len(data)]:
            got.add(reader.feed(data[at:cut]))
            at = cut
        got.add(reader.end())
        return got

    whole = read([])
    assert whole.entries == data.count(b"\n")
    # the junk after the NULs is on line 1; the cut JSON line one line down from its own place
    assert [e.split(": ")[0] for e in whole.errors] == ["f:1", f"f:{CUT_LINE + 1}"]
    for step in (1, 2, 7, 100):
        cut = read(list(range(step, len(data), step)))
        assert (cut.lines, cut.errors, cut.entries) == (whole.lines, whole.errors, whole.entries)


# -- the daemon as a process: a node pointed at /dev/zero, the other goes on -------------------


NEW_PID = 4242  # (the demo's servers run as other PIDs: the lines added later are a restart)
SHORT_MS = 200  # the requests added later: just past the watermark, and short


def demo(node: str, start_us: int, seconds: int) -> tuple[bytes, int]:
    """A node's demo journal over [start_us, +seconds): its bytes and its requests."""
    lines = list(node_lines(node, 7, start_us, start_us + seconds * SECOND))
    data = "".join(short_iso(node, x) + "\n" for x in lines).encode()
    return data, sum("total time" in x.message for x in lines)


@pytest.mark.slow
def test_daemon_refuses_dev_zero_keeps_the_other_node_going_and_reads_the_dump_back(
    tmp_path: Path,
) -> None:
    start_us = (time.time_ns() // 1000 // SECOND - 3600) * SECOND  # an hour ago
    dumps = {n: tmp_path / f"{n}.log" for n in ("node0", "node1")}
    counts = {}
    for n, p in dumps.items():
        data, counts[n] = demo(n, start_us, 300)
        p.write_bytes(data)
    config = {
        "since": iso(start_us - 3600 * SECOND),
        "stall_seconds": 1,
        "nodes": file_nodes(dumps),
    }
    kept = tmp_path / "node0.keep"
    with DaemonProcess(tmp_path / "daemon", config) as d:

        def requests_of(node: str) -> float:
            return total(d.metrics(), "smllm_requests_total", node=node)

        def counted(node: str, want: float) -> bool:
            return requests_of(node) == want

        def watermark() -> float:
            return sample(d.metrics(), "smllm_accounted_until_timestamp_seconds") or 0.0

        d.start()
        for n in dumps:
            wait_for(functools.partial(counted, n, counts[n]), 20, f"{n}'s requests counted")
        os.link(dumps["node0"], kept)
        point(dumps["node0"], ZERO)
        wait_for(
            lambda: sample(d.metrics(), "smllm_source_up", node="node0") == 0, 10, "node0 down"
        )
        got = answer(d.url + "/api/status")
        assert got is not None and got[0] == 200
        (status,) = [x for x in json.loads(got[1])["nodes"] if x["name"] == "node0"]
        assert status["last_error"] == (
            f"{dumps['node0']} (a symlink to /dev/zero) is a character device, not a dump "
            "file: not read"
        )
        assert not opened_by(d.pid, ZERO)  # refused, not read
        assert "character device" in d.log_text()

        # node1 goes on: a request after the watermark counted, and the watermark past it
        # (node0, stuck reading, would hold it where node0's journal ends)
        began_us = int(watermark() * SECOND) + SHORT_MS * 1000
        with dumps["node1"].open("ab") as f:
            f.write(request_at(began_us, 9001, pid=NEW_PID, ms=SHORT_MS))
        wait_for(lambda: requests_of("node1") == counts["node1"] + 1, 20, "node1's request")
        ended = began_us / SECOND + SHORT_MS / 1000
        wait_for(lambda: watermark() >= ended, 20, "the watermark past it")

        # node0's dump put back, written to meanwhile: read on from where it was left
        began_us = int(watermark() * SECOND) + SHORT_MS * 1000
        with kept.open("ab") as f:
            f.write(request_at(began_us, 9002, pid=NEW_PID, ms=SHORT_MS))
        kept.replace(dumps["node0"])
        want = counts["node0"] + 1
        wait_for(lambda: requests_of("node0") == want, 20, "node0's new request")
        ended = began_us / SECOND + SHORT_MS / 1000
        wait_for(lambda: watermark() >= ended, 20, "the watermark past it")
        m = d.metrics()
        assert sample(m, "smllm_source_up", node="node0") == 1
        assert total(m, "smllm_requests_total", node="node0") == want  # none counted twice
        d.stop()

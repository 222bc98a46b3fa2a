"""Reads vllm-omni init timelines: a JSON dump and a run directory's worker files, merged.

vllm-omni's `init_timeline.py` (the seed) writes the engine's JSON dump (`{"schema": 1, "t0",
"t_end", "total_s", "phases"}`) and, in a run directory, a `worker_<pid>.jsonl` per worker
process, a phase a line. `load` takes a dump (any file not named `*.jsonl`), a run directory, a
single `.jsonl` file, or a dump and a run directory: the dump's phases first, then the worker
files (a directory's in name order, as the seed's `sorted(glob)`) merged in with
`Timeline.merge`, the seed's key (pid, name, start): a worker phase the dump holds already is a
duplicate. Without a dump the timeline runs from the earliest phase start to the latest end.

A record is read as the seed's `ingest_workers` reads a line (`str(d["name"])`,
`float(d["start"])`, `int(d.get("pid", 0) or 0)`, ...; a dump's role defaults to "engine"),
and one it skips is skipped here, named `<path>:<line>: <why>` (a dump's: `<path>: phases[<i>]:
<why>`). Where this differs from the seed, the reason says so:
- a start or end not finite (NaN, inf) or no time (beyond 1e11 s of the epoch: spans would
  overflow), or a `stage_id` neither null nor an int (a bool is no int), is skipped: the seed
  takes it and then prints garbage, or crashes on an unhashable stage or an infinite span;
- a lone surrogate in a name or role (JSON's `\\ud800`) is replaced: it cannot be written;
- a number too large for a float and JSON nested too deeply are skipped (the seed crashes);
- a line over 1 MiB is skipped; a last line with no newline that does not parse is skipped as
  "truncated (still being written?)";
- lines are split at "\\n" only, so line numbers are an editor's (the seed's `splitlines()` also
  splits at \\r, \\f, U+2028 ...; its writer puts none in a line); files are decoded with
  errors="replace" (the seed's strict decoding crashes on a bad byte).
A path that cannot be read at all (missing, not a regular file or directory, unreadable, over
64 MiB, a dump that is no schema-1 timeline object) raises `InitTimelineError`; a worker file
gone between the listing of its directory and its reading is left out. So do files that come
to more than 64 MiB in all (each under the bound, a run directory kept across many start-ups,
say: they are refused before any is read, their sum named) and a run directory with more than
10,000 worker files: what one timeline reads is bounded, whatever its directory holds.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.startup.phases import Phase, Timeline

MAX_FILE_BYTES = 64 << 20  # a file larger than this is refused
MAX_TOTAL_BYTES = MAX_FILE_BYTES  # a timeline's files (its dump and worker files), in all
MAX_WORKER_FILES = 10_000  # worker files of a run directory (each a process of a start-up)
MAX_LINE_CHARS = 1 << 20  # a worker line longer than this is skipped
MAX_TIME_S = 1e11  # a start or end further from the epoch (year 5138) is no time
SCHEMA_VERSION = 1
WORKER_GLOB = "worker_*.jsonl"
TRUNCATED = "truncated (still being written?)"


class InitTimelineError(Exception):
    """A path that cannot be read at all; the message names it and why."""


@dataclass(frozen=True)
class Loaded:
    """A timeline as read, and what reading it left out."""

    timeline: Timeline
    skipped: tuple[str, ...]  # each malformed record, named by path and line (or phase index)
    files: tuple[str, ...]  # the files read, in order
    added: int  # worker phases merged in
    duplicates: int  # worker lines dropped by the key (pid, name, start)

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)


class _Skip(Exception):
    """A record that is no phase (the message says why)."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(d: dict[str, Any], key: str) -> float:
    if key not in d:
        raise _Skip(f"no {key!r}")
    try:
        return float(d[key])
    except OverflowError:
        raise _Skip(f"{key} is too large for a float (the seed crashes)") from None
    except (ValueError, TypeError):
        raise _Skip(f"{key} is not a number: {_short(d[key])}") from None


def _count(d: dict[str, Any], key: str) -> int:
    try:
        return int(d.get(key, 0) or 0)
    except OverflowError:
        raise _Skip(f"{key} is not finite (the seed crashes)") from None
    except (ValueError, TypeError):
        raise _Skip(f"{key} is not an int: {_short(d.get(key))}") from None


def _phase(d: object, role: str) -> Phase:
    """A record read as the seed's `ingest_workers` reads it (field by field, in its order, so
    it skips or crashes where the seed does), then checked for what the seed would misread."""
    if not isinstance(d, dict):
        raise _Skip(f"not a JSON object but {type(d).__name__}")
    if "name" not in d:
        raise _Skip("no 'name'")
    name = _text(d["name"])
    start, end = _number(d, "start"), _number(d, "end")
    stage_id = d.get("stage_id")
    replica_id, pid = _count(d, "replica_id"), _count(d, "pid")
    role = _text(d.get("role", role))
    try:
        extra = dict(d.get("extra") or {})
    except (ValueError, TypeError):
        raise _Skip(f"extra is not an object: {_short(d.get('extra'))}") from None
    for key, value in (("start", start), ("end", end)):
        if not math.isfinite(value):
            raise _Skip(f"{key} is not finite: {value} (the seed takes it)")
        if abs(value) > MAX_TIME_S:
            raise _Skip(f"{key} is no time: {value:g} s (the seed takes it)")
    if stage_id is not None and (not isinstance(stage_id, int) or isinstance(stage_id, bool)):
        raise _Skip(f"stage_id is neither null nor an int: {_short(stage_id)} (the seed takes it)")
    return Phase(name, start, end, stage_id, replica_id, pid, role, extra)


def parse_worker(text: str, name: str) -> tuple[list[Phase], list[str]]:
    """A worker file's phases, in line order, and its skipped lines (`<name>:<line>: <why>`)."""
    phases: list[Phase] = []
    skipped: list[str] = []
    lines = text.split("\n")
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if len(line) > MAX_LINE_CHARS:
            skipped.append(f"{name}:{number}: line over 1 MiB ({len(line)} characters)")
            continue
        try:
            phases.append(_phase(json.loads(line), "worker"))
            continue
        except _Skip as e:
            why = str(e)
        except RecursionError:
            why = "nested too deeply (the seed crashes)"
        except ValueError as e:  # json.JSONDecodeError, or an int of too many digits
            why = f"not JSON ({getattr(e, 'msg', e)})"
        # (only the last line can have no newline)
        skipped.append(f"{name}:{number}: {TRUNCATED if number == len(lines) else why}")
    return phases, skipped


def _text(value: object) -> str:
    """`str(value)` as the seed takes it, fit to be written out (a lone surrogate that JSON's
    `\\ud800` makes is replaced: it cannot be encoded)."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _finite(value: object) -> float | None:
    """`value` as a float if it is a finite JSON number (no bool) and a time (within
    MAX_TIME_S of the epoch), else None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_TIME_S else None


def parse_dump(text: str, name: str) -> tuple[Timeline, list[str]]:
    """A dump's timeline and its skipped phases (`<name>: phases[<i>]: <why>`); a text that is
    not a schema-1 timeline object (JSON, with a finite t0) raises InitTimelineError."""
    try:
        d = json.loads(text)
    except RecursionError:
        raise InitTimelineError(f"{name}: not JSON (nested too deeply)") from None
    except ValueError as e:
        raise InitTimelineError(f"{name}: not JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(d, dict):
        raise InitTimelineError(f"{name}: not a timeline (a JSON {type(d).__name__})")
    if d.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise InitTimelineError(f"{name}: schema {_short(d['schema'])}, not {SCHEMA_VERSION}")
    t0, t_end = _finite(d.get("t0")), _finite(d.get("t_end"))
    if t0 is None:
        raise InitTimelineError(f"{name}: t0 is not a finite number: {_short(d.get('t0'))}")
    if t_end is None and d.get("t_end") is not None:
        raise InitTimelineError(
            f"{name}: t_end is neither null nor a finite number: {_short(d['t_end'])}"
        )
    records = d.get("phases")
    if not isinstance(records, list):
        raise InitTimelineError(f"{name}: not a timeline (no 'phases' list)")
    phases: list[Phase] = []
    skipped: list[str] = []
    for i, record in enumerate(records):
        try:
            phases.append(_phase(record, "engine"))
        except (_Skip, RecursionError) as e:
            why = e if isinstance(e, _Skip) else "nested too deeply"
            skipped.append(f"{name}: phases[{i}]: {why}")
    return Timeline.of(t0, t_end, phases), skipped


class _Gone(InitTimelineError):
    """A file not there (any more)."""


class _OverTotal(InitTimelineError):
    """A file that grew past what is left of MAX_TOTAL_BYTES since the sizes were added up."""


def _read(path: Path, budget: int = MAX_TOTAL_BYTES) -> tuple[str, int]:
    """A regular file's text (decoded as UTF-8, errors replaced) and its size; _OverTotal
    beyond `budget` bytes (what is left of the total), read no further."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _Gone(f"{path}: no such file or directory") from None
    except (OSError, ValueError) as e:
        raise InitTimelineError(f"{path}: cannot open: {getattr(e, 'strerror', e)}") from None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise InitTimelineError(f"{path}: not a regular file")
            data = f.read(min(MAX_FILE_BYTES, budget) + 1)
        except OSError as e:
            raise InitTimelineError(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InitTimelineError(f"{path}: larger than {MAX_FILE_BYTES} bytes; refused")
    if len(data) > budget:
        raise _OverTotal(f"{path}: grew past the {MAX_TOTAL_BYTES} bytes all files may hold")
    return data.decode("utf-8", errors="replace"), len(data)


def worker_files(directory: Path) -> list[Path]:
    """A run directory's worker files (`worker_*.jsonl`), in name order (the seed's
    `sorted(glob)`); InitTimelineError beyond MAX_WORKER_FILES (the listing goes no further)."""
    head, tail = WORKER_GLOB.split("*")
    found: list[Path] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith(head) and entry.name.endswith(tail):
                if len(found) == MAX_WORKER_FILES:
                    raise InitTimelineError(
                        f"{directory}: more than {MAX_WORKER_FILES} {WORKER_GLOB} files; refused "
                        "(move those of old start-ups away)"
                    )
                found.append(directory / entry.name)
    return sorted(found)


def _size(path: Path) -> int:
    """A regular file's size (0 for what reading it will refuse or find gone)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _check_total(paths: Sequence[Path], files: Sequence[Path]) -> None:
    """InitTimelineError when `files` come to more than MAX_TOTAL_BYTES, before any is read."""
    total = sum(_size(f) for f in files)
    if total > MAX_TOTAL_BYTES:
        named = ", ".join(str(p) for p in paths)
        raise InitTimelineError(
            f"{named}: {len(files)} files of {total} bytes in all, over the {MAX_TOTAL_BYTES} "
            "bytes one timeline may read; refused (move the worker files of old start-ups away)"
        )


def _read_workers(
    workers: Sequence[tuple[Path, bool]], budget: int, files: list[str], skipped: list[str]
) -> list[Phase]:
    """The worker files' phases, each file once, in order (`files` and `skipped` get theirs);
    `budget`: the bytes they may hold in all."""
    found: list[Phase] = []
    read: set[str] = set()
    for path, listed in workers:
        real = os.path.realpath(path)
        if real in read:
            continue
        try:
            text, size = _read(path, budget)
        except _Gone:
            if listed:  # gone since its directory was listed
                continue
            raise
        budget -= size
        read.add(real)
        phases, bad = parse_worker(text, str(path))
        files.append(str(path))
        found += phases
        skipped += bad
    return found


def load(paths: Sequence[Path]) -> Loaded:
    """The timeline of a dump, a run directory (or worker .jsonl file), or a dump and a run
    directory: the dump's phases, then the worker files' merged in by the seed's key."""
    dumps: list[Path] = []
    workers: list[tuple[Path, bool]] = []  # (path, found by listing a directory)
    for given in paths:
        path = Path(given)
        try:
            if path.is_dir():
                workers.extend((f, True) for f in worker_files(path))
                continue
        except (OSError, ValueError) as e:
            raise InitTimelineError(f"{path}: cannot list: {e}") from None
        try:
            os.lstat(path)
        except FileNotFoundError:  # (not a second dump: a run directory gone, say)
            raise InitTimelineError(f"{path}: no such file or directory") from None
        except (OSError, ValueError):
            pass  # (reading it says why)
        if path.suffix == ".jsonl":
            workers.append((path, False))
        else:
            dumps.append(path)
    if len(dumps) > 1:
        raise InitTimelineError(f"two dumps, {dumps[0]} and {dumps[1]}: give one")
    unique = {os.path.realpath(p): p for p in (*dumps, *(w for w, _ in workers))}
    _check_total(paths, list(unique.values()))
    budget = MAX_TOTAL_BYTES
    files: list[str] = []
    skipped: list[str] = []
    timeline: Timeline | None = None
    if dumps:
        text, size = _read(dumps[0], budget)
        budget -= size
        timeline, bad = parse_dump(text, str(dumps[0]))
        files.append(str(dumps[0]))
        skipped += bad
    found = _read_workers(workers, budget, files, skipped)
    if timeline is None:
        if not found:
            named = ", ".join(str(p) for p in paths) or "(no paths)"
            raise InitTimelineError(f"{named}: no phases ({len(skipped)} records skipped)")
        merged, added = Timeline.of(0.0, None, ()).merge(found)
        ends = max(p.end for p in merged.phases)
        timeline = Timeline.of(merged.phases[0].start, ends, merged.phases)
    else:
        timeline, added = timeline.merge(found)
    return Loaded(timeline, tuple(skipped), tuple(files), added, len(found) - added)


def _stat(path: Path) -> tuple[object, ...]:
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        return (str(path), None, type(e).__name__)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def signature(paths: Sequence[Path]) -> tuple[object, ...]:
    """A cheap stat signature of `paths` (and each directory's worker files): when it changes,
    read them again. Never raises: a path that cannot be stat'ed gives a value of its own."""
    out: list[object] = []
    for given in paths:
        path = Path(given)
        out.append(_stat(path))
        try:
            if path.is_dir():
                out.append(tuple(_stat(f) for f in worker_files(path)))
        except (OSError, ValueError) as e:
            out.append((str(path), "unlisted", type(e).__name__))
        except InitTimelineError:  # (too many to list: reading says so)
            out.append((str(path), "too many"))
    return tuple(out)

"""The SSH source against a real OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py), in front of real
journal files written by systemd-journal-remote and read by the node's journalctl through
`journal_directory`. Every journal directory's name needs quoting (a space, a quote, `$HOME;`).

Covered: following (everything, then entries appended in a second file; up, lag 0 once caught up,
every counter equal to a from-scratch count of the same entries, the remote journalctl gone once
the daemon stops: its channel was closed); resuming after a daemon restart (nothing counted
twice, entries after the cursor arrive; a backlog of more than 10 entries too); a reconnect after the remote journalctl dies; a wrong
host key (refused, named, the other nodes unaffected) and `verify_host_key: false` (works, one
warning); a wrong client key; password logins from password_file and password_env for a
throwaway user; the passwords in no log record (asyncssh's included), error, metric, checkpoint
or CLI output; probing `--output-fields`/`--grep` (a journalctl that rejects them still works);
quoting and the unit-name grammar; `known-hosts`; `report` over SSH nodes equal to `report
--input` dumps of the same entries, with a progress line per node on a terminal.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.base.records import Interval, LogLine
from exporter.base.times import SECOND
from exporter.config.errors import ConfigError
from exporter.config.load import load
from exporter.daemon.daemon import Daemon
from exporter.parse.parser import Parser
from exporter.sources.base import SourceError
from exporter.sources.ssh import SshNode
from exporter.sources.sshreader import FIELDS, GREP, Features, journalctl

from support.daemon_process import DaemonProcess
from support.daemon_thread import DaemonThread
from support.dumps import report_of_dumps, window_batches
from support.journals import (
    JOURNAL_REMOTE,
    UNIT,
    UNIT_B,
    Entry,
    compare,
    ent,
    iso,
    journal_json,
    lines_of,
    workload,
    write_journal,
)
from support.scrape import Samples, parse_metrics, sample
from support.ssh_nodes import KINDS, MINUTE, local_config, local_node, now_us, requests
from support.sshd import (
    Sshd,
    User,
    keygen,
    public_key,
    require_ssh_tools,
    running_sshd,
    throwaway_user,
)
from support.tools import REPO, missing, until_right, wait_for

# -- fixtures: the tools, one sshd for the session, a throwaway user, quoted journal dirs ---------


@pytest.fixture(scope="session")
def tools() -> None:
    require_ssh_tools()
    if not os.access(JOURNAL_REMOTE, os.X_OK) or shutil.which("journalctl") is None:
        missing(f"{JOURNAL_REMOTE} (Debian systemd-journal-remote) or journalctl")


@pytest.fixture(scope="session")
def base(tools: None) -> Iterator[Path]:
    """Readable by every user (pytest's own tmp dirs are not): the throwaway user's journalctl
    reads the journals in here."""
    d = Path(tempfile.mkdtemp(prefix="smllm-ssh-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def server(base: Path) -> Iterator[Sshd]:
    with running_sshd(base / "sshd") as s:
        yield s


@pytest.fixture(scope="session")
def known_hosts(server: Sshd) -> Path:
    return server.known_hosts(server.directory / "known_hosts")


@pytest.fixture(scope="session")
def other_key(server: Sshd) -> Path:
    """A key pair that is neither the server's host key nor in its authorized_keys."""
    return keygen(server.directory / "other_ed25519", "smllm-test-other")


@pytest.fixture(scope="session")
def login(tools: None) -> Iterator[User]:
    with throwaway_user() as user:
        yield user


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the keys and passwords a test gives: no SSH agent of whoever runs the tests."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture
def journals(base: Path) -> Path:
    return journal_dir(base)


def journal_dir(base: Path) -> Path:
    """A new journal directory whose name only works when quoted for the remote shell."""
    d = Path(tempfile.mkdtemp(prefix="journal ", suffix=" it's $HOME;x", dir=base))
    d.chmod(0o755)
    return d


def write(directory: Path, name: str, entries: list[Entry]) -> None:
    """A journal file written by systemd-journal-remote, readable by every user."""
    path = directory / name
    write_journal(path, entries)
    path.chmod(0o644)


def dump(directory: Path, unit: str, path: Path) -> Path:
    """`journalctl --directory DIR -u UNIT -o json`, as a file."""
    rows = journal_json("--directory", str(directory), "-u", unit)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def grep_count(directory: Path, unit: str = UNIT) -> int:
    """How many entries the remote journalctl sends with --grep."""
    return len(journal_json("--directory", str(directory), "-u", unit, "--grep", GREP))


def newest_sent(directory: Path, unit: str = UNIT) -> int:
    """The journal time of the newest entry the remote journalctl sends with --grep: where the
    watermark of a caught-up node stands when that is ahead of the clock."""
    rows = journal_json("--directory", str(directory), "-u", unit, "--grep", GREP, "-n", "1")
    return int(rows[-1]["__REALTIME_TIMESTAMP"])


def remote_followers(directory: Path) -> list[int]:
    """PIDs of the `journalctl --follow` processes sshd started on `directory`."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        wanted = argv[0].endswith(b"journalctl") and b"--follow" in argv
        if wanted and str(directory).encode() in argv:
            out.append(int(proc.name))
    return out


def ssh_node(server: Sshd, known_hosts: Path, name: str, directory: Path, **kw: object) -> SshNode:
    return local_node(name, server.port, known_hosts, server.client_key, str(directory), **kw)


def daemon(tmp_path: Path, since_us: int, *nodes: SshNode) -> Daemon:
    return Daemon(local_config(tmp_path, since_us, *nodes), publish_seconds=0.1)


def follow_problems(
    d: DaemonThread,
    dumps: dict[str, Path],
    since_us: int,
    until_us: int | None,
    entries: dict[str, int],
) -> list[str]:
    """What differs between the served figures and a from-scratch count of the dumps up to the
    served watermark (`until_us`, when given, must be that watermark); each node up, caught up
    (lag 0), having read `entries`."""
    samples = parse_metrics(d.metrics())
    wm = sample(samples, "smllm_accounted_until_timestamp_seconds")
    if wm is None:
        return ["no watermark served"]
    watermark = round(wm * SECOND)
    problems = []
    if until_us is not None and watermark != until_us:
        problems.append(f"watermark {iso(watermark)}, not {iso(until_us)}")
    snap = report_of_dumps(dumps, KINDS, since_us, until_us or watermark).snapshot
    problems += compare(samples, snap)
    for node, want in entries.items():
        for name, value in (
            ("smllm_source_up", 1),
            ("smllm_source_lag_seconds", 0),
            ("smllm_source_entries_total", want),
        ):
            got = sample(samples, name, node=node)
            if got != value:
                problems.append(f"{node} {name}: {got}, not {value}")
    return problems


def caught_up(
    d: DaemonThread,
    dumps: dict[str, Path],
    since_us: int,
    until_us: int | None,
    journals: Path,
    timeout: float,
    what: str,
) -> None:
    """Wait until node a has read everything the remote journalctl sends of `journals`, and its
    figures equal the dump's (follow_problems)."""
    until_right(
        lambda: follow_problems(d, dumps, since_us, until_us, {"a": grep_count(journals)}),
        timeout,
        what,
    )


def first_file(
    journals: Path, tmp_path: Path, seed: int, since_us: int
) -> tuple[list[Entry], dict[str, Path]]:
    """20 minutes of workload `seed` from `since_us` written to `journals`, and node a's dump."""
    first = workload(seed, since_us, since_us + 20 * MINUTE)
    write(journals, "remote-1.journal", first)
    return first, {"a": dump(journals, UNIT, tmp_path / "a.json")}


def second_file(journals: Path, entries: list[Entry], dumps: dict[str, Path]) -> int:
    """`entries` written to `journals` beside the first file, node a's dump redone; the time of
    the newest entry the remote journalctl sends."""
    write(journals, "remote-2.journal", entries)
    dump(journals, UNIT, dumps["a"])
    return newest_sent(journals)


def unit_requests(entries: list[Entry], unit: str = UNIT) -> int:
    return sum(1 for e in entries if e.unit == unit and b"total time" in e.message)


def messages(caplog: pytest.LogCaptureFixture, *words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if all(w in r.getMessage() for w in words)]


# -- 1. following: everything, then what is appended ----------------------------------------------


@pytest.mark.slow
def test_follow_reads_everything_then_what_is_appended(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    now = now_us()
    since = now - 40 * MINUTE  # the first file is history: lag would show if never caught up
    first, dumps = first_file(journals, tmp_path, 1, since)
    node = ssh_node(server, known_hosts, "a", journals)
    with DaemonThread(daemon(tmp_path, since, node)) as d:
        caught_up(d, dumps, since, None, journals, 30, "the first file read")
        samples = parse_metrics(d.metrics())
        # caught up: the watermark went past the newest entry, up to the clock
        assert (sample(samples, "smllm_accounted_until_timestamp_seconds") or 0) * SECOND > (
            first[-1].time_us + 10 * MINUTE
        )
        assert requests(samples, "a") == unit_requests(first) > 20
        # --grep was probed and used: only the entries that may matter came over the wire
        assert grep_count(journals) < sum(e.unit == UNIT for e in first)
        assert len(remote_followers(journals)) == 1

        # a second file in the same directory, its entries ahead of the clock (never late)
        start2 = now + 10 * MINUTE
        second = workload(2, start2, start2 + 10 * MINUTE)
        t_end = second_file(journals, second, dumps)
        assert t_end > max(e.time_us for e in first)
        caught_up(d, dumps, since, t_end, journals, 30, "the appended file read")
        samples = parse_metrics(d.metrics())
        assert requests(samples, "a") == unit_requests(first) + unit_requests(second)
        assert sample(samples, "smllm_source_reconnects_total", node="a") == 0
        assert sample(samples, "smllm_source_gaps_total", node="a") == 0
    # root sessions refuse signals: the daemon closed the channel, and that ended journalctl
    wait_for(lambda: not remote_followers(journals), 10, "the remote journalctl gone")


@pytest.mark.slow
def test_a_journal_that_ends_before_since_is_caught_up_at_once(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    """`since` after the node's newest entry (the default `since: now` on an idle node): the
    stream will never bring that entry, and the node must still vouch for "nothing unread up
    to now - 2 s", or the cluster's figures would wait for its next line."""
    now = now_us()
    write(journals, "remote-1.journal", workload(5, now - 60 * MINUTE, now - 40 * MINUTE))
    since = now - 10 * MINUTE
    node = ssh_node(server, known_hosts, "a", journals)
    with DaemonThread(daemon(tmp_path, since, node)) as d:

        def problems() -> list[str]:
            samples = parse_metrics(d.metrics())
            out = []
            until = round(
                (sample(samples, "smllm_accounted_until_timestamp_seconds") or 0) * SECOND
            )
            if until < since + 3 * SECOND:  # (no launch lines: max_request_seconds behind now)
                out.append(f"accounted until {iso(until)}, not past {iso(since + 3 * SECOND)}")
            for name, want in (("smllm_source_up", 1), ("smllm_source_lag_seconds", 0)):
                if sample(samples, name, node="a") != want:
                    out.append(f"{name} {sample(samples, name, node='a')}, not {want}")
            return out

        until_right(problems, 30, "the node caught up with nothing to read")
        samples = parse_metrics(d.metrics())
        until = sample(samples, "smllm_accounted_until_timestamp_seconds") or 0
        assert requests(samples, "a") == 0
        idle = sample(samples, "smllm_concurrency_seconds_total", nodes_busy="0")
        assert idle == pytest.approx(until - since / SECOND)


# -- 2. resuming after a daemon restart ----------------------------------------------------------


def first_requests(entries: list[Entry], n: int) -> list[Entry]:
    """The unit's entries up to its n-th request's total line: whole requests only."""
    mine = [e for e in entries if e.unit == UNIT]
    ends = [i for i, e in enumerate(mine) if b"total time" in e.message]
    return mine[: ends[n - 1] + 1]


def restart(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path, later: int, timeout: float
) -> None:
    """A daemon reads the unit's history and stops; `later` requests (ahead of the clock) are
    written while none runs; a new daemon on the same state must count everything once."""
    now = now_us()
    since = now - 40 * MINUTE
    first, dumps = first_file(journals, tmp_path, 3, since)
    node = ssh_node(server, known_hosts, "a", journals)
    with DaemonThread(daemon(tmp_path, since, node)) as d:
        caught_up(d, dumps, since, None, journals, 30, "the first run caught up")
    wait_for(lambda: not remote_followers(journals), 10, "the remote journalctl gone")

    start2 = now + 10 * MINUTE
    second = first_requests(workload(4, start2, start2 + 30 * MINUTE), later)
    t_end = second_file(journals, second, dumps)  # while no daemon runs
    assert t_end == second[-1].time_us
    with DaemonThread(daemon(tmp_path, since, node)) as d:
        # the checkpoint's counters from the start, then only what follows its cursor
        assert requests(parse_metrics(d.metrics()), "a") == unit_requests(first)
        caught_up(d, dumps, since, t_end, journals, timeout, "the second run: everything once")
        samples = parse_metrics(d.metrics())
        assert requests(samples, "a") == unit_requests(first) + later
        assert sample(samples, "smllm_source_gaps_total", node="a") == 0


@pytest.mark.slow
def test_resume_after_restart_counts_nothing_twice(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    restart(server, known_hosts, journals, tmp_path, later=2, timeout=30)  # <= 10 entries


@pytest.mark.slow
def test_resume_after_restart_reads_a_backlog_of_more_than_ten_entries(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    restart(server, known_hosts, journals, tmp_path, later=12, timeout=10)


# -- 3. host keys; a reconnect ----------------------------------------------------------------------


@pytest.mark.slow
def test_wrong_host_key_refused_and_unverified_warned_once(
    server: Sshd,
    known_hosts: Path,
    other_key: Path,
    base: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    since = now_us() - 30 * MINUTE
    entries = workload(5, since, since + 10 * MINUTE)
    dirs = {n: journal_dir(base) for n in ("good", "bad", "unverified")}
    for directory in dirs.values():
        write(directory, "remote.journal", entries)
    wrong = server.known_hosts(tmp_path / "wrong_known_hosts", other_key)
    good = ssh_node(server, known_hosts, "good", dirs["good"])
    bad = ssh_node(server, wrong, "bad", dirs["bad"])
    # a node name no other test uses: the warning is once per node and process
    unverified = ssh_node(server, wrong, "unverified", dirs["unverified"], verify_host_key=False)
    want = unit_requests(entries)

    def state(node: str) -> tuple[float | None, float]:
        s = parse_metrics(d.metrics())
        return sample(s, "smllm_source_up", node=node), requests(s, node)

    with DaemonThread(daemon(tmp_path, since, good, bad, unverified)) as d:
        wait_for(
            lambda: state("good") == state("unverified") == (1, want) and state("bad") == (0, 0),
            30,
            "good and unverified read, bad refused",
        )
        refused = messages(caplog, "node bad", "host key not verifiable")
        assert refused, [r.getMessage() for r in caplog.records]
        assert f"ssh root@127.0.0.1:{server.port}" in refused[0]
        assert str(wrong) in refused[0] and "sm-llm-exporter known-hosts bad" in refused[0]
        assert not messages(caplog, "node good", "host key")

        # the remote journalctl dies: the source reconnects and resumes after its cursor
        (follower,) = wait_for(lambda: remote_followers(dirs["unverified"]), 10, "a follower")
        os.kill(follower, signal.SIGKILL)
        wait_for(
            lambda: (
                sample(
                    parse_metrics(d.metrics()), "smllm_source_reconnects_total", node="unverified"
                )
                == 1
                and state("unverified") == (1, want)
            ),
            30,
            "reconnected",
        )
        assert messages(caplog, "node unverified", "remote journalctl ended")
        # two requests: at most 10 entries after the cursor (see the xfail above)
        later = first_requests(workload(6, since + 12 * MINUTE, since + 15 * MINUTE), 2)
        write(dirs["unverified"], "remote-2.journal", later)
        wait_for(
            lambda: state("unverified") == (1, want + 2),
            30,
            "entries after the cursor, once",
        )
    warnings = messages(caplog, "node unverified", "host key NOT verified")
    assert len(warnings) == 1, warnings
    assert not messages(caplog, "node good", "NOT verified")


# -- 4. a wrong client key ------------------------------------------------------------------------


@pytest.mark.slow
def test_wrong_client_key_fails_clearly(
    server: Sshd,
    known_hosts: Path,
    other_key: Path,
    journals: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    since = now_us() - 30 * MINUTE
    write(journals, "remote.journal", workload(7, since, since + 5 * MINUTE))
    node = ssh_node(server, known_hosts, "keyless", journals, client_keys=(other_key,))
    with DaemonThread(daemon(tmp_path, since, node)) as d:
        wait_for(
            lambda: messages(caplog, "node keyless", "authentication failed"),
            20,
            "an authentication failure logged",
        )
        wait_for(
            lambda: sample(parse_metrics(d.metrics()), "smllm_source_up", node="keyless") == 0,
            10,
            "source_up 0",
        )
        assert requests(parse_metrics(d.metrics()), "keyless") == 0
    (line, *_) = messages(caplog, "node keyless", "authentication failed")
    assert f"ssh root@127.0.0.1:{server.port}" in line


# -- 5. passwords ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["password_file", "password_env"])
def test_password_login(
    server: Sshd,
    known_hosts: Path,
    login: User,
    journals: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    since = now_us() - 30 * MINUTE
    entries = workload(8, since, since + 10 * MINUTE)
    write(journals, "remote.journal", entries)
    secret: dict[str, object] = {}
    if where == "password_file":
        path = tmp_path / "password"
        path.write_text(login.password + "\n")
        path.chmod(0o600)
        secret["password_file"] = path
    else:
        monkeypatch.setenv("SMLLM_TEST_PASSWORD", login.password)
        secret["password_env"] = "SMLLM_TEST_PASSWORD"
    node = ssh_node(server, known_hosts, "pw", journals, user=login.name, client_keys=(), **secret)
    with DaemonThread(daemon(tmp_path, since, node)) as d:
        wait_for(
            lambda: requests(parse_metrics(d.metrics()), "pw") == unit_requests(entries),
            30,
            "every request read",
        )
        assert sample(parse_metrics(d.metrics()), "smllm_source_up", node="pw") == 1
    assert f"Accepted password for {login.name}" in server.log_text()


@pytest.mark.slow
def test_passwords_appear_in_no_log_or_error(
    server: Sshd,
    known_hosts: Path,
    login: User,
    journals: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A right and a wrong password, through the daemon, a node's window and `report` (at debug
    level, asyncssh's own loggers included): neither is in any text they produce."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="asyncssh")
    since = now_us() - 30 * MINUTE
    entries = workload(9, since, since + 10 * MINUTE)
    write(journals, "remote.journal", entries)
    wrong_password = "pw-wrong-" + login.password[::-1]
    secrets_ = (login.password, wrong_password)
    wrong_file = tmp_path / "wrong-password"
    wrong_file.write_text(wrong_password + "\n")
    monkeypatch.setenv("SMLLM_TEST_PASSWORD", login.password)
    right = ssh_node(
        server,
        known_hosts,
        "right",
        journals,
        user=login.name,
        client_keys=(),
        password_env="SMLLM_TEST_PASSWORD",
    )
    wrong = replace(right, name="wrong", password_env=None, password_file=wrong_file)
    texts: list[str] = []

    d = DaemonThread(daemon(tmp_path, since, right, wrong))
    with d:
        wait_for(
            lambda: (
                requests(parse_metrics(d.metrics()), "right") == unit_requests(entries)
                and messages(caplog, "node wrong", "authentication failed")
            ),
            30,
            "right read, wrong refused",
        )
        texts.append(d.metrics())
    texts += [p.read_text(errors="replace") for p in (tmp_path / "state").iterdir()]

    # the window, as `report` reads it: its error, with everything chained to it
    window = (since, since + 10 * MINUTE)
    assert sum(len(b.lines) for b in window_batches(right, *window)) > 0
    with pytest.raises(SourceError) as raised:
        window_batches(wrong, *window)
    assert "authentication failed" in str(raised.value)
    texts += traceback.format_exception(raised.value)
    e: BaseException | None = raised.value
    while e is not None:
        texts += [str(e), repr(e), repr(vars(e))]
        e = e.__cause__ or e.__context__

    # the CLI at debug level
    cfg = tmp_path / "config.json"
    nodes = [
        {
            "name": n.name,
            "source": "ssh",
            "host": n.host,
            "port": n.port,
            "user": n.user,
            "known_hosts": str(known_hosts),
            "journal_directory": n.journal_directory,
            **({"password_env": n.password_env} if n.password_env else {}),
            **({"password_file": str(n.password_file)} if n.password_file else {}),
        }
        for n in (right, wrong)
    ]
    for chosen in ([nodes[0]], [nodes[1]]):
        cfg.write_text(json.dumps({"state_dir": str(tmp_path / "state"), "nodes": chosen}))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "exporter",
                "--log-level",
                "debug",
                "report",
                "--config",
                str(cfg),
                "--since",
                iso(window[0]),
                "--until",
                iso(window[1]),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "SMLLM_TEST_PASSWORD": login.password},
            timeout=60,
            check=False,
        )
        assert done.returncode == (0 if chosen[0]["name"] == "right" else 1), done.stderr[-2000:]
        assert "asyncssh" in done.stderr  # its debug lines were there to leak into
        texts += [done.stdout, done.stderr]

    # an inline password is refused, and the refusal does not repeat it
    inline = {**nodes[0], "password": login.password}
    del inline["password_env"]
    cfg.write_text(json.dumps({"nodes": [inline]}))
    with pytest.raises(ConfigError) as refused:
        load(cfg)
    assert "never inline" in str(refused.value)
    texts.append(str(refused.value))

    records = caplog.records
    assert any(r.name.startswith("asyncssh") and "password" in r.getMessage() for r in records)
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    for r in records:
        texts += [formatter.format(r), repr(vars(r))]
    assert len(texts) > 100
    leaks = [t for t in texts for s in secrets_ if s in t]
    assert not leaks, leaks[:3]


# -- 6. probing, quoting, the unit name ------------------------------------------------------------

FAKE_JOURNALCTL = """\
#!/bin/sh
# An older journalctl: without --output-fields and --grep.
echo "$*" >> '{log}'
for arg in "$@"; do
  case "$arg" in
    --output-fields*|--grep*) echo "journalctl: unrecognized option '$arg'" >&2; exit 1 ;;
  esac
done
exec /usr/bin/journalctl "$@"
"""


@pytest.mark.slow
def test_a_journalctl_without_grep_or_output_fields_still_works(
    base: Path, journals: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake = Path(tempfile.mkdtemp(prefix="fakebin-", dir=base))
    fake.chmod(0o755)
    calls = fake / "calls.log"
    (fake / "journalctl").write_text(FAKE_JOURNALCTL.format(log=calls))
    (fake / "journalctl").chmod(0o755)
    since = now_us() - 30 * MINUTE
    entries = workload(10, since, since + 10 * MINUTE)
    last = entries[-1].time_us
    entries += [
        # 4096 bytes and more: journalctl writes MESSAGE as null without --all
        ent(
            last + 1000,
            "slot print_timing: id  0 | task 90001 |       total time =    1000.00 ms /   100"
            " tokens " + "x" * 5000,
        ),
        # the newest entry holds U+2028, which journalctl's JSON leaves unescaped: it must not
        # split the entry (the source would take the journal for empty and a backlog for read)
        ent(last + 2000, "request body a\u2028b"),
    ]
    write(journals, "remote.journal", entries)
    mine = sum(e.unit == UNIT for e in entries)
    assert grep_count(journals) < mine
    with running_sshd(base / "old-sshd", [f"SetEnv PATH={fake}:/usr/bin:/bin"]) as old:
        kh = old.known_hosts(tmp_path / "known_hosts")
        node = ssh_node(old, kh, "old", journals)
        with DaemonThread(daemon(tmp_path, since, node)) as d:

            def read_in_full() -> Samples | None:
                s = parse_metrics(d.metrics())
                return s if sample(s, "smllm_source_entries_total", node="old") == mine else None

            samples = wait_for(read_in_full, 30, "every entry of the unit read, in full")
            assert requests(samples, "old") == unit_requests(entries)
            assert sample(samples, "smllm_source_up", node="old") == 1
            assert sample(samples, "smllm_late_intervals_total", node="old") == 0
    assert messages(caplog, "node old", "without --output-fields --grep")
    called = calls.read_text().splitlines()
    assert any("--output-fields=" in c for c in called), called
    assert any("--grep" in c for c in called), called
    follow = [c for c in called if "--follow" in c]
    assert follow and not any("--grep" in c or "--output-fields" in c for c in follow)


def test_journalctl_arguments_are_quoted() -> None:
    odd = '/srv/j d\'ir $(touch /tmp/x); `id` "q" *'
    node = SshNode("n", "h", "sm-llm@a\\x2db.service", journal_directory=odd)
    cursor = "s=1;i=2;b=3;m=4;t=5;x=6"
    command = journalctl(node, "--after-cursor", cursor, features=Features(True, True))
    assert shlex.split(command) == [
        "journalctl",
        "--no-pager",
        "--all",
        "-u",
        "sm-llm@a\\x2db.service",
        "-o",
        "json",
        "--directory",
        odd,
        f"--output-fields={FIELDS}",
        "--grep",
        GREP,
        "--after-cursor",
        cursor,
    ]


@pytest.mark.parametrize(
    "unit",
    ["sm-llm.service; touch /tmp/x", "sm llm.service", "$(id).service", "a/b.service", ""],
)
def test_unit_names_outside_systemds_grammar_are_refused(tmp_path: Path, unit: str) -> None:
    cfg = tmp_path / "config.json"
    node = {"name": "n", "source": "ssh", "host": "127.0.0.1", "unit": unit}
    cfg.write_text(json.dumps({"nodes": [node]}))
    with pytest.raises(ConfigError) as refused:
        load(cfg)
    assert "nodes[0].unit" in str(refused.value)


# -- 7. known-hosts -------------------------------------------------------------------------------


# The exporter as installed without systemd-python (the `journal` extra): the import blocked.
WITHOUT_SYSTEMD = [
    sys.executable,
    "-c",
    "import sys; sys.modules['systemd'] = None; from exporter.cli import main; "
    "sys.exit(main(sys.argv[1:]))",
]


def cli(*args: str, without_systemd: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(WITHOUT_SYSTEMD if without_systemd else [sys.executable, "-m", "exporter"]), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def config_file(path: Path, *nodes: SshNode) -> Path:
    """The nodes as a config file (JSON, which is YAML: every odd path quoted)."""
    rows = []
    for n in nodes:
        row: dict[str, object] = {
            "name": n.name,
            "source": "ssh",
            "host": n.host,
            "port": n.port,
            "user": n.user,
            "unit": n.unit,
            "known_hosts": str(n.known_hosts),
            "client_keys": [str(k) for k in n.client_keys],
        }
        if n.journal_directory:
            row["journal_directory"] = n.journal_directory
        rows.append(row)
    path.write_text(json.dumps({"state_dir": str(path.parent / "state"), "nodes": rows}))
    return path


@pytest.mark.slow
def test_known_hosts_prints_the_host_key_and_its_fingerprint(
    server: Sshd, journals: Path, tmp_path: Path
) -> None:
    since = now_us() - 30 * MINUTE
    entries = workload(12, since, since + 5 * MINUTE)
    write(journals, "remote.journal", entries)
    fetched = tmp_path / "fetched_known_hosts"
    node = ssh_node(server, fetched, "n0", journals)
    cfg = config_file(
        tmp_path / "config.json", node, ssh_node(server, fetched, "n1", journals, port=1)
    )
    done = cli("known-hosts", "n0", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    keygen_l = subprocess.run(
        [require_ssh_tools(), "-lf", f"{server.host_key}.pub"],
        capture_output=True,
        text=True,
        check=True,
    )
    fingerprint = keygen_l.stdout.split()[1]
    assert fingerprint.startswith("SHA256:")
    assert lines == [f"# n0: {fingerprint}", f"{server.host_entry} {public_key(server.host_key)}"]

    # what it printed is a known_hosts file that ssh and the exporter accept
    fetched.write_text(done.stdout)
    found = subprocess.run(
        [require_ssh_tools(), "-F", server.host_entry, "-f", str(fetched)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0 and public_key(server.host_key) in found.stdout
    got = window_batches(node, since, since + 5 * MINUTE)
    assert not any(b.errors for b in got)
    assert [
        LogLine(x.node, x.time_us, "", x.pid, x.message) for b in got for x in b.lines
    ] == lines_of(entries, "n0")

    unknown = cli("known-hosts", "nope", "--config", str(cfg))
    assert unknown.returncode == 2 and "nope" in unknown.stderr

    # a node it cannot reach is named, and the one it can is printed all the same
    both = cli("known-hosts", "--config", str(cfg))
    assert both.returncode == 1
    assert both.stdout.splitlines() == lines
    assert "node n1: 127.0.0.1:1: cannot fetch its host key" in both.stderr


# -- 8. report over SSH nodes -------------------------------------------------------------------


@pytest.mark.slow
def test_report_over_ssh_equals_report_on_dumps(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    start = 1_790_062_264_127_792  # 2026-09-22T07:31:04.127792Z
    entries = workload(13, start, start + 40 * MINUTE)
    half = len(entries) // 2
    write(journals, "remote-a.journal", entries[:half])
    write(journals, "remote-b.journal", entries[half:])
    a = ssh_node(server, known_hosts, "a", journals)
    b = ssh_node(server, known_hosts, "b", journals, unit=UNIT_B)
    cfg = config_file(tmp_path / "config.json", a, b)
    # a window that cuts through requests at both ends
    parser = Parser("a")
    intervals = [
        r for line in lines_of(entries, "a") for r in parser.feed(line) if isinstance(r, Interval)
    ]
    first, last = intervals[len(intervals) // 4], intervals[len(intervals) * 3 // 4]
    since = (first.start_us + first.end_us) // 2 + 7
    until = (last.start_us + last.end_us) // 2 + 3
    assert first.start_us < since < first.end_us and last.start_us < until < last.end_us
    inputs = []
    for name, unit in (("a", UNIT), ("b", UNIT_B)):
        inputs += ["--input", f"{name}={dump(journals, unit, tmp_path / f'{name}.json')}"]
    window = ["report", "--since", iso(since), "--until", iso(until)]
    outputs = {}
    for fmt in ("text", "json"):
        over_ssh = cli(*window, "--format", fmt, "--config", str(cfg))
        from_dumps = cli(*window, "--format", fmt, *inputs)
        assert over_ssh.returncode == 0, over_ssh.stderr
        assert from_dumps.returncode == 0, from_dumps.stderr
        assert over_ssh.stdout == from_dumps.stdout, fmt
        assert "entries" not in over_ssh.stderr  # no progress lines when not on a terminal
        outputs[fmt] = over_ssh.stdout
    figures = json.loads(outputs["json"])
    assert figures["nodes"]["a"]["requests"] > 20 and figures["nodes"]["b"]["requests"] > 20

    # on a terminal: a progress line per node, and the same output
    text, progress = report_on_a_terminal([*window, "--format", "text", "--config", str(cfg)])
    assert text == outputs["text"]
    for name in ("a", "b"):
        assert f"\r  {name}: " in progress and " entries reached " in progress, progress


def report_on_a_terminal(args: list[str]) -> tuple[str, str]:
    """stdout, and what went to stderr, a terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
    )
    os.close(slave)
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    reader.join(10)
    os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")
    return out, seen.decode(errors="replace")


@pytest.mark.slow
def test_a_report_names_the_node_it_could_not_read_and_shows_the_others(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    since = now_us() - 30 * MINUTE
    entries = workload(12, since, since + 5 * MINUTE)
    write(journals, "remote.journal", entries)
    good = ssh_node(server, known_hosts, "good", journals)
    broken = ssh_node(server, known_hosts, "broken", journals, port=1)
    window = ["report", "--since", iso(since), "--until", iso(since + 6 * MINUTE)]
    both = cli(
        *window, "--format", "json", "--config", str(config_file(tmp_path / "c.json", good, broken))
    )
    alone = cli(
        *window, "--format", "json", "--config", str(config_file(tmp_path / "g.json", good))
    )
    assert alone.returncode == 0, alone.stderr
    assert both.returncode == 1
    assert "node broken: ssh root@127.0.0.1:1:" in both.stderr
    assert "could not read 1 of 2 nodes (broken)" in both.stderr
    figures, good_only = json.loads(both.stdout), json.loads(alone.stdout)
    assert figures["nodes"]["good"] == good_only["nodes"]["good"]
    assert figures["nodes"]["good"]["requests"] > 5


@pytest.mark.slow
def test_an_ssh_node_needs_no_systemd_python(
    server: Sshd, known_hosts: Path, journals: Path, tmp_path: Path
) -> None:
    """Installed without the `journal` extra (as `make run` installs), an ssh node is followed,
    reported and its host key fetched: nothing on its path imports systemd."""
    since = now_us() - 30 * MINUTE
    entries = workload(12, since, since + 5 * MINUTE)
    write(journals, "remote.journal", entries)
    node = ssh_node(server, known_hosts, "n0", journals)
    cfg = config_file(tmp_path / "config.json", node)
    window = [
        "report",
        "--since",
        iso(since),
        "--until",
        iso(since + 6 * MINUTE),
        "--format",
        "json",
    ]
    blocked = cli(*window, "--config", str(cfg), without_systemd=True)
    normal = cli(*window, "--config", str(cfg))
    assert blocked.returncode == 0, blocked.stderr
    assert blocked.stdout == normal.stdout
    assert json.loads(blocked.stdout)["nodes"]["n0"]["requests"] > 5
    keys = cli("known-hosts", "--config", str(cfg), without_systemd=True)
    assert keys.returncode == 0 and public_key(server.host_key) in keys.stdout, keys.stderr
    journal_node = tmp_path / "journal.json"  # a journal node is refused, naming the extra
    journal_node.write_text(json.dumps({"nodes": [{"name": "j", "source": "journal"}]}))
    refused = cli("check-config", str(journal_node), without_systemd=True)
    assert refused.returncode == 1 and "journal" in refused.stderr

    # the daemon follows it
    config = json.loads(cfg.read_text())
    config["since"] = iso(since)
    d = DaemonProcess(
        tmp_path / "daemon", config, command=lambda c: [*WITHOUT_SYSTEMD, "run", "--config", str(c)]
    )
    want = json.loads(normal.stdout)["nodes"]["n0"]["requests"]
    try:
        d.start()
        wait_for(lambda: requests(d.metrics(), "n0") == want, 30, "every request counted")
        assert sample(d.metrics(), "smllm_source_up", node="n0") == 1
    finally:
        d.close()
    assert "systemd" not in d.log_text().replace("systemd-python", "")

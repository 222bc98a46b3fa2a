"""No text from outside forges a log line or drives the operator's terminal (issue 27).

A router's model name read from a node's journal, a remote journalctl's standard error and an
exception's message reach the exporter's log with their control characters escaped (`\\n`,
`\\x1b`), whatever logs them: the daemon runs as a process, its log a file, formatted as on a
terminal and, with JOURNAL_STREAM naming that file, as under journald (journald itself does not
run in this container: what it would be handed is checked, a line each entry). The remote
side is a real OpenSSH sshd whose ForceCommand stands in for a hostile node's journalctl, and
asyncssh's own server emulating one (support/fake_journalctl.py) for a follow stream that ends
with such a message.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.base.times import iso
from exporter.sources.base import SourceError
from exporter.sources.sshreader import SshSource

from support.daemon_process import DaemonProcess, file_nodes
from support.dumps import window_batches
from support.fake_journalctl import FakeServer
from support.journals import UNIT
from support.ssh_nodes import local_node
from support.sshd import Sshd, running_sshd
from support.tools import REPO, now_us, wait_for

SECOND = 1_000_000
DEADLINE_S = 20.0
FORGED = "2030-01-01T00:00:00.000Z ERROR exporter.daemon.daemon: FORGED"
# a newline and a forged line, a carriage return, ESC sequences (clear the screen, set the
# window title), BEL, C1's CSI and DEL, U+2028
HOSTILE = f"m\n{FORGED}\r\x1b[2J\x1b]0;owned\x07\x9b31m\x7f\u2028x"
HOSTILE_SHOWN = (
    "m\\n2030-01-01T00:00:00.000Z ERROR exporter.daemon.daemon: FORGED\\r\\x1b[2J\\x1b]0;owned\\x07"
    "\\x9b31m\\x7f\\u2028x"
)
RAW_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # (a line's own \t: none)
PRIORITY = re.compile(r"^<[0-7]>")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def entry(i: int, time_us: int, message: str) -> str:
    """One `journalctl -o json` line of the node's llama-server (the router)."""
    return json.dumps(
        {
            "__CURSOR": f"s=h1b;i={i:x}",
            "__REALTIME_TIMESTAMP": str(time_us),
            "_PID": "4242",
            "_SYSTEMD_UNIT": "sm-llm.service",
            "MESSAGE": message,
        }
    )


def router_dump(path: Path, model: str, start_us: int) -> None:
    """A router spawns `model`, whose instance exits and is spawned again: a restart of that
    instance, which the daemon logs, naming it."""
    spawn = f"srv          load: spawning server instance with name={model} on port 8081"
    lines = [
        spawn,
        "[ 8081] 0.00.100.000 I srv    load_model: initializing, n_slots = 2, n_ctx = 9",
        f"srv           run: instance name={model} exited with status -9",
        spawn,
    ]
    path.write_text(
        "".join(entry(i, start_us + i * SECOND, m) + "\n" for i, m in enumerate(lines, 1))
    )


def journal_stream_env(log: Path) -> dict[str, str]:
    """JOURNAL_STREAM naming `log` (created now, kept by the run that truncates it), as systemd
    names the journal stream it gives a service."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    st = os.stat(log)
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def assert_one_record_a_line(text: str, journald: bool) -> None:
    """Every line of the log is a record of its own: a priority under journald, a time and a
    level elsewhere; no raw control character anywhere."""
    assert not RAW_CONTROLS.search(text), repr(text[-3000:])
    head = PRIORITY if journald else STAMP
    stray = [line for line in text.splitlines() if not head.match(line)]
    assert stray == [], stray


@pytest.mark.slow
@pytest.mark.parametrize("journald", [False, True], ids=["file", "journald"])
def test_a_model_name_in_the_journal_forges_no_log_line(tmp_path: Path, journald: bool) -> None:
    start = now_us() - 60 * SECOND
    dump = tmp_path / "router.json"
    router_dump(dump, HOSTILE, start)
    settings = {"nodes": file_nodes({"node0": dump}), "since": iso(start - 60 * SECOND)}
    env = journal_stream_env(tmp_path / "run" / "run-01.log") if journald else {}
    with DaemonProcess(tmp_path / "run", settings, env=env) as d:
        d.start()
        said = wait_for(
            lambda: [x for x in d.log_text().splitlines() if "llama-server restarted" in x],
            DEADLINE_S,
            "the instance's exit logged",
        )
        text = d.stop()
    shown = f"exporter.daemon.daemon: node node0: llama-server restarted (model instance {HOSTILE_SHOWN} "
    assert len(said) == 1 and shown in said[0], said
    assert said[0].startswith("<6>") if journald else STAMP.match(said[0])
    assert [line for line in text.splitlines() if "FORGED" in line] == said
    assert_one_record_a_line(text, journald)


EMIT = """
import logging
from exporter.base import logs
logs.setup("info")
log = logging.getLogger("exporter.x")
said = {said!r}
log.warning("a name: %s", said)
log.error("problems:\\n  one\\n  two %s", "\\x1b[2Jx", extra=logs.LINES)
try:
    try:
        raise KeyError(said)
    except KeyError as e:
        raise ValueError("bad " + said) from e
except ValueError:
    log.exception("it failed")
try:
    raise ExceptionGroup("two " + said, [OSError(said), ValueError("x")])
except ExceptionGroup:
    log.exception("they failed")
"""


@pytest.mark.slow
@pytest.mark.parametrize("journald", [False, True], ids=["file", "journald"])
def test_every_record_and_traceback_is_escaped_and_keeps_its_own_lines(
    tmp_path: Path, journald: bool
) -> None:
    """A message quoting outside text is one line; one logged with `extra=LINES` (the program's
    own lines: a list of config problems) keeps its line breaks, nothing else; a traceback keeps
    its lines, each exception's message on one."""
    log = tmp_path / "stderr.log"
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    env |= journal_stream_env(log) if journald else {"JOURNAL_STREAM": "1:1"}
    with log.open("wb") as err:
        done = subprocess.run(
            [sys.executable, "-c", EMIT.format(said=HOSTILE)],
            stderr=err,
            env=env,
            cwd=REPO,
            timeout=30,
            check=False,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert not RAW_CONTROLS.search(text), repr(text)
    if journald:  # (each line an entry of its own: each with its priority)
        assert all(PRIORITY.match(line) for line in text.splitlines()), text
    head = PRIORITY if journald else STAMP
    lines = [head.sub("", line, count=1) for line in text.splitlines()]
    assert lines[0] == f"exporter.x: a name: {HOSTILE_SHOWN}"
    assert lines[1:4] == ["exporter.x: problems:", "  one", "  two \\x1b[2Jx"]
    # each exception's message on one line, the frames as Python prints them
    assert f"KeyError: '{HOSTILE_SHOWN}'" in lines
    assert f"ValueError: bad {HOSTILE_SHOWN}" in lines
    assert "The above exception was the direct cause of the following exception:" in lines
    assert f"  | ExceptionGroup: two {HOSTILE_SHOWN} (2 sub-exceptions)" in lines
    assert f"    | OSError: {HOSTILE_SHOWN}" in lines
    assert [line for line in lines if "FORGED" in line and not line.startswith("exporter.x")] == [
        f"KeyError: '{HOSTILE_SHOWN}'",
        f"ValueError: bad {HOSTILE_SHOWN}",
        f"  | ExceptionGroup: two {HOSTILE_SHOWN} (2 sub-exceptions)",
        f"    | OSError: {HOSTILE_SHOWN}",
    ]


# -- a remote journalctl's standard error ---------------------------------------------------------

HOSTILE_JOURNALCTL = """#!/bin/sh
printf 'journalctl: \\033[2J\\033]0;owned\\007bad\\n%s\\n' '{forged}' >&2
exit 1
"""


@pytest.fixture(scope="module")
def hostile_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real sshd whose every session runs a script that says what a hostile node's journalctl
    could on stderr (ESC sequences, BEL, a forged log line) and fails."""
    base = tmp_path_factory.mktemp("h1b-sshd")
    script = base / "journalctl"
    script.write_text(HOSTILE_JOURNALCTL.format(forged=FORGED))
    script.chmod(0o755)
    with running_sshd(base / "sshd", [f"ForceCommand {script}"]) as server:
        yield server


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.mark.slow
def test_a_remote_journalctls_stderr_is_escaped_in_the_error(
    hostile_sshd: Sshd, tmp_path: Path
) -> None:
    node = local_node(
        "a",
        hostile_sshd.port,
        hostile_sshd.known_hosts(tmp_path / "known_hosts"),
        hostile_sshd.client_key,
        "",
    )
    with pytest.raises(SourceError) as e:
        window_batches(node, now_us() - 60 * SECOND, now_us())
    error = str(e.value)
    assert error.isprintable(), repr(error)
    assert error.endswith(
        f"the remote journalctl failed (1): journalctl: \\x1b[2J\\x1b]0;owned\\x07bad; {FORGED}"
    ), error


@pytest.mark.slow
def test_the_daemon_logs_a_remote_journalctls_stderr_on_one_line(
    hostile_sshd: Sshd, tmp_path: Path
) -> None:
    config = {
        "since": iso(now_us() - 60 * SECOND),
        "nodes": [
            {
                "name": "a",
                "source": "ssh",
                "host": "127.0.0.1",
                "port": hostile_sshd.port,
                "user": "root",
                "unit": UNIT,
                "known_hosts": str(hostile_sshd.known_hosts(tmp_path / "known_hosts")),
                "client_keys": [str(hostile_sshd.client_key)],
            }
        ],
    }
    with DaemonProcess(tmp_path / "run", config) as d:
        d.start()
        said = wait_for(
            lambda: [x for x in d.log_text().splitlines() if "FORGED" in x],
            DEADLINE_S,
            "the node's failure logged",
        )
        text = d.stop()
    assert "\\x1b[2J\\x1b]0;owned\\x07bad; " + FORGED in said[0]
    assert all("the remote journalctl failed (1)" in line for line in said), said
    assert_one_record_a_line(text, journald=False)


@pytest.mark.slow
def test_a_follow_stream_ending_with_hostile_stderr_says_it_escaped(tmp_path: Path) -> None:
    """asyncssh's server as the node: the follow stream sends nothing, then journalctl exits 1
    with ESC sequences and a forged line on stderr."""
    with FakeServer() as fake:
        fake.set(fail_next=f"journalctl: \x1b[31mbad\x1b[0m\n{FORGED}\x1b]0;owned\x07")
        node = local_node(
            "a",
            fake.port,
            fake.known_hosts(tmp_path / "known_hosts"),
            fake.client_key_file(tmp_path / "id_ed25519"),
            "",
        )
        source = SshSource(node, since_us=now_us() - 60 * SECOND)

        async def follow() -> str:
            with pytest.raises(SourceError) as e:
                await asyncio.wait_for(source.run(asyncio.Queue()), DEADLINE_S)
            return str(e.value)

        error = asyncio.run(follow())
    assert error.isprintable(), repr(error)
    assert error == (
        "node a: remote journalctl ended (1): journalctl: \\x1b[31mbad\\x1b[0m; "
        f"{FORGED}\\x1b]0;owned\\x07"
    )

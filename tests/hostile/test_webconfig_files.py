"""Issue 27, the web config's points: a web config (re-read for every connection) replaced by a
FIFO is refused at once, naming the path and its kind, never waited on: the server and the
daemon process keep answering, and the daemon stops on SIGTERM; a read that hangs (a hung NFS
mount) leaves the version in force serving until it ends."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config.document import read_text
from exporter.config.errors import ConfigError
from exporter.web import tls as webtls
from exporter.web import watched

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import answer
from support.served import Served
from support.tools import deadline, wait_for, yaml_text

DEADLINE_S = 20.0  # (a hang fails the test instead of stalling the suite)
NOSNIFF = yaml_text("http_server_config:", "  headers:", "    X-Content-Type-Options: nosniff")
DENY = yaml_text("http_server_config:", "  headers:", "    X-Frame-Options: deny")


def write(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    temp.replace(path)  # (atomically, as an operator's tool would)


def as_fifo(path: Path) -> None:
    """`path` replaced by a FIFO (made beside it, renamed over it)."""
    temp = path.with_name(f".{path.name}.fifo")
    os.mkfifo(temp)
    temp.replace(path)


def test_a_web_config_replaced_by_a_fifo_is_refused_at_once_until_it_is_a_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "web.yml"
    write(path, NOSNIFF)
    with Served(path) as s, caplog.at_level(logging.WARNING, "exporter.web.gate"):
        status, headers, _ = s.get()
        assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
        as_fifo(path)
        with deadline(DEADLINE_S):
            assert s.get()[0] == 500  # (refused as a bad web config is: never served open)
            write(path, DENY)
            status, headers, _ = s.get()
        assert status == 200 and headers["X-Frame-Options"] == "deny"
    assert f"{path}: cannot read: not a regular file (a FIFO)" in caplog.text


class HungRead:
    """A web config read that hangs until opened: a hung NFS mount stands in here (none can be
    made on this machine), as watched.py's read_text; the file itself is real and read for real
    once it is let open."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()

    def read(self, path: Path) -> str:
        if not self.open.is_set():
            self.waiting.set()
            self.open.wait()
        return read_text(path)


@pytest.fixture
def hung_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[HungRead]:
    g = HungRead()
    monkeypatch.setattr(watched, "read_text", g.read)
    yield g
    g.open.set()  # (no thread left hanging)


def test_a_read_that_hangs_leaves_the_version_in_force_serving(
    tmp_path: Path, hung_read: HungRead, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "web.yml"
    write(path, NOSNIFF)
    with Served(path) as s, caplog.at_level(logging.WARNING, "exporter.web.watched"):
        assert s.get()[1]["X-Content-Type-Options"] == "nosniff"
        hung_read.open.clear()
        write(path, DENY)
        with deadline(DEADLINE_S):
            for _ in range(3):  # the first waits for the read a moment; none hangs
                status, headers, _ = s.get()
                assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
        assert hung_read.waiting.is_set()
        hung_read.open.set()
        wait_for(lambda: "X-Frame-Options" in s.get()[1], 10, "the new version served")
    wait = f"{watched.READ_WAIT_S:g}"
    assert f"web config {path}: not read in {wait} s (a hung file system?)" in caplog.text


def test_a_stat_that_hangs_leaves_the_version_in_force_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On a hung mount the stat itself hangs, before any read: it is taken in a thread too,
    waited for once, and the version in force serves meanwhile (a stand-in for the hung mount,
    as above: the files are real and looked at for real once it is let open)."""
    path = tmp_path / "web.yml"
    write(path, NOSNIFF)
    opened, waiting = threading.Event(), threading.Event()
    opened.set()
    real = watched.stat_key

    def stat(p: Path) -> tuple[int, ...]:
        if not opened.is_set():
            waiting.set()
            opened.wait()
        return real(p)

    monkeypatch.setattr(watched, "stat_key", stat)
    try:
        with Served(path) as s, caplog.at_level(logging.WARNING, "exporter.web.watched"):
            assert s.get()[1]["X-Content-Type-Options"] == "nosniff"
            opened.clear()
            write(path, DENY)
            with deadline(DEADLINE_S):
                for _ in range(3):  # the first waits for the stat a moment; none hangs
                    status, headers, _ = s.get()
                    assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
            assert waiting.is_set()
            opened.set()
            wait_for(lambda: "X-Frame-Options" in s.get()[1], 10, "the new version served")
    finally:
        opened.set()
    assert f"web config {path}: its files not looked at in" in caplog.text


def test_a_first_read_that_hangs_refuses_until_it_is_read(
    tmp_path: Path, hung_read: HungRead
) -> None:
    """A reload's new web config: what it protects is not known before it is read, so
    nothing is served (open) meanwhile."""
    path = tmp_path / "web.yml"
    write(path, NOSNIFF)
    with Served(path) as s:
        hung_read.open.clear()
        s.server.web_config = path  # (as a reload sets it)
        with deadline(DEADLINE_S):
            assert s.get()[0] == 500
            assert s.get()[0] == 500
        hung_read.open.set()
        wait_for(lambda: s.get()[0] == 200, 10, "the web config read")


@pytest.mark.slow
def test_the_daemon_answers_and_stops_on_sigterm_while_its_web_config_is_a_fifo(
    tmp_path: Path,
) -> None:
    dump = tmp_path / "n1.log"
    dump.write_text("")
    web = tmp_path / "web.yml"
    write(web, NOSNIFF)
    config = {"nodes": file_nodes({"n1": dump}), "web_config_file": str(web)}
    with DaemonProcess(tmp_path / "daemon", config) as d:
        d.start()
        assert d.scrape()
        as_fifo(web)
        got = answer(d.url + "/metrics")
        assert got is not None and got[0] == 500, got  # (not a hang: an answer)
        got = answer(d.url + "/-/healthy")
        assert got is not None, "the daemon stopped answering"
        text = d.stop()
    assert f"{web}: cannot read: not a regular file (a FIFO)" in text


def test_a_web_config_shown_in_a_problem_never_shows_a_key_or_a_user_s_hash(
    tmp_path: Path,
) -> None:
    """(A web config that is a list: the problem shows its start, but no private key's text
    and no basic_auth_users value.)"""
    path = tmp_path / "web.yml"
    write(
        path,
        yaml_text(
            "- tls_server_config: {key: MIIEvQIBADANBgkqhkiG9w0B}",
            "- basic_auth_users: {alice: plain-password}",
        ),
    )
    with pytest.raises(ConfigError) as e:
        webtls.load(path)
    text = "\n".join(e.value.problems)
    assert f"{path}:1: (top): must be a mapping, got [" in text
    assert "MIIEvQ" not in text and "plain-password" not in text
    assert "<not shown>" in text

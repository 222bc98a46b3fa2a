"""check-config and run on config files (the commands, in-process): check-config prints every
problem of the form and of the paths a config names on stderr, in the order of the lines; run
refuses a bad config without starting the daemon."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.commands.loading import SERVICE_CREDENTIALS
from exporter.config.schema import Config
from exporter.daemon import daemon
from exporter.sources import registry as sources
from exporter.sources.file import FileNode
from exporter.sources.registry import ALL_SOURCES

from support.cli import Cli
from support.configs import (
    FILE_NODE,
    MANY,
    MANY_PROBLEMS,
    ROOT,
    problems,
)
from support.tools import yaml_text as y

EXAMPLE = ROOT / "config.example.yaml"

EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")


EXAMPLE_DUMP_LINE = EXAMPLE_TEXT.splitlines().index("    path: /srv/dumps/node0.json") + 1


def test_check_config_on_the_example_finds_only_its_placeholder_dump(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its form is valid; of the paths it names, only the example dump is not there: a
    warning (the daemon waits for a dump to appear), so it is valid."""
    monkeypatch.chdir(ROOT)
    code, out, err = cli("check-config", "config.example.yaml")
    assert code == 0 and out.startswith("config.example.yaml: valid, ")
    warnings = [
        line.split(" WARNING exporter.commands.check_config: ", 1)[1] for line in err.splitlines()
    ]
    assert warnings == [
        f"config.example.yaml:{EXAMPLE_DUMP_LINE}: nodes[0].path: /srv/dumps/node0.json "
        "does not exist yet: the daemon waits for it",
    ]


def test_check_config_good_file(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(
        y(
            "nodes:",
            "  - {name: a, source: file, path: /etc/passwd}",
            "  - {name: b, source: file, path: /etc/group}",
        ),
        encoding="utf-8",
    )
    code, out, err = cli("check-config", str(path))
    assert code == 0, err
    assert (
        out == f"{path}: valid, 2 node(s)\n  node a: file /etc/passwd\n  node b: file /etc/group\n"
    )
    assert err == ""


def test_check_config_bad_file_prints_every_problem_on_stderr(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    path = tmp_path / "bad.yaml"
    path.write_text(MANY, encoding="utf-8")
    code, out, err = cli("check-config", str(path))
    assert code == 1
    assert out == ""
    # the CLI checks against the sources the daemon can follow: more problems than MANY_PROBLEMS
    # when some source is not available
    # ... and reads an unset ${CREDENTIALS_DIRECTORY} as the service will see it
    service_env = {**os.environ, "CREDENTIALS_DIRECTORY": SERVICE_CREDENTIALS}
    expected = [
        p.replace("cfg.yaml", str(path), 1)
        for p in problems(MANY, env=service_env, available=sources.AVAILABLE)
    ]
    assert set(MANY_PROBLEMS[:-1]) <= {p.replace(str(path), "cfg.yaml", 1) for p in expected}
    assert "CREDENTIALS_DIRECTORY is not set" in MANY_PROBLEMS[-1]
    # in one list with them, in the order of their lines: the problems of the paths it names
    printed = [line for line in err.splitlines() if line.startswith(f"{path}:")]
    assert f"{path}: {len(printed)} problem(s):" in err
    assert [p for p in printed if p in expected] == expected
    of_paths = [p for p in printed if p not in expected]
    assert f"{path}:17: nodes[3].directory: /d does not exist" in of_paths
    lines = [int(p[len(f"{path}:") :].split(":", 1)[0]) for p in printed]
    assert lines == sorted(lines)
    assert "hunter2" not in err


CREDENTIALS_NODE = y(
    "nodes:",
    "  - name: a",
    "    source: ssh",
    "    host: h",
    "    known_hosts: ${CREDENTIALS_DIRECTORY}/ssh_known_hosts",
)


@pytest.mark.parametrize("level", [None, "warning"])
def test_check_config_from_a_shell_reads_credentials_as_the_service_will(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str | None
) -> None:
    """systemd sets $CREDENTIALS_DIRECTORY in the service only: checked from a shell, a config
    written for the service is valid, and says how it was read (an INFO line, which
    `--log-level warning`, given after the command, silences)."""
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text(CREDENTIALS_NODE, encoding="utf-8")
    code, out, err = cli("check-config", str(path), *(["--log-level", level] if level else []))
    # valid; and its credential is followed to the file the unit hands over, not there here
    assert code == 1 and out == "", err
    assert (
        f"{path}:5: nodes[0].known_hosts: {SERVICE_CREDENTIALS}/ssh_known_hosts comes from "
        "/etc/sm-llm-exporter/ssh/known_hosts, which does not exist"
    ) in err
    said = f"read as the service's, {SERVICE_CREDENTIALS}" in err
    assert said == (level is None), err
    # `run` is the service: there the variable must be set
    code, _, err = cli("run", "--config", str(path))
    assert code == 1
    assert "$CREDENTIALS_DIRECTORY is not set" in err


# a valid node of each source kind
NODE_OF = {
    "file": "{name: a, source: file, path: /etc/passwd}",  # (any regular file)
    "journal": "{name: a, source: journal}",
    "journal-remote": "{name: a, source: journal-remote, directory: /tmp}",
    "ssh": "{name: a, source: ssh, host: h, known_hosts: /etc/passwd}",  # (any regular file)
    "init-timeline": "{name: a, source: init-timeline, path: /tmp}",
}


UNAVAILABLE = sorted(ALL_SOURCES - sources.AVAILABLE)


def test_node_of_covers_every_source() -> None:
    assert set(NODE_OF) == ALL_SOURCES
    assert sources.AVAILABLE <= ALL_SOURCES


@pytest.mark.parametrize("source", sorted(ALL_SOURCES))
def test_check_config_refuses_sources_the_daemon_cannot_follow(
    cli: Cli, tmp_path: Path, source: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(y("nodes:", f"  - {NODE_OF[source]}"), encoding="utf-8")
    code, _, err = cli("check-config", str(path))
    if source in sources.AVAILABLE:
        assert code == 0, err
    else:
        assert code == 1
        assert f"{path}:2: nodes[0].source: source {source!r} is not available" in err


def _latin1(d: Path) -> Path:
    path = d / "latin1.yaml"
    path.write_bytes(b"unit: \xe9\n")
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "missing.yaml", "No such file or directory"),
        (lambda d: d, "Is a directory"),
        (_latin1, "can't decode"),
    ],
    ids=["missing", "directory", "not-utf-8"],
)
def test_check_config_unreadable_file(
    cli: Cli, tmp_path: Path, make: Callable[[Path], Path], reason: str
) -> None:
    path = make(tmp_path)
    code, out, err = cli("check-config", str(path))
    assert code == 1
    assert out == ""
    assert f"{path}: cannot read: " in err
    assert reason in err


@pytest.fixture
def fake_daemon(monkeypatch: pytest.MonkeyPatch) -> list[Config]:
    """daemon.Daemon replaced by a stand-in that records its config and returns at once."""
    made: list[Config] = []

    class FakeDaemon:
        def __init__(self, config: Config, **options: object) -> None:
            made.append(config)

        async def run_until_signalled(self) -> None:
            return None

    monkeypatch.setattr(daemon, "Daemon", FakeDaemon)
    return made


def test_run_with_a_good_config_starts_the_daemon(
    cli: Cli, tmp_path: Path, fake_daemon: list[Config]
) -> None:
    """The control for the test below: `run` does go through daemon.Daemon."""
    path = tmp_path / "good.yaml"
    path.write_text(y(*FILE_NODE), encoding="utf-8")
    code, _, err = cli("run", "--config", str(path))
    assert code == 0, err
    assert fake_daemon == [Config(nodes=(FileNode("a", Path("/x")),))]
    assert f"starting with {path}" in err


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(MANY, id="bad"),
        pytest.param(None, id="missing"),
        *(
            pytest.param(y("nodes:", f"  - {NODE_OF[s]}"), id=f"unavailable-{s}")
            for s in UNAVAILABLE
        ),
    ],
)
def test_run_with_a_bad_config_exits_1_without_starting(
    cli: Cli, tmp_path: Path, fake_daemon: list[Config], content: str | None
) -> None:
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    t0 = time.monotonic()
    code, out, err = cli("run", "--config", str(path))
    assert time.monotonic() - t0 < 2.0
    assert code == 1
    assert out == ""
    assert fake_daemon == []
    assert f"ERROR exporter.commands.loading: {path}: " in err
    assert "starting" not in err


def test_check_config_names_an_init_timeline_path_it_cannot_check(cli: Cli, tmp_path: Path) -> None:
    """A path too long to stat, or missing, is a problem named by its key (not a traceback);
    a dump beside a run directory is checked as a file."""
    path = tmp_path / "c.yaml"
    long = "/" + "a" * 300 + "/run"
    path.write_text(
        y(
            "nodes:",
            "  - {name: a, source: file, path: /etc/passwd}",
            f"  - {{name: t, source: init-timeline, path: {long}}}",
            f"  - {{name: u, source: init-timeline, path: {tmp_path}, dump: {tmp_path}}}",
        ),
        encoding="utf-8",
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1 and "Traceback" not in err
    assert f"{path}:3: nodes[1].path: " in err
    assert f"{path}:4: nodes[2].dump: {tmp_path} is a directory" in err

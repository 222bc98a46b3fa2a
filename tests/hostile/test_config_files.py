"""Issue 27, the config's points: check-config never shows a secret pasted where a path belongs;
a config that is a FIFO (or names one) is refused at once, never waited on, by `run` and by
check-config as processes; check-config lists every problem in one pass and one format, reads
`-` as standard input, and only warns of a dump that is not there yet; a misspelled `source:`
is named as an unknown key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config.errors import ConfigError
from exporter.config.load import parse

from support.cli import Cli
from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import answer
from support.tools import REPO, wait_for, yaml_text

SECRET = "Hunter2-secret-pasted"
PROCESS_DEADLINE_S = 20.0  # (a hang fails the test instead of stalling the suite)
CREDENTIALS = "/run/credentials/sm-llm-exporter.service"


def exporter(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m exporter ARGV` as its own process; TimeoutExpired (the process killed) when
    it hangs."""
    return subprocess.run(
        [sys.executable, "-m", "exporter", *argv],
        cwd=REPO,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PROCESS_DEADLINE_S,
        check=False,
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "config.fifo"
    os.mkfifo(path)
    yield path
    path.unlink()


def a_dump(tmp_path: Path) -> Path:
    dump = tmp_path / "n1.log"
    dump.write_text("")
    return dump


# -- 1. a secret pasted where a path belongs is never shown ------------------------------------


@pytest.mark.parametrize("key", ["password_file", "passphrase_file", "client_keys"])
@pytest.mark.parametrize(
    ("value", "as_service"),
    [
        (SECRET, False),  # relative
        (f"/{SECRET}", False),  # not there
        (f"${{CREDENTIALS_DIRECTORY}}/{SECRET}", True),  # no credential the unit hands over
        (f"${{CREDENTIALS_DIRECTORY}}/ssh_{SECRET}", True),  # its source not there
    ],
    ids=["relative", "missing", "no-credential", "credential-missing"],
)
def test_check_config_names_the_key_of_a_bad_secret_path_never_its_value(
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    value: str,
    as_service: bool,
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    shown = f"['{value}']" if key == "client_keys" else f"'{value}'"
    path = tmp_path / "secret.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            "  - name: a",
            "    source: ssh",
            "    host: a.example",
            "    verify_host_key: false",
            f"    {key}: {shown}",
        )
    )
    code, out, err = cli("check-config", str(path), *(["--as-service"] if as_service else []))
    assert code == 1, err
    assert SECRET not in out + err
    at = f"{key}[0]" if key == "client_keys" else key
    assert f"{path}:7: nodes[0].{at}: the path given " in err
    assert "(the path is not shown: it may be a secret)" in err


def test_a_secret_path_that_is_a_fifo_is_named_by_its_key_and_kind(
    cli: Cli, tmp_path: Path
) -> None:
    secret = tmp_path / SECRET
    os.mkfifo(secret)
    path = tmp_path / "fifo.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: a, source: ssh, host: a.example, verify_host_key: false, "
            f"password_file: {secret}}}",
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1 and SECRET not in err
    assert (
        f"{path}:3: nodes[0].password_file: the path given is not a regular file (a FIFO) "
        "(the path is not shown: it may be a secret)"
    ) in err


# -- 2. a FIFO is refused, never waited on -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", [["run", "--config"], ["check-config"]])
def test_a_config_that_is_a_fifo_ends_at_once_with_one_line(fifo: Path, command: list[str]) -> None:
    done = exporter(*command, str(fifo))
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith(f"{fifo}: cannot read: not a regular file (a FIFO)")


@pytest.mark.slow
def test_a_web_config_that_is_a_fifo_ends_run_and_check_config_at_once(
    tmp_path: Path, fifo: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: n1, source: file, path: {a_dump(tmp_path)}}}",
            f"web_config_file: {fifo}",
        )
    )
    done = exporter("check-config", str(config))
    assert done.returncode == 1, done.stderr
    assert f"{config}:4: web_config_file: {fifo} is not a regular file (a FIFO)" in done.stderr
    done = exporter("run", "--config", str(config))
    assert done.returncode == 1, done.stderr
    assert f"{fifo}: cannot read: not a regular file (a FIFO)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_reload_of_a_config_turned_fifo_is_refused_and_the_daemon_answers(
    tmp_path: Path,
) -> None:
    config = {"nodes": file_nodes({"n1": a_dump(tmp_path)})}
    with DaemonProcess(tmp_path / "daemon", config) as d:
        d.start()
        os.unlink(d.config)
        os.mkfifo(d.config)
        os.kill(d.pid, signal.SIGHUP)
        refused = (
            "reload refused, the config in force stays: "
            f"{d.config}: cannot read: not a regular file (a FIFO)"
        )
        wait_for(lambda: refused in d.log_text(), PROCESS_DEADLINE_S, "the reload refused")
        got = answer(d.url + "/metrics")
        assert got is not None and got[0] == 200
        d.stop()


@pytest.mark.slow
def test_check_config_reads_standard_input_once_with_its_lines(tmp_path: Path) -> None:
    text = yaml_text(
        f"state_dir: {tmp_path / 'state'}",
        "nodes:",
        f"  - {{name: n1, source: file, path: {a_dump(tmp_path)}}}",
    )
    done = exporter("check-config", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<stdin>: valid, 1 node(s)\n")
    missing = tmp_path / "no-journals"
    done = exporter(
        "check-config",
        "-",
        stdin=text + f"  - {{name: n2, source: journal, directory: {missing}}}\n",
    )
    assert done.returncode == 1
    assert f"<stdin>:4: nodes[1].directory: {missing} does not exist" in done.stderr


# -- 3. one pass, one format -------------------------------------------------------------------


def test_check_config_lists_bad_values_and_missing_files_together(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "both.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "stall_seconds: 0",
            "nodes:",
            f"  - {{name: a, source: journal, directory: {tmp_path / 'no-journals'}}}",
            f"  - {{name: b, source: ssh, host: b.example, known_hosts: {tmp_path / 'no-kh'}}}",
            "  - {name: c, source: ssh, host: 'c; x', known_hosts: /nowhere}",
        )
    )
    code, out, err = cli("check-config", str(path))
    assert code == 1 and out == ""
    lines = err.splitlines()
    header = [line for line in lines if " ERROR " in line]
    assert len(header) == 1 and header[0].endswith(f"{path}: 4 problem(s):")
    listed = lines[lines.index(header[0]) + 1 :]
    assert listed == [
        f"{path}:2: stall_seconds: must be a positive integer, got 0",
        f"{path}:4: nodes[0].directory: {tmp_path / 'no-journals'} does not exist",
        f"{path}:5: nodes[1].known_hosts: {tmp_path / 'no-kh'} does not exist",
        f"{path}:6: nodes[2].host: must be a host name or an IP address, got 'c; x'",
    ]  # (node c is not built: its known_hosts is not checked)


def test_a_value_refused_is_not_checked_again_as_a_path(cli: Cli, tmp_path: Path) -> None:
    """A refused value stands in as its default: no problem of the default's path too."""
    path = tmp_path / "default.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            "  - {name: a, source: ssh, host: a.example, known_hosts: 5}",
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1
    assert f"{path}: 1 problem(s):\n{path}:3: nodes[0].known_hosts: must be a path, got 5\n" in err


# -- 4. `souce:` is an unknown key -------------------------------------------------------------


def test_a_misspelled_source_is_named_as_an_unknown_key() -> None:
    text = yaml_text("nodes:", "  - name: a", "    souce: file", "    path: /x")
    with pytest.raises(ConfigError) as e:
        parse(text, "c.yaml", {})
    assert e.value.problems == [
        "c.yaml:3: nodes[0].souce: unknown key 'souce' (did you mean 'source'?)"
    ]


def test_a_node_without_a_source_says_so_and_names_its_unknown_keys() -> None:
    text = yaml_text("nodes:", "  - {name: a, path: /x, colour: red}")
    with pytest.raises(ConfigError) as e:
        parse(text, "c.yaml", {})
    assert e.value.problems == [
        "c.yaml:2: nodes[0].colour: unknown key 'colour'",
        "c.yaml:2: nodes[0]: a node needs a source: one of file, journal, journal-remote, ssh, init-timeline",
    ]


def test_a_bad_source_is_named_with_the_node_s_unknown_keys() -> None:
    text = yaml_text("nodes:", "  - {name: a, source: fiel, colour: red}")
    with pytest.raises(ConfigError) as e:
        parse(text, "c.yaml", {})
    assert e.value.problems == [
        "c.yaml:2: nodes[0].colour: unknown key 'colour'",
        "c.yaml:2: nodes[0].source: must be one of file, journal, journal-remote, ssh, init-timeline, got "
        "'fiel' (did you mean 'file'?)",
    ]


def test_a_node_after_one_without_a_source_keeps_its_own_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "order.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            "  - {name: a, souce: file, path: /x}",
            f"  - {{name: b, source: journal, directory: {tmp_path / 'none'}}}",
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1
    assert f"{path}:4: nodes[1].directory: {tmp_path / 'none'} does not exist" in err


# -- 5. a dump not there yet is a warning ------------------------------------------------------


def test_a_dump_not_there_yet_is_a_warning(cli: Cli, tmp_path: Path) -> None:
    later = tmp_path / "later.json"
    timeline = tmp_path / "timeline.json"
    path = tmp_path / "later.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: a, source: file, path: {later}}}",
            f"  - {{name: t, source: init-timeline, path: {timeline}}}",
        )
    )
    code, out, err = cli("check-config", str(path))
    assert code == 0, err
    assert out.startswith(f"{path}: valid, 2 node(s)")
    warnings = [
        line.split(" WARNING exporter.commands.check_config: ", 1)[1] for line in err.splitlines()
    ]
    assert warnings == [
        f"{path}:3: nodes[0].path: {later} does not exist yet: the daemon waits for it",
        f"{path}:4: nodes[1].path: {timeline} does not exist yet: the daemon waits for it",
    ]


def test_a_dump_that_is_a_directory_is_still_a_problem(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "dir.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: a, source: file, path: {tmp_path}}}",
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1
    assert f"{path}:3: nodes[0].path: {tmp_path} is a directory" in err


def test_a_dump_that_is_a_device_is_a_problem_in_the_daemons_words(
    cli: Cli, tmp_path: Path
) -> None:
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    path = tmp_path / "zero.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: a, source: file, path: {zero}}}",
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1
    assert f"{path}:3: nodes[0].path: {zero} is a character device, not a dump file" in err


def test_credentials_directory_stand_in_is_still_told(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    path = tmp_path / "creds.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            "  - name: a",
            "    source: ssh",
            "    host: a.example",
            "    known_hosts: ${CREDENTIALS_DIRECTORY}/ssh_no-such-file-here",
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1
    assert f"$CREDENTIALS_DIRECTORY is not set: read as the service's, {CREDENTIALS}" in err
    assert f"{path}:6: nodes[0].known_hosts: {CREDENTIALS}/ssh_no-such-file-here comes from " in err


def test_a_path_with_a_line_break_stays_on_its_problem_s_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "forged.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            '  - {name: a, source: ssh, host: a.example, known_hosts: "/nowhere\\nFORGED: x"}',
        )
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1
    assert f"{path}:3: nodes[0].known_hosts: /nowhere\\nFORGED: x does not exist" in err
    assert "\nFORGED" not in err

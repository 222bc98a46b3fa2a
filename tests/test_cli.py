"""The command line an operator types: `run --listen`, relative report windows, numbers in
range, a note for an empty window, known-hosts with nothing to do."""

from __future__ import annotations

import html
import logging
import signal
import subprocess
from pathlib import Path

import pytest

from exporter import cli

from support.scrape import answer
from support.tools import REPO, free_port, wait_for, yaml_text

EXPORTER = REPO / ".venv" / "bin" / "sm-llm-exporter"


def config_file(tmp_path: Path, *extra: str) -> Path:
    dump = tmp_path / "a.log"
    dump.write_text("")
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml_text(
            f'listen: "127.0.0.1:{free_port()}"',
            f"state_dir: {tmp_path}/state",
            *extra,
            "nodes:",
            f"  - {{name: a, source: file, path: {dump}}}",
        )
    )
    return path


def test_run_listen_serves_where_it_says_not_where_the_config_does(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            str(EXPORTER),
            "run",
            "--config",
            str(config_file(tmp_path)),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status = wait_for(lambda: answer(f"http://127.0.0.1:{port}/-/ready"), 20, "ready")
        assert status[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"listening on http://127.0.0.1:{port}/metrics" in err


@pytest.mark.parametrize("listen", ["nope", "127.0.0.1:99999", "h; x:10027", "::1:10027"])
def test_run_listen_is_checked(listen: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--listen", listen])
    assert e.value.code == 2
    assert "--listen: expected HOST:PORT or :PORT" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--since", "-7d", "--until", "now"],
        ["--since=-90m", "--until=-30m"],
        ["--until", "-1h", "--since", "-2h"],
    ],
)
def test_report_takes_relative_times_as_the_config_does(
    argv: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dump = tmp_path / "a.log"
    dump.write_text("")
    with caplog.at_level(logging.WARNING):
        assert cli.main(["report", *argv, "--input", f"a={dump}"]) == 0
    # an empty window says so
    assert "holds no journal entries of any node" in caplog.text


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--split-tokens", "0"),
        ("--split-tokens", "x"),
        ("--split-tokens", "1000000001"),
        ("--max-request-seconds", "0"),
        ("--max-request-seconds", "-5"),
        ("--max-request-seconds", "604801"),
    ],
)
def test_report_numbers_are_range_checked(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["report", "--since=-1h", "--until=now", "--input", "a=x", f"{option}={value}"])
    assert e.value.code == 2
    assert f"{option} must be an integer" in capsys.readouterr().err


def test_known_hosts_with_no_ssh_node_says_there_is_nothing_to_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path)
    with caplog.at_level(logging.INFO):
        assert cli.main(["known-hosts", "--config", str(path)]) == 0
    assert f"{path} has no ssh nodes: no host keys to fetch" in caplog.text
    assert capsys.readouterr().out == ""


def test_known_hosts_with_an_unreachable_node_names_it_and_ends_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # (nothing listens there)
    path = config_file(tmp_path)
    path.write_text(
        path.read_text().replace(
            "nodes:\n", f"nodes:\n  - {{name: s, source: ssh, host: 127.0.0.1, port: {port}}}\n"
        )
    )
    with caplog.at_level(logging.INFO):
        assert cli.main(["known-hosts", "--config", str(path)]) == 1
    assert f"node s: 127.0.0.1:{port}: cannot fetch its host key" in caplog.text
    assert "Traceback" not in caplog.text + capsys.readouterr().err


def test_report_html_goes_to_output_whole_with_the_texts_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    run = REPO / "tests" / "testdata" / "llama-server" / "parallel.journal.json"
    window = ["--since", "2026-01-01T00:00:00", "--until", "2027-01-01T00:00:00"]
    inputs = ["--input", f"a={run}"]
    assert cli.main(["report", *window, *inputs]) == 0
    text = capsys.readouterr().out
    out = tmp_path / "report.html"
    assert cli.main(["report", *window, *inputs, "--format", "html", "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""  # (all of it in the file)
    page = out.read_text(encoding="utf-8")
    assert page.lower().startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert html.escape(text.rstrip("\n"), quote=False) in page  # the seed's tables, exactly
    assert list(tmp_path.iterdir()) == [out]  # (no temporary file left)
    assert cli.main(["report", *window, *inputs, "--format", "html"]) == 0
    assert capsys.readouterr().out == page  # standard output, the same page
    missing = tmp_path / "no-such-dir" / "r.html"
    assert cli.main(["report", *window, *inputs, "--format", "html", "--output", str(missing)]) == 1
    assert f"cannot write {missing}: No such file or directory" in caplog.text

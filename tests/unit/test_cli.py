"""The command line an operator types: `run --listen`, relative report windows, numbers in
range, a note for an empty window, known-hosts with nothing to do."""

from __future__ import annotations

import html
import logging
from pathlib import Path

import pytest

from exporter import cli

from support.tools import REPO


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


def test_a_window_beside_a_dumps_entries_says_it_holds_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dump is read whole: its entries outside the window do not make the window hold any."""
    dump = tmp_path / "a.log"
    dump.write_text(
        "2026-09-22T07:31:04.127792+0000 node0 sm-llm[4242]: slot print_timing: id  0 | "
        "task 36 |       total time =   47390.06 ms /   730 tokens\n"
    )
    empty = "holds no journal entries of any node"
    window = ["--since", "2026-09-22T08:00:00", "--until", "2026-09-22T09:00:00"]
    with caplog.at_level(logging.WARNING):
        assert cli.main(["report", *window, "--input", f"a={dump}"]) == 0
    assert empty in caplog.text
    caplog.clear()
    window = ["--since", "2026-09-22T07:00:00", "--until", "2026-09-22T08:00:00"]
    with caplog.at_level(logging.WARNING):
        assert cli.main(["report", *window, "--input", f"a={dump}"]) == 0
    assert empty not in caplog.text

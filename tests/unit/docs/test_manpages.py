"""The man pages in man/ are what tools/manpages.py writes now: sm-llm-exporter(1) names every
command and option the command line has, with each command's example; sm-llm-exporter.yaml(5)
every key of the config reference, and its example config is one the checker accepts.

`SMLLM_UPDATE_GOLDEN=1` rewrites the pages instead of comparing (as `make man` does).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import re
from functools import cache
from types import ModuleType

import pytest

from exporter import cli
from exporter.config.reference import keys

from support.configs import good
from support.golden import UPDATE_ENV
from support.tools import REPO

TOOL = REPO / "tools" / "manpages.py"
MAN = REPO / "man"


@cache
def manpages() -> ModuleType:
    """tools/manpages.py (a script, not a module of the package)."""
    spec = importlib.util.spec_from_file_location("manpages", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plain(roff: str) -> str:
    """Roff source as the words it shows: escapes of hyphens, backslashes and fonts undone."""
    text = re.sub(r"\\f[BIRP]|\\[,/&]", "", roff)
    return text.replace("\\-", "-").replace("\\e", "\\")


def commands() -> dict[str, argparse.ArgumentParser]:
    """The command line's commands, by name."""
    found = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(found) == 1
    return dict(found[0].choices)


def options(parser: argparse.ArgumentParser) -> list[str]:
    """A parser's option strings and positional names, but --help."""
    shown: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        shown += action.option_strings or [str(action.metavar or action.dest)]
    return shown


@pytest.mark.parametrize("name", ["sm-llm-exporter.1", "sm-llm-exporter.yaml.5"])
def test_the_committed_page_is_what_the_generator_writes(name: str) -> None:
    text = manpages().PAGES[name]()
    path = MAN / name
    if os.environ.get(UPDATE_ENV):
        MAN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"man/{name} missing: run `make man`"
    want = path.read_text(encoding="utf-8")
    if text != want:
        diff = difflib.unified_diff(
            want.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"man/{name} (committed)",
            f"{name} (written now)",
        )
        raise AssertionError(
            f"man/{name} is not what tools/manpages.py writes: run `make man` (or "
            f"{UPDATE_ENV}=1) and review the diff:\n{''.join(diff)}"
        )


def test_the_pages_are_the_same_on_every_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """No date from the clock, nothing from the terminal's width."""
    pages = manpages().PAGES
    first = {name: make() for name, make in pages.items()}
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert {name: make() for name, make in pages.items()} == first
    assert re.match(r'\.TH \S+ "1" "" ', first["sm-llm-exporter.1"])


def test_the_command_page_names_every_command_and_option_in_its_section() -> None:
    page = plain(manpages().page1())
    head, *sections = re.split(r"^\.SS ", page, flags=re.MULTILINE)
    by_command = {s.split("\n", 1)[0].strip(): s for s in sections}
    assert set(by_command) == {f"sm-llm-exporter {c}" for c in commands()}
    for option in options(cli.parser()):
        assert option in head, option
    for name, parser in commands().items():
        section = by_command[f"sm-llm-exporter {name}"]
        for option in options(parser):
            assert option in section, (name, option)


def test_every_command_says_what_it_serves_or_needs_with_an_example() -> None:
    """Its --help (and so its part of the page) ends with an example of the command."""
    for name, parser in commands().items():
        epilog = parser.epilog or ""
        assert re.search(rf"^examples?:\n  sm-llm-exporter {name}\b", epilog, re.MULTILINE), name
        assert re.search(r"^(serves|requires|checks)\b", epilog, re.MULTILINE), name
        assert parser.formatter_class is argparse.RawDescriptionHelpFormatter, name
    run = commands()["run"].format_help()
    for served in (" / ", " /api/status ", " /metrics ", "SIGHUP", "systemctl reload"):
        assert served in run, served
    report = commands()["report"].format_help()
    assert "requires: --since and --until" in report


def test_the_config_page_names_every_key_with_its_default() -> None:
    page = plain(manpages().page5())
    section = page.split("\n.SH KEYS\n", 1)[1].split("\n.SH ", 1)[0]
    for key in keys():
        assert f"\n{key.path}\n" in section, key.path
        if key.default:
            assert f"Default: {key.default}." in section, key.path


def test_the_config_page_example_is_a_config_the_checker_accepts() -> None:
    cfg = good(manpages().EXAMPLE_5, {"CREDENTIALS_DIRECTORY": "/run/credentials/x"})
    assert [n.source for n in cfg.nodes] == ["ssh", "journal", "file"]

"""The man pages as groff and man render them: no warning, nothing past 80 columns, every
command in sm-llm-exporter(1) and every config key in sm-llm-exporter.yaml(5).

(tests/unit/docs/test_manpages.py holds the committed pages to what tools/manpages.py writes.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from exporter.config.reference import keys

from support.tools import REPO, require_tool

MAN = REPO / "man"
PAGES = [MAN / "sm-llm-exporter.1", MAN / "sm-llm-exporter.yaml.5"]
COMMANDS = ("run", "check-config", "known-hosts", "demo", "report")
WIDTH = 80


def rendered(page: Path) -> str:
    """`man -l PAGE` as a reader's 80-column terminal shows it (no pager)."""
    r = subprocess.run(
        [require_tool("man"), "-l", str(page)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MANWIDTH": str(WIDTH), "MANPAGER": "cat", "PAGER": "cat"},
        timeout=60,
    )
    assert r.returncode == 0 and not r.stderr, r.stderr
    return r.stdout


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_groff_renders_the_page_without_a_warning(page: Path) -> None:
    r = subprocess.run(
        [require_tool("groff"), "-man", "-Tutf8", "-ww", "-z", str(page)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert r.returncode == 0 and not r.stderr, r.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_man_renders_the_page_without_a_warning(page: Path) -> None:
    r = subprocess.run(
        [require_tool("man"), "--warnings", "-l", str(page)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MANWIDTH": str(WIDTH), "MANPAGER": "cat", "PAGER": "cat"},
        timeout=60,
    )
    assert r.returncode == 0 and not r.stderr, r.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_line_runs_past_80_columns(page: Path) -> None:
    wide = [line for line in rendered(page).splitlines() if len(line) > WIDTH]
    assert wide == []


def test_the_command_page_shows_every_command() -> None:
    shown = rendered(PAGES[0])
    for command in COMMANDS:
        assert f"\n   sm-llm-exporter {command}\n" in shown, command
        assert f"sm-llm-exporter {command} [-h]" in shown, command  # (its usage)


def test_the_config_page_shows_every_key() -> None:
    shown = rendered(PAGES[1])
    for key in keys():
        assert key.path in shown, key.path

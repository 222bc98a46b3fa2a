"""The `cli` fixture's type: run `exporter.cli.main` in-process, get (exit code, stdout, stderr)."""

from __future__ import annotations

from collections.abc import Callable

Cli = Callable[..., tuple[int, str, str]]

"""The error a config that cannot be used raises: every problem found, each with its place."""

from __future__ import annotations

from exporter.config.redact import printable


class ConfigError(Exception):
    """The config cannot be used; `problems` lists every one, each with its place."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s):\n" + "\n".join(problems))


class Unreadable(ConfigError):
    """A config (or a web config) that cannot be read at all: its one problem is the message."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(source, [printable(problem)])

    def __str__(self) -> str:
        return self.problems[0]

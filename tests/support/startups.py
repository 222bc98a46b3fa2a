"""Start-up tests' shared parts: a finished start-up and the report of a window."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Done:
    """What `sm-llm-exporter report ...` did (run in-process: the `cli` fixture)."""

    returncode: int
    stdout: str
    stderr: str

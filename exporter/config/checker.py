"""Collects every problem of a YAML document instead of stopping at the first, each at its line.

A `Checker` reads a document's mappings and values: a key that is not allowed, or a value its
check refuses, is a problem named `SOURCE:LINE: KEY.PATH: what it must be` (see redact.py for
what a problem never shows), and the value read is the default.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from exporter.config.redact import (
    MAY_HOLD_A_SECRET,
    SECRET_KEYS,
    SERVICE_VARIABLES,
    key_shown,
    printable,
    show,
)
from exporter.config.values import Unset, expand_path, expand_paths

_LAST_STEP = re.compile(r"(\.[^.\[]*|\[\d+\])$")  # a key path's last key or index


class Checker:
    """Collects every problem instead of stopping at the first."""

    def __init__(self, source: str, lines: dict[str, int], env: Mapping[str, str]) -> None:
        self.source, self.lines, self.env = source, lines, env
        self._found: list[tuple[int, str]] = []
        self.keys: set[str] = set()  # the key paths with a problem

    def placed(self, path: str, text: str, shown: str | None = None) -> tuple[int, str]:
        """(line, `SOURCE:LINE: KEY: text`): `text` at `path`'s line, or at the line of the
        nearest key around it (a default's); `shown`, if given, is the path as it is named."""
        probe = path
        while probe and probe not in self.lines:  # the nearest enclosing key that has a line
            shorter = _LAST_STEP.sub("", probe)
            probe = shorter if shorter != probe else ""
        line = self.lines.get(probe, 0)
        where = f"{self.source}:{line}" if line else self.source
        named = shown or path or "(top)"
        return line, printable(f"{where}: {named}: {text}")

    def problem(self, path: str, text: str, shown: str | None = None) -> None:
        """`text` at `path`'s line; `shown`, if given, is the path as the problem names it."""
        self.keys.add(path)
        self._found.append(self.placed(path, text, shown))

    def has_problem(self, path: str) -> bool:
        """Whether a problem names the key at `path` or one inside it."""
        return any(k == path or k.startswith((f"{path}.", f"{path}[")) for k in self.keys)

    @property
    def problems(self) -> list[str]:
        """Every problem found, in the order of their lines."""
        return [text for _, text in sorted(self._found, key=lambda p: p[0])]

    def mapping(self, value: Any, path: str, allowed: AbstractSet[str]) -> dict[str, Any]:
        """`value` as a mapping whose keys are `allowed` ({} when it is none); every other key
        is a problem, with the nearest allowed one as a hint."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, f"must be a mapping, got {show(value)}")
            return {}
        for key in value:
            if key not in allowed:
                self._unknown(key, path, allowed)
        return value

    def _unknown(self, key: Any, path: str, allowed: AbstractSet[str]) -> None:
        sub = f"{path}.{key}" if path else str(key)
        in_kinds = path.startswith("kinds")  # (where `token` is a typo, no secret)
        if not in_kinds and str(key).lower() in SECRET_KEYS:
            self.problem(
                sub,
                "secrets are never inline: use password_file or password_env (a key's "
                "passphrase: passphrase_file or passphrase_env)",
            )
            return
        near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        if not key_shown(key):
            shown = f"{path}.(a key)" if path else "(a key)"
            self.problem(sub, f"unknown key, not shown as it may hold a secret{hint}", shown)
            return
        self.problem(sub, f"unknown key {show(key)}{hint}")

    def get(
        self,
        d: dict[str, Any],
        key: str,
        path: str,
        kind: Callable[[Any], Any],
        default: Any,
        what: str,
    ) -> Any:
        """`d[key]` as `kind` reads it; `default` when it is not given, or is a problem (`what`
        the value must be)."""
        if key not in d or d[key] is None:
            return default
        sub = f"{path}.{key}" if path else key
        try:
            return kind(d[key])
        except (TypeError, ValueError, OverflowError) as e:
            secret = key in MAY_HOLD_A_SECRET
            shown = "" if secret else f", got {show(d[key])}"
            self.problem(sub, f"{what}{shown}{_reason(e, secret)}")
            return default

    def path(self, value: Any) -> Path:
        """A path (a `Checker.get` kind); `$CREDENTIALS_DIRECTORY` and other variables expand
        from the checker's environment."""
        return expand_path(value, self.env)

    def paths(self, value: Any) -> tuple[Path, ...]:
        """A list of paths (a `Checker.get` kind), each as `path` reads it."""
        return expand_paths(value, self.env)


def _reason(e: Exception, secret: bool) -> str:
    """Why a value was refused, in brackets; for a key that may hold a secret, nothing of the
    value but the name of a service variable."""
    if not secret:
        return f" ({e})" if str(e) else ""
    if isinstance(e, Unset):
        return f" ({e})" if e.name in SERVICE_VARIABLES else " (a variable it names is not set)"
    return ""

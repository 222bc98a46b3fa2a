"""Kinds of request: ordered token rules, first match wins (docs/design.md)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class KindRule:
    """`name` for requests with min_tokens <= tokens <= max_tokens (either bound optional)."""

    name: str
    min_tokens: int | None = None
    max_tokens: int | None = None

    @property
    def needs_tokens(self) -> bool:
        return self.min_tokens is not None or self.max_tokens is not None

    def matches(self, tokens: int | None) -> bool:
        if tokens is None:
            return not self.needs_tokens
        return (self.min_tokens is None or tokens >= self.min_tokens) and (
            self.max_tokens is None or tokens <= self.max_tokens
        )


def split_rules(split_tokens: int) -> tuple[KindRule, ...]:
    """The seed's two kinds: extraction at or above `split_tokens`, reconcile below."""
    return (KindRule("extraction", min_tokens=split_tokens), KindRule("reconcile"))


DEFAULT_SPLIT_TOKENS = 600  # (`report --split-tokens` and the config's kinds by default)
DEFAULT_RULES = split_rules(DEFAULT_SPLIT_TOKENS)


@dataclass(frozen=True, slots=True)
class Kinds:
    """The rules, and every kind name and mix label they can produce."""

    rules: tuple[KindRule, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Every kind a request can get: the rule names, then `unknown` if no rule catches all."""
        names = tuple(dict.fromkeys(r.name for r in self.rules))
        if all(r.needs_tokens for r in self.rules):
            names += (UNKNOWN,)
        return names

    def classify(self, tokens: int | None) -> str:
        for rule in self.rules:
            if rule.matches(tokens):
                return rule.name
        return UNKNOWN

    def mix_labels(self) -> tuple[str, ...]:
        """`idle`, then every set of kinds (sorted, joined by `+`), smallest sets first."""
        names = sorted(self.names)
        return (
            "idle",
            *(
                "+".join(combo)
                for size in range(1, len(names) + 1)
                for combo in itertools.combinations(names, size)
            ),
        )

"""What a re-read config changes against the one in force: nodes, their sources, settings.

Each change in words for the log; the nodes whose sources must start again.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from exporter.config.schema import Config
from exporter.sources.registry import NodeConfig


@dataclass(frozen=True)
class Changes:
    added: tuple[NodeConfig, ...]
    removed: tuple[str, ...]
    changed: tuple[NodeConfig, ...]  # same name, another source or settings: started again
    settings: tuple[str, ...]  # top-level keys whose value changed (but nodes)

    @property
    def none(self) -> bool:
        return not (self.added or self.removed or self.changed or self.settings)

    def lines(self) -> list[str]:
        """One line per change, for the log."""
        out = [f"node {n.name} added ({n.source})" for n in self.added]
        out += [f"node {name} removed: its counters are dropped" for name in self.removed]
        out += [f"node {n.name} changed: its source starts again" for n in self.changed]
        out += [f"{key} changed" for key in self.settings]
        return out


# (the nodes' changes are told apart; `hosts: seen` entries are told by the nodes they made)
_NODES = ("nodes", "node_order", "hosts_seen")


def between(old: Config, new: Config) -> Changes:
    before = {n.name: n for n in old.nodes}
    after = {n.name: n for n in new.nodes}
    return Changes(
        added=tuple(n for name, n in after.items() if name not in before),
        removed=tuple(name for name in before if name not in after),
        changed=tuple(n for name, n in after.items() if name in before and before[name] != n),
        settings=tuple(
            f.name
            for f in fields(Config)
            if f.name not in _NODES and getattr(old, f.name) != getattr(new, f.name)
        ),
    )

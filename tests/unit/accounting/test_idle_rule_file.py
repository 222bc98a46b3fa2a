"""deploy/prometheus/rules.yml's idle rule holds the numbers of exporter.accounting.idle.

The rule file and the module say the same rule twice, in PromQL and in Python: the busy share
under which a node is idle (`<`), the others' average at or over which they work (`>=`), the
window both shares are taken over (`[5m]`, `:rate5m`) and how long SmLlmNodeIdle waits (`for:`).
Change one side alone and this fails.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from exporter.accounting import idle
from exporter.base.times import SECOND

from support.tools import REPO

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
CONDITION = "smllm:node_idle_while_others_work"
ALERT = "SmLlmNodeIdle"
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
NUMBER = r"(\d+(?:\.\d+)?)"
# Prometheus durations: 5m, 90s, 1h30m
DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")
UNIT_US = {
    "ms": SECOND // 1000,
    "s": SECOND,
    "m": 60 * SECOND,
    "h": 3600 * SECOND,
    "d": 86400 * SECOND,
    "w": 7 * 86400 * SECOND,
}


def duration_us(text: str) -> int:
    if not re.fullmatch(rf"(?:{DURATION.pattern})+", text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * UNIT_US[unit] for n, unit in DURATION.findall(text))


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def recorded() -> dict[str, str]:
    return {r["record"]: " ".join(str(r["expr"]).split()) for r in rules() if "record" in r}


def condition() -> str:
    return recorded()[CONDITION]


def chain(expr: str) -> list[str]:
    """`expr` and the expressions of every recording rule it reads, directly or not."""
    defined = recorded()
    seen: set[str] = set()
    out = [expr]
    todo = NAME.findall(re.sub(r'"[^"]*"', '""', expr))
    while todo:
        name = todo.pop()
        if name in defined and name not in seen:
            seen.add(name)
            out.append(defined[name])
            todo.extend(NAME.findall(re.sub(r'"[^"]*"', '""', defined[name])))
    return out


def test_duration_us() -> None:
    assert duration_us("5m") == 300 * SECOND
    assert duration_us("1h30m") == 5400 * SECOND
    with pytest.raises(ValueError):
        duration_us("5 minutes")


def test_idle_below() -> None:
    found = re.findall(rf"smllm:known_node_busy_share:rate5m\s*<\s*{NUMBER}", condition())
    assert [float(x) for x in found] == [idle.IDLE_BELOW], condition()


def test_others_at_least() -> None:
    found = re.findall(rf"smllm:node_others_busy_share:rate5m\s*>=\s*{NUMBER}", condition())
    assert [float(x) for x in found] == [idle.OTHERS_AT_LEAST], condition()


def test_window() -> None:
    """Every range the condition reads, itself or through the recording rules, and every
    recorded `:rateN` series among them, spans the window."""
    texts = chain(condition())
    ranges = {r for text in texts for r in re.findall(r"\[([^\]:]+)\]", text)}
    suffixes = {s for text in texts for s in re.findall(r"smllm:[a-z_:]+:[a-z_]*rate(\w+)", text)}
    assert ranges and suffixes, texts
    assert {duration_us(r) for r in ranges} == {idle.WINDOW_US}, ranges
    assert {duration_us(s) for s in suffixes} == {idle.WINDOW_US}, suffixes


def test_for() -> None:
    (alert,) = [r for r in rules() if r.get("alert") == ALERT]
    assert CONDITION in NAME.findall(str(alert["expr"]))
    assert duration_us(str(alert["for"])) == idle.FOR_US

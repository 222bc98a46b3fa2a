"""Values as the config reads them: `listen` forms, unit names, `since` forms."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
import yaml

from exporter.sources.journal import JournalNode

from support.configs import (
    FILE_NODE,
    good,
)
from support.tools import yaml_text as y

NOW_US = 1_790_078_400_000_000  # 2026-09-22T12:00:00Z


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        (":10027", "", 10027),
        (":0", "", 0),
        ("127.0.0.1:9100", "127.0.0.1", 9100),
        ("0.0.0.0:65535", "0.0.0.0", 65535),
        ("[::1]:10027", "::1", 10027),
        ("[::]:80", "::", 80),
        ("localhost:8080", "localhost", 8080),
    ],
)
def test_listen_forms(listen: str, host: str, port: int) -> None:
    cfg = good(y(f"listen: '{listen}'", *FILE_NODE))
    assert (cfg.listen_host, cfg.listen_port) == (host, port)


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("sm-llm", "sm-llm.service"),
        ("sm-llm.service", "sm-llm.service"),
        ("sm-llm@0", "sm-llm@0.service"),
        ("sm-llm@0.service", "sm-llm@0.service"),
        ("llama.socket", "llama.socket"),
        ("a:b_c\\x2dd", "a:b_c\\x2dd.service"),
        ("x" * 247, "x" * 247 + ".service"),
    ],
)
def test_unit_names(unit: str, expected: str) -> None:
    text = y(f"unit: '{unit}'", "nodes:", "  - {name: j, source: journal}")
    cfg = good(text)
    assert cfg.unit == expected
    assert isinstance(cfg.nodes[0], JournalNode)
    assert cfg.nodes[0].unit == expected


def utc_us(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return round(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * 10**6


SINCE: list[tuple[str, type, str, int]] = [
    ("now", str, "now", NOW_US),
    ("-30s", str, "-30s", NOW_US - 30_000_000),
    ("-15m", str, "-15m", NOW_US - 15 * 60_000_000),
    ("-24h", str, "-24h", NOW_US - 24 * 3_600_000_000),
    ("-7d", str, "-7d", NOW_US - 7 * 86_400_000_000),
    ("'2026-09-22T07:32:55'", str, "2026-09-22T07:32:55", utc_us(2026, 9, 22, 7, 32, 55)),
    (
        "'2026-09-22T09:32:55+02:00'",
        str,
        "2026-09-22T09:32:55+02:00",
        utc_us(2026, 9, 22, 7, 32, 55),
    ),
    (
        "'2026-09-22T07:32:55.127792Z'",
        str,
        "2026-09-22T07:32:55.127792Z",
        utc_us(2026, 9, 22, 7, 32, 55) + 127_792,
    ),
    # unquoted: plain YAML would make datetime (or date) objects; the config keeps the text
    ("2026-09-22 07:32:55", datetime, "2026-09-22 07:32:55", utc_us(2026, 9, 22, 7, 32, 55)),
    (
        "2026-09-22T09:32:55+02:00",
        datetime,
        "2026-09-22T09:32:55+02:00",
        utc_us(2026, 9, 22, 7, 32, 55),
    ),
    (
        "2026-09-22T07:32:55.5Z",
        datetime,
        "2026-09-22T07:32:55.5Z",
        utc_us(2026, 9, 22, 7, 32, 55) + 500_000,
    ),
    ("2026-09-22", date, "2026-09-22", utc_us(2026, 9, 22)),
]


@pytest.mark.parametrize(("value", "yaml_type", "since", "us"), SINCE)
def test_since_forms(value: str, yaml_type: type, since: str, us: int) -> None:
    assert type(yaml.safe_load(f"v: {value}")["v"]) is yaml_type
    cfg = good(y(f"since: {value}", *FILE_NODE))
    assert cfg.since == since
    assert cfg.since_us(NOW_US) == us

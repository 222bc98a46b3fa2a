"""The accounting's settings for a test: the config's defaults, with what the test says over them."""

from __future__ import annotations

import dataclasses
from typing import Any

from exporter.accounting.settings import Settings
from exporter.base.kinds import Kinds
from exporter.config.schema import Config
from exporter.ingest.settings import settings as of_config


def default_settings(kinds: Kinds | None = None, **over: Any) -> Settings:
    """A default config's settings (`Config()`), with `kinds` and any field of `Settings`
    (`max_request_us=...`, `buckets_s=...`) over them."""
    return dataclasses.replace(of_config(Config(), kinds), **over)

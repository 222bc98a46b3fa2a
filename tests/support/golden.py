"""Golden /metrics: a recorded run (or the demo) through the daemon's ingest at a fixed now,
rendered, what depends on the machine masked, and held to `tests/testdata/metrics/NAME.prom`.

The ingest is the daemon's, with explicit time and no clock: each node's dump read through the
line layer (the file source's window), every batch through `apply_batch` at "now", then one tick
(each parser flushed up to what its node has read, the watermark moved to now), as a daemon
started a minute after the run ended, with every setting at its default, would show it.
`SMLLM_UPDATE_GOLDEN=1` rewrites the files instead of comparing (tests/testdata/README.md).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from exporter.accounting.accounting import Accounting
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.exposition.render import Renderer
from exporter.ingest.settings import settings
from exporter.ingest.step import apply_batch
from exporter.parse.parser import Parser
from exporter.sources.file import FileNode

from support.dumps import dump_batches
from support.tools import REPO

GOLDEN = REPO / "tests" / "testdata" / "metrics"
UPDATE_ENV = "SMLLM_UPDATE_GOLDEN"
AFTER_US = 60 * SECOND  # "now": this long after the run's last journal entry
VERSION = "0"
MASK = "<masked>"
# smllm_exporter_build_info's labels that depend on the machine, not on the run: the Python
# version, the git revision, the package version, whether the C fast paths were built and on
MACHINE_LABELS = ("compiled", "python", "revision", "version")
_BUILD_INFO = re.compile(r"^(smllm_exporter_build_info\{)(.*)(\} .*)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(dumps: Mapping[str, Path], origin_us: int, now_us: int) -> str:
    """The snapshot's part of /metrics (text format 0.0.4) after the dumps (node -> dump) were
    read from `origin_us` and ticked at `now_us`; the build's labels masked."""
    s = settings(Config(nodes=tuple(FileNode(n, p) for n, p in dumps.items())))
    acc = Accounting(list(dumps), s, origin_us=origin_us)
    parsers = {n: Parser(n, slots=s.slots, gone_us=s.max_request_us) for n in dumps}
    for node, path in dumps.items():
        for batch in dump_batches(path, node, origin_us):
            apply_batch(batch, parsers[node], acc, now_us)
    for node, parser in parsers.items():
        acc.add_all(parser.flush(acc.read_until(node, now_us)))
    acc.advance(now_us)
    return masked(Renderer(VERSION).text(acc.snapshot(), 0))


def masked(text: str) -> str:
    """`text` with the values of smllm_exporter_build_info's machine labels replaced by MASK."""

    def labels(m: re.Match[str]) -> str:
        pairs = _LABEL.sub(lambda p: f'{p[1]}="{MASK}"' if p[1] in MACHINE_LABELS else p[0], m[2])
        return f"{m[1]}{pairs}{m[3]}"

    return _BUILD_INFO.sub(labels, text)


def check(name: str, text: str) -> None:
    """`text` is `tests/testdata/metrics/NAME.prom` (a unified diff when not); with
    SMLLM_UPDATE_GOLDEN=1 the file is written instead."""
    path = GOLDEN / f"{name}.prom"
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    if os.environ.get(UPDATE_ENV):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{shown} missing: run with {UPDATE_ENV}=1 to write it"
    want = path.read_text(encoding="utf-8")
    if text != want:
        diff = difflib.unified_diff(
            want.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"{shown} (golden)",
            f"{name} (rendered now)",
        )
        raise AssertionError(
            f"/metrics of {name} differs from its golden file (if the change is meant, rewrite "
            f"it with {UPDATE_ENV}=1 and review the diff):\n{''.join(diff)}"
        )

"""Write the checkpoint the daemon of one commit would write for a fixed scenario.

    git archive COMMIT exporter | tar -x -C /tmp/COMMIT
    SMLLM_PURE_PYTHON=1 .venv/bin/python tests/testdata/checkpoints/make.py /tmp/COMMIT OUT

TREE is an unpacked `exporter/` of that commit (the current tree for the current version).
Four recorded llama-server journals (tests/testdata/llama-server/: restart, router, cancel and
error), the first two cut right after a `prompt eval time` line past half of them (a timing
block half read, a request in flight), go through that commit's Parser and Accounting as the
daemon fed them; the watermark moves to the median interval end (intervals still pending);
then the state the daemon's checkpoint held at that commit (its keys, read from its daemon),
encoded as that commit encoded it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "llama-server"
CUT = ("restart", "router")  # (the other two whole: their cancel and error)
NODES = ("restart", "router", "cancel", "error")
ERRORS = 2  # failed checkpoint writes, as saved


def first(*names: str) -> Any:
    """The first of these `module.name`s the tree has."""
    for name in names:
        module, _, attr = name.rpartition(".")
        try:
            m = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(m, attr):
            return getattr(m, attr)
    raise ImportError(names)


def journal(node: str, line: Any) -> list[Any]:
    """A recorded run's lines as the node's LogLines (cut where CUT says)."""
    got = []
    for raw in (DATA / f"{node}.journal.json").read_text().splitlines():
        d = json.loads(raw)
        if isinstance(d["MESSAGE"], str):
            t, pid = int(d["__REALTIME_TIMESTAMP"]), int(d.get("_PID", 0))
            got.append(line(node, t, d.get("__CURSOR", ""), pid, d["MESSAGE"]))
    if node in CUT:
        half = len(got) // 2
        cut = next(i for i, x in enumerate(got) if i >= half and "prompt eval time" in x.message)
        got = got[: cut + 1]
    return got


def accounting(origin_us: int) -> Any:
    """A fresh accounting of the default config, as that commit builds one."""
    accounting_type = first(
        "exporter.accounting.Accounting", "exporter.accounting.accounting.Accounting"
    )
    try:
        settings = first("exporter.ingest.settings.settings")
    except ImportError:
        kinds = first("exporter.kinds.Kinds", "exporter.base.kinds.Kinds")
        rules = first("exporter.kinds.DEFAULT_RULES", "exporter.base.kinds.DEFAULT_RULES")
        return accounting_type(list(NODES), kinds(rules), origin_us=origin_us)
    config = first("exporter.config.schema.Config")
    return accounting_type(list(NODES), settings(config()), origin_us=origin_us)


def main(tree: str, out: str) -> None:
    sys.path.insert(0, tree)
    exporter = importlib.import_module("exporter")
    assert exporter.__file__.startswith(os.path.abspath(tree)), exporter.__file__
    line = first("exporter.logline.LogLine", "exporter.base.records.LogLine")
    interval = first("exporter.logline.Interval", "exporter.base.records.Interval")
    parser_type = first("exporter.parse.Parser", "exporter.parse.parser.Parser")
    lines = {node: journal(node, line) for node in NODES}
    acc = accounting(min(ls[0].time_us for ls in lines.values()) - 60_000_000)
    parsers = {n: parser_type(n) for n in NODES}
    ends = []
    for node, ls in lines.items():
        for each in ls:
            for rec in parsers[node].feed(each):
                if type(rec) is interval:
                    ends.append(rec.end_us)
                acc.add(rec)
        acc.line_read(node, ls[-1].time_us, len(ls))
    acc.advance_to(sorted(ends)[len(ends) // 2])
    written_at_us = max(ls[-1].time_us for ls in lines.values()) + 1_000_000
    positions = {
        n: f"2049:{1000 + i}:{sum(len(x.message) + 1 for x in lines[n])}"
        for i, n in enumerate(NODES)
    }
    try:  # (the versioned codec: its own state, its own encoding)
        state = first("exporter.checkpoint.codec.state")
        encode = first("exporter.checkpoint.codec.encode")
    except ImportError:
        data = _unversioned(tree, acc, parsers, positions, written_at_us)
    else:
        sources = dict.fromkeys(NODES, "file")
        data = encode(state(acc, parsers, positions, sources, ERRORS, written_at_us))
    Path(out).write_bytes(data)


def _unversioned(
    tree: str, acc: Any, parsers: dict[str, Any], positions: dict[str, str], written_at_us: int
) -> bytes:
    """What a daemon before the versioned codec wrote (`"format": 1`)."""
    state_of = first("exporter.accounting.state_of", "exporter.accounting.accounting.state_of")
    checkpoint = first("exporter.checkpoint.Checkpoint", "exporter.checkpoint.store.Checkpoint")
    state = {
        "accounting": state_of(acc),
        "parsers": {n: p.state() for n, p in parsers.items()},
        "positions": positions,
    }
    daemon = Path(tree) / "exporter" / "daemon.py"
    if not daemon.exists():
        daemon = Path(tree) / "exporter" / "daemon" / "daemon.py"
    if '"sources": dict(self._position_kind)' in daemon.read_text():  # (from e9421ea on)
        state["sources"] = dict.fromkeys(NODES, "file")
    state["checkpoint_errors"] = ERRORS
    state["written_at_us"] = written_at_us
    data: bytes = checkpoint.encode(state)
    return data


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""Write what the daemon of one commit restored from a checkpoint, in the checkpoint's own form.

    git archive 3ad37a2 exporter | tar -x -C /tmp/3ad37a2
    SMLLM_PURE_PYTHON=1 .venv/bin/python tests/testdata/checkpoints/restored.py \
        /tmp/3ad37a2 tests/testdata/checkpoints/vN.json tests/testdata/checkpoints/vN.restored.json

TREE is an unpacked `exporter/` of a commit before the versioned codec (3ad37a2 made the
`vN.restored.json` here). As its daemon resumed: `Checkpoint.load`, then `restore` into an
accounting of the checkpoint's nodes and the default config, the parsers `from_state`, the
positions, their kinds of source (a position without one is of its node's kind: a file here),
the count of failed writes; written back as `state_of` and `Parser.state` write them, with
what `restore` said (`notes`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def main(tree: str, src: Path, out: Path) -> None:
    sys.path.insert(0, tree)
    exporter = importlib.import_module("exporter")
    assert exporter.__file__.startswith(os.path.abspath(tree)), exporter.__file__
    accounting: Any = importlib.import_module("exporter.accounting.accounting")
    kinds: Any = importlib.import_module("exporter.base.kinds")
    store: Any = importlib.import_module("exporter.checkpoint.store")
    parser: Any = importlib.import_module("exporter.parse.parser")
    tmp = Path(tempfile.mkdtemp())
    (tmp / "checkpoint.json").write_bytes(src.read_bytes())
    saved = store.Checkpoint(tmp).load()
    nodes = list(saved["accounting"]["nodes"])
    acc = accounting.Accounting(nodes, kinds.Kinds(kinds.DEFAULT_RULES), origin_us=0)
    notes = accounting.restore(acc, saved["accounting"])
    parsers = {n: parser.Parser.from_state(n, st) for n, st in saved["parsers"].items()}
    positions = {n: str(p) for n, p in saved["positions"].items()}
    was = saved.get("sources")
    sources = {}
    for n in nodes:
        kind = was.get(n) if isinstance(was, dict) else None
        if positions.get(n):
            sources[n] = kind if isinstance(kind, str) else "file"
    state = {
        "accounting": accounting.state_of(acc),
        "parsers": {n: p.state() for n, p in parsers.items()},
        "positions": positions,
        "sources": sources,
        "checkpoint_errors": int(saved["checkpoint_errors"]),
        "notes": notes,
    }
    out.write_text(json.dumps(state, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))

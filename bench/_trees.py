"""The work trees whose exporter a benchmark runs: this one, or another commit built beside it.

Another commit of this repository is checked out in a git worktree under the benchmark's
temporary directory, with a venv of its own, so that both are timed on the same data in one run.

Another commit's package may be laid out otherwise (modules moved between folders), so nothing
of it is imported here: its exporter runs as its own processes, through its own console script
and its own benchmark scripts (`bench/ingest.py --read-child`), with its venv's Python.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from _common import PACKAGE, ROOT, installed
from _daemon import exporter_command

COMPILED = "_*.so"  # the compiled fast paths, built by `pip install` where gcc is
LABEL_CHARS = 12  # a longer REV is named by its commit's first 12 hex digits


@dataclass(frozen=True)
class Tree:
    """A work tree of this repository, the Python of the venv it is installed in, and the
    environment of its processes (its bytecode compiled ahead, into a cache of its own)."""

    label: str
    commit: str  # "" for this work tree
    root: Path
    python: str
    env: Mapping[str, str]
    compiled: tuple[str, ...]  # the compiled modules its install built

    def exporter(self) -> list[str]:
        """Its `sm-llm-exporter` command."""
        return exporter_command(self.python)

    def bench(self, name: str) -> Path:
        """One of its benchmark scripts."""
        return self.root / "bench" / name


def built_modules(package: Path) -> tuple[str, ...]:
    return tuple(sorted(p.name.partition(".")[0] for p in package.rglob(COMPILED)))


def bench_needs(root: Path) -> list[str]:
    """What the tree's bench/ingest.py imports beyond its package: pytest where it imports the
    tests' helpers (`support`, whose tools import pytest)."""
    return ["pytest"] if "from support" in (root / "bench" / "ingest.py").read_text() else []


def this_tree(cache: Path) -> Tree:
    """This work tree, as the interpreter running the benchmark has it installed."""
    env = installed(cache)
    return Tree("ours", "", ROOT, sys.executable, env, built_modules(PACKAGE))


def _run(command: list[str], log: TextIO, cwd: Path = ROOT) -> str:
    """`command`'s output; RuntimeError with what it said when it fails."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout)[-3000:]
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {said}")
    print(f"  {' '.join(command[:4])}: done", file=log, flush=True)
    return done.stdout


@contextmanager
def built(rev: str, where: Path, log: TextIO) -> Iterator[Tree]:
    """Commit `rev` checked out in a git worktree in `where`, installed (`pip install -e`, its
    compiled modules built there) into a venv of its own; the worktree is removed after."""
    sha = _run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], log).strip()
    root = where / f"tree-{sha[:12]}"
    print(f"building {rev} ({sha[:12]}) in {root}", file=log, flush=True)
    _run(["git", "worktree", "add", "--detach", "--quiet", str(root), sha], log)
    try:
        venv = root / ".venv"
        _run([sys.executable, "-m", "venv", str(venv)], log)
        python = str(venv / "bin" / "python")
        install = [python, "-m", "pip", "install", "-q", "-e", str(root), *bench_needs(root)]
        _run(install, log, cwd=root)
        env = installed(where / f"pycache-{sha[:12]}", python, root / "exporter")
        label = rev if len(rev) <= LABEL_CHARS else sha[:LABEL_CHARS]
        yield Tree(label, sha, root, python, env, built_modules(root / "exporter"))
    finally:
        _run(["git", "worktree", "remove", "--force", str(root)], log)

"""Writes the man pages: sm-llm-exporter(1) from the command line, sm-llm-exporter.yaml(5) from
the config reference.

`sm-llm-exporter.1` is argparse-manpage's page of `exporter.cli.parser()`, with each command's
epilog (what it serves or needs, an example) under the command, and FILES and SEE ALSO.
`sm-llm-exporter.yaml.5` lists every key of `exporter.config.reference.keys()` with its default
and meaning. Both come out the same on every machine: no date, a fixed width for argparse.

    .venv/bin/python tools/manpages.py            # writes man/ (`make man`)
    .venv/bin/python tools/manpages.py --check    # exit 1 when man/ differs from what it writes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from argparse_manpage.manpage import (  # type: ignore[import-untyped]
    Manpage,
    _ManpageFormatter,
)

from exporter import __version__, cli
from exporter.config.reference import EVERY_SOURCE, KINDS, NODES, Key, keys
from exporter.config.schema import DEFAULT_PATH, DEFAULTS

REPO = Path(__file__).resolve().parent.parent
MAN = REPO / "man"
PROG = "sm-llm-exporter"
SOURCE = f"{PROG} {__version__}"
# argparse wraps help to the terminal's width: one long line each, for the same page everywhere
# (groff fills the lines to the reader's width)
COLUMNS = "1000"
CREDENTIALS = "/run/credentials/sm-llm-exporter.service"


def escape(text: str) -> str:
    """Plain text as roff text lines: backslashes and hyphens escaped, and a line that would
    start with a control character (`.` or `'`) made text with `\\&`."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.split("\n"))


def inline(text: str) -> str:
    """Markdown-ish text (`code` spans) as roff: code in bold."""
    parts = re.split(r"`([^`]*)`", text)
    return "".join(escape(p) if i % 2 == 0 else rf"\fB{escape(p)}\fR" for i, p in enumerate(parts))


def paragraphs(text: str) -> Iterator[str]:
    """A help text written for the terminal (argparse's raw epilog) as roff: a paragraph's
    indented lines (a table, an example) kept as they are, its other lines filled."""
    for block in text.strip("\n").split("\n\n"):
        yield ".PP"
        literal = False
        for line in block.split("\n"):
            indented = line.startswith("  ")
            if indented != literal:
                yield ".nf" if indented else ".fi"
                literal = indented
            yield escape(line)
        if literal:
            yield ".fi"


class _Formatter(_ManpageFormatter):  # type: ignore[misc]
    """argparse-manpage's, with each command's epilog under its options."""

    @staticmethod
    def format_text(text: str) -> str:
        return escape(text.strip("\n"))

    def _format_parser(
        self, parser: argparse.ArgumentParser, subcommand: str | None = None, *args: Any, **kw: Any
    ) -> list[str]:
        lines: list[str] = super()._format_parser(parser, subcommand, *args, **kw)
        if subcommand and parser.epilog:
            lines += [*paragraphs(parser.epilog), ""]
        return lines


FILES_1 = f"""\
.TP
.I {escape(str(DEFAULT_PATH))}
The config: sm\\-llm\\-exporter.yaml(5).
.TP
.I /etc/sm\\-llm\\-exporter/ssh/
SSH client keys, known_hosts, password and passphrase files, root's alone (0600).
The unit loads each file FILE there as the credential ssh_FILE.
.TP
.I /etc/sm\\-llm\\-exporter/tls/
The web config and its certificate, key and CA files, loaded as tls_FILE the same way.
.TP
.I {escape(CREDENTIALS)}/
Where the service finds those credentials (\\fB$CREDENTIALS_DIRECTORY\\fR).
.TP
.I {escape(str(DEFAULTS.state_dir))}/checkpoint.json
The checkpoint: each node's read position and every counter, kept across restarts and
upgrades.
"""

SEE_ALSO_1 = """\
.BR sm\\-llm\\-exporter.yaml (5),
.BR systemctl (1),
.BR journalctl (1),
.BR systemd.exec (5)
.PP
The unit is \\fBsm\\-llm\\-exporter.service\\fR: \\fBsystemctl status sm\\-llm\\-exporter\\fR,
\\fBjournalctl \\-u sm\\-llm\\-exporter\\fR.
In the source tree: README.md, deploy/README.md (the install) and docs/ (one page a topic).
"""


@contextlib.contextmanager
def _columns() -> Iterator[None]:
    """COLUMNS (which argparse reads when it formats help and usage) set to COLUMNS, then back."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def page1() -> str:
    """sm-llm-exporter(1): the command line, its commands and options, FILES, SEE ALSO."""
    with _columns():
        parser = cli.parser()
        parser.epilog = None  # (its pointers to --help: the page has the commands)
        page = Manpage(parser, format="single-commands-section")
        page.mf = _Formatter(page.prog, page.formatter, format="single-commands-section")
        page.date = ""  # (no clock: the same page on every machine)
        page.source = SOURCE
        page.manual = "User Commands"
        page.description = "exact busy time, requests and tokens of llama.cpp nodes, for Prometheus"
        page.add_section("FILES", ">", FILES_1.strip())
        page.add_section("SEE ALSO", ">", SEE_ALSO_1.strip())
        text = str(page)
    # no hyphenation, ragged right: option names and paths stay whole
    head, rest = text.split("\n", 1)
    return f"{head}\n.nh\n.ad l\n{rest}"


DESCRIPTION_5 = f"""\
.PP
\\fBsm\\-llm\\-exporter\\fR reads its config from a YAML file:
\\fI{escape(str(DEFAULT_PATH))}\\fR, or the file \\fB\\-\\-config\\fR names.
\\fBrun\\fR, \\fBcheck\\-config\\fR, \\fBreport\\fR and \\fBknown\\-hosts\\fR read the same file.
.PP
Only \\fBnodes\\fR is required: every other key has a default.
An unknown key is refused, with the key it may mean.
A key given twice is refused, with both lines.
.PP
Paths may use environment variables, \\fB${{VAR}}\\fR or \\fB$VAR\\fR; they expand in paths only.
Give whole paths: the service runs from /, so a relative path is refused.
.PP
Secrets are never inline. A password comes from \\fBpassword_file\\fR or \\fBpassword_env\\fR.
Under the service, keys, known_hosts and password files live in /etc/sm\\-llm\\-exporter/ssh/,
root's alone; the unit hands each file FILE there to the service as
\\fB${{CREDENTIALS_DIRECTORY}}/ssh_FILE\\fR, and the config names them so.
Quote such a path inside [...] or {{...}}.
.PP
\\fBsm\\-llm\\-exporter check\\-config \\-\\-as\\-service\\fR \\fIFILE\\fR lists every problem at
once, as the service will see the paths.
\\fBsystemctl reload sm\\-llm\\-exporter\\fR reads the file again; a file with a problem is
refused, and the config in force stays.
"""

EXAMPLE_5 = """\
listen: ":10027"
kinds:
  - {name: extraction, min_tokens: 600}
  - {name: reconcile}
nodes:
  - name: node0
    source: ssh
    host: 172.31.1.1
    client_keys: ["${CREDENTIALS_DIRECTORY}/ssh_id_ed25519"]
  - name: local
    source: journal
  - name: dump0
    source: file
    path: /srv/dumps/node0.json
"""

FILES_5 = f"""\
.TP
.I {escape(str(DEFAULT_PATH))}
The config.
.TP
.I /etc/sm\\-llm\\-exporter/ssh/
.TQ
.I /etc/sm\\-llm\\-exporter/tls/
Root's secrets, handed to the service as the credentials ssh_FILE and tls_FILE.
"""

SEE_ALSO_5 = """\
.BR sm\\-llm\\-exporter (1),
.BR systemd.exec (5)
.PP
In the source tree: config.example.yaml (every key, at its default) and
docs/configuration.md.
"""


def _groups(every: Sequence[Key]) -> Iterator[tuple[str, list[Key]]]:
    """The keys under the headings a reader looks them up by: the top level, a kind's rule,
    every node, then each source kind's own keys (a key two kinds take under both)."""
    yield "Top-level keys", [k for k in every if not k.path.startswith((KINDS, NODES))]
    yield "A rule of kinds", [k for k in every if k.path.startswith(KINDS)]
    node_keys = [k for k in every if k.path.startswith(NODES)]
    yield "Every node", [k for k in node_keys if set(k.sources) >= set(EVERY_SOURCE)]
    for source in EVERY_SOURCE:
        own = [k for k in node_keys if source in k.sources and set(k.sources) < set(EVERY_SOURCE)]
        yield f"Nodes of source: {source}", own


def _key(k: Key) -> list[str]:
    lines = [".TP", rf"\fB{escape(k.path)}\fR", inline(k.meaning)]
    if k.default:
        lines.append(rf"Default: \fB{escape(k.default)}\fR.")
    return lines


def page5() -> str:
    """sm-llm-exporter.yaml(5): the config file, every key with its default and meaning."""
    lines = [
        f'.TH SM\\-LLM\\-EXPORTER.YAML "5" "" "{escape(SOURCE)}" "File Formats"',
        ".nh",
        ".ad l",
        ".SH NAME",
        r"sm\-llm\-exporter.yaml \- the config file of sm\-llm\-exporter",
        ".SH SYNOPSIS",
        rf"\fI{escape(str(DEFAULT_PATH))}\fR",
        ".SH DESCRIPTION",
        DESCRIPTION_5.strip(),
        ".SH KEYS",
    ]
    for heading, group in _groups(keys()):
        if group:
            lines += [f".SS {escape(heading)}", *(line for k in group for line in _key(k))]
    lines += [
        ".SH EXAMPLE",
        ".PP",
        "A small config: one SSH node (its key a credential), this machine's journal, a dump.",
        ".PP",
        ".nf",
        ".RS 4",
        escape(EXAMPLE_5.strip("\n")),
        ".RE",
        ".fi",
        ".SH FILES",
        FILES_5.strip(),
        ".SH SEE ALSO",
        SEE_ALSO_5.strip(),
    ]
    return "\n".join(lines) + "\n"


PAGES = {"sm-llm-exporter.1": page1, "sm-llm-exporter.yaml.5": page5}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the man pages into man/.")
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    check = ap.parse_args(argv).check
    stale = []
    for name, make in PAGES.items():
        path, text = MAN / name, make()
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        MAN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale in man/: {', '.join(stale)} (run `make man`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

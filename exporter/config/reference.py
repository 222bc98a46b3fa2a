"""Every config key for readers: its path, the sources that take it, its default, its meaning.

One table, in a reader's order: the top-level keys, a rule of `kinds:`, then a node's keys,
those every node has first and then each source kind's. The defaults are not written here:
they come from the schema (`schema.DEFAULTS`) and the node dataclasses' fields, formatted as a
reader writes them in YAML. `markdown()` makes the tables of docs/configuration.md from it; the
man page of the config file is made from `keys()`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.base.kinds import KindRule, Kinds
from exporter.config.schema import DEFAULTS, MAX_KINDS
from exporter.config.values import (
    MAX_ALLOWANCE_S,
    MAX_POLL_S,
    MAX_PORT,
    MAX_START_TIMEOUT_S,
    MIN_POLL_S,
)
from exporter.parse.tokens import MAX_SLOTS
from exporter.sources.file import FileNode
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.journal import JournalNode
from exporter.sources.remote import RemoteNode
from exporter.sources.ssh import KNOWN_HOSTS_CREDENTIAL, SshNode


@dataclass(frozen=True)
class Key:
    """One key of the config file, as a reader looks it up."""

    path: str  # "listen", "kinds[].min_tokens", "nodes[].host"
    sources: tuple[str, ...]  # node keys: the source kinds that take it; () otherwise
    default: str  # as a reader writes it in YAML ("" when required or none)
    meaning: str  # plain sentences, one idea each


KINDS = "kinds[]."  # a rule of `kinds:`
NODES = "nodes[]."  # a node of `nodes:`
REQUIRED = "Required."  # how a required key's meaning starts
EVERY_SOURCE = ("file", "journal", "journal-remote", "ssh", "init-timeline")  # in a reader's order
_NODE_CLASSES: dict[str, type[Any]] = {
    "file": FileNode,
    "journal": JournalNode,
    "journal-remote": RemoteNode,
    "ssh": SshNode,
    "init-timeline": InitTimelineNode,
}
_NO_DEFAULT = ("name", "source", "hosts")  # a node's keys the config requires or that have no
# default of their own, whatever its dataclass says


def _seconds(limit: float) -> str:
    """A limit in seconds as a reader reads it: `604,800 (7 days)`."""
    days = f" ({int(limit) // 86_400} days)" if limit >= 86_400 and limit % 86_400 == 0 else ""
    return f"{limit:,g}{days}"


# The top-level keys: (key, meaning), in a reader's order.
_TOP: tuple[tuple[str, str], ...] = (
    (
        "listen",
        "Where `/metrics`, the status page `/`, `/api/status`, `/-/healthy` and `/-/ready` are "
        "served. Write `HOST:PORT`, or `:PORT` for every address. Put an IPv6 address in "
        "brackets: `[::1]:10027`. Port 0 lets the kernel choose; the log names the address "
        "bound. `run --listen` overrides it.",
    ),
    (
        "http_max_connections",
        "The most connections open at once on the listen address. At the cap, a new scrape "
        "gets in by cutting a stalled or idle connection, never one being answered. The cap "
        "stays below the file descriptors left after a reserve of 64.",
    ),
    (
        "web_config_file",
        "An exporter-toolkit web config: TLS, client certificates, basic auth and headers. "
        "Empty: plain HTTP. The file is read again for every connection and request. "
        "`run --web.config.file FILE` gives one instead.",
    ),
    (
        "state_dir",
        "Where the checkpoints are kept: each node's read position and every counter. It must "
        "be writable, or creatable. Under the unit keep the default: it is the unit's "
        "`StateDirectory=`. A reload that changes it is refused: restart instead.",
    ),
    (
        "unit",
        "The llama-server unit on every node, unless a node names its own. A name without a "
        "suffix gets `.service`.",
    ),
    (
        "since",
        "Where a node with no checkpoint starts reading. Give `now`, an ISO 8601 time, or a "
        "time relative to start-up: `-30s`, `-15m`, `-24h`, `-7d`. A time without an offset "
        "is UTC. A time before 1970 is refused.",
    ),
    (
        "max_request_seconds",
        "The longest request expected, in seconds. Without launch lines, the figures for time t "
        "are final once every node is read up to t plus this. The watermark waits for a "
        "request in flight at most this long. A longer request counts as late "
        "(`smllm_late_intervals_total`).",
    ),
    (
        "stall_seconds",
        "A node whose source has not caught up for this long stops holding the cluster figures "
        "back. This holds whether its source is down or reads without end. What it reads later "
        "behind the figures counts as late (`smllm_late_intervals_total`).",
    ),
    (
        "clock_allowance_seconds",
        "How far ahead of this machine's clock a node's journal times may run, in seconds. An "
        "entry further ahead still counts, as it is. It shows in "
        "`smllm_source_clock_skew_seconds`. It moves the watermark no further than now plus "
        f"this. At most {_seconds(MAX_ALLOWANCE_S)}.",
    ),
    (
        "duration_buckets",
        "The buckets of `smllm_request_duration_seconds`, in seconds, increasing. `+Inf` is "
        "always added: list the finite bounds only.",
    ),
    (
        "prompt_duration_buckets",
        "The buckets of `smllm_prompt_duration_seconds` (each request's prompt evaluation), in "
        "seconds, as `duration_buckets`.",
    ),
    (
        "generation_duration_buckets",
        "The buckets of `smllm_generation_duration_seconds` (each request's generation), in "
        "seconds, as `duration_buckets`.",
    ),
    (
        "histograms_per_node",
        "Whether the three duration histograms have a series for each node and kind (`true`) "
        "or for each kind only, the nodes' added up (`false`). At a thousand nodes they are "
        "most of `/metrics`; the per-node counters stay either way.",
    ),
    (
        "slots",
        "A node's llama-server slots until it logs its own count (`n_slots = N`). A node holds "
        "at most its slots + 2 requests in flight. A launch beyond that, or on a slot that "
        "holds a request, ends the older request: its end was never logged. "
        f"At most {MAX_SLOTS:,}.",
    ),
    (
        "start_timeout_seconds",
        "The llama-server unit's `TimeoutStartSec`, in seconds (systemd's default is 90). "
        "`sm-llm-exporter report --startups` suggests a value. "
        f"At most {_seconds(MAX_START_TIMEOUT_S)}.",
    ),
    (
        "slow_start_share",
        "The share of `start_timeout_seconds` past which a start-up is slow: above 0, at most "
        "1. `SmLlmServerSlowStart` fires when a start-up passes it. It fires for an hour after "
        "a slow start-up ends.",
    ),
    (
        "kinds",
        "Kinds of request: an ordered list of rules. The first rule that matches a request's "
        f"tokens names its kind. At most {MAX_KINDS} rules: every mix of kinds is a series. "
        "Without a rule that catches everything, a request whose tokens the log does not give "
        "is `unknown`.",
    ),
)

# A rule of `kinds:`: (key, meaning).
_KIND: tuple[tuple[str, str], ...] = (
    (
        "name",
        f"{REQUIRED} The kind's name: lower-case letters, digits and `_`, starting with a "
        "letter. `idle` and `unknown` are taken.",
    ),
    (
        "min_tokens",
        "The fewest tokens a request of this kind has, inclusive. Empty: no lower bound. A "
        "rule with neither bound catches every request, one without a token count too.",
    ),
    ("max_tokens", "The most tokens a request of this kind has, inclusive. Empty: no upper bound."),
)

# A node's keys: (key, the sources that take it, meaning), in a reader's order. A key whose
# meaning differs by source has a row per meaning.
_NODE: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "name",
        EVERY_SOURCE,
        f"{REQUIRED} The node's name: its `node` label. Letters, digits and `_ . : -`. Unique "
        "among the nodes.",
    ),
    (
        "source",
        EVERY_SOURCE,
        f"{REQUIRED} Where the node's entries come from: `file`, `journal`, `journal-remote`, "
        "`ssh` or `init-timeline`.",
    ),
    (
        "path",
        ("file",),
        f"{REQUIRED} The journal dump: the output of `journalctl -o json` or "
        "`-o short-iso-precise`. A regular file or a FIFO. It is followed like `tail -F`. A "
        "path not there yet is waited for.",
    ),
    (
        "unit",
        ("journal", "journal-remote", "ssh"),
        "The llama-server unit the node's entries are matched on. Default: the top-level `unit`.",
    ),
    (
        "directory",
        ("journal",),
        "A journal directory to read, such as one `systemd-journal-remote` fills. Empty: this "
        "machine's journal.",
    ),
    (
        "files",
        ("journal",),
        "A list of `.journal` files to read. Give `directory` or `files`, not both.",
    ),
    (
        "directory",
        ("journal-remote",),
        f"{REQUIRED} The output directory of the `systemd-journal-remote` collector that the "
        "node uploads to. The nodes of one directory share one reader.",
    ),
    (
        "host",
        ("journal-remote",),
        "The host name the node's entries carry (their `_HOSTNAME`). Default: the node's name.",
    ),
    (
        "hosts",
        ("journal-remote",),
        "Give `seen` for a node for every host whose entries of the unit are in the directory, "
        "in place of one `host`. The hosts are looked for when the config is read: at start "
        "and at each reload. The entry's `name` then holds `{host}`, which each host's name "
        "replaces. A host that another node names keeps that node.",
    ),
    ("host", ("ssh",), f"{REQUIRED} The node's host name or IP address."),
    ("port", ("ssh",), f"The node's SSH port, 1 to {MAX_PORT}."),
    (
        "user",
        ("ssh",),
        "The user to log in as. It needs a login shell and read access to the journal (the "
        "`systemd-journal` group).",
    ),
    (
        "known_hosts",
        ("ssh",),
        "The file the node's host key is checked against. Under the service the default is "
        f"its credential, `${{CREDENTIALS_DIRECTORY}}/{KNOWN_HOSTS_CREDENTIAL}`. "
        "`sm-llm-exporter known-hosts` prints the lines to review and add.",
    ),
    (
        "verify_host_key",
        ("ssh",),
        "Whether the host key is checked. `false` turns the check off and logs a warning.",
    ),
    (
        "client_keys",
        ("ssh",),
        "A list of private keys to log in with. Empty: the SSH agent and the `~/.ssh` keys "
        "only. Under the service, name a key by its credential: "
        '`"${CREDENTIALS_DIRECTORY}/ssh_id_ed25519"`. Quote such a path inside `[...]`.',
    ),
    (
        "password_file",
        ("ssh",),
        "A file holding the password to log in with. Give `password_file` or `password_env`, "
        "not both. A password in the config itself is refused.",
    ),
    ("password_env", ("ssh",), "An environment variable holding the password."),
    (
        "passphrase_file",
        ("ssh",),
        "A file holding the passphrase of encrypted `client_keys`. An encrypted key without "
        "one is refused, naming the key.",
    ),
    ("passphrase_env", ("ssh",), "An environment variable holding that passphrase."),
    (
        "journal_directory",
        ("ssh",),
        "A journal directory on the node, for its `journalctl --directory`: journals collected "
        "there. An absolute path. Empty: the node's own journal.",
    ),
    ("keepalive_interval", ("ssh",), "Seconds between SSH keepalives."),
    (
        "keepalive_count_max",
        ("ssh",),
        "Keepalives unanswered before the link counts as lost. With the defaults a silent "
        "link is noticed after 45 s.",
    ),
    (
        "path",
        ("init-timeline",),
        f"{REQUIRED} A vllm-omni engine's init timeline: its run directory of "
        "`worker_*.jsonl` files, or its merged dump.",
    ),
    ("dump", ("init-timeline",), "The merged dump, beside a run directory."),
    (
        "poll_seconds",
        ("init-timeline",),
        f"How often the files are looked at, in seconds: {MIN_POLL_S:g} to {MAX_POLL_S:,}.",
    ),
)


def keys() -> tuple[Key, ...]:
    """Every key, in a reader's order: the top level, a kind's, a node's."""
    return (
        *(Key(k, (), yaml_value(_top_default(k)), m) for k, m in _TOP),
        *(Key(f"{KINDS}{k}", (), yaml_value(_kind_default(k)), m) for k, m in _KIND),
        Key("nodes", (), "", f"{REQUIRED} The nodes: a list, each with a name and a source."),
        *(Key(f"{NODES}{k}", s, yaml_value(_node_default(k, s)), m) for k, s, m in _NODE),
    )


def _top_default(key: str) -> Any:
    if key == "listen":
        host = f"[{DEFAULTS.listen_host}]" if ":" in DEFAULTS.listen_host else DEFAULTS.listen_host
        return f"{host}:{DEFAULTS.listen_port}"
    return getattr(DEFAULTS, key)


def _kind_default(key: str) -> Any:
    return _field_default(KindRule, key)


def _node_default(key: str, sources: tuple[str, ...]) -> Any:
    """The default of a node's key, from the dataclass of the first source that takes it."""
    return None if key in _NO_DEFAULT else _field_default(_NODE_CLASSES[sources[0]], key)


def _field_default(cls: type[Any], name: str) -> Any:
    (f,) = (f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None  # (none: required, or given by another key)


# A plain YAML scalar cannot start with these, nor hold ": " or " #".
_INDICATORS = tuple("-?:,[]{}#&*!|>'\"%@`")
_NOT_TEXT = re.compile(r"(?i)(true|false|yes|no|on|off|null|~|[-+.\d].*)")


def yaml_value(value: Any) -> str:
    """`value` as a reader writes it in YAML, in flow style ("" for none or an empty list)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Kinds):
        return yaml_value(value.rules)
    if isinstance(value, KindRule):
        given = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        pairs = [f"{k}: {yaml_value(v)}" for k, v in given.items() if v is not None]
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]" if value else ""
    text = str(value) if isinstance(value, Path) else value
    if not isinstance(text, str):
        raise TypeError(f"no YAML form for {type(value).__name__}")
    plain = (
        text
        and not text.startswith(_INDICATORS)
        and ": " not in text
        and " #" not in text
        and not text.endswith(":")
        and not _NOT_TEXT.fullmatch(text)
    )
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The tables of markdown(): (heading, what it holds, which keys).
def _sections() -> Iterator[tuple[str, str, list[Key]]]:
    every = keys()
    top = [k for k in every if not k.path.startswith((KINDS, NODES))]
    yield "Top-level keys", "Each key of the file's top level.", top
    yield (
        "A rule of `kinds`",
        "Each rule of the `kinds:` list.",
        [k for k in every if k.path.startswith(KINDS)],
    )
    yield (
        "Every node",
        "Each node of the `nodes:` list has these two keys.",
        [k for k in every if k.sources == EVERY_SOURCE],
    )
    for source in EVERY_SOURCE:
        yield (
            f"`source: {source}`",
            f"Keys of `{source}` nodes, beside `name` and `source`.",
            [k for k in every if source in k.sources and k.sources != EVERY_SOURCE],
        )


def markdown() -> str:
    """The reference tables for docs/configuration.md: a heading and a table per part."""
    out: list[str] = []
    for heading, what, rows in _sections():
        out += [f"### {heading}", "", what, "", "| key | default | meaning |", "|---|---|---|"]
        for k in rows:
            name = k.path.removeprefix(KINDS).removeprefix(NODES)
            meaning = k.meaning.removeprefix(REQUIRED).lstrip()
            out.append(f"| `{name}` | {_default_cell(k)} | {_cell(meaning)} |")
        out.append("")
    return "\n".join(out)


def _default_cell(key: Key) -> str:
    if key.default:
        return f"`{_cell(key.default)}`"
    return "required" if key.meaning.startswith(REQUIRED) else "-"


def _cell(text: str) -> str:
    """Text fit for a table cell."""
    return text.replace("|", "\\|")

"""Opens an SSH connection to a node: its credentials, its host-key policy, and asyncssh itself.

The one module that imports asyncssh (`sources/sshreader.py` follows a journal over what it
opens, through the names below). Host keys are checked against known_hosts unless the node's
config says otherwise (a warning, once). Passwords and the client keys' passphrase come from a
file or an environment variable and are never logged; keys and known_hosts are read and decoded
here, in a worker thread, so that a problem names the file, and each file's content is parsed
once and shared by every connection (`parsedonce`). A failure to connect comes out as a
SourceError in words, naming the node and never a secret, with what the peer said escaped.
`known-hosts` fetches a node's host key without trusting it (`host_keys`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncssh

from exporter.base.logs import escape
from exporter.config.files import read_small_file
from exporter.sources.base import SourceError
from exporter.sources.parsedonce import Parsed
from exporter.sources.registry import NodeConfig
from exporter.sources.ssh import SSH_PORT, SshNode

log = logging.getLogger(__name__)

# asyncssh's names that following a journal over a connection needs (sshreader.py)
Connection = asyncssh.SSHClientConnection
Session = asyncssh.SSHClientSession
Channel = asyncssh.SSHClientChannel
Completed = asyncssh.SSHCompletedProcess
DataType = asyncssh.DataType
STDERR = asyncssh.EXTENDED_DATA_STDERR

CONNECT_TIMEOUT_S = 20  # to open the connection, and again to log in
# AES-GCM first: hardware AES costs a fraction of ChaCha20-Poly1305 per packet here
ENCRYPTION = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
)
# Connections begun a second, at most. A handshake costs milliseconds of CPU on both ends: a
# thousand begun together time each other out (CONNECT_TIMEOUT_S) and all start again. (A pace,
# not a count of connections being opened: nodes that do not answer hold nothing back.)
CONNECTS_PER_S = 50.0
_next_connect: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = (
    weakref.WeakKeyDictionary()
)
_warned_unverified: set[str] = set()
# the files every connection shares, each parsed once per content
KNOWN_HOSTS: Parsed[asyncssh.SSHKnownHosts] = Parsed()
CLIENT_KEYS: Parsed[asyncssh.SSHKey] = Parsed()

Env = dict[str, str] | os._Environ[str]


def read_secret(node: SshNode, env: Env, what: str = "password") -> str | None:
    """The node's password (or, `what="passphrase"`, its keys' passphrase) from its *_file or
    *_env; SourceError when it cannot be had, naming the key and the file but not its value: a
    secret pasted there by mistake would be logged at every retry."""
    path: Path | None = getattr(node, f"{what}_file")
    name: str | None = getattr(node, f"{what}_env")
    if path is not None:
        shown = shown_path(path)
        try:
            return read_small_file(path).decode("utf-8").rstrip("\r\n")
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise SourceError(
                f"{who(node)}: cannot read its {what}_file{shown}: {why}{_hint(e)}"
            ) from None
        except UnicodeDecodeError:
            raise SourceError(f"{who(node)}: its {what}_file{shown} is not UTF-8") from None
    if name is not None:  # (the variable's name is not shown: it may be the secret itself)
        value = env.get(name)
        if value is None:
            raise SourceError(f"{who(node)}: its {what}_env variable is not set")
        return value
    return None


def who(node: SshNode) -> str:
    """`node N: ssh USER@HOST:PORT`, how every SSH error begins."""
    return f"node {node.name}: ssh {node.user}@{node.host}:{node.port}"


def shown_path(path: Path) -> str:
    """` PATH` for a message, when it reads as a path; "" when it may be a secret pasted into a
    key meant for a path (no `/` in it, blanks, unprintable characters)."""
    text = str(path)
    if "/" in text and text.isprintable() and not any(c.isspace() for c in text):
        return f" {text}"
    return ""


def _hint(e: OSError) -> str:
    """For a file the service could not read: where it should come from."""
    if isinstance(e, PermissionError):
        return (
            " (under the service, files in /etc/sm-llm-exporter come as credentials: "
            "${CREDENTIALS_DIRECTORY}/ssh_FILE, see deploy/README.md)"
        )
    return ""


def load_client_keys(node: SshNode, env: Env) -> list[asyncssh.SSHKey]:
    """The node's client_keys, read and decrypted here, so that a problem names the file:
    SourceError for a file that cannot be read, is no private key, or is encrypted without
    (or with a wrong) passphrase."""
    passphrase = read_secret(node, env, "passphrase") if node.client_keys else None
    return [_client_key(node, path, passphrase) for path in node.client_keys]


def _client_key(node: SshNode, path: Path, passphrase: str | None) -> asyncssh.SSHKey:
    try:
        data = read_small_file(path)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise SourceError(f"{who(node)}: client key{shown_path(path)}: {why}{_hint(e)}") from None
    try:
        salt = b"" if passphrase is None else b"p" + passphrase.encode("utf-8", "surrogatepass")
        return CLIENT_KEYS.get(data, lambda: asyncssh.import_private_key(data, passphrase), salt)
    except (asyncssh.KeyImportError, ValueError, TypeError) as e:
        text = str(e)
        if "assphrase" in text or "decrypt" in text.lower():
            if passphrase is None:
                why = "is encrypted: give its passphrase as passphrase_file or passphrase_env"
            else:
                why = "is encrypted, and the passphrase given does not open it"
            raise SourceError(f"{who(node)}: client key{shown_path(path)} {why}") from None
        raise SourceError(
            f"{who(node)}: client key{shown_path(path)} is not a private key ({text[:120]})"
        ) from None


def load_known_hosts(node: SshNode) -> asyncssh.SSHKnownHosts | None:
    """The node's known_hosts, read here so that a problem names the file (None when host keys
    are not verified)."""
    if not node.verify_host_key or node.known_hosts is None:
        return None
    path = node.known_hosts
    try:
        text = read_small_file(path).decode("utf-8", "replace")
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise SourceError(
            f"{who(node)}: known_hosts {path}: {why}{_hint(e)}; `sm-llm-exporter "
            f"known-hosts {node.name}` prints the lines to put there"
        ) from None
    try:
        return KNOWN_HOSTS.get(text.encode(), lambda: asyncssh.import_known_hosts(text))
    except (asyncssh.Error, ValueError) as e:
        raise SourceError(f"{who(node)}: known_hosts {path} does not read: {e}") from None


def loaded_options(node: SshNode, env: Env) -> dict[str, object]:
    """connect_options with the node's secrets, keys and known_hosts read (and the keys
    decrypted: half a second of bcrypt for one key) here: in a worker thread, off the loop."""
    password = read_secret(node, env)
    keys, known_hosts = load_client_keys(node, env), load_known_hosts(node)
    return connect_options(node, password, keys or None, known_hosts)


def connect_options(
    node: SshNode,
    password: str | None,
    keys: list[asyncssh.SSHKey] | None = None,
    known_hosts: asyncssh.SSHKnownHosts | None = None,
) -> dict[str, object]:
    """asyncssh.connect's options for the node; `keys` and `known_hosts` as loaded here
    (`load_client_keys`, `load_known_hosts`), else asyncssh reads the files itself."""
    if not node.verify_host_key and node.name not in _warned_unverified:
        _warned_unverified.add(node.name)
        log.warning(
            "node %s: host key NOT verified (verify_host_key: false); anyone on the path "
            "can read this node's journal and feed it false lines",
            node.name,
        )
    options: dict[str, object] = {
        "port": node.port,
        "username": node.user,
        "known_hosts": _known_hosts_option(node, known_hosts),
        "keepalive_interval": node.keepalive_interval,
        "keepalive_count_max": node.keepalive_count_max,
        "encryption_algs": list(ENCRYPTION),
        "connect_timeout": CONNECT_TIMEOUT_S,
        "login_timeout": CONNECT_TIMEOUT_S,
    }
    if keys is not None:
        options["client_keys"] = keys
    elif node.client_keys:
        options["client_keys"] = [str(k) for k in node.client_keys]
    if password is not None:
        options["password"] = password
    return options


def _known_hosts_option(
    node: SshNode, known_hosts: asyncssh.SSHKnownHosts | None
) -> asyncssh.SSHKnownHosts | str | None:
    """The host keys to check against: as loaded, else the file's path, else none (not
    verified)."""
    if known_hosts is not None:
        return known_hosts
    if node.verify_host_key and node.known_hosts:
        return str(node.known_hosts)
    return None


@contextlib.asynccontextmanager
async def connection(node: SshNode, env: Env, timed_out: str) -> AsyncIterator[Connection]:
    """A connection to the node, its credentials read off the loop first. What fails inside
    (connecting, or what runs over it) comes out as a SourceError in words; a TimeoutError as
    `timed_out` after `who(node)`."""
    options = await asyncio.to_thread(loaded_options, node, env)
    try:
        await _paced()
        conn = await asyncssh.connect(node.host, **options)
        async with conn:
            yield conn
    except TimeoutError:  # (before OSError, its base class, and asyncssh's: it is both)
        raise SourceError(f"{who(node)}: {timed_out}") from None
    except (asyncssh.Error, OSError) as e:
        raise SourceError(explain(node, e)) from None


async def _paced() -> None:
    """Wait for this connection's turn (CONNECTS_PER_S on the running loop)."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    turn = max(now, _next_connect.get(loop, now))
    _next_connect[loop] = turn + 1 / CONNECTS_PER_S
    if turn > now:
        await asyncio.sleep(turn - now)


def explain(node: SshNode, e: BaseException) -> str:
    """An SSH failure in words, naming the node and never a secret, escaped (a disconnect's
    reason is the peer's)."""
    return escape(_explained(node, e))


def _explained(node: SshNode, e: BaseException) -> str:
    where = f"ssh {node.user}@{node.host}:{node.port}"
    if isinstance(e, asyncssh.HostKeyNotVerifiable):
        return (
            f"node {node.name}: {where}: host key not verifiable against "
            f"{node.known_hosts} ({e.reason}); check the fingerprint with "
            f"`sm-llm-exporter known-hosts {node.name}`"
        )
    if isinstance(e, asyncssh.PermissionDenied):
        return f"node {node.name}: {where}: authentication failed ({e.reason})"
    if isinstance(e, asyncssh.DisconnectError):
        return f"node {node.name}: {where}: disconnected ({e.reason})"
    if isinstance(e, OSError):
        return f"node {node.name}: {where}: {e.strerror or e}"
    return f"node {node.name}: {where}: {type(e).__name__}: {e}"


async def host_key(name: str, host: str, port: int) -> list[str]:
    """known_hosts lines for a node, fetched without trusting it, with the SHA256 fingerprint as
    a comment for the operator to check."""
    try:
        key = await asyncssh.get_server_host_key(host, port)
    except (asyncssh.Error, OSError) as e:
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        raise SourceError(
            f"node {name}: {host}:{port}: cannot fetch its host key: {escape(str(why))}"
        ) from None
    if key is None:
        return [f"# {name}: {host}:{port} offered no host key"]
    entry = host if port == SSH_PORT else f"[{host}]:{port}"
    return [
        f"# {name}: {key.get_fingerprint('sha256')}",
        f"{entry} {key.export_public_key('openssh').decode().strip()}",
    ]


async def host_keys(
    nodes: Sequence[NodeConfig], *, named: bool = False
) -> tuple[list[str], list[str]]:
    """known_hosts lines (with SHA256 fingerprints as comments) of every SSH node reached, and
    why each of the others could not be; a node of another kind is one of those when `named`."""
    lines: list[str] = []
    problems: list[str] = []
    for node in nodes:
        if not isinstance(node, SshNode):
            if named:
                problems.append(f"node {node.name}: not an ssh node (source: {node.source})")
            continue
        try:
            lines += await host_key(node.name, node.host, node.port)
        except SourceError as e:
            problems.append(str(e))
    return lines, problems

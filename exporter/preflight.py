"""Checks of what a valid config names, for check-config: every path there and readable (the
state directory creatable and writable), seen by this user or as the service will see it.

As the service (`--as-service`), a path under `$CREDENTIALS_DIRECTORY` is the file the unit
hands over as that credential (`LoadCredential=ssh:/etc/sm-llm-exporter/ssh`: every file there
as `ssh_FILE`), which systemd reads as root; every other path must be readable by the unit's
dynamic user, which is neither its owner nor in its group (but for the journal's group,
systemd-journal), and not hidden by its sandbox; and the default state directory is the unit's
`StateDirectory=`, which systemd makes.
"""

from __future__ import annotations

import contextlib
import grp
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.checkpoint import StateLock
from exporter.config import Config, FileNode, JournalNode, SshNode

# What the unit (deploy/sm-llm-exporter.service) hands over and makes.
SERVICE_CREDENTIALS = Path("/run/credentials/sm-llm-exporter.service")
# LoadCredential=ssh:/etc/sm-llm-exporter/ssh (and tls:...): every file there as ssh_FILE
CREDENTIAL_DIRECTORIES = (
    ("ssh_", Path("/etc/sm-llm-exporter/ssh")),
    ("tls_", Path("/etc/sm-llm-exporter/tls")),
)
SERVICE_STATE_DIR = Path("/var/lib/sm-llm-exporter")
SERVICE_GROUPS = ("systemd-journal",)


# What the unit's sandbox hides from the service (a path there is no path for it).
HIDDEN = {
    Path("/tmp"): "PrivateTmp=yes",
    Path("/var/tmp"): "PrivateTmp=yes",
    Path("/home"): "ProtectHome=yes",
    Path("/root"): "ProtectHome=yes",
    Path("/run/user"): "ProtectHome=yes",
}


@dataclass(frozen=True)
class Named:
    """A path the config names: its key path, whether it is a directory to read, and whether
    it must be a regular file (a FIFO there would be read once, or block)."""

    key: str
    path: Path
    directory: bool = False
    regular: bool = True


def named_paths(cfg: Config) -> Iterator[Named]:
    """Every local path the config names, with its key path, but the state directory."""
    for i, n in enumerate(cfg.nodes):
        at = f"nodes[{_index(cfg, n.name, i)}]"
        if isinstance(n, FileNode):
            yield Named(f"{at}.path", n.path, regular=False)  # (a FIFO is followed too)
        elif isinstance(n, JournalNode):
            if n.directory is not None:
                yield Named(f"{at}.directory", n.directory, directory=True, regular=False)
            for j, f in enumerate(n.files):
                yield Named(f"{at}.files[{j}]", f)
        elif isinstance(n, SshNode):
            if n.verify_host_key and n.known_hosts is not None:
                yield Named(f"{at}.known_hosts", n.known_hosts)
            for j, key in enumerate(n.client_keys):
                yield Named(f"{at}.client_keys[{j}]", key)
            if n.password_file is not None:
                yield Named(f"{at}.password_file", n.password_file)
            if n.passphrase_file is not None:
                yield Named(f"{at}.passphrase_file", n.passphrase_file)
    for t in cfg.init_timelines:  # (a run directory, or a dump)
        at = f"nodes[{_index(cfg, t.name, 0)}]"
        yield Named(f"{at}.path", t.path, directory=_is_dir(t.path), regular=False)
        if t.dump is not None:
            yield Named(f"{at}.dump", t.dump)
    if cfg.web_config_file is not None:
        yield Named("web_config_file", cfg.web_config_file)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # (checking it says why)
        return False


def _index(cfg: Config, name: str, otherwise: int) -> int:
    """Where `nodes:` lists the node (the init-timeline nodes are kept apart)."""
    return cfg.node_order.index(name) if name in cfg.node_order else otherwise


def problems(
    cfg: Config,
    lines: Mapping[str, int],
    source: str,
    *,
    as_service: bool = False,
    credentials: Path = SERVICE_CREDENTIALS,
) -> list[str]:
    """Every path problem, each `SOURCE:LINE: KEY: what`, in the order of their lines."""
    found: list[tuple[int, str]] = []

    def problem(key: str, text: str) -> None:
        probe = key
        while probe and probe not in lines:  # (a default: the line of the key around it)
            shorter = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", probe)
            probe = shorter if shorter != probe else ""
        line = lines.get(probe, 0)
        found.append(
            (line, f"{source}:{line}: {key}: {text}" if line else f"{source}: {key}: {text}")
        )

    for named in named_paths(cfg):
        why = _unreadable(named, as_service, credentials)
        if why:
            problem(named.key, why)
    why = _state_dir_problem(cfg.state_dir, as_service)
    if why:
        problem("state_dir", why)
    return [text for _, text in sorted(found, key=lambda p: p[0])]


def _unreadable(named: Named, as_service: bool, credentials: Path) -> str:
    try:
        return _path_problem(named, as_service, credentials)
    except OSError as e:  # (a directory on the way this user cannot enter)
        return f"{named.path} cannot be checked as this user ({e.strerror or type(e).__name__})"


def _path_problem(named: Named, as_service: bool, credentials: Path) -> str:
    path = named.path
    if not path.is_absolute():
        return f"{path} is relative: give the whole path (the service runs from /)"
    # as the service, or from a shell where the service's credentials directory is not there:
    # a credential is the file the unit hands over
    if path.is_relative_to(credentials) and (as_service or not credentials.exists()):
        given = _credential_source(path.relative_to(credentials))
        if given is None:
            kinds = " or ".join(f"{p}FILE for a file of {d}" for p, d in CREDENTIAL_DIRECTORIES)
            return f"{path} is not a credential the unit hands over ({kinds})"
        if not os.path.lexists(given):
            return f"{path} comes from {given}, which does not exist"
        if not stat.S_ISREG(given.lstat().st_mode):  # (LoadCredential= hands over files only)
            return f"{path} comes from {given}, which is not a regular file (a symlink?)"
        return ""  # (systemd reads it as root)
    if as_service:
        hidden = next((why for top, why in HIDDEN.items() if path.is_relative_to(top)), None)
        if hidden is not None:
            return f"{path} is hidden from the service (the unit's {hidden})"
    if not path.exists():
        return f"{path} does not exist"
    if named.directory != path.is_dir():
        return f"{path} is {'not ' if named.directory else ''}a directory"
    if named.regular and not path.is_file():
        return f"{path} is not a regular file"
    if as_service:
        blocked = _blocked_for_others(path, named.directory)
        return f"{blocked}: the service's dynamic user cannot read {path}" if blocked else ""
    mode = os.R_OK | (os.X_OK if named.directory else 0)
    return "" if os.access(path, mode) else f"{path} is not readable here"


def _credential_source(name: Path) -> Path | None:
    text = str(name)
    for prefix, directory in CREDENTIAL_DIRECTORIES:
        if text.startswith(prefix) and "/" not in text and len(text) > len(prefix):
            return directory / text[len(prefix) :]
    return None


def seen_here(
    path: Path, *, as_service: bool = False, credentials: Path = SERVICE_CREDENTIALS
) -> Path:
    """The file to read here for a path the service reads: a credential's source (when checked
    as the service, or where its credentials directory is not), else the path itself."""
    if path.is_relative_to(credentials) and (as_service or not credentials.exists()):
        given = _credential_source(path.relative_to(credentials))
        if given is not None:
            return given
    return path


def _blocked_for_others(path: Path, directory: bool) -> str:
    """The first directory (or the file) a user that is neither owner nor in the group (but
    for SERVICE_GROUPS) cannot pass through or read; "" when none."""
    groups = set()
    for name in SERVICE_GROUPS:
        with contextlib.suppress(KeyError):
            groups.add(grp.getgrnam(name).gr_gid)
    resolved = path.resolve()
    steps = [*reversed(resolved.parents), resolved]
    for step in steps:
        st = step.stat()
        last = step == resolved
        need = (stat.S_IROTH | (stat.S_IXOTH if directory else 0)) if last else stat.S_IXOTH
        need_group = (stat.S_IRGRP | (stat.S_IXGRP if directory else 0)) if last else stat.S_IXGRP
        if st.st_mode & need == need:
            continue
        if st.st_gid in groups and st.st_mode & need_group == need_group:
            continue
        return f"{step} is mode {stat.S_IMODE(st.st_mode):04o}"
    return ""


def _state_dir_problem(state_dir: Path, as_service: bool) -> str:
    try:
        return _state_dir_check(state_dir, as_service)
    except OSError as e:
        return f"{state_dir} cannot be checked as this user ({e.strerror or type(e).__name__})"


def _state_dir_check(state_dir: Path, as_service: bool) -> str:
    if as_service and state_dir == SERVICE_STATE_DIR:
        return ""  # (the unit's StateDirectory=: systemd makes it, the service's own)
    if not state_dir.is_absolute():
        return f"{state_dir} is relative: give the whole path"
    if as_service:
        return (
            f"{state_dir} is read-only for the service (the unit's ProtectSystem=strict): keep "
            f"the default, {SERVICE_STATE_DIR}, the unit's StateDirectory="
        )
    if state_dir.exists():
        if not state_dir.is_dir():
            return f"{state_dir} is not a directory"
        if as_service:
            blocked = _blocked_for_others(state_dir, True)
            if blocked or not state_dir.stat().st_mode & stat.S_IWOTH:
                return f"the service's dynamic user cannot write {state_dir}"
            return ""
        try:  # (as the daemon does at start: a file written, fsynced, removed)
            StateLock(state_dir).probe()
        except OSError as e:
            return str(e)
        return ""
    parent = state_dir.parent
    while not parent.exists():
        parent = parent.parent
    try:  # (a directory made and removed where it would be made: root's access() says yes
        # to /proc)
        os.rmdir(tempfile.mkdtemp(prefix=".sm-llm-exporter-probe-", dir=parent))
    except OSError as e:
        return f"{state_dir} does not exist and cannot be made ({parent}: {e.strerror})"
    return ""

"""Checks every path a valid config names, for check-config, as this user or as the service.

Every path must be there and readable (the state directory creatable and writable), seen by
this user or as the service will see it; each source kind says which of its node's paths are
checked (`SourceKind.paths`).

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
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.checkpoint.store import StateLock
from exporter.config.checker import Checker
from exporter.config.document import MAX_BYTES, decode, document, read_text
from exporter.config.errors import ConfigError, Unreadable
from exporter.config.files import file_kind, why_not
from exporter.config.load import config_of
from exporter.config.schema import DEFAULTS, Config
from exporter.sources.kind import Named
from exporter.sources.registry import ALL_SOURCES, paths
from exporter.web import tls as webtls
from exporter.web import webconfig

# What the unit (deploy/sm-llm-exporter.service) hands over and makes.
SERVICE_CREDENTIALS = Path("/run/credentials/sm-llm-exporter.service")
# LoadCredential=ssh:/etc/sm-llm-exporter/ssh (and tls:...): every file there as ssh_FILE
CREDENTIAL_DIRECTORIES = (
    ("ssh_", Path("/etc/sm-llm-exporter/ssh")),
    ("tls_", Path("/etc/sm-llm-exporter/tls")),
)
SERVICE_STATE_DIR = DEFAULTS.state_dir  # (the unit's StateDirectory=, the config's default)
SERVICE_GROUPS = ("systemd-journal",)


# What the unit's sandbox hides from the service (a path there is no path for it).
HIDDEN = {
    Path("/tmp"): "PrivateTmp=yes",
    Path("/var/tmp"): "PrivateTmp=yes",
    Path("/home"): "ProtectHome=yes",
    Path("/root"): "ProtectHome=yes",
    Path("/run/user"): "ProtectHome=yes",
}


# How a path problem says that the path is not shown (it may be a secret pasted where a path
# belongs); the path itself is named as `kind.NOT_SHOWN`.
NOT_SHOWN_WHY = " (the path is not shown: it may be a secret)"
STDIN = Path("-")  # check-config's standard input
STDIN_NAME = "<stdin>"  # ... as its problems name it


def named_paths(cfg: Config) -> Iterator[Named]:
    """Every local path the config names, with its key path, but the state directory."""
    for i, n in enumerate(cfg.nodes):
        yield from paths(n, f"nodes[{_index(cfg, n.name, i)}]")
    for t in cfg.init_timelines:
        yield from paths(t, f"nodes[{_index(cfg, t.name, 0)}]")
    for h in cfg.hosts_seen:
        at = f"nodes[{_index(cfg, h.name, 0)}].directory"
        yield Named(at, h.directory, directory=True, regular=False)
    if cfg.web_config_file is not None:
        yield Named("web_config_file", cfg.web_config_file)


def _index(cfg: Config, name: str, otherwise: int) -> int:
    """Where `nodes:` lists the node (the init-timeline nodes are kept apart)."""
    return cfg.node_order.index(name) if name in cfg.node_order else otherwise


@dataclass(frozen=True)
class Checked:
    """check-config's verdict: every problem (of the config's form, of the paths it names, of
    its web configs) in one list, the config's in the order of their lines; the warnings; the
    config as read (None when it cannot be read or is no YAML); a line per valid web config."""

    source: str
    config: Config | None
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    web: tuple[str, ...] = ()


def check(
    path: Path,
    env: Mapping[str, str] = os.environ,
    available: frozenset[str] = ALL_SOURCES,
    *,
    as_service: bool = False,
    web_config: Path | None = None,
    credentials: Path = SERVICE_CREDENTIALS,
) -> Checked:
    """The config at `path` (`-`: standard input) read once and checked in one pass: its keys
    and values, every path it names, its web config (and `web_config`, if given)."""
    source = STDIN_NAME if path == STDIN else str(path)
    try:
        text = _read_stdin() if path == STDIN else read_text(path)
        data, checker = document(text, source, env)
    except ConfigError as e:
        return Checked(source, None, tuple(e.problems))
    cfg = config_of(data, checker, available)
    if as_service and path != STDIN:
        why = _config_problem(path, credentials)
        if why:
            checker.problem("", why, shown="the config itself")
    warnings = _check_paths(cfg, checker, as_service, credentials)
    problems = checker.problems
    described = []
    webs = [web_config] if web_config is not None else []
    if cfg.web_config_file is not None and not checker.has_problem("web_config_file"):
        webs.insert(0, cfg.web_config_file)
    for web_path in dict.fromkeys(webs):
        try:
            web = webtls.load(
                web_path, lambda p: seen_here(p, as_service=as_service, credentials=credentials)
            )
        except ConfigError as e:
            problems.extend(e.problems)
            continue
        described.append(f"{web_path}: valid web config: {webconfig.describe(web)}")
        warnings.extend(webconfig.warnings(web))
    return Checked(source, cfg, tuple(problems), tuple(warnings), tuple(described))


def _read_stdin() -> str:
    """The config piped in, bounded as a file's is; ConfigError when there is no reading it."""
    try:
        raw = sys.stdin.buffer.read(MAX_BYTES + 1)
    except (AttributeError, ValueError, OSError) as e:  # (none, closed, or failing)
        why = why_not(e) if isinstance(e, OSError) else "there is no standard input"
        raise Unreadable(STDIN_NAME, f"{STDIN_NAME}: cannot read: {why}") from None
    return decode(raw, STDIN_NAME)


def _check_paths(cfg: Config, checker: Checker, as_service: bool, credentials: Path) -> list[str]:
    """Every path problem into `checker` (but at a key that has a problem already: its value is
    a default); the warnings returned (a dump not there yet: the daemon waits for it)."""
    warnings: list[str] = []
    for named in named_paths(cfg):
        if checker.has_problem(named.key):
            continue
        why, waited = _unreadable(named, as_service, credentials)
        if waited:
            warnings.append(checker.placed(named.key, why)[1])
        elif why:
            checker.problem(named.key, why + (NOT_SHOWN_WHY if named.secret else ""))
    if not checker.has_problem("state_dir"):
        why = _state_dir_problem(cfg.state_dir, as_service)
        if why:
            checker.problem("state_dir", why)
    return warnings


def _config_problem(path: Path, credentials: Path) -> str:
    """Why the service cannot read the config file at `path` (the unit reads it where it is,
    as its dynamic user, behind PrivateTmp= and ProtectHome=), or ""."""
    why, _ = _unreadable(Named("config", path.absolute()), True, credentials)
    return why


def _unreadable(named: Named, as_service: bool, credentials: Path) -> tuple[str, bool]:
    """(Why the path cannot be used, or ""; whether that is a dump the daemon waits for.)"""
    try:
        return _path_problem(named, as_service, credentials)
    except OSError as e:  # (a directory on the way this user cannot enter)
        why = e.strerror or type(e).__name__
        return f"{named.shown} cannot be checked as this user ({why})", False


def _path_problem(named: Named, as_service: bool, credentials: Path) -> tuple[str, bool]:
    path, shown = named.path, named.shown
    if not path.is_absolute():
        return f"{shown} is relative: give the whole path (the service runs from /)", False
    # as the service, or from a shell where the service's credentials directory is not there:
    # a credential is the file the unit hands over
    if path.is_relative_to(credentials) and (as_service or not credentials.exists()):
        return _credential_problem(named, credentials), False
    if as_service:
        hidden = next((why for top, why in HIDDEN.items() if path.is_relative_to(top)), None)
        if hidden is not None:
            return f"{shown} is hidden from the service (the unit's {hidden})", False
    if not path.exists():
        if named.waited:
            return f"{shown} does not exist yet: the daemon waits for it", True
        return f"{shown} does not exist", False
    return _kind_problem(named, as_service), False


def _kind_problem(named: Named, as_service: bool) -> str:
    """An existing path: of the right kind, and readable (by the service's user)."""
    path, shown = named.path, named.shown
    if named.directory != path.is_dir():
        return f"{shown} is {'not ' if named.directory else ''}a directory"
    if named.regular and not path.is_file():
        return f"{shown} is not a regular file ({file_kind(path.stat().st_mode)})"
    if not named.regular and not named.directory:  # (a dump: a file, or a FIFO to follow)
        mode = path.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            return f"{shown} is {file_kind(mode)}, not a dump file"
    if as_service:
        blocked = _blocked_for_others(path, named.directory)
        if blocked is None:
            return ""
        step, mode = blocked
        if not named.secret:
            where = str(step)
        else:
            where = "it" if step == path.resolve() else "a directory on its way"
        return f"{where} is mode {mode:04o}: the service's dynamic user cannot read {shown}"
    wanted = os.R_OK | (os.X_OK if named.directory else 0)
    return "" if os.access(path, wanted) else f"{shown} is not readable here"


def _credential_problem(named: Named, credentials: Path) -> str:
    """A path under the service's credentials directory: the file the unit hands over."""
    path, shown = named.path, named.shown
    given = _credential_source(path.relative_to(credentials))
    if given is None:
        kinds = " or ".join(f"{p}FILE for a file of {d}" for p, d in CREDENTIAL_DIRECTORIES)
        return f"{shown} is not a credential the unit hands over ({kinds})"
    source = f"a file of {given.parent}" if named.secret else str(given)
    if not os.path.lexists(given):
        return f"{shown} comes from {source}, which does not exist"
    if not stat.S_ISREG(given.lstat().st_mode):  # (LoadCredential= hands over files only)
        return f"{shown} comes from {source}, which is not a regular file (a symlink?)"
    return ""  # (systemd reads it as root)


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


def _blocked_for_others(path: Path, directory: bool) -> tuple[Path, int] | None:
    """The first directory (or the file) a user that is neither owner nor in the group (but
    for SERVICE_GROUPS) cannot pass through or read, and its mode; None when none."""
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
        return step, stat.S_IMODE(st.st_mode)
    return None


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
            if blocked is not None or not state_dir.stat().st_mode & stat.S_IWOTH:
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

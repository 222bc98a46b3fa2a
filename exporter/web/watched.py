"""The web config in force: looked at for every connection and request, read again as it changes.

Each connection and request asks `Watched` (exporter-toolkit reads the file again for every
one): it looks at the file and at the files it names on each call (a stat) and reads them again
when any changed, in a thread (a read that hangs leaves the version in force serving). A web
config that turns bad is refused as exporter-toolkit refuses it: connections and requests fail
(closed) until it is good again, and the problem is logged.
"""

from __future__ import annotations

import concurrent.futures
import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from exporter.config.document import read_text
from exporter.config.errors import ConfigError
from exporter.config.redact import printable
from exporter.web.tls import context
from exporter.web.webconfig import WebConfig, parse

_T = TypeVar("_T")
log = logging.getLogger(__name__)


# How long the connection that finds the web config changed waits for it to be read (in a
# thread of its own: a file system that hangs the read never hangs the event loop); past that,
# the version in force serves until the read ends, and nothing waits for it again.
READ_WAIT_S = 1.0


@dataclass(frozen=True)
class _Read:
    """A version of the web config as a reading thread found it: parsed (or None), its TLS
    context built (or None), and the problem that stopped it (or None)."""

    web: WebConfig | None
    context: ssl.SSLContext | None
    error: ConfigError | None


def _read(path: Path, read: Callable[[Path], str]) -> _Read:
    try:
        web = parse(read(path), path)
    except ConfigError as e:
        return _Read(None, None, e)
    try:
        return _Read(web, context(web), None)
    except ConfigError as e:
        return _Read(web, None, e)


def _in_a_thread(call: Callable[[], _T]) -> concurrent.futures.Future[_T]:
    """`call` in a daemon thread of its own (one that hangs for good holds neither a pool nor
    the interpreter's exit), its outcome in the future returned."""
    future: concurrent.futures.Future[_T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as e:  # (handed to whoever looks)
            future.set_exception(e)

    threading.Thread(target=run, name="smllm-web-config", daemon=True).start()
    return future


class Watched:
    """The web config as the next connection or request is to see it: read again whenever the
    file or one it names changed (by inode, size, mtime or ctime), else the one read last.
    `current` raises ConfigError while it is bad.

    What it protects is fixed when it is first read (at start, and again on a reload: a new
    Watched): TLS or not, basic auth or not. A later version that drops either is refused as a
    bad one (fail closed), never served: a web config caught half-written (empty, so plain HTTP
    and no users) is a moment of refusals, not of open doors. A version is kept only if none of
    its files changed while it was read; else it is read again next time.

    The files are read in a thread (only their stat is taken by the caller): `current` waits
    at most `wait_s` for a read, once; while a read hangs (a hung NFS mount), the version in
    force stays (the first version: refused until it is read) and no other read starts."""

    def __init__(
        self,
        path: Path,
        wait_s: float = READ_WAIT_S,
        read: Callable[[Path], str] | None = None,
    ) -> None:
        """`read`: how a version's text is read (default: `read_text`, as it is then)."""
        self.path = path
        self.wait_s, self.read = wait_s, read
        self._signature: tuple[Any, ...] | None = None
        self._files: tuple[Path, ...] = (path,)  # the files of the last version that parsed
        self._loaded: tuple[WebConfig, ssl.SSLContext | None] | None = None
        self._error: ConfigError | None = None
        self.protects: tuple[bool, bool] | None = None  # (TLS, basic auth), from the first
        self.loads = 0  # how many times it was read: a test's view of "re-read"
        # the read under way, the signature it began at, and whether it was waited for
        self._reading: (
            tuple[concurrent.futures.Future[tuple[_Read, tuple[Any, ...]]], tuple[Any, ...]] | None
        ) = None
        self._waited = False
        self._stating: concurrent.futures.Future[tuple[Any, ...]] | None = None  # (a stat)
        self._stat_waited = False

    @property
    def tls(self) -> bool:
        """Is it TLS (as first read)?"""
        return self.protects is not None and self.protects[0]

    @property
    def reading(self) -> bool:
        """Is a read under way (one that outlasted its wait: the version in force serves)?"""
        return self._reading is not None

    def current(self) -> tuple[WebConfig, ssl.SSLContext | None]:
        if self._reading is None:
            signature = self._signature_now()
            if signature is not None and signature != self._signature:
                self.loads += 1
                read, files = self.read or read_text, self._files
                self._reading = (
                    _in_a_thread(lambda: _read_then_stat(self.path, read, files)),
                    signature,
                )
                self._waited = False
        if self._reading is not None:
            self._finish(*self._reading)
        if self._error is not None:
            raise self._error
        if self._loaded is None:  # (its first read hangs)
            raise ConfigError(
                str(self.path),
                [
                    printable(
                        f"{self.path}: not read in {self.wait_s:g} s (a hung file system?): "
                        "refusing until it is"
                    )
                ],
            )
        return self._loaded

    def _signature_now(self) -> tuple[Any, ...] | None:
        """The files' stat, taken in a thread: a hung mount holds up no caller (waited for
        once, at most wait_s); None while it hangs (the version in force serves)."""
        stating = self._stating
        if stating is None:
            files = self._files
            stating = self._stating = _in_a_thread(lambda: _signature(files))
            self._stat_waited = False
        if not stating.done():
            if self._stat_waited:
                return None
            self._stat_waited = True
            concurrent.futures.wait([stating], self.wait_s)
            if not stating.done():
                log.warning(
                    "web config %s: its files not looked at in %g s (a hung file system?): "
                    "the version in force stays until they are",
                    self.path,
                    self.wait_s,
                )
                return None
        self._stating = None
        return stating.result()

    def _finish(
        self,
        reading: concurrent.futures.Future[tuple[_Read, tuple[Any, ...]]],
        began: tuple[Any, ...],
    ) -> None:
        """Take the read under way once it is done (waiting for it once, at most wait_s)."""
        if not reading.done():
            if self._waited:
                return
            self._waited = True
            concurrent.futures.wait([reading], self.wait_s)
            if not reading.done():
                log.warning(
                    "web config %s: not read in %g s (a hung file system?): the version in "
                    "force stays until it is",
                    self.path,
                    self.wait_s,
                )
                return
        self._reading = None
        read, after = reading.result()
        self._take(read)
        # (changed while it was read, or files it names now: look again next time)
        self._signature = began if after == began else None

    def _take(self, read: _Read) -> None:
        web = read.web
        if web is None:
            self._loaded, self._error = None, read.error
            return
        self._files = web.files()
        protects = (web.tls is not None, bool(web.users))
        change = _protection_change(self.protects, protects)
        if change:
            problem = printable(
                f"{self.path}: would {change}: that is fixed when the exporter starts or "
                "reloads (systemctl reload, SIGHUP), never changed under running connections; "
                "refusing until then"
            )
            self._loaded, self._error = None, ConfigError(str(self.path), [problem])
            return
        if read.error is not None:
            self._loaded, self._error = None, read.error
            return
        self._loaded, self._error = (web, read.context), None
        was = self.protects
        self.protects = protects if was is None else (was[0], was[1] or protects[1])


def _protection_change(was: tuple[bool, bool] | None, now: tuple[bool, bool]) -> str:
    """What a new version would change that only a start or reload may: TLS on or off, basic
    auth off ("" for nothing; basic auth turned on is taken at once)."""
    if was is None:
        return ""
    if was[0] != now[0]:
        return f"turn TLS {'on' if now[0] else 'off'}"
    return "turn basic auth off" if was[1] and not now[1] else ""


def _signature(files: tuple[Path, ...]) -> tuple[Any, ...]:
    """What tells a change of `files` (their stat: blocking file I/O, for a worker thread)."""
    return tuple(stat_key(p) for p in files)


def _read_then_stat(
    path: Path, read: Callable[[Path], str], files: tuple[Path, ...]
) -> tuple[_Read, tuple[Any, ...]]:
    """The web config at `path` read, and the signature of its files after (of those it names
    now, when it parsed): a change while it was read is looked at again next time."""
    got = _read(path, read)
    return got, _signature(got.web.files() if got.web is not None else files)


def stat_key(path: Path) -> tuple[int, ...]:
    """What tells a change of the file at `path`: its inode, size, mtime and ctime (or the
    error that stat met)."""
    try:
        st = path.stat()
    except OSError as e:
        return (-1, e.errno or 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

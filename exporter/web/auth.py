"""Basic auth and the rate limit: bcrypt verdicts, cached (the only `bcrypt` import).

An unknown user's password is checked against a configured user's hash (the costliest), so it
takes as long as a known user's; a password over 72 bytes (bcrypt's limit) is checked the same
way and refused. Verdicts are cached (by a SHA-256 of user, hash and password), at most
AUTH_CACHE of them, as exporter-toolkit caches them, and each user's last success apart.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Mapping

import bcrypt

from exporter.web.webconfig import MAX_USERS, WebConfig

BCRYPT_MAX = 72  # bytes of a password bcrypt looks at
AUTH_CACHE = 100


def credentials(authorization: bytes) -> tuple[str, bytes] | None:
    """(user, password) of an `Authorization: Basic ...` value, as Go's Request.BasicAuth reads
    it; None for anything else."""
    scheme, _, encoded = authorization.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user.decode("utf-8", "replace"), password


class Auth:
    """Basic-auth verdicts: `cached` answers at once when it can, `check` runs bcrypt (tens of
    milliseconds: call it from a worker thread; one runs at a time, as in exporter-toolkit)."""

    def __init__(self, checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw) -> None:
        self.checkpw = checkpw
        self._cache: dict[bytes, bool] = {}  # refusals (and successes), AUTH_CACHE at most
        # each user's last success, kept apart: a flood of wrong passwords evicts none of them
        self._good: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._one_at_a_time = threading.Lock()

    @staticmethod
    def _key(users: Mapping[str, bytes], user: str, password: bytes) -> bytes:
        hashed = users.get(user, b"")
        return hashlib.sha256(b"\0".join((user.encode(), hashed, password))).digest()

    def cached(self, users: Mapping[str, bytes], user: str, password: bytes) -> bool | None:
        key = self._key(users, user, password)
        with self._lock:
            if self._good.get(user) == key:
                return True
            return self._cache.get(key)

    def check(self, users: Mapping[str, bytes], user: str, password: bytes) -> bool:
        known = user in users
        hashed = users[user] if known else _costliest(users)
        fits = len(password) <= BCRYPT_MAX
        with self._one_at_a_time:
            try:
                matched = self.checkpw(password[:BCRYPT_MAX], hashed)
            except ValueError:  # (a hash bcrypt cannot read after all)
                matched = False
        ok = known and fits and matched
        key = self._key(users, user, password)
        with self._lock:
            if ok and len(self._good) < MAX_USERS:
                self._good[user] = key
            if len(self._cache) >= AUTH_CACHE:
                with contextlib.suppress(StopIteration):
                    del self._cache[next(iter(self._cache))]
            self._cache[key] = ok
        return ok


def _costliest(users: Mapping[str, bytes]) -> bytes:
    return max(users.values(), key=lambda h: int(h.split(b"$")[2]))


def hash_password(password: bytes, cost: int = 10) -> str:
    """A bcrypt hash for basic_auth_users (what `htpasswd -nBC 10` makes)."""
    return bcrypt.hashpw(password, bcrypt.gensalt(cost)).decode()


class RateLimit:
    """rate_limit: a token bucket of `burst` requests refilled one per `interval_s`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._tokens: float | None = None
        self._at = 0.0

    def allow(self, web: WebConfig) -> bool:
        if not web.rate_interval_s:
            return True
        now = self.clock()
        if self._tokens is None:
            self._tokens = float(web.rate_burst)
        else:
            refill = (now - self._at) / web.rate_interval_s
            self._tokens = min(float(web.rate_burst), self._tokens + refill)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

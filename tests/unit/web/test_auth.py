"""exporter.web.auth: basic-auth credentials read as Go reads them, and bcrypt verdicts: an
unknown user costs as much as a known one, the cache is bounded and keeps good verdicts."""

from __future__ import annotations

import base64
import statistics
import time

from exporter.web import auth as webauth

from support.webconfigs import HASH, PASSWORD


def test_credentials_are_read_as_go_reads_them() -> None:
    def basic(raw: bytes) -> bytes:
        return b"Basic " + base64.b64encode(raw)

    assert webauth.credentials(basic(b"alice:pa:ss")) == ("alice", b"pa:ss")
    assert webauth.credentials(b"basic " + base64.b64encode(b"a:")) == ("a", b"")
    for bad in (b"", b"Bearer x", b"Basic !!!", basic(b"no colon"), b"Basic"):
        assert webauth.credentials(bad) is None


def test_an_unknown_user_is_checked_against_the_costliest_hash() -> None:
    cheap, dear = (
        webauth.hash_password(b"a", 4).encode(),
        webauth.hash_password(b"b", 6).encode(),
    )
    users = {"alice": cheap, "bob": dear}
    seen: list[tuple[bytes, bytes]] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        seen.append((password, hashed))
        return password == b"a" and hashed == cheap

    auth = webauth.Auth(checkpw)
    assert auth.check(users, "alice", b"a")
    assert not auth.check(users, "mallory", b"a")
    assert seen[-1][1] == dear  # the same work as bob's: no user enumeration by timing
    assert not auth.check(users, "alice", b"a" * 73)  # over bcrypt's 72: refused, no exception
    assert seen[-1] == (b"a" * 72, cheap)  # (and as much work as any other check)
    assert auth.cached(users, "alice", b"a") is True
    assert auth.cached(users, "mallory", b"a") is False
    assert auth.cached(users, "alice", b"other") is None
    for i in range(webauth.AUTH_CACHE + 10):  # bounded
        auth.check(users, "alice", str(i).encode())
    assert (
        sum(
            1
            for i in range(webauth.AUTH_CACHE + 10)
            if auth.cached(users, "alice", str(i).encode()) is not None
        )
        == webauth.AUTH_CACHE
    )


def test_an_unknown_user_costs_as_long_as_a_known_one() -> None:
    users = {"alice": webauth.hash_password(PASSWORD, 10).encode()}

    def median_s(user: str) -> float:
        times = []
        for i in range(5):
            began = time.perf_counter()
            assert not webauth.Auth().check(users, user, f"wrong {i}".encode())
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    known, unknown = median_s("alice"), median_s("nobody")
    assert 0.5 < unknown / known < 2.0, (known, unknown)


def test_a_flood_of_wrong_passwords_evicts_no_good_verdict() -> None:
    users = {"alice": HASH.encode()}
    calls: list[bytes] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return password == PASSWORD

    auth = webauth.Auth(checkpw)
    assert auth.check(users, "alice", PASSWORD)
    for i in range(3 * webauth.AUTH_CACHE):
        assert not auth.check(users, "alice", f"wrong {i}".encode())
    assert auth.cached(users, "alice", PASSWORD) is True  # no bcrypt for the scraper
    changed = {"alice": webauth.hash_password(b"new", 4).encode()}
    assert auth.cached(changed, "alice", PASSWORD) is None  # (a new hash: checked again)

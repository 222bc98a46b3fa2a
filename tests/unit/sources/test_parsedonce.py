"""The known_hosts and client keys of a fleet, each parsed once per content and shared."""

from __future__ import annotations

import threading
from pathlib import Path

import asyncssh
import pytest

from exporter.sources import sshconnect
from exporter.sources.base import SourceError
from exporter.sources.parsedonce import Parsed
from exporter.sources.ssh import SshNode


def test_one_parse_per_content_and_again_when_it_changes() -> None:
    cache: Parsed[list[bytes]] = Parsed()
    calls: list[bytes] = []

    def parse(data: bytes) -> list[bytes]:
        calls.append(data)
        return data.split()

    first = cache.get(b"a b", lambda: parse(b"a b"))
    assert cache.get(b"a b", lambda: parse(b"a b")) is first
    assert cache.get(b"a b c", lambda: parse(b"a b c")) == [b"a", b"b", b"c"]
    assert calls == [b"a b", b"a b c"] and cache.parses == 2


def test_a_salt_keeps_apart_what_the_same_content_makes() -> None:
    cache: Parsed[str] = Parsed()
    assert cache.get(b"key", lambda: "one", b"p1") == "one"
    assert cache.get(b"key", lambda: "two", b"p2") == "two"
    assert cache.get(b"key", lambda: "three") == "three"
    assert cache.get(b"key", lambda: "four", b"p1") == "one"


def test_what_fails_to_parse_is_not_kept() -> None:
    cache: Parsed[int] = Parsed()

    def bad() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError):
        cache.get(b"x", bad)
    assert cache.get(b"x", lambda: 5) == 5


def test_the_least_recently_used_goes_first() -> None:
    cache: Parsed[int] = Parsed(size=2)
    cache.get(b"a", lambda: 1)
    cache.get(b"b", lambda: 2)
    cache.get(b"a", lambda: 0)  # (a used again: b is the oldest)
    cache.get(b"c", lambda: 3)
    assert cache.get(b"a", lambda: 9) == 1
    assert cache.get(b"b", lambda: 9) == 9  # (parsed again)


def test_many_threads_at_once_parse_it_once() -> None:
    cache: Parsed[object] = Parsed()
    got: list[object] = []
    start = threading.Barrier(16)

    def one() -> None:
        start.wait()
        got.append(cache.get(b"shared", object))

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.parses == 1 and len({id(v) for v in got}) == 1


def test_every_node_of_one_known_hosts_file_shares_one_parsed_copy(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    line = key.export_public_key().decode().strip()
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"node{i} {line}\n" for i in range(200)))
    nodes = [SshNode(f"n{i}", f"node{i}", "sm-llm.service", known_hosts=path) for i in range(50)]
    before = sshconnect.KNOWN_HOSTS.parses
    loaded = [sshconnect.load_known_hosts(n) for n in nodes]
    assert len({id(k) for k in loaded}) == 1
    assert sshconnect.KNOWN_HOSTS.parses == before + 1
    path.write_text(f"node0 {line}\n")  # (an edited file: read anew)
    assert sshconnect.load_known_hosts(nodes[0]) is not loaded[0]


def test_every_node_of_one_encrypted_key_shares_one_decryption(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / "id"
    path.write_bytes(key.export_private_key(passphrase="secret"))
    phrase = tmp_path / "phrase"
    phrase.write_text("secret\n")
    nodes = [
        SshNode(f"n{i}", "h", "u.service", client_keys=(path,), passphrase_file=phrase)
        for i in range(20)
    ]
    before = sshconnect.CLIENT_KEYS.parses
    keys = [sshconnect.load_client_keys(n, {})[0] for n in nodes]
    assert len({id(k) for k in keys}) == 1 and sshconnect.CLIENT_KEYS.parses == before + 1
    wrong = tmp_path / "wrong"
    wrong.write_text("not it\n")
    other = SshNode("x", "h", "u.service", client_keys=(path,), passphrase_file=wrong)
    with pytest.raises(SourceError, match="passphrase given does not open it"):
        sshconnect.load_client_keys(other, {})

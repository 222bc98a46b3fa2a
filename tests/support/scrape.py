"""Reading what a daemon serves: one HTTP GET, one scrape, the samples in it, and a watcher.

- `http_get`: status, body and headers of one GET (an HTTP error status is an answer, not an
  exception); `answer` the same, or None when nothing answers (a daemon down or killed
  mid-answer).
- `scrape`: /metrics as Prometheus fetches it (gzip accepted), timed to the end of the body;
  its `samples` are parsed only when asked for (a scrape loop times, not parses).
- `parse_metrics` -> `Samples` ({(sample name, sorted labels): value}); `sample`, `value` (served
  or the test fails) and `total` (summed over series) read them.
- `Watch`: scrapes over and over in a thread, as a very eager Prometheus, across daemon
  restarts; every counter (histograms' buckets, counts and sums included) and the gauges that
  must not go back (the watermark, each node's last request end) must never be served lower
  than before. Scrapes are checked in the order they were answered: the test's own go through
  `checked`, one at a time with the thread's.
"""

from __future__ import annotations

import gzip
import http.client
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from prometheus_client.parser import text_string_to_metric_families

from support.tools import wait_for

Key = tuple[str, tuple[tuple[str, str], ...]]
Samples = dict[Key, float]


def http_get(
    url: str, headers: dict[str, str] | None = None, timeout: float = 5
) -> tuple[int, bytes, dict[str, str]]:
    """Status, body and headers; OSError when nothing answers."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def answer(url: str, timeout: float = 5) -> tuple[int, bytes] | None:
    """Status and body, or None when nothing answers (down, or killed in mid-answer)."""
    try:
        status, body, _ = http_get(url, timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None
    return status, body


def parse_metrics(text: str) -> Samples:
    """Exposition text -> {(sample name, sorted labels): value}."""
    return never_back(text)[0]


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample, which must be served."""
    v = sample(samples, name, **labels)
    assert v is not None, f"{name}{labels} is not served"
    return v


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name` over every series whose labels include `labels`."""
    return sum(
        v
        for (n, lbl), v in samples.items()
        if n == name and all(dict(lbl).get(k) == x for k, x in labels.items())
    )


@dataclass(frozen=True)
class Scrape:
    """One scrape of /metrics: its text, and the seconds from the request to the body's end."""

    text: str
    seconds: float

    @cached_property
    def samples(self) -> Samples:
        return parse_metrics(self.text)


def scrape(url: str, timeout: float = 10) -> Scrape:
    """GET `url` as Prometheus does (gzip accepted); it must answer 200."""
    began = time.perf_counter()
    status, body, headers = http_get(url, {"Accept-Encoding": "gzip"}, timeout)
    seconds = time.perf_counter() - began
    assert status == 200, f"{url}: {status} {body[:200]!r}"
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return Scrape(body.decode(), seconds)


# Gauges that must never go back either: the watermark, and each node's newest request end.
NEVER_BACK_GAUGES = frozenset(
    {"smllm_accounted_until_timestamp_seconds", "smllm_node_last_request_end_timestamp_seconds"}
)


def never_back(text: str) -> tuple[Samples, Samples]:
    """Every sample, and those that must never be served lower than before: the exporter's
    counters and histograms, and NEVER_BACK_GAUGES (the process_* counters start again with the
    process)."""
    every: Samples = {}
    kept: Samples = {}
    for fam in text_string_to_metric_families(text):
        keep = fam.name.startswith("smllm_") and (
            fam.type in ("counter", "histogram") or fam.name in NEVER_BACK_GAUGES
        )
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            every[key] = s.value
            if keep:
                kept[key] = s.value
    return every, kept


class Watch:
    """Scrapes `url()` + /metrics every `every` seconds in a thread while `url()` names a daemon
    (None: it is down), checking each scrape; `run()` names the daemon's run in the messages. As
    a context manager it starts and stops the thread, then asserts that it scraped, raised
    nothing and saw nothing go back."""

    def __init__(
        self,
        url: Callable[[], str | None],
        every: float = 0.03,
        run: Callable[[], int] = lambda: 0,
    ) -> None:
        self.url = url
        self.every = every
        self.run = run
        self.highest: Samples = {}
        self.violations: list[str] = []
        self.errors: list[BaseException] = []  # raised in the thread
        self.runs_seen: set[int] = set()
        self.scrapes = 0
        self.last: Samples = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()
        # a scrape and its check, one at a time: a scrape answered earlier (older values) but
        # checked after one answered later would read as values going back
        self._order = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="watch", daemon=True)

    def checked(self, fetch: Callable[[], str], run: int | None = None) -> Samples:
        """A scrape the test makes itself (`fetch` returns its text), checked in turn with the
        thread's: never between one of theirs and its check. Its samples."""
        with self._order:
            return self.check(fetch(), run)

    def check(self, text: str, run: int | None = None) -> Samples:
        """One scrape's text; its samples. A test's own scrape while the thread runs goes
        through `checked` (a text scraped outside it may be checked out of order)."""
        run = self.run() if run is None else run
        samples, kept = never_back(text)
        with self._lock:
            for key, v in kept.items():
                before = self.highest.get(key)
                if before is not None and v < before:
                    self.violations.append(f"run {run}: {key} went from {before} to {v}")
                else:
                    self.highest[key] = v
            self.runs_seen.add(run)
            self.last = samples
            self.scrapes += 1
        return samples

    def fresh(self, timeout: float = 10) -> Samples:
        """The samples of a scrape that started after this call."""
        n = self.scrapes
        wait_for(lambda: self.scrapes >= n + 2, timeout, "two more scrapes")
        return self.last

    def stop(self) -> None:
        """No scrape starts after this returns (idempotent)."""
        self._halt.set()
        if self._thread.ident is not None:
            self._thread.join(10)
            assert not self._thread.is_alive(), "the watch did not stop"

    def _loop(self) -> None:
        try:
            while not self._halt.is_set():
                with self._order:
                    url, run = self.url(), self.run()
                    got = answer(url + "/metrics") if url is not None else None
                    if got is not None and got[0] == 200:
                        self.check(got[1].decode(), run)
                self._halt.wait(self.every)
        except BaseException as e:  # seen by the test, not lost in a thread
            self.errors.append(e)
            raise

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if exc[0] is None:
            self.assert_fine()

    def assert_fine(self) -> None:
        assert not self.errors, self.errors
        assert self.scrapes > 0, "never scraped"
        assert not self.violations, "\n".join(self.violations[:20])

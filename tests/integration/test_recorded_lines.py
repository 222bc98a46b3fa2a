"""The independent reader of the recorded runs (tests/support/recorded.py) held to what the real
llama-server answered: draft tokens, sleeps and the reload that ends one, live decode lines and
the router's queue lines."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

import pytest

from support.recorded import (
    Occupancy,
    entries,
    gen_lines,
    occupancies,
    queue_lines,
    results,
    sleeps,
)


def timed_requests(run: str) -> list[dict[str, Any]]:
    return [r for r in results(run) if r["outcome"] == "timed"]


def occupancy_of(run: str, request: dict[str, Any]) -> Occupancy:
    """The one timed occupancy whose timing block has the request's own token counts, launched
    after the request was sent. (Its end may be stamped after the client had the answer: the
    recorder stamps a line when its reader thread reads it.)"""
    timings = request["timings"]
    found = [
        occ
        for occ in occupancies(run)
        if occ.prompt is not None
        and occ.generated is not None
        and occ.end_us is not None
        and occ.prompt[0] == timings["prompt_n"]
        and occ.generated[0] == timings["predicted_n"]
        and request["sent_us"] <= occ.launch_us
    ]
    assert len(found) == 1, (run, request["step"], found)
    return found[0]


def message_times(run: str, pattern: str) -> list[int]:
    rx = re.compile(pattern)
    return [
        int(e["__REALTIME_TIMESTAMP"])
        for e in entries(run)
        if e["_PID"] != "1" and rx.search(e["MESSAGE"])
    ]


def test_each_speculative_requests_draft_tokens_are_the_servers_own() -> None:
    requests = timed_requests("speculative")
    assert len(requests) == 2
    for request in requests:
        timings = request["timings"]
        draft = occupancy_of("speculative", request).draft
        assert draft == (timings["draft_n_accepted"], timings["draft_n"]), request["step"]
    timed = [occ for occ in occupancies("speculative") if occ.total_us is not None]
    assert all(occ.draft is not None for occ in timed)
    # a run without a draft model has no draft line
    assert all(occ.draft is None for occ in occupancies("parallel"))


def test_the_server_sleeps_wakes_for_a_request_after_a_reload_and_sleeps_again() -> None:
    (first_in, first_out), (second_in, second_out) = sleeps("sleep")
    assert first_out is not None
    assert second_out is None  # stopped while asleep
    wake = next(r for r in results("sleep") if r["step"] == "wake")
    # the request was sent to a sleeping server, and woke it
    assert first_in < wake["sent_us"] <= first_out
    launch = occupancy_of("sleep", wake).launch_us
    (loading,) = [t for t in message_times("sleep", r"load_model: loading model ") if t > first_in]
    (init,) = [t for t in message_times("sleep", r"initializing, n_slots = \d+") if t > first_in]
    assert first_out <= loading <= init <= launch
    # it fell asleep again only after answering
    assert wake["done_us"] < second_in
    # the task queue's own line comes with each of the server's (the oracle reads the latter)
    assert len(message_times("sleep", r"I que +\w+: entering sleeping state$")) == 2
    assert len(message_times("sleep", r"I que +\w+: exiting sleeping state$")) == 1


def test_the_live_decode_lines_count_up_to_the_requests_generated_tokens() -> None:
    (request,) = timed_requests("long_generation")
    occ = occupancy_of("long_generation", request)
    lines = gen_lines("long_generation")
    assert len(lines) >= 2
    counts = [line.n_gen for line in lines]
    assert counts == sorted(set(counts))
    assert counts[-1] <= request["timings"]["predicted_n"]
    assert counts[0] >= 100  # the server logs none before its 100th token
    # tg_3s is the server's rate since its previous line: the counts and the journal's times
    # give it back (the recorder's stamps are within milliseconds of the server's clock)
    for before, after in pairwise(lines):
        rate = (after.n_gen - before.n_gen) / ((after.time_us - before.time_us) / 1e6)
        assert rate == pytest.approx(after.tg_3s, rel=0.02), after
    _model, pid, slot, task = occ.key
    assert occ.end_us is not None
    for line in lines:
        assert (line.pid, line.slot, line.task) == (pid, slot, task)
        assert occ.launch_us < line.time_us < occ.end_us
        assert line.tg > 0
        assert line.tg_3s > 0


def test_every_queued_model_is_one_the_client_asked_for() -> None:
    asked = {r["request"]["model"] for r in results("router_queue") if "request" in r}
    lines = queue_lines("router_queue")
    assert {line.model for line in lines} <= asked
    kinds = {line.kind for line in lines}
    assert kinds == {"queued", "joined", "waiting", "loading"}
    queued = [line for line in lines if line.kind == "queued"]
    assert max(line.position or 0 for line in queued) >= 2
    assert all(line.position is None for line in lines if line.kind != "queued")
    # each queued model is loaded once its turn comes
    for line in queued:
        assert any(
            other.kind == "loading" and other.model == line.model and other.time_us >= line.time_us
            for other in lines
        ), line
    # the other models queued while tiny-a's long request held the one instance allowed
    busy = next(r for r in results("router_queue") if r["step"] == "busy_a")
    occ = occupancy_of("router_queue", busy)
    assert occ.key[0] == "tiny-a"
    assert occ.end_us is not None
    others = [line for line in queued if line.model != "tiny-a"]
    assert others
    assert all(occ.launch_us < line.time_us < occ.end_us for line in others)

"""A llama-server's journal entries, generated: the real workload and the mixed one.

The real one: era D, slots serving at once. The mixed one: one request at a time, two thirds of
the lines without a parser keyword.

Deterministic for a given `random.Random`, endless, in journal order (strictly increasing
times). An `Entry` of a `total time` line carries the request's duration and tokens, so a
benchmark knows what every tool must count. bench/ingest.py describes both workloads; the
journal files and dumps made of them are `_dumps`'.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass

from exporter.base.times import SECOND

NODE = "node0"
UNIT = "sm-llm.service"
PID = 4242
SYSTEMD_PID = 1  # systemd's own line about the unit
EPOCH_US = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
SLOTS = 3  # the real workload's llama-server slots
LATENCY_US = 25  # from llama-server's elapsed stamp to journald's receipt
MIXED_LINES_PER_REQUEST = 15
STARTED = f"Started {UNIT} - llama.cpp server (sm-llm)."

# llama-server's start-up lines (no keyword), after systemd's `Started` line.
HEADER = (
    "build: 6412 (3c1f9a27) with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu",
    "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32",
    "main: binding port with default address family",
    "main: HTTP server is listening, hostname: 0.0.0.0, port: 8080, http threads: 31",
    "main: loading model",
    "srv    load_model: loading model '/srv/models/qwen3-30b-a3b-q4_k_m.gguf'",
    "llama_model_loader: loaded meta data with 35 key-value pairs and 579 tensors from "
    "/srv/models/qwen3-30b-a3b-q4_k_m.gguf (version GGUF V3 (latest))",
    "load_tensors: offloaded 49/49 layers to GPU",
    "llama_context: n_ctx = 98304, n_batch = 2048, n_ubatch = 512, flash_attn = auto",
    f"srv    load_model: initializing slots, n_slots = {SLOTS}",
    "main: model loaded",
    "main: server is listening on http://0.0.0.0:8080 - starting the main loop",
    "srv  update_slots: all slots are idle",
)
POLLS = (
    "GET /health 10.0.0.2 200",
    "GET /health 10.0.0.3 200",
    "GET /v1/models 10.0.0.7 200",
    "GET /metrics 10.0.0.9 200",
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One journal entry: its time, PID (SYSTEMD_PID: systemd's own line about the unit), MESSAGE,
    and on a `total time` line the request's duration (hundredths of a millisecond) and tokens."""

    time_us: int
    pid: int
    message: str
    request: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request's figures, drawn as the seed's workload has them."""

    duration_cs: int  # hundredths of a millisecond, as logged
    prompt_cs: int
    eval_cs: int
    prompt: int
    generated: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.generated


def draw(rng: random.Random) -> Request:
    if rng.random() < 0.3:  # extraction: a long prompt, many tokens, 20-60 s
        tokens, duration_cs = rng.randint(600, 1000), rng.randint(2_000_000, 6_000_000)
    else:  # reconcile: 2-15 s
        tokens, duration_cs = rng.randint(40, 599), rng.randint(200_000, 1_500_000)
    generated = rng.randint(8, min(200, tokens // 2))
    prompt_cs = round(duration_cs * rng.uniform(0.03, 0.2))
    eval_cs = max(0, duration_cs - prompt_cs - rng.randint(0, 3000))
    return Request(duration_cs, prompt_cs, eval_cs, tokens - generated, generated)


def _ms(cs: int) -> str:
    """Hundredths of a millisecond as `%10.2f` prints them: `  47390.06`."""
    return f"{cs // 100}.{cs % 100:02d}".rjust(10)


def timing_block(slot: str, r: Request) -> tuple[str, str, str, str]:
    """Era D's block as `print_timings` writes it (`slot` is `id  0 | task 22576 |`)."""
    per_p = r.prompt_cs / 100 / r.prompt
    per_e = r.eval_cs / 100 / r.generated
    return (
        f"slot print_timing: {slot} prompt eval time = {_ms(r.prompt_cs)} ms / "
        f"{r.prompt:5d} tokens ({per_p:8.2f} ms per token, {1e3 / per_p:8.2f} tokens per second)",
        f"slot print_timing: {slot}        eval time = {_ms(r.eval_cs)} ms / "
        f"{r.generated:5d} tokens ({per_e:8.2f} ms per token, "
        f"{1e3 / per_e if per_e else 0.0:8.2f} tokens per second)",
        f"slot print_timing: {slot}       total time = {_ms(r.duration_cs)} ms / "
        f"{r.tokens:5d} tokens",
        f"slot print_timing: {slot}    graphs reused = {max(0, r.generated - 1):10d}",
    )


def elapsed(us: int) -> str:
    """common/log.cpp's prefix for `us` since the server started, level I: `50.10.605.993 I `."""
    return f"{us // 60_000_000}.{us // SECOND % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} I "


def real_workload(rng: random.Random) -> Iterator[Entry]:
    """A current llama-server's journal with SLOTS slots busy at once, endless, in time order."""
    t = EPOCH_US
    yield Entry(t, SYSTEMD_PID, STARTED)
    server_start = t + 4_000
    t = server_start + 2_000
    for text in HEADER:
        yield Entry(t, PID, elapsed(t - server_start - LATENCY_US) + text)
        t += rng.randint(1_000, 400_000)
    # Lines waiting for their time: (time, order, message, request); each slot's next launch.
    pending: list[tuple[int, int, str, tuple[int, int] | None]] = []
    launches = [(t + rng.randint(0, 2 * SECOND), slot) for slot in range(SLOTS)]
    heapq.heapify(launches)
    order = 0
    task = rng.randrange(1, 500)
    active = 0
    while True:
        launch, slot = heapq.heappop(launches)
        r = draw(rng)
        end = launch - rng.randint(50, 900) + r.duration_cs * 10  # launch logged after start
        ids = f"id {slot:2d} | task {task} |"
        task += rng.randint(1, 3)
        block = timing_block(ids, r)
        lines = [
            (launch, f"slot launch_slot_: {ids} processing task, is_child = 0", None),
            (end - 3, block[0], None),
            (end - 2, block[1], None),
            (end, block[2], (r.duration_cs, r.tokens)),
            (end + 1, block[3], None),
            (
                end + 40,
                f"slot      release: {ids} stop processing: n_tokens = {r.tokens}, truncated = 0",
                None,
            ),
        ]
        for at, message, request in lines:
            heapq.heappush(pending, (at, order, message, request))
            order += 1
        if rng.random() < 0.01:  # the pipeline waits: idle minutes on this slot
            gap = rng.uniform(60.0, 600.0)
        else:
            gap = 0.002 + min(rng.expovariate(1 / 1.5), 30.0)
        heapq.heappush(launches, (end + 40 + round(gap * SECOND), slot))
        horizon = launches[0][0]  # nothing later generated starts before this
        while pending and pending[0][0] < horizon:
            at, _, message, request = heapq.heappop(pending)
            stamp = elapsed(at - server_start - LATENCY_US)  # printed, then received
            t = max(t + 1, at)
            yield Entry(t, PID, stamp + message, request)
            if "launch_slot_" in message:
                active += 1
            elif "stop processing" in message:
                active -= 1
                if not active:
                    t += 30
                    stamp = elapsed(t - server_start - LATENCY_US)
                    yield Entry(t, PID, stamp + "srv  update_slots: all slots are idle")


def _mixed_request(
    rng: random.Random, t: int, task: int
) -> tuple[list[tuple[int, str, tuple[int, int] | None]], int]:
    """One request's 15 lines from time `t` on, in time order, and the time of the last."""
    r = draw(rng)
    launch = t + rng.randint(100, 900)
    end = launch + r.duration_cs * 10
    slot = f"id  0 | task {task} |"
    out: list[tuple[int, str, tuple[int, int] | None]] = [
        (t, "srv  params_from_: Chat format: Hermes 2 Pro", None),
        (launch, f"slot launch_slot_: {slot} processing task", None),
    ]
    progress = rng.choice((0, 1, 1, 2))
    done = 0
    for i in range(progress):
        batch = r.prompt // 2 if i < progress - 1 else r.prompt - done  # n_batch: half of it
        done += batch
        out.append(
            (
                launch + (i + 1) * r.prompt_cs * 10 // (progress + 1),
                f"slot update_slots: {slot} prompt processing progress, n_tokens = {done}, "
                f"batch.n_tokens = {batch}, progress = {done / r.prompt:.6f}",
                None,
            )
        )
    out.extend(
        (rng.randint(launch, end - 100), f"srv  log_server_r: request: {rng.choice(POLLS)}", None)
        for _ in range(7 - progress)
    )
    prompt_eval, eval_, total, _ = timing_block(slot, r)
    out += [
        (end - 40, prompt_eval, None),
        (end - 20, eval_, None),
        (end, total, (r.duration_cs, r.tokens)),
        (
            end + 30,
            f"slot      release: {slot} stop processing: n_tokens = {r.tokens}, truncated = 0",
            None,
        ),
        (end + 60, "srv  update_slots: all slots are idle", None),
        (
            end + rng.randint(200, 900),
            "srv  log_server_r: request: POST /v1/chat/completions 10.0.0.5 200",
            None,
        ),
    ]
    assert len(out) == MIXED_LINES_PER_REQUEST
    out.sort(key=lambda p: p[0])
    return out, out[-1][0]


def mixed_workload(rng: random.Random) -> Iterator[Entry]:
    """The mixed workload: requests one at a time, two thirds of the lines without a keyword."""
    t = EPOCH_US
    yield Entry(t, SYSTEMD_PID, STARTED)
    for text in HEADER:
        t += rng.randint(1_000, 400_000)
        yield Entry(t, PID, text)
    task = rng.randrange(1, 500)
    prev = t
    while True:
        out, end = _mixed_request(rng, t, task)
        for at, message, request in out:
            prev = max(prev + 1, at)
            yield Entry(prev, PID, message, request)
        task += rng.randint(1, 3)
        if rng.random() < 0.01:
            gap = rng.uniform(60.0, 600.0)
        else:
            gap = 0.001 + min(rng.expovariate(1 / 1.5), 30.0)
        t = end + round(gap * SECOND)

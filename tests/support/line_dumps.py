"""Line-layer tests' shared parts: a workload's lines as journalctl's JSON."""

from __future__ import annotations

import json

from exporter.base.times import SECOND

from support.dumps import LAUNCH, RELEASE, T0, TOTAL, short


def as_json(t_us: int, msg: str, seq: int, pid: int = 4242) -> bytes:
    return json.dumps(
        {
            "__CURSOR": f"s=ab;i={seq:x};t={t_us:x}",
            "__REALTIME_TIMESTAMP": str(t_us),
            "_PID": str(pid),
            "MESSAGE": msg,
        }
    ).encode()


def workload(requests: int, form: str = "short", garbage: bool = False) -> bytes:
    """Requests on two slots, interleaved; with `garbage`, lines that are no journal lines
    (with and without a keyword) and garbled timing lines between them."""
    out: list[bytes] = []
    seq = 0

    def add(t: int, msg: str) -> None:
        nonlocal seq
        seq += 1
        out.append(short(t, msg) if form == "short" else as_json(t, msg, seq))

    for i in range(requests):
        t, s = T0 + i * 3 * SECOND, i % 2
        add(t, LAUNCH.format(s=s, t=i))
        if garbage and i % 3 == 0:
            out.append(b"no journal line at all")
            out.append(b"no journal line, but total time in it")
            add(t + 1, TOTAL.format(s=s, t=i, ms=1.0, n="x7"))  # garbled: a parse error
        add(t + 2_500_000, TOTAL.format(s=s, t=i, ms=2500.0, n=500 + i))
        add(t + 2_500_100, RELEASE.format(s=s, t=i, n=500 + i))
    return b"\n".join(out) + b"\n"

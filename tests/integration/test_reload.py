"""SIGHUP re-reads the config: nodes added and removed, settings taken up, every unchanged
node's source left running and its counters continuous; a config that does not validate is
refused and the old one stays in force.

The daemon runs as its own process; a writer appends requests to its nodes' dumps the whole
time and a scraper checks every scrape (tests/support/scrape.py's Watch: no counter ever goes
down); after 20 reloads every request written was counted exactly once."""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from exporter.commands.demo import DemoLine, short_iso

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import Watch, answer, parse_metrics, sample
from support.tools import free_port, now_us, wait_for

SECOND = 1_000_000
RELOADS = 20


def request_lines(task: int, end_us: int) -> list[DemoLine]:
    """One era D request on slot 0 ending at `end_us`, 2 ms long (the writer's next comes 5 ms
    later: one at a time, as a slot serves them): launch, timing block, release."""
    p = f"slot print_timing: id  0 | task {task} | "
    launch = f"slot launch_slot_: id  0 | task {task} | processing task"
    release = f"slot      release: id  0 | task {task} | stop processing: n_tokens = 110"
    return [
        DemoLine(end_us - 3_000, 4242, launch),
        DemoLine(end_us, 4242, p + "prompt eval time =       0.50 ms /   100 tokens"),
        DemoLine(end_us, 4242, p + "       eval time =       1.50 ms /    10 tokens"),
        DemoLine(end_us, 4242, p + "      total time =       2.00 ms /   110 tokens"),
        DemoLine(end_us + 10, 4242, release),
    ]


class Writer:
    """Appends a request to each node's dump every few milliseconds until stopped."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.written = dict.fromkeys(paths, 0)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        task = 0
        while not self._halt.wait(0.005):
            task += 1
            for node, path in self.paths.items():
                with path.open("a") as f:
                    f.writelines(short_iso(node, ln) + "\n" for ln in request_lines(task, now_us()))
                self.written[node] += 1

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(10)


def settings(paths: dict[str, Path], state: Path, **extra: Any) -> dict[str, Any]:
    return {
        "state_dir": str(state),
        "since": "-1m",
        "max_request_seconds": 5,
        "nodes": file_nodes(paths),
        **extra,
    }


def reloaded(d: DaemonProcess, count: int) -> bool:
    text = d.log_text()
    return text.count("reload: ") + text.count("reload refused") >= count


def test_twenty_reloads_under_a_scraper_lose_nothing_and_count_nothing_twice(
    tmp_path: Path,
) -> None:
    paths = {n: tmp_path / f"{n}.log" for n in ("a", "b", "c", "d")}
    for p in paths.values():
        p.write_text("")
    base = {n: paths[n] for n in ("a", "b", "c")}
    link = tmp_path / "c-link.log"
    link.symlink_to(paths["c"])
    d = DaemonProcess(tmp_path / "daemon", settings(base, tmp_path / "state"))
    d.start()
    port = d.port

    def write_config(cfg: dict[str, Any] | str) -> None:
        text = cfg if isinstance(cfg, str) else json.dumps({**cfg, "listen": f"127.0.0.1:{port}"})
        d.config.write_text(text)

    seen = 0
    with Writer(paths) as writer, Watch(lambda: d.url) as watch:
        for i in range(1, RELOADS + 1):
            nodes = dict(base)
            if 8 <= i < 15:  # d added at the 8th, removed at the 15th
                nodes["d"] = paths["d"]
            if i % 4 == 1:  # c changed (the same file by a link): its source starts again
                nodes["c"] = link
            extra = {"http_max_connections": 64 + i % 2, "slots": 4 + i % 3}
            if i == 12:  # a config that does not validate: refused, the old one stays
                write_config("nodes: [{name: a, source: nope}]\nlisten: 5\n")
            else:
                write_config(settings(nodes, tmp_path / "state", **extra))
            before = d.log_text().count("reload")
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)

            def taken_up(before: int = before) -> bool:
                return d.log_text().count("reload") > before

            wait_for(taken_up, 20, f"reload {i}")
            wait_for(lambda: answer(d.url + "/-/ready"), 10, "ready after the reload")
            seen += 1
        assert seen == RELOADS
    log = d.log_text()
    assert "reload: node d added (file)" in log
    assert "reload: node d removed: its counters are dropped" in log
    assert "reload refused, the config in force stays" in log and "nodes[0].source" in log
    assert "reload: slots changed" in log and "reload: http_max_connections changed" in log
    assert log.count("reload: node c changed: its source starts again") == 10
    assert watch.scrapes > RELOADS and not watch.errors
    assert not watch.violations, watch.violations[:5]

    # every request written to a node present throughout counted exactly once
    def settled() -> dict[Any, float] | None:
        samples = parse_metrics(answer(d.url + "/metrics")[1].decode())  # type: ignore[index]
        for node in ("a", "b", "c"):
            got = sum(
                v
                for (name, labels), v in samples.items()
                if name == "smllm_requests_total" and dict(labels)["node"] == node
            )
            if got != writer.written[node]:
                return None
        return samples

    samples = wait_for(settled, 30, "every request written counted")
    assert sample(samples, "smllm_late_intervals_total", node="a") == 0
    assert sample(samples, "smllm_source_reconnects_total", node="a") == 0  # never restarted
    assert sample(samples, "smllm_node_busy_seconds_total", node="d") is None  # (removed)
    assert "Traceback" not in d.stop()


def one_node_daemon(tmp_path: Path) -> tuple[DaemonProcess, Path]:
    """A running daemon with one file node, and the node's dump."""
    dump = tmp_path / "a.log"
    dump.write_text("")
    d = DaemonProcess(tmp_path / "daemon", settings({"a": dump}, tmp_path / "state"))
    d.start()
    return d, dump


def reload_with(d: DaemonProcess, dump: Path, state: Path, port: int) -> None:
    """Write a config of the one node with `state` and `port`, and SIGHUP the daemon."""
    d.config.write_text(json.dumps({**settings({"a": dump}, state), "listen": f"127.0.0.1:{port}"}))
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)


def test_a_reload_that_moves_the_state_dir_is_refused(tmp_path: Path) -> None:
    d, dump = one_node_daemon(tmp_path)
    reload_with(d, dump, tmp_path / "other", d.port)
    wait_for(lambda: "reload refused: state_dir changed" in d.log_text(), 20, "the refusal")
    got = answer(d.url + "/-/ready")  # (still serving, on the old config)
    assert got is not None and got[0] == 200
    d.stop()


def test_a_reload_serves_on_a_new_listen_address(tmp_path: Path) -> None:
    d, dump = one_node_daemon(tmp_path)
    new_port = free_port()
    reload_with(d, dump, tmp_path / "state", new_port)
    got = wait_for(lambda: answer(f"http://127.0.0.1:{new_port}/-/healthy"), 20, "the new port")
    assert got[0] == 200
    assert "reload: listen_port changed" in d.log_text()
    d.port = new_port
    d.stop()


def test_a_reload_onto_a_taken_port_keeps_serving_the_old_one(tmp_path: Path) -> None:
    d, dump = one_node_daemon(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        reload_with(d, dump, tmp_path / "state", port)
        wait_for(lambda: "reload: serving on 127.0.0.1" in d.log_text(), 20, "the fallback")
    got = answer(d.url + "/-/ready")  # (the old port, still served)
    assert got is not None and got[0] == 200
    assert f"reload: cannot serve on 127.0.0.1:{port}" in d.log_text()
    assert "Traceback" not in d.stop()

#!/usr/bin/env python3
"""Record golden fixtures of a REAL llama-server (see README.md).

usage: python record.py BINARY [--out DIR] [--only RUN,RUN...]

Needs only the stdlib plus the `gguf` and `numpy` packages (for writing the
tiny random-weight models).  For every run NAME it writes into DIR:
  NAME.journal.json   one `journalctl -o json`-shaped object per line
  NAME.results.json   one object per HTTP request the client made
  NAME.cmdline.txt    the exact argv of each server process of the run
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

HOST = "127.0.0.1"
UNIT = "sm-llm.service"
DESC = "sm-llm llama-server"
BOOT_ID = "0f15ca11ab1e4d0c8e5c0ffee0000015"  # fixed, synthetic
MACHINE_ID = "7dd212bd438b42399420ab857851c10e"  # as in the earlier nspawn capture

# MESSAGE_IDs systemd 252 attaches to these unit messages (first four seen in
# the earlier runF verbose capture; the last two are SD_MESSAGE_UNIT_PROCESS_EXIT
# and SD_MESSAGE_UNIT_FAILURE_RESULT from systemd's sd-messages.h)
MID_STARTED = "39f53479d3a045ac8e11786248231fbf"
MID_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
MID_SUCCESS = "7ad2d189f7e94e70a38c781354912448"
MID_STOPPED = "9d1aaa27d60140bd96365438aad20286"
MID_PROC_EXIT = "98e322203f7a4ed290d09fe03c09fe15"
MID_FAIL_RESULT = "d9b373ed55a64feb8242e02dbe79a49c"


def now_us():
    return time.time_ns() // 1000


# --------------------------------------------------------------------------
# tiny models
# --------------------------------------------------------------------------


def write_model(path, seed, n_layer=2, n_embd=64, n_head=4, n_ff=128, n_ctx=2048, name="tiny"):
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(0)  # all F32
    # byte vocabulary: <unk> <s> </s> + 256 <0xNN> BYTE tokens
    toks = [b"<unk>", b"<s>", b"</s>"] + [(f"<0x{i:02X}>").encode() for i in range(256)]
    types = [
        int(gguf.TokenType.UNKNOWN),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
    ] + [int(gguf.TokenType.BYTE)] * 256
    n_vocab = len(toks)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def f(*shape):  # numpy shape is ggml's ne reversed
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w.add_tensor("token_embd.weight", f(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    out = f(n_vocab, n_embd)
    out[0:3] = 0.0  # unk/bos/eos get logit 0: rarely the argmax
    w.add_tensor("output.weight", out)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + t + ".weight", f(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "ffn_gate.weight", f(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", f(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", f(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --------------------------------------------------------------------------
# journal + server processes
# --------------------------------------------------------------------------


class Journal:
    def __init__(self, name):
        self.name = name
        self.entries = []
        self.lock = threading.Lock()
        self.i = 0

    def add(self, ts_us, fields):
        with self.lock:
            self.i += 1
            e = {
                "__CURSOR": f"s=rec15;i={self.i:x}",
                "__REALTIME_TIMESTAMP": str(ts_us),
                "__MONOTONIC_TIMESTAMP": str(time.monotonic_ns() // 1000),
                "_BOOT_ID": BOOT_ID,
                "_MACHINE_ID": MACHINE_ID,
                "_HOSTNAME": "vm",
            }
            e.update(fields)
            self.entries.append(e)

    def systemd(self, msg, mid, invocation, extra=None):
        f = {
            "PRIORITY": "6",
            "SYSLOG_FACILITY": "3",
            "_TRANSPORT": "journal",
            "_PID": "1",
            "_COMM": "systemd",
            "SYSLOG_IDENTIFIER": "systemd",
            "_SYSTEMD_UNIT": "init.scope",
            "UNIT": UNIT,
            "MESSAGE_ID": mid,
            "INVOCATION_ID": invocation,
            "MESSAGE": msg,
        }
        if extra:
            f.update(extra)
        self.add(now_us(), f)

    def server_line(self, ts, pid, invocation, msg):
        self.add(
            ts,
            {
                "PRIORITY": "6",
                "SYSLOG_FACILITY": "3",
                "_TRANSPORT": "stdout",
                "_PID": str(pid),
                "_COMM": "llama-server",
                "SYSLOG_IDENTIFIER": "llama-server",
                "_SYSTEMD_UNIT": UNIT,
                "_SYSTEMD_INVOCATION_ID": invocation,
                "MESSAGE": msg,
            },
        )

    def write(self, path):
        with open(path, "w") as fh:
            for e in self.entries:
                fh.write(json.dumps(e, ensure_ascii=False) + "\n")


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    """One llama-server process = one 'start' of sm-llm.service."""

    n_started = 0

    def __init__(self, run, argv, port):
        self.run, self.argv, self.port = run, argv, port
        Server.n_started += 1
        self.invocation = "%032x" % (0x15 << 100 | Server.n_started)
        run.cmdlines.append(argv)
        # systemd logs "Started" right after fork/exec of the main process
        run.journal.systemd(
            f"Started {UNIT} - {DESC}.",
            MID_STARTED,
            self.invocation,
            {"JOB_TYPE": "start", "JOB_RESULT": "done"},
        )
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
            cwd=run.cwd,
        )
        run.servers.append(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        pid = self.proc.pid
        f = self.proc.stdout
        buf = b""
        while True:
            chunk = f.read1(65536) if hasattr(f, "read1") else os.read(f.fileno(), 65536)
            if not chunk:
                break
            ts = now_us()  # stamp the moment the data is read, like journald
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self.run.journal.server_line(
                    ts, pid, self.invocation, line.decode("utf-8", "replace")
                )
        if buf:
            self.run.journal.server_line(
                now_us(), pid, self.invocation, buf.decode("utf-8", "replace")
            )

    def wait_healthy(self, timeout=60):
        time.sleep(0.3)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early rc={self.proc.returncode}")
            try:
                c = http.client.HTTPConnection(HOST, self.port, timeout=2)
                sent = now_us()
                c.request("GET", "/health")
                r = c.getresponse()
                body = r.read()
                self.run.result(
                    step="health",
                    endpoint="GET /health",
                    sent_us=sent,
                    done_us=now_us(),
                    status=r.status,
                    outcome="untimed",
                    body=body,
                )
                c.close()
                if r.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server never became healthy")

    def stop(self):
        """clean stop the way systemd does it: SIGTERM, wait, log."""
        self.run.journal.systemd(
            f"Stopping {UNIT} - {DESC}...", MID_STOPPING, self.invocation, {"JOB_TYPE": "stop"}
        )
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.reader.join(10)
        self.run.notes.append(f"pid {self.proc.pid} exit status {rc} after SIGTERM")
        self.run.journal.systemd(f"{UNIT}: Deactivated successfully.", MID_SUCCESS, self.invocation)
        self.run.journal.systemd(
            f"Stopped {UNIT} - {DESC}.",
            MID_STOPPED,
            self.invocation,
            {"JOB_TYPE": "stop", "JOB_RESULT": "done"},
        )

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.crashed()

    def crashed(self, timeout=60):
        """the process died (or is dying) by a signal: systemd's failure lines"""
        rc = self.proc.wait(timeout)
        self.reader.join(10)
        self.run.notes.append(f"pid {self.proc.pid} exit status {rc}")
        sig = -rc if rc < 0 else 0
        name = {6: "ABRT", 9: "KILL", 11: "SEGV"}.get(sig, str(sig))
        self.run.journal.systemd(
            f"{UNIT}: Main process exited, code=killed, status={sig}/{name}",
            MID_PROC_EXIT,
            self.invocation,
            {"EXIT_CODE": "killed", "EXIT_STATUS": str(sig)},
        )
        self.run.journal.systemd(
            f"{UNIT}: Failed with result 'signal'.",
            MID_FAIL_RESULT,
            self.invocation,
            {"UNIT_RESULT": "signal"},
        )


class Run:
    def __init__(self, name, binary, out):
        self.name, self.binary, self.out = name, binary, out
        self.journal = Journal(name)
        self.results = []
        self.cmdlines = []
        self.notes = []
        self.servers = []
        self.cwd = None
        self.lock = threading.Lock()

    def start(self, args, port=None):
        port = port or free_port()
        argv = [self.binary, *args, "--host", HOST, "--port", str(port)]
        s = Server(self, argv, port)
        s.wait_healthy()
        return s

    # ---- results -------------------------------------------------------
    def result(
        self, step, endpoint, sent_us, done_us, status, outcome, body=None, obj=None, **extra
    ):
        r = {
            "step": step,
            "endpoint": endpoint,
            "sent_us": sent_us,
            "done_us": done_us,
            "status": status,
            "outcome": outcome,
        }
        if obj is None and body is not None:
            try:
                obj = json.loads(body)
            except Exception:
                obj = None
        r.update(summarize(obj, endpoint))
        if obj is None and body is not None and status != 200:
            r["body"] = body.decode("utf-8", "replace")[:500]
        r.update(extra)
        with self.lock:
            self.results.append(r)
        return r

    def post(self, port, step, path, body, timeout=120):
        c = http.client.HTTPConnection(HOST, port, timeout=timeout)
        data = json.dumps(body)
        sent = now_us()
        c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        done = now_us()
        c.close()
        untimed = "embed" in path or "rerank" in path or path.startswith("/models")
        outcome = (
            "untimed" if untimed and r.status == 200 else ("timed" if r.status == 200 else "error")
        )
        return self.result(
            step,
            "POST " + path,
            sent,
            done,
            r.status,
            outcome,
            body=raw,
            request={k: v for k, v in body.items() if k != "prompt"}
            | ({"prompt_chars": len(body["prompt"])} if "prompt" in body else {}),
        )

    def stream(self, port, step, path, body, n_events=5, then=None):
        """raw-socket SSE request; close after n_events 'data: ' events (client cancel).
        `then`: callable run after n_events instead of closing (e.g. kill the server)."""
        data = json.dumps(body)
        s = socket.create_connection((HOST, port))
        req = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n{data}"
        )
        sent = now_us()
        s.sendall(req.encode())
        buf = b""
        while buf.count(b"data: ") < n_events:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        status = None
        with contextlib.suppress(Exception):
            status = int(buf.split(b"\r\n", 1)[0].split()[1])
        extra = {}
        if then is None:
            s.close()
            done = now_us()
            outcome = "cancelled"
        else:
            then()
            done = now_us()
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except OSError as e:
                extra["socket_error"] = repr(e)
            s.close()
            outcome = "error"
            extra["killed"] = True
        events = [
            ln[6:] for ln in buf.decode("utf-8", "replace").split("\n") if ln.startswith("data: ")
        ]
        last = None
        last_timings = None
        for ev in events:
            try:
                j = json.loads(ev)
            except Exception:
                continue
            last = j
            if isinstance(j, dict) and "timings" in j:
                last_timings = j["timings"]
        summ = summarize(last, path)
        summ["timings"] = last_timings
        r = {
            "step": step,
            "endpoint": "POST " + path,
            "sent_us": sent,
            "done_us": done,
            "status": status,
            "outcome": outcome,
            "sse_events_received": len(events),
        }
        r.update(summ)
        r["request"] = {k: v for k, v in body.items() if k != "prompt"}
        r.update(extra)
        with self.lock:
            self.results.append(r)
        return r

    def wait_line(self, pattern, start=0, timeout=60):
        """Wait until a journal MESSAGE at index >= start matches the regex `pattern`;
        return the index after it (a deadline, never a fixed sleep)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.journal.lock:
                msgs = [e["MESSAGE"] for e in self.journal.entries[start:]]
            for i, msg in enumerate(msgs):
                if rx.search(msg):
                    return start + i + 1
            time.sleep(0.05)
        raise RuntimeError(f"no line matching {pattern!r} within {timeout} s")

    def mark(self):
        """the journal's length now: wait_line(..., start=mark) sees only later lines"""
        with self.journal.lock:
            return len(self.journal.entries)

    def write(self):
        base = os.path.join(self.out, self.name)
        self.journal.write(base + ".journal.json")
        with open(base + ".results.json", "w") as fh:
            json.dump(self.results, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
        with open(base + ".cmdline.txt", "w") as fh:
            for a in self.cmdlines:
                fh.write(" ".join(a) + "\n")
        print(
            f"[{self.name}] {len(self.journal.entries)} journal lines, {len(self.results)} requests; "
            + "; ".join(self.notes),
            flush=True,
        )


def summarize(obj, endpoint):  # noqa: C901 (the recorder, run once by hand)
    """pull what the server itself returned about the request"""
    keys = (
        "id_slot",
        "tasks",
        "timings",
        "tokens_evaluated",
        "tokens_predicted",
        "n_cmpl",
        "model",
        "stop_type",
        "truncated",
        "tokens_cached",
    )
    out = {}
    if obj is None:
        return out
    if isinstance(obj, list):  # n_cmpl>1 on /completion, /embedding results
        if obj and isinstance(obj[0], dict) and "embedding" in obj[0]:
            e = obj[0]["embedding"]
            out["n_results"] = len(obj)
            out["embedding_shape"] = (
                [len(e), len(e[0])] if e and isinstance(e[0], list) else [len(e)]
            )
            return out
        out["choices"] = [summarize(o, endpoint) for o in obj]
        out["n_cmpl"] = len(obj)
        return out
    if not isinstance(obj, dict):
        return out
    for k in keys:
        if k in obj:
            out[k] = obj[k]
    if "error" in obj:
        out["error"] = obj["error"]
    if "usage" in obj:
        out["usage"] = obj["usage"]
    if (
        "data" in obj
        and isinstance(obj["data"], list)
        and obj["data"]
        and "embedding" in obj["data"][0]
    ):
        out["n_results"] = len(obj["data"])
        out["embedding_shape"] = [len(obj["data"][0]["embedding"])]
    if "choices" in obj and isinstance(obj["choices"], list):
        out["choices"] = [
            {k: c.get(k) for k in ("index", "finish_reason") if k in c}
            | ({"timings": c["timings"]} if "timings" in c else {})
            for c in obj["choices"]
        ]
    if "results" in obj:  # rerank
        out["n_results"] = len(obj["results"])
    if "success" in obj:
        out["success"] = obj["success"]
    return out


def concurrently(fns):
    ts = [threading.Thread(target=f) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


# --------------------------------------------------------------------------
# the runs
# --------------------------------------------------------------------------

BASE = ["-c", "1024", "--parallel", "3"]
LONG_PROMPT = "hello world " * 300  # ~3600 byte tokens >> 512-token slot


def run_parallel(r, m):
    s = r.start(["-m", m["model"], *BASE])
    fns = []
    for i, n in enumerate([8, 16, 24, 32, 40, 48]):
        fns.append(
            lambda i=i, n=n: r.post(
                s.port,
                f"concurrent{i}",
                "/completion",
                {
                    "prompt": f"Request {i}: tell me about the number {i}",
                    "n_predict": n,
                    "temperature": 0,
                },
            )
        )
    concurrently(fns)
    time.sleep(0.3)
    for i, n in enumerate([8, 24, 48]):
        r.post(
            s.port,
            f"sequential{i}",
            "/completion",
            {"prompt": f"Sequential request {i}", "n_predict": n, "temperature": 0},
        )
        time.sleep(0.2)
    s.stop()


def run_cancel(r, m):
    s = r.start(["-m", m["model"], *BASE])
    body = {
        "prompt": "Write a long story about a dragon who",
        "n_predict": 400,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
    }
    r.stream(s.port, "stream_cancel0", "/completion", body, n_events=5)
    time.sleep(0.5)
    r.stream(
        s.port,
        "stream_cancel1",
        "/completion",
        dict(body, prompt="Another story, about a cat"),
        n_events=3,
    )
    time.sleep(0.5)
    r.post(
        s.port,
        "normal",
        "/completion",
        {"prompt": "The capital of France is", "n_predict": 16, "temperature": 0},
    )
    time.sleep(0.2)
    s.stop()


def run_error(r, m):
    s = r.start(["-m", m["model"], *BASE])
    r.post(s.port, "too_long0", "/completion", {"prompt": LONG_PROMPT, "n_predict": 4})
    time.sleep(0.2)
    r.post(
        s.port,
        "normal",
        "/completion",
        {"prompt": "The capital of France is", "n_predict": 16, "temperature": 0},
    )
    time.sleep(0.2)
    r.post(s.port, "too_long1", "/completion", {"prompt": LONG_PROMPT + "again", "n_predict": 4})
    time.sleep(0.2)
    s.stop()


def run_embeddings(r, m):
    s = r.start(["-m", m["model"], *BASE, "--embeddings", "--pooling", m.get("pooling", "last")])
    r.post(s.port, "emb0", "/embedding", {"content": "Hello, world"})
    time.sleep(0.2)
    concurrently(
        [
            lambda: r.post(
                s.port, "emb_concurrent1", "/embedding", {"content": "First concurrent text"}
            ),
            lambda: r.post(
                s.port,
                "emb_concurrent2",
                "/v1/embeddings",
                {"input": ["Second concurrent text", "and one more"], "model": "x"},
            ),
        ]
    )
    time.sleep(0.2)
    r.post(s.port, "emb3", "/embedding", {"content": "Last one"})
    time.sleep(0.2)
    s.stop()


def run_embeddings_mean_abort(r, m):
    """--pooling mean aborts at load with this build (GGML_ASSERT in build_pooling)"""
    port = free_port()
    argv = [
        r.binary,
        "-m",
        m["model"],
        *BASE,
        "--embeddings",
        "--pooling",
        "mean",
        "--host",
        HOST,
        "--port",
        str(port),
    ]
    s = Server(r, argv, port)
    s.crashed()


def run_n_cmpl(r, m):
    s = r.start(["-m", m["model"], *BASE])
    r.post(
        s.port,
        "n_cmpl3",
        "/completion",
        {"prompt": "Three completions of this", "n_predict": 16, "temperature": 0.8, "n_cmpl": 3},
    )
    time.sleep(0.2)
    r.post(
        s.port,
        "single",
        "/completion",
        {"prompt": "One completion of this", "n_predict": 16, "temperature": 0},
    )
    time.sleep(0.2)
    r.post(
        s.port,
        "oai_n3",
        "/v1/completions",
        {"prompt": "OpenAI style n=3", "max_tokens": 12, "n": 3, "temperature": 0.8},
    )
    time.sleep(0.2)
    s.stop()


def run_speculative(r, m):
    # -md alone loads the draft but leaves speculative.types = none; draft-simple makes it draft
    s = r.start(["-m", m["model"], "-md", m["draft"], "--spec-type", "draft-simple", *BASE])
    r.post(
        s.port,
        "spec0",
        "/completion",
        {"prompt": "The capital of France is", "n_predict": 32, "temperature": 0},
    )
    time.sleep(0.2)
    r.post(
        s.port,
        "spec1",
        "/completion",
        {"prompt": "Speculate about the weather", "n_predict": 48, "temperature": 0},
    )
    time.sleep(0.2)
    s.stop()


def run_router(r, m):
    d = m["models_dir"]
    s = r.start(["--models-dir", d, *BASE])
    a, b = m["router_names"]
    r.post(
        s.port,
        "first_a",
        "/completion",
        {"model": a, "prompt": "Hello A", "n_predict": 8, "temperature": 0},
    )
    time.sleep(0.2)
    concurrently(
        [
            lambda: r.post(
                s.port,
                "conc_b0",
                "/v1/completions",
                {"model": b, "prompt": "Hello B", "max_tokens": 16, "temperature": 0},
            ),
            lambda: r.post(
                s.port,
                "conc_b1",
                "/completion",
                {"model": b, "prompt": "Hi B", "n_predict": 24, "temperature": 0},
            ),
            lambda: r.post(
                s.port,
                "conc_a",
                "/completion",
                {"model": a, "prompt": "Hi A", "n_predict": 24, "temperature": 0},
            ),
        ]
    )
    time.sleep(0.3)
    r.post(s.port, "unload_a", "/models/unload", {"model": a})
    time.sleep(1.5)
    r.post(
        s.port,
        "again_a",
        "/completion",
        {"model": a, "prompt": "Back again A", "n_predict": 8, "temperature": 0},
    )
    time.sleep(0.3)
    # crash a child: SIGKILL the router's own child process for model b (found via /proc, by its --alias)
    kid = router_child(s.proc.pid, b)
    if kid:
        os.kill(kid, signal.SIGKILL)
        r.notes.append(f"SIGKILLed router child pid {kid} (model {b})")
        time.sleep(1.0)
        r.post(
            s.port,
            "after_kill_b",
            "/completion",
            {"model": b, "prompt": "B after crash", "n_predict": 8, "temperature": 0},
        )
        time.sleep(0.3)
    s.stop()


def router_child(ppid, alias):
    for tdir in os.listdir(f"/proc/{ppid}/task"):
        try:
            kids = Path(f"/proc/{ppid}/task/{tdir}/children").read_text().split()
        except OSError:
            continue
        for k in kids:
            try:
                argv = Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--alias" in argv and argv[argv.index(b"--alias") + 1].decode() == alias:
                return int(k)
    return None


def run_restart(r, m):
    port = free_port()
    args = ["-m", m["model"], *BASE]
    for k in (1, 2):
        s = r.start(args, port=port)
        for i, n in enumerate([8, 16, 24]):
            r.post(
                s.port,
                f"proc{k}_req{i}",
                "/completion",
                {"prompt": f"Process {k} request {i}", "n_predict": n, "temperature": 0},
            )
            time.sleep(0.2)
        if k == 1:
            s.stop()
            time.sleep(0.3)
    body = {
        "prompt": "A long story that gets killed",
        "n_predict": 400,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
    }
    r.stream(s.port, "proc2_killed_stream", "/completion", body, n_events=2, then=s.kill9)


# the server context's own lines (handle_sleeping_state), not the task queue's
SLEEP_ENTER = r"^\S+ I srv +\w+: server is entering sleeping state$"
SLEEP_EXIT = r"^\S+ I srv +\w+: server is exiting sleeping state$"


def run_sleep(r, m):
    """--sleep-idle-seconds 2: serve, fall asleep, wake on a request (the model reloads),
    fall asleep again, stop while asleep"""
    s = r.start(["-m", m["model"], *BASE, "--sleep-idle-seconds", "2"])
    start = r.mark()
    for i, n in enumerate([16, 24]):
        r.post(
            s.port,
            f"before_sleep{i}",
            "/completion",
            {"prompt": f"Before sleeping {i}", "n_predict": n, "temperature": 0},
        )
    asleep = r.wait_line(SLEEP_ENTER, start=start, timeout=30)
    r.post(
        s.port,
        "wake",
        "/completion",
        {"prompt": "Wake up and answer", "n_predict": 32, "temperature": 0},
    )
    r.wait_line(SLEEP_EXIT, start=asleep, timeout=5)  # (logged before the answer)
    r.wait_line(SLEEP_ENTER, start=asleep, timeout=30)
    s.stop()


LONG_N_PREDICT = 8000
# model.gguf says context_length 2048, and the server caps a slot at that; the override lifts
# it without another model file. One thread: two threads on 2 shared cores stall each other.
LONG_ARGS = ["-c", "16384", "--parallel", "1", "-t", "1"]
LONG_ARGS += ["--override-kv", "llama.context_length=int:16384"]


def run_long_generation(r, m):
    """one generation long enough for print_timings_tg's `n_gen = ...` lines (after 100
    tokens, then every 3 s): 8000 tokens on one 16k slot take ~14 s on this machine"""
    s = r.start(["-m", m["model"], *LONG_ARGS])
    r.post(
        s.port,
        "long",
        "/completion",
        {
            "prompt": "Tell a very long story",
            "n_predict": LONG_N_PREDICT,
            "temperature": 0,
            "ignore_eos": True,
        },
        timeout=300,
    )
    s.stop()


def run_router_queue(r, m):
    """router with --models-max 1 and three models: requests queue for a model instance
    while another model's instance is busy"""
    d = m["queue_models_dir"]
    a, b, c = m["queue_names"]
    # one 2048-token slot per instance (the instances get these args), so tiny-a's 1900
    # tokens hold it busy for a second or more; one thread, as in run_long_generation
    args = ["--models-dir", d, "--models-max", "1", "-c", "2048", "--parallel", "1", "-t", "1"]
    s = r.start(args)
    r.post(
        s.port,
        "first_a",
        "/completion",
        {"model": a, "prompt": "Hello A", "n_predict": 8, "temperature": 0},
    )

    def post(step, model, n):
        return lambda: r.post(
            s.port,
            step,
            "/completion",
            {
                "model": model,
                "prompt": f"{step} for {model}",
                "n_predict": n,
                "temperature": 0,
                "ignore_eos": True,
            },
        )

    # each request is sent once the router logged what the previous one did
    steps = [
        ("busy_a", a, 1900, rf"proxying request to model {a} on port"),
        ("queued_b0", b, 16, rf"request for name={b} queued at position 1$"),
        ("joined_b1", b, 24, rf"request for name={b} joined the queue, 2 waiting$"),
        ("queued_c", c, 16, rf"request for name={c} queued at position 2$"),
    ]
    threads = []
    for step, model, n, line in steps:
        at = r.mark()
        t = threading.Thread(target=post(step, model, n))
        t.start()
        threads.append(t)
        r.wait_line(line, start=at, timeout=30)
    for t in threads:
        t.join()
    s.stop()


RUNS = [
    ("parallel", run_parallel),
    ("cancel", run_cancel),
    ("error", run_error),
    ("embeddings", run_embeddings),
    ("embeddings_mean_abort", run_embeddings_mean_abort),
    ("n_cmpl", run_n_cmpl),
    ("speculative", run_speculative),
    ("router", run_router),
    ("restart", run_restart),
    ("sleep", run_sleep),
    ("long_generation", run_long_generation),
    ("router_queue", run_router_queue),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--only", default="")
    ap.add_argument("--pooling", default="last")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="rec15-")
    try:
        model, draft = os.path.join(tmp, "model.gguf"), os.path.join(tmp, "draft.gguf")
        write_model(model, seed=15, n_layer=2, name="tiny-rec15")
        write_model(draft, seed=16, n_layer=1, name="tiny-rec15-draft")
        for p in (model, draft):
            if os.path.getsize(p) < 1_000_000:
                shutil.copyfile(p, os.path.join(a.out, os.path.basename(p)))
        mdir = os.path.join(tmp, "models")
        os.makedirs(mdir)
        names = ["tiny-a", "tiny-b"]
        write_model(os.path.join(mdir, names[0] + ".gguf"), seed=15, n_layer=2, name="tiny-a")
        write_model(os.path.join(mdir, names[1] + ".gguf"), seed=17, n_layer=2, name="tiny-b")
        qdir = os.path.join(tmp, "models_queue")
        os.makedirs(qdir)
        qnames = ["tiny-a", "tiny-b", "tiny-c"]
        for qname, seed in zip(qnames, (15, 17, 18), strict=True):
            write_model(os.path.join(qdir, qname + ".gguf"), seed=seed, n_layer=2, name=qname)
        # servers run with cwd=tmp and relative paths, so the logged paths are stable
        m = {
            "model": "model.gguf",
            "draft": "draft.gguf",
            "models_dir": "models",
            "router_names": names,
            "queue_models_dir": "models_queue",
            "queue_names": qnames,
            "pooling": a.pooling,
        }
        only = {x for x in a.only.split(",") if x}
        for name, fn in RUNS:
            if only and name not in only:
                continue
            r = Run(name, binary, a.out)
            r.cwd = tmp
            try:
                fn(r, m)
            except Exception as e:  # keep what we have
                r.notes.append(f"run failed: {e!r}")
                for sv in r.servers:
                    if sv.proc.poll() is None:
                        sv.proc.kill()
                        sv.proc.wait()
                        sv.reader.join(5)
            r.write()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

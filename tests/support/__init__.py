"""What tests and benches share: one helper of each kind.

Imported as `support` (pytest puts tests/ on the import path; a bench puts it there itself):
- `tools`: real tools (fail in CI, skip elsewhere), waiting on conditions with deadlines, ports;
- `scrape`: HTTP GETs, scrapes of /metrics, their samples, and `Watch` (nothing goes back);
- `daemon_process`: the daemon as a real process, started, killed and started again;
- `fake_journalctl`: a node's journalctl behind asyncssh's own server (faults, many nodes);
- `sshd`: a real OpenSSH sshd on 127.0.0.1 and a throwaway login user;
- `dumps`: nodes' windows and dump files read as the report reads them;
- `seed`: the seed's timeline.py, ported;
- `daemon_thread`: the daemon in-process, on its own event loop in a thread;
- `exposition`: accountings full of traffic, and prometheus_client's renderings of them;
- `nobody`: a function run as the `nobody` user in a forked child;
- `readme`: the README's metric table and links;
- `recorded`: a real llama-server's recorded runs, read independently with regexes;
- `certs`: a CA, server and client certificates for the TLS tests;
- `prometheus`: a real Prometheus, started on a free port, and its query API;
- `browser`: headless Chromium: a page's DOM, a screenshot;
- `dom`: a page's elements, lanes and request rects, and whether it is self-contained;
- `workload`: generated requests, their journal lines and the report read from them.
"""

"""What tests and benches share: one helper of each kind.

Imported as `support` (pytest puts tests/ on the import path; a bench puts it there itself):
- `tools`: real tools (fail in CI, skip elsewhere), waiting on conditions with deadlines, ports;
- `scrape`: HTTP GETs, scrapes of /metrics, their samples, and `Watch` (nothing goes back);
- `daemon_process`: the daemon as a real process, started, killed and started again;
- `fake_journalctl`: a node's journalctl behind asyncssh's own server (faults, many nodes);
- `sshd`: a real OpenSSH sshd on 127.0.0.1 and a throwaway login user;
- `dumps`: nodes' windows and dump files read as the report reads them;
- `seed`: the seed's timeline.py, ported.
"""

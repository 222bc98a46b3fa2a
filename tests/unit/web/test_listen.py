"""exporter.web.listen: the URL each bound address is logged with (binding itself is tested with
the server, in tests/integration/test_exposition.py)."""

from __future__ import annotations

from exporter.web.listen import metrics_url


def test_metrics_url() -> None:
    assert metrics_url(("127.0.0.1", 10027)) == "http://127.0.0.1:10027/metrics"
    assert metrics_url(("::1", 10027, 0, 0), "https") == "https://[::1]:10027/metrics"
    assert metrics_url(("fe80::1%eth0", 80, 0, 2)) == "http://[fe80::1%25eth0]:80/metrics"

"""`icache doctor --prometheus URL` (docs/doctor.md "The engines' own view"): it reads the
per-CacheBackend engine series from the Prometheus at URL, and only there, and reports
zero hits, remote-tier errors, unhealthy LMCache and backends with no engine series.

The HTTP tests run a real HTTP server on loopback that answers the Prometheus query API
(``GET /api/v1/query``) with JSON as Prometheus does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from icache_install.doctor.engine_metrics import (
    ERRORS,
    HEALTHY,
    LOOKUPS,
    RATIO,
    EngineSeries,
    check_prometheus,
    engine_findings,
)
from icache_install.doctor.findings import CODES, Severity

NS = "team-a"


def _codes(findings: list[Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for f in findings:
        out.setdefault((f.object.namespace, f.object.name), set()).add(f.code)
    return out


def test_zero_hits_errors_and_unhealthy_are_findings_at_their_severity() -> None:
    series = EngineSeries(
        ratio={(NS, "silent"): 0.0, (NS, "good"): 0.4},
        lookups={(NS, "silent"): 120.0, (NS, "good"): 50.0},
        errors={(NS, "good"): 0.0, (NS, "failing"): 2.0},
        healthy={(NS, "failing"): 0.0, (NS, "good"): 1.0},
    )
    findings = engine_findings(series, [(NS, "silent"), (NS, "good"), (NS, "failing")], None)
    assert _codes(findings) == {
        (NS, "silent"): {"backend.OffloadNoHits"},
        (NS, "good"): {"backend.OffloadHitRatio"},
        (NS, "failing"): {"backend.RemoteTierErrors", "backend.LMCacheUnhealthy"},
    }
    for f in findings:
        assert f.severity == CODES[f.code][0]
        assert f.code == "backend.OffloadHitRatio" or f.next_step
    assert CODES["backend.RemoteTierErrors"][0] == Severity.ERROR


def test_a_backend_prometheus_has_nothing_of_is_not_scraped() -> None:
    """No series of a backend the cluster has: the monitoring bundle does not reach its
    engines. A namespace scope leaves other namespaces' series out."""
    series = EngineSeries(ratio={("other", "x"): 0.0}, lookups={}, errors={}, healthy={})
    findings = engine_findings(series, [(NS, "cache")], NS)
    assert _codes(findings) == {(NS, "cache"): {"backend.NoEngineMetrics"}}


def test_idle_engines_are_not_a_no_hit_finding() -> None:
    """The ratio has no value while nothing is looked up: no finding, not a zero."""
    series = EngineSeries(ratio={}, lookups={(NS, "idle"): 0.0}, errors={}, healthy={})
    assert engine_findings(series, [(NS, "idle")], NS) == []


class _FakePrometheus(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, Any]] = {}
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        self.seen.append(url.path)
        promql = parse_qs(url.query).get("query", [""])[0]
        if url.path != "/api/v1/query" or promql not in self.answers:
            body, status = {"status": "error", "errorType": "bad_data", "error": "unknown"}, 400
        else:
            body, status = self.answers[promql], 200
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


def _vector(*samples: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"namespace": ns, "cachebackend": cb}, "value": [1.7e9, value]}
                for ns, cb, value in samples
            ],
        },
    }


@pytest.fixture
def prometheus() -> Iterator[str]:
    _FakePrometheus.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_doctor_reads_the_series_over_the_query_api(prometheus: str) -> None:
    _FakePrometheus.answers = {
        RATIO: _vector((NS, "cache", "0")),
        LOOKUPS: _vector((NS, "cache", "250")),
        ERRORS: _vector((NS, "cache", "0.5")),
        HEALTHY: _vector(),
    }
    backends = [{"metadata": {"namespace": NS, "name": "cache"}}]
    findings = check_prometheus(prometheus, backends, NS)
    assert _codes(findings) == {
        (NS, "cache"): {"backend.OffloadNoHits", "backend.RemoteTierErrors"}
    }
    (no_hits,) = [f for f in findings if f.code == "backend.OffloadNoHits"]
    assert no_hits.details["lookupTokensPerSecond"] == 250.0
    assert _FakePrometheus.seen == ["/api/v1/query"] * 4


def test_a_failing_query_is_a_doctor_error_not_a_crash(prometheus: str) -> None:
    _FakePrometheus.answers = {}  # every query answered 400, as Prometheus does for bad_data
    findings = check_prometheus(prometheus, [], None)
    assert [f.code for f in findings] == ["doctor.PrometheusQueryFailed"]
    assert "HTTP 400" in findings[0].message
    assert findings[0].severity == Severity.ERROR


def test_a_wrong_base_url_is_a_doctor_error(prometheus: str) -> None:
    port = int(prometheus.rsplit(":", 1)[1].strip("/"))
    closed = f"http://127.0.0.1:{port}/nothing-here"
    _FakePrometheus.answers = {}
    findings = check_prometheus(closed, [], None)
    assert [f.code for f in findings] == ["doctor.PrometheusQueryFailed"]

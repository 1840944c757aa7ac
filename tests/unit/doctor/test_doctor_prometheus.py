"""`icache doctor --prometheus URL` (docs/doctor.md "The engines' own view"): it reads the
per-CacheBackend engine series from the Prometheus at URL, and only there, and reports
zero hits, remote-tier errors, unhealthy LMCache and backends with no engine series.

The HTTP tests run a real HTTP server on loopback that answers the Prometheus query API
(``GET /api/v1/query``) with JSON as Prometheus does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from icache_install.doctor.engine_metrics import (
    ERRORS,
    HEALTHY,
    LOOKUPS,
    OFFLOAD_HIT_RATIO,
    EngineSeries,
    check_prometheus,
    engine_findings,
)
from icache_install.doctor.findings import CODES, Severity
from tests.fakes import FakePrometheus, prometheus_vector

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


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    with FakePrometheus() as server:
        yield server


def test_doctor_reads_the_series_over_the_query_api(prometheus: FakePrometheus) -> None:
    prometheus.answers = {
        OFFLOAD_HIT_RATIO: prometheus_vector((NS, "cache", "0")),
        LOOKUPS: prometheus_vector((NS, "cache", "250")),
        ERRORS: prometheus_vector((NS, "cache", "0.5")),
        HEALTHY: prometheus_vector(),
    }
    backends = [{"metadata": {"namespace": NS, "name": "cache"}}]
    findings = check_prometheus(prometheus.url, backends, NS)
    assert _codes(findings) == {
        (NS, "cache"): {"backend.OffloadNoHits", "backend.RemoteTierErrors"}
    }
    (no_hits,) = [f for f in findings if f.code == "backend.OffloadNoHits"]
    assert no_hits.details["lookupTokensPerSecond"] == 250.0
    assert prometheus.seen == ["/api/v1/query"] * 4


def test_a_failing_query_is_a_doctor_error_not_a_crash(prometheus: FakePrometheus) -> None:
    # every query answered 400, as Prometheus does for bad_data
    findings = check_prometheus(prometheus.url, [], None)
    assert [f.code for f in findings] == ["doctor.PrometheusQueryFailed"]
    assert "HTTP 400" in findings[0].message
    assert findings[0].severity == Severity.ERROR


def test_a_wrong_base_url_is_a_doctor_error(prometheus: FakePrometheus) -> None:
    prometheus.answers = {OFFLOAD_HIT_RATIO: prometheus_vector()}
    findings = check_prometheus(prometheus.url + "nothing-here", [], None)
    assert [f.code for f in findings] == ["doctor.PrometheusQueryFailed"]

"""`icache doctor --prometheus URL`: the engines' own view of their KV tier.

Reads the per-CacheBackend recording rules of the monitoring bundle (docs/metrics.md
"Engine series") from the Prometheus at URL, and only from there: one instant query
per series over its HTTP API (``GET <URL>/api/v1/query``). The findings:

- ``backend.OffloadNoHits``: the engines look prompt tokens up in the tier and find none
  (``inferencecache:offload_hit_ratio:rate5m`` is 0): the silent no-op;
- ``backend.RemoteTierErrors``: errors reaching the remote tier
  (``inferencecache:remote_errors:rate5m`` above 0);
- ``backend.LMCacheUnhealthy``: LMCache's health gauge is 0;
- ``backend.OffloadHitRatio`` (info): the ratio when it is above 0;
- ``backend.NoEngineMetrics``: a CacheBackend the cluster has but Prometheus has no
  engine series of (monitoring off, the PodMonitor not selected by Prometheus, rules
  not loaded, or SGLang's own metrics off and no LMCache MP worker);
- ``doctor.PrometheusQueryFailed``: the URL did not answer a query.

``engine_findings`` is pure; ``check_prometheus`` does the reads.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from icache_install.doctor.findings import Finding, ObjectRef, finding
from shared.objects import meta

OFFLOAD_HIT_RATIO: Final = "inferencecache:offload_hit_ratio:rate5m"
LOOKUPS: Final = "inferencecache:offload_lookup_tokens:rate5m"
ERRORS: Final = "inferencecache:remote_errors:rate5m"
HEALTHY: Final = "inferencecache:engine_healthy"
SERIES: Final = (OFFLOAD_HIT_RATIO, LOOKUPS, ERRORS, HEALTHY)
PROMETHEUS_TIMEOUT_SECONDS: Final = 10.0
RUNBOOK: Final = "docs/operations/alerts.md"

# (namespace, cachebackend) -> value
Samples = dict[tuple[str, str], float]
Fetch = Callable[[str, str], Samples]


class PrometheusError(Exception):
    """The Prometheus API did not answer a query with a vector."""


def parse_vector(body: bytes) -> Samples:
    """An instant-query answer (``resultType: vector``) by namespace and cachebackend."""
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise PrometheusError(f"not JSON: {exc}") from exc
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise PrometheusError(f"query failed: {error or 'no success status'}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"expected a vector, got {data.get('resultType')!r}")
    out: Samples = {}
    for item in data.get("result") or []:
        metric = item.get("metric") or {}
        key = (str(metric.get("namespace", "")), str(metric.get("cachebackend", "")))
        try:
            out[key] = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusError(f"a sample without a value: {item!r}") from exc
    return out


def query(base_url: str, promql: str) -> Samples:
    """One instant query against ``base_url`` (nothing else is contacted)."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=PROMETHEUS_TIMEOUT_SECONDS) as response:
            return parse_vector(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return parse_vector(exc.read())
        except PrometheusError as inner:
            raise PrometheusError(f"HTTP {exc.code}: {inner}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PrometheusError(str(getattr(exc, "reason", exc))) from exc


@dataclass(frozen=True)
class EngineSeries:
    """The four per-backend series, as Prometheus answered them."""

    ratio: Samples
    lookups: Samples
    errors: Samples
    healthy: Samples

    def backends(self) -> set[tuple[str, str]]:
        return {*self.ratio, *self.lookups, *self.errors, *self.healthy}


def _ref(key: tuple[str, str]) -> ObjectRef:
    return ObjectRef("CacheBackend", key[1], key[0])


def _ratio_findings(series: EngineSeries, key: tuple[str, str]) -> list[Finding]:
    ratio = series.ratio.get(key)
    if ratio is None or math.isnan(ratio):
        return []
    if ratio == 0:
        lookups = series.lookups.get(key, 0.0)
        return [
            finding(
                "backend.OffloadNoHits",
                _ref(key),
                f"the engines look up {lookups:.4g} prompt tokens a second in the offload "
                "tier and find none there",
                f"see InferenceCacheOffloadNoHits in {RUNBOOK}: the tier's size, its "
                "remote errors, engines that disagree on model or chunk size",
                ratio=ratio,
                lookupTokensPerSecond=lookups,
            )
        ]
    return [
        finding(
            "backend.OffloadHitRatio",
            _ref(key),
            f"{ratio:.1%} of the prompt tokens looked up are served from the tier",
            ratio=ratio,
        )
    ]


def _health_findings(series: EngineSeries, key: tuple[str, str]) -> list[Finding]:
    out: list[Finding] = []
    errors = series.errors.get(key, 0.0)
    if errors > 0:
        out.append(
            finding(
                "backend.RemoteTierErrors",
                _ref(key),
                f"the engines report {errors:.4g} errors a second reaching the remote tier",
                f"see InferenceCacheRemoteTierErrors in {RUNBOOK}: endpoint, password, "
                "NetworkPolicy, LMCache version",
                errorsPerSecond=errors,
            )
        )
    if series.healthy.get(key) == 0:
        out.append(
            finding(
                "backend.LMCacheUnhealthy",
                _ref(key),
                "an engine pod reports lmcache_is_healthy 0",
                f"see InferenceCacheLMCacheUnhealthy in {RUNBOOK}; read the engine's log",
            )
        )
    return out


def engine_findings(
    series: EngineSeries, cluster_backends: list[tuple[str, str]], namespace: str | None
) -> list[Finding]:
    """Findings of the engines' series; a backend the cluster has but Prometheus does
    not is not scraped. ``namespace`` None: every namespace."""
    keys = {k for k in series.backends() if namespace is None or k[0] == namespace}
    out: list[Finding] = []
    for key in sorted(keys):
        out += _ratio_findings(series, key) + _health_findings(series, key)
    for key in sorted(set(cluster_backends) - keys):
        out.append(
            finding(
                "backend.NoEngineMetrics",
                _ref(key),
                "Prometheus has no engine series of this backend",
                "install the monitoring bundle (Helm monitoring.enabled, or "
                "manifests/components/monitoring) and check that Prometheus selects the "
                "PodMonitor inference-cache-engines and loads the PrometheusRule; "
                "SGLang HiCache engines serve metrics only with --enable-metrics",
            )
        )
    return out


def _backend_keys(backends: list[dict[str, Any]]) -> list[tuple[str, str]]:
    keys = []
    for raw in backends:
        view = meta(raw)
        keys.append((view.namespace, view.name))
    return keys


def check_prometheus(
    url: str,
    backends: list[dict[str, Any]],
    namespace: str | None,
    fetch: Fetch = query,
) -> list[Finding]:
    """Query ``url`` for the engine series and judge them (``fetch``: the reader)."""
    answers: dict[str, Samples] = {}
    for name in SERIES:
        try:
            answers[name] = fetch(url, name)
        except PrometheusError as exc:
            return [
                finding(
                    "doctor.PrometheusQueryFailed",
                    ObjectRef("Prometheus", url),
                    f"{name}: {exc}",
                    "check the URL (the Prometheus server's base, e.g. "
                    "http://prometheus-operated.monitoring:9090) and that it answers",
                )
            ]
    series = EngineSeries(
        answers[OFFLOAD_HIT_RATIO], answers[LOOKUPS], answers[ERRORS], answers[HEALTHY]
    )
    return engine_findings(series, _backend_keys(backends), namespace)

"""The dispatcher's and the worker's counters expose every known label child from the
start (docs/metrics.md): a counter child otherwise appears on its first increment
only, so a healthy process would not expose series the page lists (lost leases,
live reads, watch errors), and rate() would miss the first increment.

The label values are lists in reconciler/metrics.py; the call sites pass literals or
resource names, and the source scan below keeps the two in step.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from kubeio import client as k
from reconciler import metrics
from reconciler.steps.reads import OWNED_RESOURCES

RECONCILER = Path(metrics.__file__).parent


def _present(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> bool:
    return registry.get_sample_value(name, labels) is not None


def test_the_dispatcher_exposes_its_counter_children_once_registered() -> None:
    registry = CollectorRegistry()
    metrics.register_metrics(metrics.DISPATCHER, registry)
    for cause in ("lease_expired", "redispatch"):
        assert _present(
            registry,
            "inferencecache_workqueue_retries_total",
            {"name": "cachebackend", "cause": cause},
        )
    for resource in ("cachebackends", "deployments", "pods", "horizontalpodautoscalers"):
        for cause in ("timeout", "expired", "error"):
            assert _present(
                registry,
                "inferencecache_dispatcher_watch_restarts_total",
                {"resource": resource, "cause": cause},
            )


def test_the_worker_exposes_its_counter_children_once_registered() -> None:
    registry = CollectorRegistry()
    metrics.register_metrics(metrics.WORKER, registry)
    assert _present(
        registry,
        "inferencecache_workqueue_retries_total",
        {"name": "cachebackend", "cause": "error"},
    )
    for result in ("success", "error", "requeue_after"):
        assert _present(
            registry,
            "inferencecache_reconcile_total",
            {"controller": "cachebackend", "result": result},
        )
    for read in ("cachebackend", "owned", "injected-pods", "engine-deployments", "engine-pods"):
        assert _present(registry, "inferencecache_worker_cache_live_reads_total", {"read": read})
    for watch in ("cachebackends", "server-pods", "engine-pods", "statefulsets"):
        assert _present(
            registry,
            "inferencecache_worker_cache_watch_restarts_total",
            {"watch": watch, "cause": "error"},
        )
    assert _present(
        registry,
        "inferencecache_reconcile_api_writes_total",
        {"verb": "update", "resource": "CacheBackend/status"},
    )


def _literals(pattern: str, *files: str) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for name in files:
        for match in re.finditer(pattern, (RECONCILER / name).read_text()):
            found.add(match.groups())
    return found


def test_the_label_lists_cover_every_literal_at_the_call_sites() -> None:
    restarts = {w for (w,) in _literals(r'_count_restart\("([^"]+)"\)', "watch/cluster_cache.py")}
    assert restarts <= set(metrics.CACHE_WATCHES)
    reads = {r for (r,) in _literals(r'_ready\([^,]+,\s*"([^"]+)"\)', "watch/cluster_cache.py")}
    reads |= {
        r for (r,) in _literals(r'CACHE_LIVE_READS\.labels\("([^"]+)"\)', "watch/cluster_cache.py")
    }
    assert reads
    assert reads <= set(metrics.CACHE_READS)
    writes = _literals(r'_count_write\("([^"]+)",\s*"([^"]+)"\)', "steps/reconcile.py")
    assert writes
    assert writes <= set(metrics.API_WRITE_LABELS)
    verbs = {v for (v,) in _literals(r'_count_write\("([^"]+)",\s*kind\)', "steps/reconcile.py")}
    assert verbs
    assert {(v, r.kind) for v in verbs for r in OWNED_RESOURCES} <= set(metrics.API_WRITE_LABELS)
    causes = {c for (c,) in _literals(r'metrics\.retried\("([^"]+)"', "queue/workqueue.py")}
    assert causes == set(metrics.DISPATCHER_RETRY_CAUSES) | set(metrics.WORKER_RETRY_CAUSES)
    watch_causes = {c for (c,) in _literals(r'on_restart\("([^"]+)"\)', "watch/watch_cache.py")}
    assert watch_causes == set(metrics.WATCH_CAUSES)
    assert set(metrics.DISPATCHER_WATCHES) >= {k.CACHEBACKENDS.plural, k.PODS.plural}

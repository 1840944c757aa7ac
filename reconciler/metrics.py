"""Prometheus metrics of the work queue, the dispatcher and the reconcile workers."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

QUEUE_DEPTH = Gauge(
    "icache_workqueue_depth",
    "Keys in the Redis work queue by state: pending (waiting, incl. delayed), queued "
    "(dispatched to Celery, not started), processing (leased by a worker).",
    ["state"],
)
IN_FLIGHT = Gauge("icache_workqueue_in_flight", "Reconciles running in this worker process.")
ADDS = Counter("icache_workqueue_adds_total", "Keys added to the work queue (before collapsing).")
RETRIES = Counter(
    "icache_workqueue_retries_total",
    "Keys re-enqueued after a failure: a reconcile error (backoff), an expired worker lease, "
    "or a dispatch whose Celery message never arrived.",
    ["cause"],
)
RECONCILE_DURATION = Histogram(
    "icache_reconcile_duration_seconds",
    "Wall time of one reconcile.",
    ["outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECONCILES = Counter(
    "icache_reconcile_total",
    "Reconciles by outcome: success, requeue (asked to run again later), error.",
    ["outcome"],
)
API_WRITES = Counter(
    "icache_reconcile_api_writes_total",
    "Kubernetes write requests made by reconciles, by verb and resource.",
    ["verb", "resource"],
)
LEADER = Gauge("icache_dispatcher_leader", "1 while this dispatcher holds the leader Lease.")
WATCH_RESTARTS = Counter(
    "icache_dispatcher_watch_restarts_total",
    "Watch streams re-established, by resource and cause (expired = 410 Gone re-list).",
    ["resource", "cause"],
)
T2_HIT_RATE = Gauge(
    "inferencecache_backend_t2_hit_rate",
    "Query-weighted tier-2 reload hit rate of a CacheBackend (status.indexParticipation."
    "t2HitRate), by backend (namespace/name); absent until the tier has been exercised. "
    "Exported by the leading dispatcher only.",
    ["backend"],
)
CACHE_WATCH_RESTARTS = Counter(
    "inferencecache_worker_cache_watch_restarts_total",
    "Watch streams of a worker's cache re-established, by watch and cause (timeout, "
    "expired = 410 Gone re-list, error).",
    ["watch", "cause"],
)
CACHE_LIVE_READS = Counter(
    "inferencecache_worker_cache_live_reads_total",
    "Reconcile reads sent to the API server because the worker's cache could not answer "
    "(not listed yet, a watch failing, an engine selector not watched yet), by read.",
    ["read"],
)

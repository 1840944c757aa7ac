"""Prometheus metrics of the work queue, the dispatcher and the reconcile workers.

Every series is ``inferencecache_*`` (docs/metrics.md lists them all; a test scrapes
the real processes against that list). The work-queue and reconcile series carry the
names and labels of client-go's work queue and controller-runtime's controller
metrics with our prefix instead of theirs (``workqueue_depth{name}`` becomes
``inferencecache_workqueue_depth{name}``, ``controller_runtime_reconcile_total
{controller,result}`` becomes ``inferencecache_reconcile_total{controller,result}``),
so dashboards and alerts written for controllers read them the same way.

Who exports what: the worker the reconcile and work-duration series; the dispatcher
the queue depth, adds and lost-lease retries; the *leading* dispatcher only the
per-CacheBackend gauges (it is the one process that watches every backend), which a
dispatcher clears when it stops leading so that a standby never reports stale values.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubeio import client as k
from reconciler.steps.reads import (
    DISPATCHER_OWNED_RESOURCES,
    LISTED_OWNED_RESOURCES,
    OWNED_RESOURCES,
)
from shared import constants as c

# No `<name>_created` series beside every counter and histogram: Prometheus does not
# read them from the text format, and they would double the series count.
disable_created_metrics()

# The one controller and the one work queue of this control plane (the values of the
# `controller` and `name` labels).
CONTROLLER: Final = "cachebackend"
QUEUE: Final = "cachebackend"
# The dispatcher's leader-election Lease name is the `name` label of the leader gauge.
DEFAULT_LEADER_LEASE: Final = c.DISPATCHER_LEASE

# Reconcile results, as controller-runtime spells them.
SUCCESS: Final = "success"
ERROR: Final = "error"
REQUEUE_AFTER: Final = "requeue_after"

# Wall-time buckets of a reconcile and of a key's time in the queue (seconds).
_DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_QUEUE_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)

# ---------------------------------------------------------------- work queue

# Created unregistered: each process registers the families it feeds (register()),
# so a worker does not expose the dispatcher's series as zeros, nor the reverse.
_DEPTH = Gauge(
    "inferencecache_workqueue_depth",
    "Keys waiting to run: due in the Redis work queue or dispatched to a worker and not "
    "started yet (delayed requeues and error backoff not counted until due). Leading "
    "dispatcher only.",
    ["name"],
    registry=None,
)
_FAILING = Gauge(
    "inferencecache_workqueue_failing_keys",
    "Keys whose last run failed and that are waiting out their error backoff (reset by "
    "a successful run). Leading dispatcher only.",
    ["name"],
    registry=None,
)
_ADDS = Counter(
    "inferencecache_workqueue_adds_total",
    "Keys added to the work queue (before collapsing into a pending entry).",
    ["name"],
    registry=None,
)
_RETRIES = Counter(
    "inferencecache_workqueue_retries_total",
    "Keys re-enqueued after a failure, by cause: error (the reconcile failed; backoff), "
    "lease_expired (the worker running it stopped renewing its lease), redispatch (the "
    "dispatched message never started).",
    ["name", "cause"],
    registry=None,
)
_QUEUE_DURATION = Histogram(
    "inferencecache_workqueue_queue_duration_seconds",
    "Time from a key's dispatch to a worker until that worker started it.",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=None,
)
_WORK_DURATION = Histogram(
    "inferencecache_workqueue_work_duration_seconds",
    "Time a worker held a key (its lease), from start to done.",
    ["name"],
    buckets=_DURATION_BUCKETS,
    registry=None,
)

# ---------------------------------------------------------------- reconciles

_RECONCILES = Counter(
    "inferencecache_reconcile_total",
    "Reconciles by result: success, error, requeue_after (succeeded and asked to run "
    "again after a delay).",
    ["controller", "result"],
    registry=None,
)
_RECONCILE_ERRORS = Counter(
    "inferencecache_reconcile_errors_total",
    "Reconciles that failed (raised); the key is retried with backoff.",
    ["controller"],
    registry=None,
)
_RECONCILE_TIME = Histogram(
    "inferencecache_reconcile_time_seconds",
    "Wall time of one reconcile.",
    ["controller"],
    buckets=_DURATION_BUCKETS,
    registry=None,
)
_ACTIVE_WORKERS = Gauge(
    "inferencecache_active_workers",
    "Reconciles running in this worker process now.",
    ["controller"],
    registry=None,
)
_MAX_CONCURRENT = Gauge(
    "inferencecache_max_concurrent_reconciles",
    "Reconciles this worker process runs at most at once (its --concurrency).",
    ["controller"],
    registry=None,
)
API_WRITES = Counter(
    "inferencecache_reconcile_api_writes_total",
    "Kubernetes write requests made by reconciles, by verb and resource.",
    ["verb", "resource"],
    registry=None,
)

# ---------------------------------------------------------------- dispatcher

_LEADER = Gauge(
    "inferencecache_leader_election_master_status",
    "1 while this dispatcher holds the leader-election Lease `name`, 0 otherwise.",
    ["name"],
    registry=None,
)
WATCH_RESTARTS = Counter(
    "inferencecache_dispatcher_watch_restarts_total",
    "Watch streams re-established, by resource and cause (expired = 410 Gone re-list).",
    ["resource", "cause"],
    registry=None,
)
T2_HIT_RATE = Gauge(
    "inferencecache_backend_t2_hit_rate",
    "Query-weighted tier-2 reload hit rate of a CacheBackend (status.indexParticipation."
    "t2HitRate), by backend (namespace/name); absent until the tier has been exercised. "
    "Leading dispatcher only.",
    ["backend"],
    registry=None,
)
LMCACHE_VERSION_SKEW = Gauge(
    "inferencecache_backend_lmcache_version_skew",
    "1 while a Managed LMCacheServer CacheBackend's engine pods run an lmcache client of "
    "another major.minor than its server (LMCacheVersionSkew=True), 0 otherwise. By backend "
    "(namespace/name). Leading dispatcher only.",
    ["backend"],
    registry=None,
)
BACKEND_CONDITION = Gauge(
    "inferencecache_backend_condition",
    "1 for each condition a CacheBackend has (status.conditions[]), by backend "
    "(namespace/name), type, status and reason. Leading dispatcher only.",
    ["backend", "type", "status", "reason"],
    registry=None,
)

CACHE_WATCH_RESTARTS = Counter(
    "inferencecache_worker_cache_watch_restarts_total",
    "Watch streams of a worker's cache re-established, by watch and cause (timeout, "
    "expired = 410 Gone re-list, error).",
    ["watch", "cause"],
    registry=None,
)
CACHE_LIVE_READS = Counter(
    "inferencecache_worker_cache_live_reads_total",
    "Reconcile reads sent to the API server because the worker's cache could not answer "
    "(not listed yet, a watch failing, an engine selector not watched yet), by read; "
    "unlabelled-injected-pod: an injected pod without the injected-by-uid label, read by "
    "name on every reconcile until its workload rolls; failed-create-events: the "
    "FailedCreate Events of a managed StatefulSet short of pods, listed on each of its "
    "reconciles until its pods exist.",
    ["read"],
    registry=None,
)

# The children with fixed labels, for the call sites.
ADDS = _ADDS.labels(QUEUE)
QUEUE_DURATION = _QUEUE_DURATION.labels(QUEUE)
WORK_DURATION = _WORK_DURATION.labels(QUEUE)
RECONCILE_ERRORS = _RECONCILE_ERRORS.labels(CONTROLLER)
RECONCILE_TIME = _RECONCILE_TIME.labels(CONTROLLER)
ACTIVE_WORKERS = _ACTIVE_WORKERS.labels(CONTROLLER)
MAX_CONCURRENT = _MAX_CONCURRENT.labels(CONTROLLER)


def retried(cause: str, count: int = 1) -> None:
    _RETRIES.labels(QUEUE, cause).inc(count)


def reconciled(result: str, seconds: float) -> None:
    """One finished reconcile: its result and how long it took."""
    _RECONCILES.labels(CONTROLLER, result).inc()
    if result == ERROR:
        RECONCILE_ERRORS.inc()
    RECONCILE_TIME.observe(seconds)


def lmcache_version_skew_value(obj: Mapping[str, Any]) -> float:
    """1 when the backend's LMCacheVersionSkew condition is True; 0 otherwise (aligned,
    unknown, or not published: the condition gauge tells those apart)."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == c.COND_LMCACHE_VERSION_SKEW:
            return 1.0 if cond.get("status") == "True" else 0.0
    return 0.0


def condition_series(obj: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """(type, status, reason) of every condition in a CacheBackend's status."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    out: set[tuple[str, str, str]] = set()
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type"):
            out.add(
                (str(cond["type"]), str(cond.get("status") or ""), str(cond.get("reason") or ""))
            )
    return out


class LeaderSeries:
    """The series only the leading dispatcher exports: the queue state it pumps and
    the per-CacheBackend gauges of the backends it watches, each backend's kept to
    exactly the conditions it has now (a changed reason replaces the old series; a
    deleted backend drops its own). Between ``stop`` and the next ``start`` every
    update is dropped, so a watch or pump thread finishing its last step after the
    Lease was lost cannot leave a standby reporting stale values."""

    def __init__(
        self,
        conditions: Gauge = BACKEND_CONDITION,
        t2: Gauge = T2_HIT_RATE,
        depth: Gauge = _DEPTH,
        failing: Gauge = _FAILING,
        skew: Gauge = LMCACHE_VERSION_SKEW,
    ) -> None:
        self._conditions, self._t2, self._depth, self._failing = conditions, t2, depth, failing
        self._skew = skew
        self._exported: dict[str, set[tuple[str, str, str]]] = {}
        self._leading = False
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            self._leading = True

    def stop(self) -> None:
        with self._lock:
            self._leading = False
            for gauge in (self._conditions, self._t2, self._depth, self._failing, self._skew):
                gauge.clear()
            self._exported.clear()

    def queue(self, depth: int, failing: int) -> None:
        with self._lock:
            if self._leading:
                self._depth.labels(QUEUE).set(depth)
                self._failing.labels(QUEUE).set(failing)

    def backend(self, key: str, obj: Mapping[str, Any] | None, t2_rate: float | None) -> None:
        """The gauges of backend ``key`` (namespace/name): ``obj`` None, it is gone;
        ``t2_rate`` None, its tier 2 has not been exercised. The version-skew gauge
        follows its LMCacheVersionSkew condition."""
        wanted = condition_series(obj) if obj is not None else set()
        skew = lmcache_version_skew_value(obj) if obj is not None else None
        with self._lock:
            if not self._leading:
                return
            for stale in self._exported.get(key, set()) - wanted:
                self._conditions.remove(key, *stale)
            for series in wanted:
                self._conditions.labels(key, *series).set(1)
            if wanted:
                self._exported[key] = wanted
            else:
                self._exported.pop(key, None)
            if t2_rate is None:
                with contextlib.suppress(KeyError):
                    self._t2.remove(key)
            else:
                self._t2.labels(key).set(t2_rate)
            if skew is None:
                with contextlib.suppress(KeyError):
                    self._skew.remove(key)
            else:
                self._skew.labels(key).set(skew)


LEADER_SERIES = LeaderSeries()


def set_leader(leading: bool, lease: str = DEFAULT_LEADER_LEASE) -> None:
    """This dispatcher took (True) or gave up (False) the Lease ``lease``; giving it up
    drops every leader-only series (:class:`LeaderSeries`)."""
    _LEADER.labels(lease).set(1 if leading else 0)
    if leading:
        LEADER_SERIES.start()
    else:
        LEADER_SERIES.stop()


def set_queue_state(depth: int, failing: int) -> None:
    LEADER_SERIES.queue(depth, failing)


# ---------------------------------------------------------------- running keys


class RunningKeys(Collector):
    """client-go's unfinished-work gauges for the keys this worker process runs:
    ``inferencecache_workqueue_unfinished_work_seconds`` (the summed age of every
    running key) and ``..._longest_running_processor_seconds`` (the oldest one),
    computed at scrape time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started: dict[object, float] = {}
        self._lock = threading.Lock()

    def start(self, token: object) -> None:
        with self._lock:
            self._started[token] = self._clock()

    def finish(self, token: object) -> None:
        with self._lock:
            self._started.pop(token, None)

    def ages(self) -> list[float]:
        now = self._clock()
        with self._lock:
            return [max(0.0, now - t) for t in self._started.values()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ages = self.ages()
        yield _queue_gauge(
            "inferencecache_workqueue_unfinished_work_seconds",
            "Seconds of work in progress in this worker process not yet observed by "
            "work_duration: the summed age of every running key (a large value with few "
            "completions means stuck reconciles).",
            sum(ages),
        )
        yield _queue_gauge(
            "inferencecache_workqueue_longest_running_processor_seconds",
            "Seconds the longest-running reconcile in this worker process has run.",
            max(ages, default=0.0),
        )


def _queue_gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["name"])
    family.add_metric([QUEUE], value)
    return family


RUNNING = RunningKeys()

DISPATCHER: Final = "dispatcher"
WORKER: Final = "worker"
# What each process feeds (docs/metrics.md, column "process").
_FAMILIES: Final[dict[str, tuple[Collector, ...]]] = {
    DISPATCHER: (
        _DEPTH,
        _FAILING,
        _ADDS,
        _RETRIES,
        _LEADER,
        WATCH_RESTARTS,
        T2_HIT_RATE,
        LMCACHE_VERSION_SKEW,
        BACKEND_CONDITION,
    ),
    WORKER: (
        _RETRIES,
        _QUEUE_DURATION,
        _WORK_DURATION,
        RUNNING,
        _RECONCILES,
        _RECONCILE_ERRORS,
        _RECONCILE_TIME,
        _ACTIVE_WORKERS,
        _MAX_CONCURRENT,
        API_WRITES,
        CACHE_WATCH_RESTARTS,
        CACHE_LIVE_READS,
    ),
}
# The label values the counters take, created at zero when a process registers its
# series (register()): a counter child otherwise appears on its first increment only,
# so a healthy process would not expose the series docs/metrics.md lists, and rate()
# would miss the first increment. tests/unit/monitoring/test_reconciler_metrics.py checks these
# lists against the call sites.
WATCH_CAUSES: Final = ("timeout", "expired", "error")  # reconciler/watch/watch_cache.py
DISPATCHER_RETRY_CAUSES: Final = ("lease_expired", "redispatch")
WORKER_RETRY_CAUSES: Final = ("error",)
# The dispatcher's watches, by resource (reconciler/dispatch/dispatcher.py _start_leading).
DISPATCHER_WATCHES: Final = tuple(
    r.plural for r in (k.CACHEBACKENDS, *DISPATCHER_OWNED_RESOURCES, k.PODS, k.REPLICASETS)
)
# The worker cache's watches and the reads it can fall back on (reconciler/watch/cluster_cache.py).
CACHE_WATCHES: Final = (
    k.CACHEBACKENDS.plural,
    *(r.plural for r in LISTED_OWNED_RESOURCES),
    "server-pods",
    "injected-pods",
    "engine-deployments",
    "engine-pods",
)
CACHE_READS: Final = (
    "cachebackend",
    "owned",
    "injected-pods",
    "engine-deployments",
    "engine-pods",
    "behind-dispatcher",
)
# (verb, resource) of every write a reconcile makes (reconciler/steps/reconcile.py).
API_WRITE_LABELS: Final = (
    *((verb, r.kind) for verb in ("apply", "delete") for r in OWNED_RESOURCES),
    ("update", "CacheBackend/status"),
    ("create", "Event"),
    ("patch", "Deployment"),
)
_CHILDREN: Final[dict[str, tuple[tuple[Any, tuple[tuple[str, ...], ...]], ...]]] = {
    DISPATCHER: (
        (_RETRIES, tuple((QUEUE, cause) for cause in DISPATCHER_RETRY_CAUSES)),
        (
            WATCH_RESTARTS,
            tuple((res, cause) for res in DISPATCHER_WATCHES for cause in WATCH_CAUSES),
        ),
    ),
    WORKER: (
        (_RETRIES, tuple((QUEUE, cause) for cause in WORKER_RETRY_CAUSES)),
        (_RECONCILES, tuple((CONTROLLER, result) for result in (SUCCESS, ERROR, REQUEUE_AFTER))),
        (
            CACHE_WATCH_RESTARTS,
            tuple((watch, cause) for watch in CACHE_WATCHES for cause in WATCH_CAUSES),
        ),
        (CACHE_LIVE_READS, tuple((read,) for read in CACHE_READS)),
        (API_WRITES, API_WRITE_LABELS),
    ),
}
# By registry: the families registered there (weak: a registry's id can be reused).
_registered: weakref.WeakKeyDictionary[CollectorRegistry, set[int]] = weakref.WeakKeyDictionary()
_register_lock = threading.Lock()


def register_metrics(role: str, registry: CollectorRegistry = REGISTRY) -> None:
    """Expose the series ``role`` (dispatcher, worker) feeds on ``registry``, with the
    counter children of its known label values at zero; idempotent, and a family both
    roles feed is registered once."""
    with _register_lock:
        done = _registered.setdefault(registry, set())
        for family in _FAMILIES[role]:
            if id(family) not in done:
                registry.register(family)
                done.add(id(family))
        for counter, children in _CHILDREN[role]:
            for labels in children:
                counter.labels(*labels)

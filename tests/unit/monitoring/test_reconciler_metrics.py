"""The reconciler's metric helpers: controller-runtime's reconcile series, the
per-backend condition gauge (exactly the conditions a backend has now) and client-go's
unfinished-work gauges (docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from reconciler import metrics
from reconciler.metrics import LeaderSeries, RunningKeys, condition_series
from tests.builders import conditioned_backend as _backend


def _samples(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    """The label sets of the samples named ``name``."""
    return [
        dict(sample.labels)
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name
    ]


def test_condition_series_reads_type_status_and_reason_of_every_condition() -> None:
    obj = _backend(("Ready", "False", "AwaitingFirstKVEvent"), ("Degraded", "False", "NotDegraded"))
    obj["status"]["conditions"].append({"status": "True"})  # no type: not a condition
    assert condition_series(obj) == {
        ("Ready", "False", "AwaitingFirstKVEvent"),
        ("Degraded", "False", "NotDegraded"),
    }
    assert condition_series({}) == set()


def _leader_series() -> tuple[CollectorRegistry, LeaderSeries]:
    registry = CollectorRegistry()
    series = LeaderSeries(
        Gauge("cond", "c", ["backend", "type", "status", "reason"], registry=registry),
        Gauge("t2", "t", ["backend"], registry=registry),
        Gauge("depth", "d", ["name"], registry=registry),
        Gauge("failing", "f", ["name"], registry=registry),
        Gauge("skew", "s", ["backend"], registry=registry),
    )
    return registry, series


def test_backend_condition_gauge_keeps_only_the_current_reason_and_goes_with_the_backend() -> None:
    """A changed reason replaces its series (an alert `for:` follows the live reason);
    a deleted backend leaves no series behind."""
    registry, series = _leader_series()
    series.start()
    series.backend("ns/cb", _backend(("Ready", "False", "RolloutInProgress")), 0.0)
    series.backend("ns/other", _backend(("Ready", "True", "KVEventsObserved")), None)
    series.backend("ns/cb", _backend(("Ready", "False", "ReplicasUnavailable")), 0.5)
    got = _samples(registry, "cond")
    assert {s["reason"] for s in got if s["backend"] == "ns/cb"} == {"ReplicasUnavailable"}
    assert registry.get_sample_value("t2", {"backend": "ns/cb"}) == 0.5
    series.backend("ns/cb", None, None)
    assert {s["backend"] for s in _samples(registry, "cond")} == {"ns/other"}
    assert _samples(registry, "t2") == []


def test_version_skew_gauge_follows_the_condition_and_goes_with_the_backend() -> None:
    """1 while LMCacheVersionSkew is True, 0 otherwise (False, Unknown, absent), and no
    series left behind by a deleted backend."""
    registry, series = _leader_series()
    series.start()

    def skew() -> float | None:
        return registry.get_sample_value("skew", {"backend": "ns/cb"})

    series.backend(
        "ns/cb", _backend(("LMCacheVersionSkew", "True", "ClientServerVersionSkew")), None
    )
    assert skew() == 1.0
    series.backend("ns/cb", _backend(("LMCacheVersionSkew", "False", "VersionsAligned")), None)
    assert skew() == 0.0
    series.backend(
        "ns/cb", _backend(("LMCacheVersionSkew", "Unknown", "ServerVersionUnknown")), None
    )
    assert skew() == 0.0
    series.backend(
        "ns/cb", _backend(("LMCacheVersionSkew", "True", "ClientServerVersionSkew")), None
    )
    series.backend("ns/cb", _backend(("Ready", "True", "BackendReady")), None)
    assert skew() == 0.0
    series.backend(
        "ns/cb", _backend(("LMCacheVersionSkew", "True", "ClientServerVersionSkew")), None
    )
    series.backend("ns/cb", None, None)
    assert _samples(registry, "skew") == []


def test_a_dispatcher_that_lost_the_lease_exports_nothing_until_it_leads_again() -> None:
    """A watch or pump thread finishing its last step after the Lease was lost must not
    leave a standby reporting a backend's (possibly stale) state or the queue's."""
    registry, series = _leader_series()
    series.backend("ns/cb", _backend(("Ready", "False", "X")), 0.0)  # never led: dropped
    series.start()
    series.backend(
        "ns/cb", _backend(("Ready", "True", "Y"), ("LMCacheVersionSkew", "True", "S")), 0.2
    )
    series.queue(depth=3, failing=1)
    assert registry.get_sample_value("depth", {"name": "cachebackend"}) == 3
    series.stop()
    series.backend("ns/cb", _backend(("Ready", "False", "Z")), 0.0)
    series.queue(depth=9, failing=9)
    for name in ("cond", "t2", "depth", "failing", "skew"):
        assert _samples(registry, name) == [], name


def test_running_keys_sum_and_max_the_ages_of_the_running_reconciles() -> None:
    now = [100.0]
    running = RunningKeys(clock=lambda: now[0])
    running.start("a")
    now[0] = 104.0
    running.start("b")
    now[0] = 110.0
    families = {f.name: f.samples[0].value for f in running.collect()}
    assert families == {
        "inferencecache_workqueue_unfinished_work_seconds": 16.0,
        "inferencecache_workqueue_longest_running_processor_seconds": 10.0,
    }
    running.finish("a")
    running.finish("b")
    assert {f.samples[0].value for f in running.collect()} == {0.0}


def test_an_error_counts_in_reconcile_total_and_in_reconcile_errors_total() -> None:
    registry = CollectorRegistry()
    metrics.register_metrics(metrics.WORKER, registry)

    def value(name: str, labels: dict[str, str]) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    by_result = {"controller": "cachebackend", "result": "error"}
    errors_before = value("inferencecache_reconcile_errors_total", {"controller": "cachebackend"})
    total_before = value("inferencecache_reconcile_total", by_result)
    metrics.reconciled(metrics.ERROR, 0.01)
    metrics.reconciled(metrics.SUCCESS, 0.01)
    assert value("inferencecache_reconcile_total", by_result) == total_before + 1
    assert (
        value("inferencecache_reconcile_errors_total", {"controller": "cachebackend"})
        == errors_before + 1
    )


def test_each_process_registers_the_series_it_feeds_once() -> None:
    """A worker does not expose the dispatcher's series (as zeros), nor the reverse;
    the retries counter, fed by both, is registered once in a process running both."""
    worker, dispatcher, both = CollectorRegistry(), CollectorRegistry(), CollectorRegistry()
    metrics.register_metrics(metrics.WORKER, worker)
    metrics.register_metrics(metrics.DISPATCHER, dispatcher)
    for role in (metrics.WORKER, metrics.DISPATCHER, metrics.WORKER):
        metrics.register_metrics(role, both)

    def names(registry: CollectorRegistry) -> set[str]:
        return {family.name for family in registry.collect()}

    assert "inferencecache_reconcile" in names(worker)
    assert "inferencecache_workqueue_depth" not in names(worker)
    assert "inferencecache_workqueue_depth" in names(dispatcher)
    assert "inferencecache_reconcile" not in names(dispatcher)
    assert names(both) == names(worker) | names(dispatcher)

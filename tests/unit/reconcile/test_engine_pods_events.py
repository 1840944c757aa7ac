"""The engine-pod events controller: which pods get InjectedByCacheBackend /
SkippedByOperator, recorded once; and the dispatcher's pod → backend mapping and T2 gauge."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client import REGISTRY

from reconciler import metrics
from reconciler.dispatch.dispatcher import Dispatcher, t2_hit_rate
from reconciler.dispatch.pod_events import (
    EnginePodEvents,
    injected_by_cache_backend_event,
    injected_by_claim,
    pod_event_name,
    pod_event_object,
    relevant,
    skipped_by_operator_event,
)
from reconciler.watch.enqueue_keys import pod_backend_key
from tests.builders import event_pod as pod
from tests.fakes import FakeKube

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


INJECTED = {"inferencecache.io/injected-by": "ns/cb", "inferencecache.io/injected-by-uid": "u1"}
SKIPPED = {
    "inferencecache.io/skip-inject": " True ",
    "inferencecache.io/inject-skipped": "skip-inject-annotation",
}


# ------------------------------------------------------------------ pure rules


def test_only_pods_with_a_decision_marker_matter() -> None:
    assert relevant(pod(INJECTED))
    assert relevant(pod(SKIPPED))
    assert not relevant(pod({"inferencecache.io/skip-inject": "true"}))
    assert not relevant(pod({}))


@pytest.mark.parametrize(
    ("annotations", "live_uid", "fires"),
    [
        (INJECTED, "u1", True),
        (INJECTED, None, False),  # the CR is NotFound
        (INJECTED, "u2", False),  # recreated under the same name / copied template
        ({"inferencecache.io/injected-by": "ns/cb"}, "u1", False),  # UID annotation absent
        ({**INJECTED, "inferencecache.io/injected-by": "other-ns/cb"}, "u1", False),
        ({**INJECTED, "inferencecache.io/injected-by": "cb"}, "u1", False),
    ],
)
def test_injected_by_cache_backend_needs_the_live_uid(
    annotations: dict[str, str], live_uid: str | None, fires: bool
) -> None:
    event = injected_by_cache_backend_event(injected_by_claim(pod(annotations)), live_uid)
    assert (event is not None) == fires
    if event is not None:
        assert event.reason == "InjectedByCacheBackend"
        assert event.type == "Normal"


@pytest.mark.parametrize(
    ("annotations", "fires"),
    [
        (SKIPPED, True),
        ({**SKIPPED, "inferencecache.io/skip-inject": "false"}, False),
        ({"inferencecache.io/skip-inject": "true"}, False),  # no webhook marker
        ({"inferencecache.io/inject-skipped": "skip-inject-annotation"}, False),
        ({**SKIPPED, "inferencecache.io/inject-skipped": "something-else"}, False),
    ],
)
def test_skipped_by_operator_needs_the_opt_out_and_the_marker(
    annotations: dict[str, str], fires: bool
) -> None:
    event = skipped_by_operator_event(pod(annotations))
    assert (event is not None) == fires


def test_event_name_is_deterministic_per_pod_uid_and_reason_and_valid() -> None:
    a = pod_event_name(pod(INJECTED), "InjectedByCacheBackend")
    assert a == pod_event_name(pod(INJECTED), "InjectedByCacheBackend")
    assert a != pod_event_name(pod(INJECTED), "SkippedByOperator")
    assert a != pod_event_name(pod(INJECTED, uid="other"), "InjectedByCacheBackend")
    assert a.startswith("engine-0.")
    assert a == a.lower()
    long_name = pod_event_name(pod(INJECTED, name="x" * 253), "SkippedByOperator")
    assert len(long_name) <= 253


def test_pod_event_object_targets_the_pod_by_uid() -> None:
    event = injected_by_cache_backend_event(injected_by_claim(pod(INJECTED)), "u1")
    assert event is not None
    body = pod_event_object(pod(INJECTED), event, NOW, "dispatcher-1")
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "engine-0",
        "namespace": "ns",
        "uid": "pod-uid",
        "resourceVersion": "7",
    }
    assert body["metadata"]["namespace"] == "ns"
    assert (body["type"], body["reason"], body["count"]) == ("Normal", "InjectedByCacheBackend", 1)


# ------------------------------------------------------------------ the shell


def kube_with(backends: dict[str, str]) -> FakeKube:
    """A FakeKube holding CacheBackends "namespace/name" -> uid."""
    kube = FakeKube()
    for key, uid in backends.items():
        kube.put_backend(key, uid)
    return kube


def recorder(kube: FakeKube) -> EnginePodEvents:
    return EnginePodEvents(kube, "dispatcher-1", clock=lambda: NOW)


def reasons(kube: FakeKube) -> list[str]:
    return sorted(e["reason"] for e in kube.events.values())


def test_records_each_event_once_across_updates() -> None:
    kube = kube_with({"ns/cb": "u1"})
    rec = recorder(kube)
    p = pod(INJECTED)
    rec.observe("ADDED", p)
    rec.observe("MODIFIED", p)
    rec.observe("MODIFIED", p)
    assert reasons(kube) == ["InjectedByCacheBackend"]
    assert [c for c in kube.calls if c[0] == "create"] == [("create", next(iter(kube.events)))]


def test_a_second_recorder_upserts_nothing_new() -> None:
    kube = kube_with({"ns/cb": "u1"})
    recorder(kube).observe("ADDED", pod(INJECTED))
    recorder(kube).observe("ADDED", pod(INJECTED))  # a new leader: 409, nothing new
    assert reasons(kube) == ["InjectedByCacheBackend"]


def test_an_already_recorded_event_409_is_done_not_retried() -> None:
    """Contract Notes: 'a re-enqueue across controller restarts upserts the existing
    event rather than spamming' — the 409 on the deterministic Event name means
    'recorded before', so the new leader marks it done instead of retrying it."""
    kube = kube_with({"ns/cb": "u1"})
    recorder(kube).observe("ADDED", pod(INJECTED))
    second = recorder(kube)
    second.observe("ADDED", pod(INJECTED))
    creates = [c for c in kube.calls if c[0] == "create"]
    assert len(creates) == 2  # the first recorder's, and the second's 409
    second.retry()
    second.observe("MODIFIED", pod(INJECTED))
    assert [c for c in kube.calls if c[0] == "create"] == creates
    assert reasons(kube) == ["InjectedByCacheBackend"]


def test_mismatch_and_not_found_are_final_skips() -> None:
    kube = kube_with({"ns/cb": "recreated"})
    rec = recorder(kube)
    rec.observe("ADDED", pod(INJECTED))
    rec.observe("MODIFIED", pod(INJECTED))
    assert kube.events == {}
    assert kube.calls == [("get", "ns/cb")]  # decided once
    gone = kube_with({})
    rec = recorder(gone)
    rec.observe("ADDED", pod(INJECTED))
    assert gone.events == {}


def test_pods_of_one_backend_cost_one_lookup_but_a_miss_is_always_rechecked() -> None:
    kube = kube_with({"ns/cb": "u1"})
    rec = recorder(kube)
    for i in range(3):
        rec.observe("ADDED", pod(INJECTED, name=f"e{i}", uid=f"p{i}"))
    assert reasons(kube) == ["InjectedByCacheBackend"] * 3
    assert [c for c in kube.calls if c[0] == "get"] == [("get", "ns/cb")]
    # The CR is recreated: a pod stamped with the new UID is checked live, not skipped.
    kube.put_backend("ns/cb", "u2")
    rec.observe("ADDED", pod({**INJECTED, "inferencecache.io/injected-by-uid": "u2"}, uid="p9"))
    assert reasons(kube) == ["InjectedByCacheBackend"] * 4


def test_skipped_pod_gets_skipped_by_operator_without_a_lookup() -> None:
    kube = kube_with({})
    recorder(kube).observe("ADDED", pod(SKIPPED))
    assert reasons(kube) == ["SkippedByOperator"]
    assert all(call[0] == "create" for call in kube.calls)


def test_lookup_errors_are_retried() -> None:
    kube = kube_with({"ns/cb": "u1"})
    kube.fail_get = True
    rec = recorder(kube)
    rec.observe("ADDED", pod(INJECTED))
    assert kube.events == {}
    kube.fail_get = False
    rec.retry()
    assert reasons(kube) == ["InjectedByCacheBackend"]
    rec.retry()  # nothing pending any more
    assert len([c for c in kube.calls if c[0] == "create"]) == 1


def test_pods_without_uid_terminating_or_unmarked_are_ignored() -> None:
    kube = kube_with({"ns/cb": "u1"})
    rec = recorder(kube)
    rec.observe("ADDED", pod(INJECTED, uid=""))
    terminating = pod(INJECTED)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    rec.observe("MODIFIED", terminating)
    rec.observe("ADDED", pod({}))
    assert kube.calls == []


def test_deleted_pods_are_forgotten() -> None:
    kube = kube_with({"ns/cb": "u1"})
    rec = recorder(kube)
    rec.observe("ADDED", pod(INJECTED))
    rec.observe("DELETED", pod(INJECTED))
    assert rec._done == set()


# ------------------------------------------------------------------ dispatcher helpers


def test_pod_backend_key_maps_injected_and_cache_server_pods() -> None:
    assert pod_backend_key(pod(INJECTED)) == "ns/cb"
    assert pod_backend_key(pod({"inferencecache.io/injected-by": "other/cb"})) is None
    server = {
        "metadata": {
            "namespace": "ns",
            "labels": {
                "app.kubernetes.io/managed-by": "inference-cache",
                "inferencecache.io/cachebackend": "cb",
            },
        }
    }
    assert pod_backend_key(server) == "ns/cb"
    assert pod_backend_key({"metadata": {"namespace": "ns", "labels": {"app": "x"}}}) is None


def test_t2_hit_rate_reads_the_status_field() -> None:
    assert t2_hit_rate({"status": {"indexParticipation": {"t2HitRate": "0.25"}}}) == 0.25
    assert t2_hit_rate({"status": {"indexParticipation": {"t2HitRate": "0"}}}) == 0.0
    assert t2_hit_rate({"status": {"indexParticipation": {}}}) is None
    assert t2_hit_rate({"status": {"indexParticipation": {"t2HitRate": "bad"}}}) is None
    assert t2_hit_rate({}) is None


def _gauge(backend: str) -> float | None:
    metrics.register_metrics(metrics.DISPATCHER)
    return REGISTRY.get_sample_value("inferencecache_backend_t2_hit_rate", {"backend": backend})


def test_t2_gauge_follows_the_backend_status_and_goes_with_it() -> None:
    metrics.set_leader(True)  # only the leader exports backend gauges
    key = "gauge-ns/cb"
    with_rate: dict[str, Any] = {
        "metadata": {"namespace": "gauge-ns", "name": "cb"},
        "status": {"indexParticipation": {"t2HitRate": "0"}},
    }
    Dispatcher._export_t2(key, with_rate)
    assert _gauge(key) == 0.0
    with_rate["status"]["indexParticipation"]["t2HitRate"] = "0.5"
    Dispatcher._export_t2(key, with_rate)
    assert _gauge(key) == 0.5
    Dispatcher._export_t2(key, {"metadata": with_rate["metadata"], "status": {}})
    assert _gauge(key) is None
    Dispatcher._export_t2(key, None)  # already absent: no error
    Dispatcher._export_t2(key, with_rate)
    Dispatcher._export_t2(key, None)  # deleted backend
    assert _gauge(key) is None
    metrics.set_leader(False)

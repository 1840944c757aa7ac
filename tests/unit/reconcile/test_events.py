"""CacheBackend Events: the recorded object, and Events as best effort in the shell.

Which transitions deserve which Event is pinned by test_status.py and
test_reconcile_spec_cases.py; these tests pin what is recorded and how.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from reconciler.status.events import EventSpec, event_object
from tests.fakes import FailingEvents, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def cb_obj(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {
            "name": "cb",
            "namespace": "ns",
            "uid": "cb-uid",
            "generation": 1,
            "resourceVersion": "42",
        },
        "spec": spec or {"runtime": "VLLM", "integration": {"failOpen": False}},
    }


def test_event_object_targets_the_cache_backend_by_uid() -> None:
    """Contract Notes: Events are recorded 'on the CacheBackend'; kubectl describe
    filters Events by involvedObject.uid, so an Event without the CR's uid would be
    invisible there (the reason the Pod webhook records none itself)."""
    event = EventSpec("Warning", "FailClosedEnabled", "m" * 2000)
    body = event_object(cb_obj(), event, NOW, "worker-1")
    assert body["involvedObject"] == {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "name": "cb",
        "namespace": "ns",
        "uid": "cb-uid",
        "resourceVersion": "42",
    }
    assert body["metadata"]["namespace"] == "ns"
    assert (body["type"], body["reason"], body["count"]) == ("Warning", "FailClosedEnabled", 1)
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-01-01T12:00:00Z"
    assert body["reportingComponent"] == body["source"]["component"]
    assert body["reportingInstance"] == "worker-1"
    assert len(body["message"]) <= 1024


def test_a_failed_event_write_does_not_fail_the_reconcile_or_repeat() -> None:
    """Transition Events are best effort (docs/decisions.md): a refused Event write is logged,
    the status write stands, and — since Events are keyed on the old→new status
    transition and 'never on steady-state reconciles' — the next, idle reconcile
    neither retries it nor writes anything."""
    kube = FailingEvents()
    kube.put("cachebackends", cb_obj())
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    result = rec.reconcile("ns/cb")
    assert ("status", "cachebackends", "cb") in kube.writes
    assert ("create-failed", "events", "FailClosedEnabled") in kube.writes
    assert kube.objects[("cachebackends", "ns", "cb")]["status"]["failOpen"] is False
    assert result.mode == "HostOnly"
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == []

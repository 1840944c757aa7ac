"""The reconcile shell sheds owned objects the new spec no longer renders.

The e2e mode-switch test walks Managed → External → EventsOnly; the spec's own
example is the direct flip: 'Flipping an existing Offload backend to EventsOnly sheds
the previously-provisioned Deployment + Service on the next reconcile.'
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tests.fakes import FakeKube, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
OWNED = (
    "secrets",
    "networkpolicies",
    "deployments",
    "statefulsets",
    "services",
    "horizontalpodautoscalers",
)


def owned(kube: FakeKube) -> set[tuple[str, str]]:
    return {(plural, name) for (plural, _, name) in kube.objects if plural in OWNED}


def test_offload_to_events_only_flip_sheds_the_provisioned_objects_on_the_next_reconcile() -> None:
    kube = FakeKube()
    spec: dict[str, Any] = {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        "autoscaling": {"minReplicas": 1, "maxReplicas": 3},
        "observation": {"modelID": "Qwen/Qwen3-Next"},
    }
    kube.put(
        "cachebackends",
        {
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": {"name": "cb", "namespace": "ns", "uid": "cb-uid", "generation": 1},
            "spec": spec,
        },
    )
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    assert owned(kube) == {
        ("networkpolicies", "cb-lmcache-server"),
        ("deployments", "cb-lmcache-server"),
        ("services", "cb-lmcache-server"),
        ("horizontalpodautoscalers", "cb-lmcache-server"),
    }
    status = kube.objects[("cachebackends", "ns", "cb")]["status"]
    assert status["endpoint"] == "cb-lmcache-server.ns.svc:65432"

    # Admission forbids remoteStorage and autoscaling on an events-only backend.
    cb = kube.objects[("cachebackends", "ns", "cb")]
    cb["spec"] = {
        "runtime": "VLLM",
        "integration": {"mode": "EventsOnly"},
        "observation": {"modelID": "Qwen/Qwen3-Next"},
    }
    cb["metadata"]["generation"] = 2
    kube.writes.clear()
    result = rec.reconcile("ns/cb")
    assert result.mode == "EventsOnly"
    assert owned(kube) == set()
    assert {w for w in kube.writes if w[0] == "delete"} == {
        ("delete", plural, "cb-lmcache-server")
        for plural in ("networkpolicies", "deployments", "services", "horizontalpodautoscalers")
    }
    status = kube.objects[("cachebackends", "ns", "cb")]["status"]
    # 'status.endpoint stays empty (there is no server address to publish)'.
    assert "endpoint" not in status
    assert {c["type"] for c in status["conditions"]} == {"Ready", "Degraded", "Progressing"}

    # Shedding is done once: the next pass is idle.
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == []

"""The reconcile shell's side of the functional-probe gate: when /probe is called, and with what.

``functional_probe_gate`` (pure, in test_status.py) decides what a probe outcome does
to the conditions; these tests pin the shell's decisions around it — the spec's
"The probe gate only fires when the upstream KV-event gate would otherwise say
Ready=True", "External ownership is always exempt", the once-per-window rate limit,
and the request body of docs/server-contract.md (hashScheme from spec.runtime).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from reconciler.steps.reconcile import Reconciler
from tests.builders import NO_GATE
from tests.fakes import FakeIndexServer as FakeServer
from tests.fakes import FakeKube, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
LMSERVER: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
    "observation": {"modelID": "Qwen/Qwen3"},
}


def make(
    spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> tuple[FakeKube, FakeServer, Reconciler]:
    kube = FakeKube()
    meta: dict[str, Any] = {"name": "cb", "namespace": "ns", "uid": "cb-uid", "generation": 1}
    if annotations:
        meta["annotations"] = dict(annotations)
    kube.put(
        "cachebackends",
        {
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": meta,
            "spec": spec,
        },
    )
    server = FakeServer()
    rec = in_process_reconciler(kube, server=server, clock=lambda: NOW)
    return kube, server, rec


def mark_workload_available(kube: FakeKube) -> None:
    for (plural, _, _), obj in kube.objects.items():
        if plural in ("deployments", "statefulsets"):
            obj["status"] = {
                "observedGeneration": 1,
                "replicas": 1,
                "updatedReplicas": 1,
                "readyReplicas": 1,
                "availableReplicas": 1,
            }


def conditions(kube: FakeKube) -> dict[str, tuple[str, str]]:
    status = kube.objects[("cachebackends", "ns", "cb")].get("status") or {}
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def test_no_probe_until_the_upstream_gates_would_say_ready() -> None:
    """'The probe gate only fires when the upstream KV-event gate would otherwise say
    Ready=True (a broken upstream can't be diagnosed by a downstream probe, and
    probing every not-yet-ready backend on every reconcile is pure noise).'"""
    kube, server, rec = make(LMSERVER)
    rec.reconcile("ns/cb")  # workload created, rolling out
    assert conditions(kube)["Ready"] == ("False", "RolloutInProgress")
    mark_workload_available(kube)
    rec.reconcile("ns/cb")
    assert conditions(kube)["Ready"] == ("False", "AwaitingFirstKVEvent")
    assert server.calls == []
    assert "FunctionalProbeOK" not in conditions(kube)

    cb = kube.objects[("cachebackends", "ns", "cb")]
    cb["status"]["indexParticipation"] = {"prefixCount": 1, "lastEventAt": "2026-01-01T11:59:00Z"}
    rec.reconcile("ns/cb")
    assert len(server.calls) == 1
    assert conditions(kube)["Ready"] == ("True", "KVEventsObserved")
    assert conditions(kube)["FunctionalProbeOK"] == ("True", "ProbeOK")


def test_probe_is_called_once_per_rate_limit_window() -> None:
    """'the server-side /probe endpoint the controller POSTs to once per backend per
    rate-limit window (~30s)'; a rate-limited reconcile requeues at the window expiry."""
    kube, server, rec = make(LMSERVER, NO_GATE)
    rec.reconcile("ns/cb")
    mark_workload_available(kube)
    rec.reconcile("ns/cb")
    assert len(server.calls) == 1
    result = rec.reconcile("ns/cb")
    assert len(server.calls) == 1, "inside the window: no second call"
    assert result.requeue_after is not None
    assert 0 < result.requeue_after <= 30
    assert conditions(kube)["FunctionalProbeOK"] == ("True", "ProbeOK")


@pytest.mark.parametrize(
    ("spec", "body"),
    [
        (
            LMSERVER,
            {"model": "Qwen/Qwen3", "hash_scheme": "vllm", "backend_type": "LMCache"},
        ),
        (
            {
                "runtime": "SGLang",
                "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
                "observation": {"modelID": "Qwen/Qwen3-8B"},
            },
            {"model": "Qwen/Qwen3-8B", "hash_scheme": "sglang", "backend_type": "LMCache"},
        ),
    ],
    ids=["vllm", "sglang"],
)
def test_probe_request_carries_backend_model_hash_scheme_and_type(
    spec: dict[str, Any], body: dict[str, Any]
) -> None:
    """docs/server-contract.md, POST /probe: backend '<namespace>/<name>', model
    spec.observation.modelID, hashScheme 'vllm or sglang (from spec.runtime)',
    backendType 'LMCache when the engine cache is LMCache'."""
    kube, server, rec = make(spec, NO_GATE)
    rec.reconcile("ns/cb")
    mark_workload_available(kube)
    rec.reconcile("ns/cb")
    assert server.calls == [{"backend": "ns/cb", **body}]


@pytest.mark.parametrize(
    "spec",
    [
        {
            "runtime": "VLLM",
            "remoteStorage": {
                "provider": "LMCacheServer",
                "ownership": "External",
                "endpoint": "lmcache.example:65432",
            },
        },
        {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}},
        {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}},
    ],
    ids=["external", "events-only", "host-only"],
)
def test_backends_without_a_managed_server_are_never_probed(spec: dict[str, Any]) -> None:
    """'External ownership is always exempt — there is no managed Deployment for the
    gate to compose with'; FunctionalProbeOK is Offload-managed-only ('there is no
    provisioned server to functionally probe'), so Ready=True backends of the other
    shapes never cost a /probe call."""
    kube, server, rec = make(spec, NO_GATE)
    rec.reconcile("ns/cb")
    rec.reconcile("ns/cb")
    assert conditions(kube)["Ready"][0] == "True"
    assert "FunctionalProbeOK" not in conditions(kube)
    assert server.calls == []


def test_skip_annotation_publishes_bypassed_without_calling_the_server() -> None:
    """'when set, the probe call is skipped entirely and FunctionalProbeOK=True/
    ProbeBypassed is published — the Ready gate does not downgrade.'"""
    kube, server, rec = make(
        LMSERVER, {**NO_GATE, "inferencecache.io/skip-functional-probe": "true"}
    )
    rec.reconcile("ns/cb")
    mark_workload_available(kube)
    rec.reconcile("ns/cb")
    assert server.calls == []
    assert conditions(kube)["FunctionalProbeOK"] == ("True", "ProbeBypassed")
    assert conditions(kube)["Ready"] == ("True", "BackendReady")

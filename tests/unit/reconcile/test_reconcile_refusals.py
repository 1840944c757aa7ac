"""The reconcile shell surfaces a managed workload's refused pods (decision "A tier
that cannot start says why") and rolls an existing tier onto the hardened template
once (decision "Managed tiers restricted by default", upgrade). The real-API-server
proof is tests/e2e/tiers/test_restricted_tiers.py."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from shared.conditions import find
from shared.storage_providers.render import ANNOTATION_SPEC_HASH
from tests.builders import status_backend
from tests.fakes import FakeKube, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
UID = "cb-uid"
WORKLOAD = "cb-lmcache-server"
REFUSAL = (
    "create Pod cb-lmcache-server-0 in StatefulSet cb-lmcache-server failed error: pods "
    '"cb-lmcache-server-0" is forbidden: violates PodSecurity "restricted:latest": '
    "runAsUser=0 (pod must not set runAsUser=0)"
)


def spec(**extra: Any) -> dict[str, Any]:
    return {
        "runtime": "VLLM",
        "engineSelector": {"matchLabels": {"app": "engine"}},
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        **extra,
    }


def ready(kube: FakeKube) -> dict[str, Any]:
    cb = kube.objects[("cachebackends", "ns", "cb")]
    cond = find(cb["status"]["conditions"], "Ready")
    assert cond is not None
    return cond


def failed_create(kube: FakeKube, involved_uid: str, stamp: str, message: str) -> None:
    kube.put(
        "events",
        {
            "metadata": {"name": f"sts.{stamp}", "namespace": "ns"},
            "involvedObject": {"kind": "StatefulSet", "name": WORKLOAD, "uid": involved_uid},
            "reason": "FailedCreate",
            "type": "Warning",
            "message": message,
            "lastTimestamp": stamp,
        },
    )


def pod_creation_events(kube: FakeKube) -> list[str]:
    return [w[2] for w in kube.writes if w[:2] == ("create", "events") and "PodCreation" in w[2]]


def test_a_statefulset_short_of_pods_reports_its_latest_failed_create() -> None:
    """A StatefulSet has no ReplicaFailure: its FailedCreate Events (about this very
    StatefulSet) give Ready/Progressing PodCreationFailed, and one Warning Event."""
    kube = FakeKube()
    kube.put(
        "cachebackends",
        status_backend(spec(deploymentKind="StatefulSet"), uid=UID),
    )
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    sts = kube.objects[("statefulsets", "ns", WORKLOAD)]
    sts["status"] = {"observedGeneration": 1, "replicas": 0}
    failed_create(kube, sts["metadata"]["uid"], "2026-01-01T11:59:00Z", "older refusal")
    failed_create(kube, sts["metadata"]["uid"], "2026-01-01T11:59:30Z", REFUSAL)
    failed_create(kube, "another-uid", "2026-01-01T11:59:50Z", "a namesake's refusal")
    rec.reconcile("ns/cb")
    assert ready(kube)["reason"] == "PodCreationFailed"
    assert REFUSAL in ready(kube)["message"]
    assert pod_creation_events(kube) == ["PodCreationFailed"]
    rec.reconcile("ns/cb")
    assert pod_creation_events(kube) == ["PodCreationFailed"]  # not one per reconcile


def test_a_statefulset_with_its_pods_reads_no_events() -> None:
    """Idle cost: a StatefulSet with every pod created lists no Events."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(spec(deploymentKind="StatefulSet"), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    sts = kube.objects[("statefulsets", "ns", WORKLOAD)]
    sts["status"] = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 0}
    failed_create(kube, sts["metadata"]["uid"], "2026-01-01T11:59:30Z", REFUSAL)
    rec.reconcile("ns/cb")
    assert ready(kube)["reason"] != "PodCreationFailed"


def test_an_existing_tier_gets_the_hardened_template_in_one_rollout() -> None:
    """Upgrade: a workload rendered before hardening (no securityContext, an old
    spec hash) is applied once; the next reconcile writes nothing."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(spec()), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    live = kube.objects[("deployments", "ns", WORKLOAD)]
    pod = live["spec"]["template"]["spec"]
    pod.pop("securityContext")
    pod.pop("automountServiceAccountToken")
    pod.pop("volumes")
    pod["containers"][0].pop("securityContext")
    live["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = "pre-hardening"
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert [w for w in kube.writes if w[1] == "deployments"] == [("apply", "deployments", WORKLOAD)]
    assert (
        kube.objects[("deployments", "ns", WORKLOAD)]["spec"]["template"]["spec"][
            "automountServiceAccountToken"
        ]
        is False
    )
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert [w for w in kube.writes if w[1] == "deployments"] == []

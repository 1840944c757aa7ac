"""A managed tier that cannot create its pods says why (decision "A tier that cannot
start says why"): Ready=False and Progressing=False with reason PodCreationFailed and
the API server's message; Degraded by the spec's rules as they stand; one Warning
Event on entering the state."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from reconciler.status.compute import compute_status
from reconciler.status.events import transition_events
from reconciler.status.observed import Observed, WorkloadObservation, replica_failure_message
from shared.api.models import CacheBackend
from tests.builders import ENDPOINT, MANAGED_SPEC, NO_GATE, T0
from tests.builders import condition_of as cond
from tests.builders import status_backend as obj

REFUSAL = (
    'pods "cache-redis-5d8f-abcde" is forbidden: violates PodSecurity "restricted:latest": '
    "allowPrivilegeEscalation != false"
)


def refused_deployment(**status: Any) -> dict[str, Any]:
    """A Deployment whose ReplicaSet's pod creations are refused: no replicas, and the
    ReplicaFailure condition the Deployment controller copies from the ReplicaSet."""
    return {
        "kind": "Deployment",
        "metadata": {"generation": 1},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetCreated",
                },
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": REFUSAL,
                },
            ],
            **status,
        },
    }


def observed(w: WorkloadObservation) -> Observed:
    return Observed(workload=w, service_endpoint=ENDPOINT)


def step(o: dict[str, Any], w: WorkloadObservation, now: dt.datetime = T0) -> dict[str, Any]:
    o = dict(o)
    o["status"] = compute_status(
        CacheBackend.model_validate(o), o.get("status"), observed(w), now
    ).status
    return o


def test_replica_failure_condition_is_read_from_the_workload() -> None:
    """The Deployment's ReplicaFailure=True message is the observation."""
    w = WorkloadObservation.from_object(refused_deployment())
    assert w.pod_creation_failure == REFUSAL
    assert replica_failure_message([{"type": "ReplicaFailure", "status": "False"}]) is None


def test_refused_pods_are_pod_creation_failed_not_rollout_in_progress() -> None:
    """Ready=False and Progressing=False carry PodCreationFailed and the API server's
    message; not rolled out, so Degraded stays False (spec: Degraded is
    ReplicasUnavailable once rolled out)."""
    st = step(obj(), WorkloadObservation.from_object(refused_deployment()))["status"]
    assert cond(st, "Ready") == ("False", "PodCreationFailed")
    assert cond(st, "Progressing") == ("False", "PodCreationFailed")
    assert cond(st, "Degraded") == ("False", "NotDegraded")
    ready = next(x for x in st["conditions"] if x["type"] == "Ready")
    assert REFUSAL in ready["message"]


def test_refusal_past_the_progress_deadline_is_also_replicas_unavailable() -> None:
    """Degraded follows the spec's rules: past the progress deadline the workload is
    ReplicasUnavailable, so Degraded=True/ReplicasUnavailable, Ready keeps the cause."""
    w = dataclasses.replace(
        WorkloadObservation.from_object(refused_deployment()), progress_deadline_exceeded=True
    )
    st = step(obj(), w)["status"]
    assert cond(st, "Ready") == ("False", "PodCreationFailed")
    assert cond(st, "Progressing") == ("False", "PodCreationFailed")
    assert cond(st, "Degraded") == ("True", "ReplicasUnavailable")


def test_an_available_workload_keeps_its_verdict() -> None:
    """A stale ReplicaFailure on a workload with every replica available does not
    downgrade a serving backend."""
    available = refused_deployment(replicas=1, updatedReplicas=1, availableReplicas=1)
    available["status"]["conditions"][0]["reason"] = "NewReplicaSetAvailable"
    st = step(obj(annotations=NO_GATE), WorkloadObservation.from_object(available))["status"]
    assert cond(st, "Ready") == ("True", "BackendReady")


def test_scaled_to_zero_keeps_its_verdict() -> None:
    spec = dict(MANAGED_SPEC, replicas=0)
    refused = refused_deployment()
    refused["spec"]["replicas"] = 0
    st = step(obj(spec), WorkloadObservation.from_object(refused))["status"]
    assert cond(st, "Ready") == ("False", "ScaledToZero")


def test_one_warning_event_on_entering_the_state() -> None:
    """One Warning PodCreationFailed on entering, none on later reconciles, none on
    leaving; entering again is a new Event."""
    refused = WorkloadObservation.from_object(refused_deployment())
    first = step(obj(), WorkloadObservation.from_object({"kind": "Deployment"}))
    second = step(first, refused)
    events = transition_events(first["status"], second["status"])
    assert [(e.type, e.reason) for e in events] == [("Warning", "PodCreationFailed")]
    assert REFUSAL in events[0].message
    later = step(second, refused, T0 + dt.timedelta(minutes=1))
    assert [e.reason for e in transition_events(second["status"], later["status"])] == []
    fixed = step(later, WorkloadObservation.from_object({"kind": "Deployment"}))
    assert [e.reason for e in transition_events(later["status"], fixed["status"])] == []
    again = step(fixed, refused)
    assert [e.reason for e in transition_events(fixed["status"], again["status"])] == [
        "PodCreationFailed"
    ]

"""Ready's Deployment-level reasons from a Deployment status as kube-controller-manager
writes it (its counts *and* its Progressing condition), not only from counts.

Spec, Conditions: Ready is True "once the backend Deployment has rolled out its current
generation, has enough updated + available replicas"; Degraded/ReplicasUnavailable is
"rolled out but replicas unavailable"; Progressing is True while a "rollout [is] in
flight". The Deployment controller counts a pod as updated the moment it exists, so a
first rollout whose pod is still starting has the same counts as a finished rollout
that lost its pod; its Progressing condition tells them apart. The e2e test
tests/e2e/rollouts/test_rollouts.py shows both against the real controller.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.status.compute import compute_status
from reconciler.status.observed import Observed, WorkloadObservation
from shared.api.models import CacheBackend
from tests.builders import ENDPOINT, NO_GATE, T0
from tests.builders import condition_of as cond
from tests.builders import status_backend as obj


def deployment(
    progressing_reason: str | None,
    *,
    available: int,
    desired: int = 1,
    progressing_status: str = "True",
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": 1,
        "replicas": desired,
        "updatedReplicas": desired,
        "readyReplicas": available,
        "availableReplicas": available,
    }
    if progressing_reason is not None:
        status["conditions"] = [
            {"type": "Progressing", "status": progressing_status, "reason": progressing_reason}
        ]
    return {
        "kind": "Deployment",
        "metadata": {"generation": 1},
        "spec": {"replicas": desired},
        "status": status,
    }


def ready_of(workload: dict[str, Any]) -> dict[str, tuple[str, str] | None]:
    observed = Observed(
        workload=WorkloadObservation.from_object(workload), service_endpoint=ENDPOINT
    )
    st = compute_status(
        CacheBackend.model_validate(obj(annotations=NO_GATE)),
        obj(annotations=NO_GATE).get("status"),
        observed,
        T0,
    ).status
    return {t: cond(st, t) for t in ("Ready", "Degraded", "Progressing")}


@pytest.mark.parametrize(
    "reason", ["NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"]
)
def test_a_pod_of_a_rollout_in_flight_still_starting_is_rollout_in_progress(reason: str) -> None:
    got = ready_of(deployment(reason, available=0))
    assert got["Ready"] == ("False", "RolloutInProgress")
    assert got["Progressing"] == ("True", "RolloutInProgress")
    assert got["Degraded"] == ("False", "NotDegraded")


def test_a_finished_rollout_that_lost_its_replicas_is_replicas_unavailable() -> None:
    got = ready_of(deployment("NewReplicaSetAvailable", available=0))
    assert got["Ready"] == ("False", "ReplicasUnavailable")
    assert got["Degraded"] == ("True", "ReplicasUnavailable")


def test_a_finished_rollout_with_every_replica_available_is_backend_ready() -> None:
    assert ready_of(deployment("NewReplicaSetAvailable", available=2, desired=2))["Ready"] == (
        "True",
        "BackendReady",
    )


def test_a_stuck_rollout_past_its_progress_deadline_is_replicas_unavailable() -> None:
    got = ready_of(deployment("ProgressDeadlineExceeded", available=0, progressing_status="False"))
    assert got["Degraded"] == ("True", "ReplicasUnavailable")


def test_a_status_without_conditions_is_read_from_its_counts() -> None:
    # A StatefulSet, or a status some other writer filled in: the counts decide.
    assert ready_of(deployment(None, available=0))["Ready"] == ("False", "ReplicasUnavailable")
    assert ready_of(deployment(None, available=1))["Ready"] == ("True", "BackendReady")

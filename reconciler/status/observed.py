"""What a reconcile observed in the cluster, as the status rules read it: the managed
workload, the engine pods, the functional probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from reconciler.status.engine_pods import (
    InjectedPodsObservation,
)
from reconciler.status.ownership import (
    NameConflict,
)
from shared import constants as c
from shared.objects import metadata
from shared.tenancy import ConsumerStanding

#: The Deployment controller's Progressing reason once a rollout has completed.
DEPLOYMENT_ROLLOUT_COMPLETE_REASON: Final = "NewReplicaSetAvailable"


def replica_failure_message(conditions: Any) -> str | None:
    """The message of a workload's ReplicaFailure=True condition (the Deployment
    controller copies it from its ReplicaSet: the API server's refusal of a pod
    create); None without one."""
    for cond in conditions or ():
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return str(cond.get("message") or cond.get("reason") or "pod creation failed")
    return None


@dataclass(frozen=True)
class WorkloadObservation:
    """The managed Deployment/StatefulSet as read back from the API server."""

    kind: str
    generation: int
    observed_generation: int
    spec_replicas: int
    replicas: int = 0
    updated_replicas: int = 0
    available_replicas: int = 0
    ready_replicas: int = 0
    progress_deadline_exceeded: bool = False
    #: The workload's own word on its rollout, when it gives one. A Deployment's
    #: Progressing condition reads NewReplicaSetAvailable once the ReplicaSet of its
    #: current template has become available (True), and an in-flight reason
    #: (NewReplicaSetCreated, FoundNewReplicaSet, ReplicaSetUpdated) before (False).
    #: None when it says nothing: a StatefulSet, or a status without conditions.
    rollout_complete: bool | None = None
    #: Why the workload cannot create its pods, in the API server's words (a Pod
    #: Security violation, a quota refusal): a Deployment's ReplicaFailure condition,
    #: a StatefulSet's latest FailedCreate Event. None while nothing is refused.
    pod_creation_failure: str | None = None

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> WorkloadObservation:
        spec = obj.get("spec") or {}
        st = obj.get("status") or {}
        progressing = next(
            (cond for cond in st.get("conditions") or () if cond.get("type") == "Progressing"),
            None,
        )
        deadline = (
            progressing is not None
            and progressing.get("status") == "False"
            and progressing.get("reason") == "ProgressDeadlineExceeded"
        )
        replicas = spec.get("replicas")
        kind = str(obj.get("kind") or c.DEPLOYMENT_KIND_DEPLOYMENT)
        available = int(st.get("availableReplicas") or 0)
        if kind == c.DEPLOYMENT_KIND_STATEFULSET:
            # Our StatefulSets set no minReadySeconds, so a Ready replica is an available
            # one; readyReplicas is the StatefulSet's long-standing count
            # (availableReplicas came later and not every writer fills it in).
            available = max(available, int(st.get("readyReplicas") or 0))
        return cls(
            kind=kind,
            generation=int(metadata(obj).get("generation") or 0),
            observed_generation=int(st.get("observedGeneration") or 0),
            spec_replicas=1 if replicas is None else int(replicas),
            replicas=int(st.get("replicas") or 0),
            updated_replicas=int(st.get("updatedReplicas") or 0),
            available_replicas=available,
            ready_replicas=int(st.get("readyReplicas") or 0),
            progress_deadline_exceeded=deadline,
            rollout_complete=None
            if progressing is None or deadline
            else progressing.get("reason") == DEPLOYMENT_ROLLOUT_COMPLETE_REASON,
            pod_creation_failure=replica_failure_message(st.get("conditions")),
        )


@dataclass(frozen=True)
class EngineObservation:
    """Engine pods and Deployments matching spec.engineSelector (None: not listed)."""

    matched_pods: int
    # Deployments whose pod-template labels satisfy the selector: how many, and the
    # sum of their desired replicas.
    matching_deployments: int = 0
    matching_deployment_replicas: int = 0


@dataclass(frozen=True)
class ProbeObservation:
    """Outcome of the functional-probe gate for this reconcile.

    ``outcome``: "ok", "failed", "error" (could not reach /probe), "rate_limited"
    (no call this time), or "bypassed" (skip annotation).
    """

    outcome: str
    failed_stage: str = ""
    message: str = ""
    retry_after_seconds: float | None = None


@dataclass(frozen=True)
class Observed:
    workload: WorkloadObservation | None = None
    service_endpoint: str = ""
    engines: EngineObservation | None = None
    # None: the probe gate is off (no --server-url); FunctionalProbeOK is cleared.
    probe: ProbeObservation | None = None
    # The engine pods this backend injected (None: not listed, e.g. a transient list
    # failure — the engine-side advisory conditions then keep their prior verdict).
    injected_pods: InjectedPodsObservation | None = None
    # The selected engine pods the webhook declined for their own KV offloading, by
    # name (None: not listed this time — EngineOffloading keeps its prior verdict).
    offloading_declined: tuple[str, ...] | None = None
    # observedServerInstance as decided by the cascade step of the shell (None: no
    # decision this time — the prior value stands).
    server_instance: str | None = None
    # Rendered objects whose names are taken by objects this backend does not own
    # (the shell wrote nothing this time).
    name_conflicts: tuple[NameConflict, ...] = ()
    # An External backend pointing at another namespace's managed tier: whether that
    # tier admits it (shared.tenancy.consumer_standing). None or ok: nothing to say.
    cross_namespace: ConsumerStanding | None = None

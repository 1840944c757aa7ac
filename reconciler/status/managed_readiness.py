"""Ready, Degraded and Progressing of a managed backend before the gates: the rollout of
its workload (against the HPA-owned replica count when autoscaled), its pods refused by
the API server, and a name taken by an object we do not own.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.status.observed import WorkloadObservation
from reconciler.status.ownership import (
    NameConflict,
    name_conflict_message,
)
from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.constants import (
    REASON_NAME_CONFLICT,
)


def desired_replicas(cb: CacheBackend, workload: WorkloadObservation | None) -> int:
    """HPA-owned replica counts: with spec.autoscaling the HPA writes the workload's
    spec.replicas, so readiness compares against that, not the user's spec.replicas."""
    if cb.spec.autoscaling is not None and workload is not None:
        return workload.spec_replicas
    return effective.replicas(cb.spec)


def workload_rolled_out(w: WorkloadObservation, desired: int) -> bool:
    """The current generation is observed, every desired replica is updated and no
    old-revision replica is left (kubectl rollout status semantics) — and, when the
    workload reports on its rollout, it reports the rollout complete.

    The counts alone cannot tell a first rollout whose pods are still starting (the
    Deployment counts a pod as updated as soon as it exists) from a finished one that
    lost its replicas. The Deployment controller can: its Progressing condition turns
    NewReplicaSetAvailable once the new ReplicaSet has been available, and keeps that
    reason when pods are lost afterwards. So a pending pod of a new template is a
    rollout in progress, and an unavailable pod of a finished one is ReplicasUnavailable.
    """
    return (
        w.observed_generation >= w.generation
        and w.updated_replicas >= desired
        and w.replicas <= w.updated_replicas
        and w.rollout_complete is not False
    )


def workload_available(w: WorkloadObservation | None, desired: int) -> bool:
    """Rolled out with every desired replica available: enough to serve traffic."""
    return (
        w is not None
        and desired > 0
        and workload_rolled_out(w, desired)
        and w.available_replicas >= desired
    )


@dataclass(frozen=True)
class Verdict:
    """Ready/Degraded/Progressing before any gate overlays."""

    ready: bool
    reason: str
    message: str
    degraded: bool = False
    progressing: bool = False
    #: Degraded's reason when it differs from Ready's (None: Ready's).
    degraded_reason: str | None = None
    #: Stuck on a cause of its own: Progressing=False with Ready's reason.
    stuck: bool = False


def managed_workload_verdict(cb: CacheBackend, w: WorkloadObservation | None) -> Verdict:
    """Deployment-level reasons: RolloutInProgress, ScaledToZero, ReplicasUnavailable,
    or (when available) BackendReady — which the KV-event gate may overlay.

    The spec's three states, read from the workload's status counts: not yet rolled
    out (current generation unobserved, desired replicas not all updated, or
    old-revision replicas left) is RolloutInProgress; rolled out but short of
    available replicas is ReplicasUnavailable (Degraded); rolled out with every
    desired replica available is BackendReady. A Deployment reporting
    ProgressDeadlineExceeded is stuck, so it is ReplicasUnavailable too.
    """
    return pod_creation_failed(cb, w, workload_rollout_verdict(cb, w))


def pod_creation_failed(cb: CacheBackend, w: WorkloadObservation | None, v: Verdict) -> Verdict:
    """A workload short of replicas because the API server refuses its pods (Pod
    Security, a quota) is stuck, not converging: Ready=False and Progressing=False
    with reason PodCreationFailed and the API server's message. Degraded stays what
    the rollout rules say (ReplicasUnavailable once the workload is rolled out or past
    its progress deadline, else not degraded). An available or scaled-to-zero
    workload keeps its verdict: it serves, or it wants no pods."""
    if w is None or w.pod_creation_failure is None or v.ready:
        return v
    if v.reason == c.REASON_SCALED_TO_ZERO:
        return v
    kind = effective.deployment_kind(cb.spec)
    return Verdict(
        False,
        c.REASON_POD_CREATION_FAILED,
        f"The {kind} cannot create its pods: {w.pod_creation_failure}",
        degraded=v.degraded,
        degraded_reason=v.reason if v.degraded else None,
        stuck=True,
    )


def workload_rollout_verdict(cb: CacheBackend, w: WorkloadObservation | None) -> Verdict:
    """The rollout state alone, from the workload's status counts (see
    managed_workload_verdict)."""
    desired = desired_replicas(cb, w)
    kind = effective.deployment_kind(cb.spec)
    if w is None:
        return Verdict(
            False,
            c.REASON_ROLLOUT_IN_PROGRESS,
            f"Waiting for the {kind} to be created.",
            progressing=True,
        )
    if desired == 0:
        return Verdict(False, c.REASON_SCALED_TO_ZERO, f"The {kind} is scaled to zero replicas.")
    if workload_available(w, desired):
        return Verdict(
            True, c.REASON_BACKEND_READY, f"The {kind} is available ({desired}/{desired} replicas)."
        )
    if w.progress_deadline_exceeded or workload_rolled_out(w, desired):
        return Verdict(
            False,
            c.REASON_REPLICAS_UNAVAILABLE,
            f"The {kind} has {w.available_replicas}/{desired} replicas available.",
            degraded=True,
        )
    return Verdict(
        False,
        c.REASON_ROLLOUT_IN_PROGRESS,
        f"The {kind} is rolling out: {w.updated_replicas}/{desired} updated, "
        f"{w.available_replicas}/{desired} available.",
        progressing=True,
    )


def name_conflict_verdict(conflicts: tuple[NameConflict, ...]) -> Verdict | None:
    """Ready=False/NameConflict (Degraded: stuck until someone acts) while a rendered
    name is taken by an object this backend does not own; None otherwise."""
    if not conflicts:
        return None
    return Verdict(False, REASON_NAME_CONFLICT, name_conflict_message(conflicts), degraded=True)

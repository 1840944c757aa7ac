"""Pure status computation for a CacheBackend: one named function per spec rule.

``compute_status(cb, stored_status, observed, now)`` is the whole decision: given the
CacheBackend its caller parsed, the status stored on it and what the reconcile
observed in the cluster, it returns the status the controller wants and when to look
again. It does no I/O; the reconcile shell gathers :class:`Observed` and writes the
result. It composes named rules: ``base_verdict`` (by mode), then for the gated modes
``gated_conditions`` (the KV-event gate, ``managed_probe_rules``,
``engine_advisory_rules``), else ``ungated_conditions``; ``owned_conditions`` merges
them over the stored ones.

Modes (``backend_mode``) and what each publishes:

=================  =========================================================
Managed            Ready, Degraded, Progressing (+FunctionalProbeOK, T2Degraded,
                   EngineKernelsHealthy, EngineCompatibility,
                   EngineVersionBelowMinimum, LMCacheVersionSkew [LMCacheServer],
                   EngineHostMemory)
HostOnly           Ready, Degraded, Progressing (base reason HostOnlyActive)
                   (+EngineKernelsHealthy, EngineCompatibility,
                   EngineVersionBelowMinimum, EngineHostMemory: engine-side)
EventsOnly         exactly Ready, Degraded, Progressing (base EventsOnlyActive)
External           Ready + Progressing only (ExternalEndpoint* reasons)
HiCache            Progressing only (no Ready by design; see ``hicache_conditions``)
Unsupported        Ready + Progressing = False/UnsupportedRuntimePair
=================  =========================================================
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Final

from reconciler.status import version_skew
from reconciler.status.engine_pods import (
    KERNEL_ERROR,
    KERNEL_FAILED,
    KERNEL_OK,
    KERNEL_PENDING,
    InjectedPodsObservation,
)
from reconciler.status.host_memory import engine_host_memory_condition
from reconciler.status.ownership import (
    NAME_CONFLICT_REQUEUE_SECONDS,
    NameConflict,
    name_conflict_message,
)
from shared import client_versions as cv
from shared import constants as c
from shared.api import effective
from shared.api.duration import parse_go_duration
from shared.api.models import CacheBackend
from shared.backend_mode import Mode, backend_mode
from shared.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    DesiredCondition,
    find,
    format_time,
    merge_conditions,
    normalised,
    parse_time,
    reason_of,
)
from shared.constants import (
    REASON_DEGRADED,
    REASON_NAME_CONFLICT,
    REASON_UNSUPPORTED_RUNTIME_PAIR,
)
from shared.endpoints import endpoint_shape_error
from shared.runtime_adapters import registry as runtime_registry
from shared.tenancy import ConsumerStanding

# Cadences. The steady 30 s resync is the dispatcher's; these are per-backend hints.
ENGINE_CHURN_REQUEUE_SECONDS: Final = 5.0
# A requeue scheduled exactly at a deadline can land a hair early; a small margin
# makes the flip happen on the first look after the deadline.
DEADLINE_MARGIN_SECONDS: Final = 0.5
DEFAULT_FIRST_EVENT_TIMEOUT_SECONDS: Final = 300.0


# Condition types each mode may carry. Types a mode publishes itself are computed;
# the remainder of the set are advisory conditions written by other loops that
# survive in that mode; everything else is removed on entering the mode.
ALLOWED_TYPES: Final[dict[Mode, frozenset[str]]] = {
    Mode.MANAGED: frozenset(
        {
            c.COND_READY,
            c.COND_DEGRADED,
            c.COND_PROGRESSING,
            c.COND_FUNCTIONAL_PROBE_OK,
            c.COND_ENGINE_KERNELS_HEALTHY,
            c.COND_T2_DEGRADED,
            c.COND_ENGINE_COMPATIBILITY,
            c.COND_ENGINE_VERSION_BELOW_MINIMUM,
            c.COND_LMCACHE_VERSION_SKEW,
            c.COND_ENGINE_HOST_MEMORY,
        }
    ),
    Mode.HOST_ONLY: frozenset(
        {
            c.COND_READY,
            c.COND_DEGRADED,
            c.COND_PROGRESSING,
            c.COND_ENGINE_KERNELS_HEALTHY,
            c.COND_ENGINE_COMPATIBILITY,
            c.COND_ENGINE_VERSION_BELOW_MINIMUM,
            c.COND_ENGINE_HOST_MEMORY,
        }
    ),
    Mode.EVENTS_ONLY: frozenset({c.COND_READY, c.COND_DEGRADED, c.COND_PROGRESSING}),
    Mode.EXTERNAL: frozenset({c.COND_READY, c.COND_PROGRESSING}),
    Mode.HICACHE: frozenset({c.COND_PROGRESSING}),
    Mode.UNSUPPORTED: frozenset({c.COND_READY, c.COND_PROGRESSING}),
}

# Modes where the KV-event readiness gate runs (External is always exempt).
GATED_MODES: Final = frozenset({Mode.MANAGED, Mode.HOST_ONLY, Mode.EVENTS_ONLY})
# Modes with an injected KV connector on the engine: the engine-side advisory
# conditions (EngineKernelsHealthy, EngineCompatibility) apply.
ENGINE_ADVISORY_MODES: Final = frozenset({Mode.MANAGED, Mode.HOST_ONLY})
ADVISORY_TYPES: Final = frozenset(
    {
        c.COND_FUNCTIONAL_PROBE_OK,
        c.COND_T2_DEGRADED,
        c.COND_ENGINE_KERNELS_HEALTHY,
        c.COND_ENGINE_COMPATIBILITY,
        c.COND_ENGINE_VERSION_BELOW_MINIMUM,
        c.COND_LMCACHE_VERSION_SKEW,
        c.COND_ENGINE_HOST_MEMORY,
    }
)


# ----------------------------------------------------------------- observations

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
        meta = obj.get("metadata") or {}
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
            generation=int(meta.get("generation") or 0),
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
    # observedServerInstance as decided by the cascade step of the shell (None: no
    # decision this time — the prior value stands).
    server_instance: str | None = None
    # Rendered objects whose names are taken by objects this backend does not own
    # (the shell wrote nothing this time).
    name_conflicts: tuple[NameConflict, ...] = ()
    # An External backend pointing at another namespace's managed tier: whether that
    # tier admits it (shared.tenancy.consumer_standing). None or ok: nothing to say.
    cross_namespace: ConsumerStanding | None = None


@dataclass(frozen=True)
class StatusResult:
    status: dict[str, Any]
    mode: Mode
    # Seconds until the backend should be looked at again (None: the steady resync).
    requeue_after: float | None = None
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------- classification


def kv_event_gate_enabled(cb: CacheBackend) -> bool:
    """Opt-out per CR with inferencecache.io/require-kv-events: "false"."""
    value = (cb.metadata.annotations or {}).get(c.ANNOTATION_REQUIRE_KV_EVENTS)
    return not (value is not None and value.strip().lower() == "false")


def first_event_timeout_seconds(cb: CacheBackend) -> float:
    """The KV-event gate's window. "0" is no grace period: the gate reports
    NoKVEventsObserved as soon as the backend is up, until the first event (the gate
    itself is turned off with the require-kv-events annotation, not with 0). A negative
    value (stored before admission rejected it) counts as 0; an unparsable one as 5m."""
    parsed = parse_go_duration(effective.first_event_timeout(cb.spec))
    return DEFAULT_FIRST_EVENT_TIMEOUT_SECONDS if parsed is None else max(parsed, 0.0)


# ----------------------------------------------------------------- spec rules


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


def external_endpoint_verdict(cb: CacheBackend) -> tuple[Verdict, str]:
    """External ownership: the provider-specific endpoint shape check is the only
    readiness signal. Returns the verdict and the endpoint to publish: status.endpoint
    mirrors the (trimmed) spec endpoint whatever the verdict — nothing dials it (the
    Pod webhook reads and validates the spec field itself), and kubectl shows the
    operator-supplied value next to the reason it was refused."""
    rs = cb.spec.remote_storage
    provider = rs.provider if rs is not None and rs.provider else ""
    raw = (rs.endpoint if rs is not None else None) or ""
    endpoint = raw.strip()
    if not endpoint:
        return (
            Verdict(
                False,
                c.REASON_EXTERNAL_ENDPOINT_MISSING,
                "spec.remoteStorage.endpoint is empty; External ownership requires the "
                "operator-managed endpoint.",
            ),
            "",
        )
    error = endpoint_shape_error(provider, endpoint)
    if error:
        return (
            Verdict(
                False,
                c.REASON_EXTERNAL_ENDPOINT_INVALID,
                f"spec.remoteStorage.endpoint: {error}",
            ),
            endpoint,
        )
    return (
        Verdict(
            True,
            c.REASON_EXTERNAL_ENDPOINT_ACCEPTED,
            f"External {provider} endpoint {endpoint} accepted.",
        ),
        endpoint,
    )


def first_available_anchor(
    mode: Mode,
    prev_status: dict[str, Any],
    available_now: bool,
    now: dt.datetime,
) -> tuple[str | None, bool]:
    """status.firstAvailableAt: the write-once anchor of the firstEventTimeout clock.

    Returns (value, reanchored). Managed latches the first time its workload is seen
    Available; events-only and host-only (no workload) latch on the first reconcile.
    The anchor belongs to one serving mode: a managed→no-workload flip (previous
    status had a managed endpoint) re-anchors to the flip moment; a
    no-workload→managed flip discards the old anchor (the previous status had no
    endpoint, which a managed backend always publishes once its Service exists);
    an unmanaged transition (External, HiCache, unsupported) clears it.
    """
    prev = prev_status.get("firstAvailableAt") or None
    prev_endpoint = prev_status.get("endpoint") or ""
    stamp = format_time(now)
    if mode not in GATED_MODES:
        return None, False
    if mode == Mode.MANAGED:
        if prev and not prev_endpoint:
            prev = None  # anchored by a no-workload mode: not this mode's clock
        if prev:
            return prev, False
        return (stamp, True) if available_now else (None, False)
    # events-only / host-only: "up" the moment they exist.
    if prev_endpoint:
        return stamp, True
    if prev:
        return prev, False
    return stamp, True


def first_kv_event_latch(
    prev_status: dict[str, Any], gate_runs: bool, now: dt.datetime
) -> str | None:
    """status.firstKVEventObservedAt: write-once, never cleared. Set the first time the
    KV-event readiness gate observes indexParticipation.lastEventAt populated — the
    gate runs once the backend is up (a managed workload Available; host-only and
    events-only at once) unless opted out; left in place (inert) everywhere else."""
    prev = prev_status.get("firstKVEventObservedAt") or None
    if prev or not gate_runs:
        return prev
    # An absent, unparseable or zero timestamp (the Unix epoch, or Go's zero time
    # 0001-01-01T00:00:00Z) is "not yet observed", never an event.
    last_event = parse_time((prev_status.get("indexParticipation") or {}).get("lastEventAt"))
    if last_event is not None and last_event > _EPOCH:
        return format_time(now)
    return None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class GateResult:
    verdict: Verdict
    # Seconds until the timeout would flip Awaiting→NoKVEventsObserved.
    deadline_in: float | None = None


def kv_event_gate(
    cb: CacheBackend,
    base: Verdict,
    *,
    anchor: str | None,
    event_observed: bool,
    previous_ready_reason: str | None,
    reanchored: bool,
    now: dt.datetime,
) -> GateResult:
    """KV-event readiness gate, overlaid on an otherwise-Ready base verdict.

    Awaiting (within firstEventTimeout) → Ready=False/AwaitingFirstKVEvent; an event
    ever observed → Ready=True/KVEventsObserved; past the timeout →
    Ready=False/NoKVEventsObserved + Degraded. NoKVEventsObserved is sticky until an
    event arrives (a re-anchor on a mode change bypasses it).
    """
    if not base.ready or not kv_event_gate_enabled(cb):
        return GateResult(base)
    if event_observed:
        return GateResult(
            Verdict(
                True,
                c.REASON_KV_EVENTS_OBSERVED,
                "At least one KV event has been observed for this backend.",
            )
        )
    timeout = first_event_timeout_seconds(cb)
    timeout_text = effective.first_event_timeout(cb.spec)
    no_events = Verdict(
        False,
        c.REASON_NO_KV_EVENTS_OBSERVED,
        f"No KV event observed within firstEventTimeout ({timeout_text}): check that engine "
        "pods are wired to this backend and that their --kv-events-config publisher is bound.",
        degraded=True,
    )
    if previous_ready_reason == c.REASON_NO_KV_EVENTS_OBSERVED and not reanchored:
        return GateResult(no_events)
    anchor_time = parse_time(anchor) or now
    remaining = timeout - (now - anchor_time).total_seconds()
    if remaining <= 0:
        return GateResult(no_events)
    return GateResult(
        Verdict(
            False,
            c.REASON_AWAITING_FIRST_KV_EVENT,
            f"Backend is up; waiting for the first KV event (firstEventTimeout {timeout_text}).",
            progressing=True,
        ),
        deadline_in=remaining,
    )


PROBE_STAGE_REASONS: Final[dict[str, str]] = {
    "ingest": c.REASON_PROBE_INGEST_FAILED,
    "routing": c.REASON_PROBE_ROUTING_FAILED,
    "t2": c.REASON_PROBE_T2_FAILED,
}
PROBE_FAILED_REASONS: Final = frozenset(PROBE_STAGE_REASONS.values())


def functional_probe_gate(
    base: Verdict,
    probe: ProbeObservation | None,
    previous: dict[str, Any] | None,
) -> tuple[Verdict, DesiredCondition | None]:
    """Functional-probe gate, composed after the KV-event gate on managed backends.

    Returns the (possibly downgraded) Ready verdict and the FunctionalProbeOK
    condition to publish (None: clear it — the gate is off). A stage failure
    downgrades Ready with the stage's reason; an unreachable /probe is Unknown and
    leaves Ready alone, unless a stage failure is already published (sticky-False).
    """
    if probe is None:
        return base, None
    prev_reason = previous.get("reason") if previous else None
    prev_failed = (
        previous is not None
        and previous.get("status") == FALSE
        and prev_reason in PROBE_FAILED_REASONS
    )
    if probe.outcome == "bypassed":
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            TRUE,
            c.REASON_PROBE_BYPASSED,
            f"Functional probe skipped by the {c.ANNOTATION_SKIP_FUNCTIONAL_PROBE} annotation.",
        )
    if not base.ready:
        # A broken upstream cannot be diagnosed by a downstream probe: keep whatever
        # verdict the probe last published, without downgrading further.
        if previous is None:
            return base, None
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            str(previous.get("status")),
            str(prev_reason),
            str(previous.get("message") or ""),
        )

    def downgraded(reason: str, message: str) -> Verdict:
        return Verdict(False, reason, message)

    if probe.outcome == "ok":
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            TRUE,
            c.REASON_PROBE_OK,
            "Every enabled probe stage round-tripped.",
        )
    if probe.outcome == "failed":
        reason = PROBE_STAGE_REASONS.get(probe.failed_stage, c.REASON_PROBE_INGEST_FAILED)
        message = probe.message or f"probe stage {probe.failed_stage} failed"
        return downgraded(reason, message), DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK, FALSE, reason, message
        )
    # "error" (could not reach) or "rate_limited" (not called this time).
    if prev_failed and previous is not None:
        message = str(previous.get("message") or "")
        return downgraded(str(prev_reason), message), DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK, FALSE, str(prev_reason), message
        )
    if probe.outcome == "error":
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            UNKNOWN,
            c.REASON_PROBE_ERROR,
            probe.message or "could not reach the cache-index server's /probe endpoint",
        )
    if previous is not None:  # rate-limited: keep the last verdict as it is
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            str(previous.get("status")),
            str(prev_reason),
            str(previous.get("message") or ""),
        )
    return base, None


def t2_degraded_condition(prev_status: dict[str, Any]) -> DesiredCondition | None:
    """T2Degraded from indexParticipation.t2HitRate: absent until the tier has been
    exercised; "0" means queried but never served a reload."""
    rate = (prev_status.get("indexParticipation") or {}).get("t2HitRate")
    if rate is None or rate == "":
        return None
    try:
        value = float(rate)
    except ValueError:
        return None
    if value <= 0:
        return DesiredCondition(
            c.COND_T2_DEGRADED,
            TRUE,
            c.REASON_T2_ZERO_HIT_RATE,
            "Tier-2 was queried but served zero reloads (store/connection failure, "
            "under-sized remote server, or hash mismatch).",
        )
    return DesiredCondition(
        c.COND_T2_DEGRADED, FALSE, c.REASON_T2_SERVING, f"Tier-2 hit rate {rate}."
    )


MAX_PODS_IN_MESSAGE: Final = 10


def _previous_as_desired(previous: dict[str, Any] | None) -> DesiredCondition | None:
    if previous is None:
        return None
    return DesiredCondition(
        str(previous.get("type")),
        str(previous.get("status")),
        str(previous.get("reason") or ""),
        str(previous.get("message") or ""),
    )


def _pod_list(items: list[str]) -> str:
    shown = items[:MAX_PODS_IN_MESSAGE]
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def engine_kernels_healthy_condition(
    injected: InjectedPodsObservation | None, previous: dict[str, Any] | None
) -> DesiredCondition | None:
    """EngineKernelsHealthy from the lmcache-kernel-check of the matched engine pods.

    Absent when no matched pod runs the check. Any failure → False/KernelLoadFailed
    (naming the pods and errors); else a check that ended without a recognised result
    → Unknown/KernelCheckError; else one still running/waiting →
    Unknown/KernelCheckPending; else True/KernelsHealthy. Pods not listed this time
    (None) keep the prior verdict.
    """
    if injected is None:
        return _previous_as_desired(previous)
    reports = injected.kernel_checks
    if not reports:
        return None
    by_state: dict[str, list[str]] = {}
    for r in reports:
        text = r.pod
        if r.state == KERNEL_FAILED:
            text = f"{r.pod} ({r.mode}): {r.detail}"
        elif r.state == KERNEL_ERROR:
            text = f"{r.pod}: {r.detail}"
        by_state.setdefault(r.state, []).append(text)
    if KERNEL_FAILED in by_state:
        return DesiredCondition(
            c.COND_ENGINE_KERNELS_HEALTHY,
            FALSE,
            c.REASON_KERNEL_LOAD_FAILED,
            "LMCache native kernels (lmcache.c_ops, or lmcache.cuda_ops from 0.5) failed to load on "
            f"{len(by_state[KERNEL_FAILED])}/{len(reports)} engine pod(s): "
            f"{_pod_list(by_state[KERNEL_FAILED])}. Align the engine image's lmcache build "
            "with its CUDA runtime.",
        )
    if KERNEL_ERROR in by_state:
        return DesiredCondition(
            c.COND_ENGINE_KERNELS_HEALTHY,
            UNKNOWN,
            c.REASON_KERNEL_CHECK_ERROR,
            "The lmcache-kernel-check terminated without a recognised result on "
            f"{_pod_list(by_state[KERNEL_ERROR])}.",
        )
    if KERNEL_PENDING in by_state:
        return DesiredCondition(
            c.COND_ENGINE_KERNELS_HEALTHY,
            UNKNOWN,
            c.REASON_KERNEL_CHECK_PENDING,
            f"The lmcache-kernel-check has not finished on {_pod_list(by_state[KERNEL_PENDING])}.",
        )
    assert set(by_state) == {KERNEL_OK}
    return DesiredCondition(
        c.COND_ENGINE_KERNELS_HEALTHY,
        TRUE,
        c.REASON_KERNELS_HEALTHY,
        f"LMCache native kernels loaded on all {len(reports)} engine pod(s) that ran the check.",
    )


def engine_kernel_strict_gate(
    base: Verdict,
    injected: InjectedPodsObservation | None,
    kernels: DesiredCondition | None,
    previous_ready: dict[str, Any] | None,
) -> Verdict:
    """Strict kernel-check mode (read from each pod) downgrades an otherwise-Ready
    backend to Ready=False/EngineKernelDegraded when a strict pod's kernels failed to
    load; report-only never does. With the pods not listed this time, a downgrade
    already published stays while the preserved verdict is still a failure."""
    if not base.ready:
        return base
    if injected is None:
        if (
            previous_ready is not None
            and previous_ready.get("reason") == c.REASON_ENGINE_KERNEL_DEGRADED
            and kernels is not None
            and kernels.reason == c.REASON_KERNEL_LOAD_FAILED
        ):
            return Verdict(
                False, c.REASON_ENGINE_KERNEL_DEGRADED, str(previous_ready.get("message") or "")
            )
        return base
    strict = [
        r.pod
        for r in injected.kernel_checks
        if r.state == KERNEL_FAILED and r.mode == c.KERNEL_CHECK_STRICT
    ]
    if not strict:
        return base
    return Verdict(
        False,
        c.REASON_ENGINE_KERNEL_DEGRADED,
        "Engine pod(s) admitted in strict kernel-check mode failed to load the LMCache "
        f"native kernels and cannot serve: {_pod_list(strict)}. See EngineKernelsHealthy.",
    )


def engine_version_conditions(
    cb: CacheBackend, mode: Mode, observed: Observed, prev_conditions: list[dict[str, Any]]
) -> list[DesiredCondition]:
    """The two advisory version conditions of an engine-side advisory mode (never
    gating Ready): EngineVersionBelowMinimum for the wiring, and LMCacheVersionSkew when
    the backend provisions an LMCache server."""
    rs = cb.spec.remote_storage
    provider = rs.provider if rs is not None and rs.provider else None
    out = [
        version_skew.engine_version_below_minimum_condition(
            cb.spec.runtime,
            effective.cache_type(cb.spec),
            provider,
            observed.injected_pods,
            find(prev_conditions, c.COND_ENGINE_VERSION_BELOW_MINIMUM),
        )
    ]
    # Only a Managed backend runs the server whose image names its version.
    image = cv.lmcache_server_image(cb) if mode == Mode.MANAGED else None
    if image is not None:
        out.append(
            version_skew.lmcache_version_skew_condition(
                image, observed.injected_pods, find(prev_conditions, c.COND_LMCACHE_VERSION_SKEW)
            )
        )
    return [x for x in out if x is not None]


def engine_compatibility_condition(
    injected: InjectedPodsObservation | None, previous: dict[str, Any] | None
) -> DesiredCondition | None:
    """EngineCompatibility=False/InjectedEngineCrashLooping while an injected engine
    container is in CrashLoopBackOff; absent otherwise. Never gates Ready. A pod list
    that failed this time (None) keeps the prior condition."""
    if injected is None:
        return _previous_as_desired(previous)
    if not injected.crash_loops:
        return None
    looping = [
        f"{loop.pod} (container {', '.join(loop.containers)})" for loop in injected.crash_loops
    ]
    return DesiredCondition(
        c.COND_ENGINE_COMPATIBILITY,
        FALSE,
        c.REASON_INJECTED_ENGINE_CRASH_LOOPING,
        f"Injected engine pod(s) in CrashLoopBackOff after KV-connector injection: "
        f"{_pod_list(looping)}. A common cause is a connector incompatibility (e.g. a "
        "hybrid-attention model: use spec.integration.mode: EventsOnly), but a bad image, "
        "command, secret or OOM crash-loops the same way: check the engine logs.",
    )


def engine_selector_status(
    cb: CacheBackend, engines: EngineObservation | None, prev_status: dict[str, Any]
) -> tuple[int | None, str | None]:
    """(matchedEnginePods, engineSelectorMessage).

    Unset without a claim-capable selector (absent or empty matchLabels). The
    message is set when the count is zero while engine pods are expected — i.e.
    unless every Deployment the selector matches is intentionally scaled to zero.
    When the pods could not be listed the previous values stand.
    """
    labels = effective.claim_match_labels(cb.spec)
    if not labels:
        return None, None
    if engines is None:
        return prev_status.get("matchedEnginePods"), prev_status.get("engineSelectorMessage")
    matched = engines.matched_pods
    expected = not (engines.matching_deployments > 0 and engines.matching_deployment_replicas == 0)
    if matched == 0 and expected:
        selector = json.dumps(labels, sort_keys=True, separators=(",", ":"))
        return matched, (
            f"spec.engineSelector.matchLabels={selector} matches no Pods in namespace "
            f"{cb.metadata.namespace}."
        )
    return matched, None


def engine_churn_requeue(engines: EngineObservation | None) -> float | None:
    """5 s cadence while the matched pod count differs from the desired replica sum of
    the Deployments the selector matches (rolling restarts), without a Pod watch."""
    if engines is None or engines.matching_deployments == 0:
        return None
    if engines.matched_pods != engines.matching_deployment_replicas:
        return ENGINE_CHURN_REQUEUE_SECONDS
    return None


# ----------------------------------------------------------------- per-mode conditions


def _triplet(v: Verdict, *, degraded_reason: str | None = None) -> list[DesiredCondition]:
    """Ready/Degraded/Progressing from one verdict.

    Progressing: True while converging (rollout, first apply, awaiting the first KV
    event) with the verdict's reason; False with the verdict's reason when stuck on a
    cause of its own (PodCreationFailed); False with Degraded when stuck (Degraded=True),
    ScaledToZero when scaled to zero, and Synced once converged — including when a
    later gate (functional probe, strict kernel check) downgrades only Ready.
    """
    ready = DesiredCondition(c.COND_READY, TRUE if v.ready else FALSE, v.reason, v.message)
    if v.degraded:
        degraded = DesiredCondition(
            c.COND_DEGRADED, TRUE, degraded_reason or v.degraded_reason or v.reason, v.message
        )
    else:
        degraded = DesiredCondition(
            c.COND_DEGRADED, FALSE, c.REASON_NOT_DEGRADED, "The backend is not degraded."
        )
    if v.progressing:
        progressing = DesiredCondition(c.COND_PROGRESSING, TRUE, v.reason, v.message)
    elif v.stuck:
        progressing = DesiredCondition(c.COND_PROGRESSING, FALSE, v.reason, v.message)
    elif v.degraded:
        progressing = DesiredCondition(c.COND_PROGRESSING, FALSE, REASON_DEGRADED, v.message)
    elif v.reason == c.REASON_SCALED_TO_ZERO:
        progressing = DesiredCondition(c.COND_PROGRESSING, FALSE, v.reason, v.message)
    else:
        progressing = DesiredCondition(
            c.COND_PROGRESSING, FALSE, c.REASON_SYNCED, "Live state matches the desired state."
        )
    return [ready, degraded, progressing]


def external_conditions(v: Verdict) -> list[DesiredCondition]:
    """External: Ready + Progressing only; Progressing is always False and mirrors
    Ready's reason (there is no rollout the controller drives)."""
    return [
        DesiredCondition(c.COND_READY, TRUE if v.ready else FALSE, v.reason, v.message),
        DesiredCondition(c.COND_PROGRESSING, FALSE, v.reason, v.message),
    ]


def hicache_conditions() -> list[DesiredCondition]:
    """SGLang native HiCache publishes no Ready (pod readiness does not prove a
    host-tier round trip) and provisions nothing that could degrade. Progressing
    False/Synced tells operators the controller has observed this generation and
    has nothing left to drive."""
    return [
        DesiredCondition(
            c.COND_PROGRESSING,
            FALSE,
            c.REASON_SYNCED,
            "SGLang HiCache is engine-local: no workload to provision; Ready is not published.",
        )
    ]


def unsupported_conditions(cb: CacheBackend) -> list[DesiredCondition]:
    spec = cb.spec
    pairs = ", ".join(runtime_registry.supported_pairs())
    message = (
        f"No adapter supports runtime {spec.runtime} with type {effective.cache_type(spec)}"
        + (
            f" and remote provider {spec.remote_storage.provider}"
            if spec.remote_storage and spec.remote_storage.provider
            else ""
        )
        + f"; supported pairs: {pairs}. Nothing is provisioned."
    )
    return [
        DesiredCondition(c.COND_READY, FALSE, REASON_UNSUPPORTED_RUNTIME_PAIR, message),
        DesiredCondition(c.COND_PROGRESSING, FALSE, REASON_UNSUPPORTED_RUNTIME_PAIR, message),
    ]


# ----------------------------------------------------------------- composition


def _min_delay(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


@dataclass(frozen=True)
class BaseVerdict:
    """Ready's verdict before the gates, and the endpoint the mode publishes."""

    verdict: Verdict
    endpoint: str = ""
    # A managed workload available now (anchors firstAvailableAt).
    available_now: bool = False
    requeue_after: float | None = None


@dataclass(frozen=True)
class ConditionsResult:
    conditions: list[DesiredCondition]
    requeue_after: float | None = None


def base_verdict(cb: CacheBackend, mode: Mode, observed: Observed) -> BaseVerdict:
    """Managed: a name conflict, else the workload's rollout; External: the endpoint's
    shape; Events-only and Host-only: active as soon as declared."""
    if mode == Mode.MANAGED:
        conflict = name_conflict_verdict(observed.name_conflicts)
        verdict = conflict or managed_workload_verdict(cb, observed.workload)
        return BaseVerdict(
            verdict,
            endpoint=observed.service_endpoint,
            available_now=verdict.ready,
            requeue_after=NAME_CONFLICT_REQUEUE_SECONDS if conflict is not None else None,
        )
    if mode == Mode.EXTERNAL:
        verdict, endpoint = external_endpoint_verdict(cb)
        standing = observed.cross_namespace
        if verdict.ready and standing is not None and not standing.ok:
            # A tier that refuses this backend's engines: never Ready, and Ready's
            # reason says why (External keeps its Ready + Progressing pair).
            verdict = Verdict(False, standing.reason, standing.message)
        return BaseVerdict(verdict, endpoint=endpoint)
    if mode == Mode.EVENTS_ONLY:
        return BaseVerdict(
            Verdict(
                True,
                c.REASON_EVENTS_ONLY_ACTIVE,
                "Events-only: routing tier wired, no server provisioned.",
            )
        )
    if mode == Mode.HOST_ONLY:
        return BaseVerdict(
            Verdict(
                True,
                c.REASON_HOST_ONLY_ACTIVE,
                "Host-only: engine-local LMCache tier, no remote provider.",
            )
        )
    return BaseVerdict(Verdict(False, "", ""))


def managed_probe_rules(
    verdict: Verdict, probe: ProbeObservation | None, prev: dict[str, Any]
) -> tuple[Verdict, list[DesiredCondition], float | None]:
    """Managed only: the functional-probe gate on Ready, T2Degraded as the snapshot
    poller left it, and the probe's retry delay while Ready waits on (or just got) a
    probe verdict."""
    prev_probe = next(
        (x for x in prev.get("conditions") or [] if x.get("type") == c.COND_FUNCTIONAL_PROBE_OK),
        None,
    )
    verdict, probe_cond = functional_probe_gate(verdict, probe, prev_probe)
    requeue = None
    if (
        probe is not None
        and probe.retry_after_seconds is not None
        and verdict.reason
        in PROBE_FAILED_REASONS | {c.REASON_KV_EVENTS_OBSERVED, c.REASON_BACKEND_READY}
    ):
        requeue = probe.retry_after_seconds
    extra = [x for x in (probe_cond, t2_degraded_condition(prev)) if x is not None]
    return verdict, extra, requeue


def engine_advisory_rules(
    cb: CacheBackend,
    mode: Mode,
    verdict: Verdict,
    observed: Observed,
    prev_conditions: list[dict[str, Any]],
) -> tuple[Verdict, list[DesiredCondition]]:
    """Managed and Host-only: the injected engines' kernel health (which may hold
    Ready under the strict gate), compatibility and version advisories."""
    pods = observed.injected_pods
    kernels = engine_kernels_healthy_condition(
        pods, find(prev_conditions, c.COND_ENGINE_KERNELS_HEALTHY)
    )
    verdict = engine_kernel_strict_gate(verdict, pods, kernels, find(prev_conditions, c.COND_READY))
    compatibility = engine_compatibility_condition(
        pods, find(prev_conditions, c.COND_ENGINE_COMPATIBILITY)
    )
    host_memory = engine_host_memory_condition(
        pods, find(prev_conditions, c.COND_ENGINE_HOST_MEMORY)
    )
    extra = [x for x in (kernels, compatibility, host_memory) if x is not None]
    extra.extend(engine_version_conditions(cb, mode, observed, prev_conditions))
    return verdict, extra


def gated_conditions(
    cb: CacheBackend,
    mode: Mode,
    base: Verdict,
    observed: Observed,
    prev: dict[str, Any],
    *,
    anchor: str | None,
    event_observed: bool,
    reanchored: bool,
    now: dt.datetime,
) -> ConditionsResult:
    """Managed, Host-only, Events-only: Ready/Degraded/Progressing from the base verdict
    through the KV-event gate, then the managed and engine-advisory rules."""
    prev_conditions = prev.get("conditions") or []
    gate = kv_event_gate(
        cb,
        base,
        anchor=anchor,
        event_observed=event_observed,
        previous_ready_reason=reason_of(prev_conditions, c.COND_READY),
        reanchored=reanchored,
        now=now,
    )
    verdict = gate.verdict
    requeue = None if gate.deadline_in is None else gate.deadline_in + DEADLINE_MARGIN_SECONDS
    extra: list[DesiredCondition] = []
    if mode == Mode.MANAGED:
        verdict, probe_extra, probe_requeue = managed_probe_rules(verdict, observed.probe, prev)
        extra.extend(probe_extra)
        requeue = _min_delay(requeue, probe_requeue)
    if mode in ENGINE_ADVISORY_MODES:
        verdict, advisory = engine_advisory_rules(cb, mode, verdict, observed, prev_conditions)
        extra.extend(advisory)
    degraded_reason = (
        c.REASON_NO_KV_EVENTS_OBSERVED if verdict.reason == c.REASON_NO_KV_EVENTS_OBSERVED else None
    )
    return ConditionsResult(_triplet(verdict, degraded_reason=degraded_reason) + extra, requeue)


def ungated_conditions(cb: CacheBackend, mode: Mode, base: Verdict) -> list[DesiredCondition]:
    """External, HiCache, and a pair no adapter supports."""
    if mode == Mode.EXTERNAL:
        return external_conditions(base)
    if mode == Mode.HICACHE:
        return hicache_conditions()
    return unsupported_conditions(cb)


def set_server_instance(status: dict[str, Any], mode: Mode, server_instance: str | None) -> None:
    """observedServerInstance: the cascade's decision (None keeps the prior value);
    the baseline is inert and cleared off the managed-provider path."""
    if mode != Mode.MANAGED:
        status.pop("observedServerInstance", None)
    elif server_instance is not None:
        _set_or_drop(status, "observedServerInstance", server_instance or None)


def owned_conditions(
    prev_conditions: list[dict[str, Any]],
    desired: list[DesiredCondition],
    mode: Mode,
    generation: int | None,
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """The desired conditions merged over the previous ones; a previous condition the
    mode allows but this pass did not compute is kept, except the advisory ones (ours
    too: when not computed they go)."""
    keep = ALLOWED_TYPES[mode] - {d.type for d in desired} - ADVISORY_TYPES
    return merge_conditions(
        prev_conditions, desired, keep=frozenset(keep), generation=generation, now=now
    )


def compute_status(
    cb: CacheBackend,
    stored_status: dict[str, Any] | None,
    observed: Observed,
    now: dt.datetime,
) -> StatusResult:
    """The status the controller wants for the parsed backend ``cb``, whose stored
    status is ``stored_status``, given ``observed``.

    Fields this controller does not own (indexParticipation, written by the
    snapshot poller; unknown future fields) are carried over untouched.
    """
    prev: dict[str, Any] = dict(stored_status or {})
    mode = backend_mode(cb)
    status = dict(prev)
    status["observedGeneration"] = cb.metadata.generation
    status["failOpen"] = effective.fail_open(cb.spec)
    matched, selector_message = engine_selector_status(cb, observed.engines, prev)
    _set_or_drop(status, "matchedEnginePods", matched)
    _set_or_drop(status, "engineSelectorMessage", selector_message)

    base = base_verdict(cb, mode, observed)
    anchor, reanchored = first_available_anchor(mode, prev, base.available_now, now)
    _set_or_drop(status, "firstAvailableAt", anchor)
    gate_runs = mode in GATED_MODES and base.verdict.ready and kv_event_gate_enabled(cb)
    latch = first_kv_event_latch(prev, gate_runs, now)
    _set_or_drop(status, "firstKVEventObservedAt", latch)
    if mode in GATED_MODES:
        desired = gated_conditions(
            cb,
            mode,
            base.verdict,
            observed,
            prev,
            anchor=anchor,
            event_observed=latch is not None,
            reanchored=reanchored,
            now=now,
        )
    else:
        desired = ConditionsResult(ungated_conditions(cb, mode, base.verdict))

    _set_or_drop(status, "endpoint", base.endpoint or None)
    set_server_instance(status, mode, observed.server_instance)
    status["conditions"] = owned_conditions(
        prev.get("conditions") or [], desired.conditions, mode, cb.metadata.generation, now
    )
    requeue = _min_delay(
        engine_churn_requeue(observed.engines), base.requeue_after, desired.requeue_after
    )
    return StatusResult(status=status, mode=mode, requeue_after=requeue)


def _set_or_drop(status: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        status.pop(key, None)
    else:
        status[key] = value


def status_equal(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Semantic equality of two statuses: condition order does not matter."""
    a, b = dict(a or {}), dict(b or {})
    a["conditions"] = normalised(a.get("conditions"))
    b["conditions"] = normalised(b.get("conditions"))
    return a == b

"""Pure status computation for a CacheBackend: one named function per spec rule.

``compute_status(cb, stored_status, observed, now)`` is the whole decision: given the
CacheBackend its caller parsed, the status stored on it and what the reconcile
observed in the cluster, it returns the status the controller wants and when to look
again. It does no I/O; the reconcile shell gathers :class:`Observed` and writes the
result. It composes named rules: ``base_verdict`` (by mode), then for the gated modes
``gated_conditions`` (the KV-event gate, ``managed_probe_rules``,
``engine_advisory_rules``), else ``ungated_conditions``; ``owned_conditions`` merges
them over the stored ones.

The rules live beside it, one module per section of the spec's status contract:
``published_types`` (which conditions a mode publishes), ``observed`` (what the reconcile
saw), ``managed_readiness`` (Ready/Degraded/Progressing of a managed workload),
``external_endpoint``, ``kv_event_gate``, ``functional_probe`` (with T2Degraded),
``engine_advisories`` (EngineKernelsHealthy, EngineCompatibility, the version
conditions), ``host_memory`` (EngineHostMemory), ``engine_offloading``
(EngineOffloading), ``engine_selector``
(matchedEnginePods) and ``per_mode`` (the modes without a gate).

Modes (``backend_mode``) and what each publishes:

=================  =========================================================
Managed            Ready, Degraded, Progressing (+FunctionalProbeOK, T2Degraded,
                   EngineKernelsHealthy, EngineCompatibility,
                   EngineVersionBelowMinimum, LMCacheVersionSkew [LMCacheServer],
                   EngineHostMemory, EngineOffloading)
HostOnly           Ready, Degraded, Progressing (base reason HostOnlyActive; type
                   VLLMOffloading: EnginePodsWired / NoEnginePodsWired, whether the
                   webhook wired any selected engine pod)
                   (+EngineKernelsHealthy, EngineCompatibility,
                   EngineVersionBelowMinimum, EngineHostMemory,
                   EngineOffloading: engine-side)
EventsOnly         exactly Ready, Degraded, Progressing (base EventsOnlyActive)
External           Ready + Progressing only (ExternalEndpoint* reasons)
HiCache            Progressing only (no Ready by design; see ``hicache_conditions``)
Unsupported        Ready + Progressing = False/UnsupportedRuntimePair
=================  =========================================================
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from reconciler.status.engine_advisories import (
    engine_compatibility_condition,
    engine_kernel_strict_gate,
    engine_kernels_healthy_condition,
    engine_version_conditions,
)
from reconciler.status.engine_offloading import engine_offloading_condition
from reconciler.status.engine_selector import engine_churn_requeue, engine_selector_status
from reconciler.status.external_endpoint import external_endpoint_verdict
from reconciler.status.functional_probe import (
    PROBE_FAILED_REASONS,
    functional_probe_gate,
    t2_degraded_condition,
)
from reconciler.status.host_memory import engine_host_memory_condition
from reconciler.status.kv_event_gate import (
    DEADLINE_MARGIN_SECONDS,
    first_available_anchor,
    first_kv_event_latch,
    kv_event_gate,
    kv_event_gate_enabled,
)
from reconciler.status.managed_readiness import (
    Verdict,
    managed_workload_verdict,
    name_conflict_verdict,
)
from reconciler.status.observed import Observed, ProbeObservation
from reconciler.status.ownership import (
    NAME_CONFLICT_REQUEUE_SECONDS,
)
from reconciler.status.per_mode import (
    external_conditions,
    hicache_conditions,
    unsupported_conditions,
    verdict_triplet,
    vllm_offloading_verdict,
)
from reconciler.status.published_types import (
    ADVISORY_TYPES,
    ALLOWED_TYPES,
    ENGINE_ADVISORY_MODES,
    GATED_MODES,
)
from reconciler.status.requeue import soonest_requeue as _min_delay
from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.backend_mode import Mode, backend_mode
from shared.conditions import (
    DesiredCondition,
    find,
    merge_conditions,
    normalised,
    reason_of,
)


@dataclass(frozen=True)
class StatusResult:
    status: dict[str, Any]
    mode: Mode
    # Seconds until the backend should be looked at again (None: the steady resync).
    requeue_after: float | None = None
    notes: list[str] = field(default_factory=list)


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
    if mode == Mode.HOST_ONLY and effective.cache_type(cb.spec) == c.TYPE_VLLM_OFFLOADING:
        return BaseVerdict(vllm_offloading_verdict(observed.injected_pods))
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
    offloading = engine_offloading_condition(
        observed.offloading_declined, find(prev_conditions, c.COND_ENGINE_OFFLOADING)
    )
    extra = [x for x in (kernels, compatibility, host_memory, offloading) if x is not None]
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
    return ConditionsResult(
        verdict_triplet(verdict, degraded_reason=degraded_reason) + extra, requeue
    )


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

"""Pure decision of which Kubernetes Events a status transition deserves.

Events are emitted on meaningful state changes only, never on steady-state
reconciles: every rule below compares the previous status with the new one, so an
idle reconcile (old == new) yields no Event by construction.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from shared import constants as c
from shared.conditions import find, format_time
from shared.objects import metadata

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
REPORTING_COMPONENT: Final = "inferencecache.io/controller"


@dataclass(frozen=True)
class EventSpec:
    type: str
    reason: str
    message: str


def _cond(status: dict[str, Any], type_: str) -> tuple[str | None, str | None, str]:
    cond = find(status.get("conditions"), type_)
    if cond is None:
        return None, None, ""
    return cond.get("status"), cond.get("reason"), str(cond.get("message") or "")


def backend_degraded_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning BackendDegraded on entering Degraded=True/ReplicasUnavailable (the
    NoKVEventsObserved flavour carries its own Event)."""
    o_status, o_reason, _ = _cond(old, c.COND_DEGRADED)
    n_status, n_reason, n_msg = _cond(new, c.COND_DEGRADED)
    entered = n_status == "True" and n_reason == c.REASON_REPLICAS_UNAVAILABLE
    already = o_status == "True" and o_reason == c.REASON_REPLICAS_UNAVAILABLE
    return EventSpec(WARNING, c.EVENT_BACKEND_DEGRADED, n_msg) if entered and not already else None


def backend_recovered_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Normal BackendRecovered on the transition back to Ready=True from a
    ReplicasUnavailable degradation (recovery from NoKVEventsObserved is narrated by
    KVEventsObserved instead)."""
    o_deg, o_deg_reason, _ = _cond(old, c.COND_DEGRADED)
    o_ready, _, _ = _cond(old, c.COND_READY)
    n_ready, n_reason, _ = _cond(new, c.COND_READY)
    if (
        n_ready == "True"
        and o_ready != "True"
        and o_deg == "True"
        and o_deg_reason == c.REASON_REPLICAS_UNAVAILABLE
    ):
        return EventSpec(NORMAL, c.EVENT_BACKEND_RECOVERED, f"Backend is Ready again ({n_reason}).")
    return None


def fail_open_events(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning FailClosedEnabled when the effective failOpen becomes false (including
    a backend created fail-closed); Normal FailOpenRestored when it returns to true."""
    was = old.get("failOpen")
    now = new.get("failOpen")
    if now is False and was is not False:
        return EventSpec(
            WARNING,
            c.EVENT_FAIL_CLOSED_ENABLED,
            "spec.integration.failOpen=false: the cache is now a serving dependency; engine "
            "pods will not fall back to local prefill when it is unreachable.",
        )
    if now is True and was is False:
        return EventSpec(
            NORMAL,
            c.EVENT_FAIL_OPEN_RESTORED,
            "spec.integration.failOpen=true: engine pods fall back to local prefill again.",
        )
    return None


def kv_gate_events(old: dict[str, Any], new: dict[str, Any]) -> list[EventSpec]:
    """The readiness gate narrates itself: AwaitingFirstKVEvent and NoKVEventsObserved
    on entering those Ready reasons; KVEventsObserved when the write-once
    firstKVEventObservedAt latch is first set (the moment an event is first seen)."""
    out: list[EventSpec] = []
    _, o_reason, _ = _cond(old, c.COND_READY)
    _, n_reason, n_msg = _cond(new, c.COND_READY)
    if n_reason != o_reason:
        if n_reason == c.REASON_AWAITING_FIRST_KV_EVENT:
            out.append(EventSpec(NORMAL, c.EVENT_AWAITING_FIRST_KV_EVENT, n_msg))
        elif n_reason == c.REASON_NO_KV_EVENTS_OBSERVED:
            out.append(EventSpec(WARNING, c.EVENT_NO_KV_EVENTS_OBSERVED, n_msg))
    if new.get("firstKVEventObservedAt") and not old.get("firstKVEventObservedAt"):
        out.append(
            EventSpec(
                NORMAL,
                c.EVENT_KV_EVENTS_OBSERVED,
                "First KV event observed for this backend; the cache plane is receiving engine state.",
            )
        )
    return out


def engine_selector_unmatched_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Normal EngineSelectorUnmatched when the diagnostic message appears: the initial
    observation is zero, a non-zero count drops to zero, or an older zero-count status
    gains the message. Steady zero with an unchanged message stays silent."""
    msg = new.get("engineSelectorMessage")
    if not msg:
        return None
    if old.get("engineSelectorMessage") == msg and old.get("matchedEnginePods") == 0:
        return None
    return EventSpec(NORMAL, c.EVENT_ENGINE_SELECTOR_UNMATCHED, str(msg))


def injected_engine_crash_looping_event(
    old: dict[str, Any], new: dict[str, Any]
) -> EventSpec | None:
    """Warning InjectedEngineCrashLooping once, when EngineCompatibility enters
    False/InjectedEngineCrashLooping (a preserved condition is no transition)."""
    msg = _entered(
        old, new, c.COND_ENGINE_COMPATIBILITY, c.REASON_INJECTED_ENGINE_CRASH_LOOPING, "False"
    )
    return None if msg is None else EventSpec(WARNING, c.EVENT_INJECTED_ENGINE_CRASH_LOOPING, msg)


def _entered(
    old: dict[str, Any], new: dict[str, Any], type_: str, reason: str, status: str = "True"
) -> str | None:
    """The new message when condition ``type_`` enters ``status``/``reason`` (a
    preserved or unchanged condition is no transition); None otherwise."""
    o_status, o_reason, _ = _cond(old, type_)
    n_status, n_reason, n_msg = _cond(new, type_)
    entered = n_status == status and n_reason == reason
    already = o_status == status and o_reason == reason
    return n_msg if entered and not already else None


def lmcache_version_skew_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning LMCacheVersionSkew once, when LMCacheVersionSkew enters
    True/ClientServerVersionSkew; not again while it stays, whichever pods it names."""
    msg = _entered(old, new, c.COND_LMCACHE_VERSION_SKEW, c.REASON_CLIENT_SERVER_VERSION_SKEW)
    return None if msg is None else EventSpec(WARNING, c.EVENT_LMCACHE_VERSION_SKEW, msg)


def engine_version_below_minimum_event(
    old: dict[str, Any], new: dict[str, Any]
) -> EventSpec | None:
    """Warning EngineVersionBelowMinimum once, when EngineVersionBelowMinimum enters
    True/ReleaseBelowMinimum."""
    msg = _entered(old, new, c.COND_ENGINE_VERSION_BELOW_MINIMUM, c.REASON_RELEASE_BELOW_MINIMUM)
    return None if msg is None else EventSpec(WARNING, c.EVENT_ENGINE_VERSION_BELOW_MINIMUM, msg)


def pinned_host_memory_over_limit_event(
    old: dict[str, Any], new: dict[str, Any]
) -> EventSpec | None:
    """Warning PinnedHostMemoryOverLimit once, when EngineHostMemory enters
    False/PinnedHostMemoryOverLimit (a preserved condition is no transition)."""
    msg = _entered(
        old, new, c.COND_ENGINE_HOST_MEMORY, c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT, "False"
    )
    return None if msg is None else EventSpec(WARNING, c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT, msg)


def engine_offloading_conflict_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning EngineOffloadingConflict once, when EngineOffloading enters
    False/EngineOffloadingConflict (a preserved condition is no transition)."""
    msg = _entered(old, new, c.COND_ENGINE_OFFLOADING, c.REASON_ENGINE_OFFLOADING_CONFLICT, "False")
    return None if msg is None else EventSpec(WARNING, c.EVENT_ENGINE_OFFLOADING_CONFLICT, msg)


def name_conflict_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning NameConflict when Ready enters NameConflict, or its message changes
    (a different set of foreign objects); an unchanged conflict stays silent."""
    _, o_reason, o_msg = _cond(old, c.COND_READY)
    _, n_reason, n_msg = _cond(new, c.COND_READY)
    if n_reason == c.REASON_NAME_CONFLICT and (o_reason, o_msg) != (n_reason, n_msg):
        return EventSpec(WARNING, c.EVENT_NAME_CONFLICT, n_msg)
    return None


def pod_creation_failed_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning PodCreationFailed once, when Ready enters PodCreationFailed (with the
    API server's refusal); not again while it stays, whatever the message says."""
    _, o_reason, _ = _cond(old, c.COND_READY)
    _, n_reason, n_msg = _cond(new, c.COND_READY)
    if n_reason == c.REASON_POD_CREATION_FAILED and o_reason != n_reason:
        return EventSpec(WARNING, c.EVENT_POD_CREATION_FAILED, n_msg)
    return None


CROSS_NAMESPACE_REFUSALS: Final = frozenset(
    {c.REASON_CROSS_NAMESPACE_CONSENT_MISSING, c.REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING}
)


def cross_namespace_refused_event(old: dict[str, Any], new: dict[str, Any]) -> EventSpec | None:
    """Warning CrossNamespaceAccessRefused when a consumer's Ready turns to a refusal by
    the tier it points at (no consent, no credentials), once per transition."""
    _, o_reason, _ = _cond(old, c.COND_READY)
    _, n_reason, n_msg = _cond(new, c.COND_READY)
    if n_reason in CROSS_NAMESPACE_REFUSALS and n_reason != o_reason:
        return EventSpec(WARNING, c.EVENT_CROSS_NAMESPACE_REFUSED, n_msg)
    return None


def transition_events(old: dict[str, Any] | None, new: dict[str, Any]) -> list[EventSpec]:
    """Every Event the old→new status transition deserves, in a stable order."""
    old = old or {}
    out: list[EventSpec] = []
    for rule in (
        name_conflict_event,
        pod_creation_failed_event,
        backend_degraded_event,
        backend_recovered_event,
        fail_open_events,
    ):
        event = rule(old, new)
        if event is not None:
            out.append(event)
    out.extend(kv_gate_events(old, new))
    for rule in (
        engine_selector_unmatched_event,
        injected_engine_crash_looping_event,
        lmcache_version_skew_event,
        engine_version_below_minimum_event,
        pinned_host_memory_over_limit_event,
        engine_offloading_conflict_event,
        cross_namespace_refused_event,
    ):
        event = rule(old, new)
        if event is not None:
            out.append(event)
    return out


def event_object(
    cb_obj: dict[str, Any], event: EventSpec, now: dt.datetime, instance: str
) -> dict[str, Any]:
    """A core/v1 Event about the CacheBackend (shown by kubectl describe, which filters
    by involvedObject.uid)."""
    raw_meta = metadata(cb_obj)
    return core_event(
        cb_obj,
        (c.API_VERSION, c.KIND),
        {"generateName": f"{raw_meta.get('name')}.", "namespace": raw_meta.get("namespace")},
        event.type,
        event.reason,
        event.message[:1024],
        now,
        instance,
    )


def core_event(
    involved: dict[str, Any],
    api_version_kind: tuple[str, str],
    event_metadata: dict[str, Any],
    type_: str,
    reason: str,
    message: str,
    now: dt.datetime,
    instance: str,
) -> dict[str, Any]:
    """A core/v1 Event about the object ``involved`` (of ``api_version_kind``), first
    and last seen ``now``, reported by this controller's ``instance``."""
    raw_meta = metadata(involved)
    api_version, kind = api_version_kind
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": event_metadata,
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": raw_meta.get("name"),
            "namespace": raw_meta.get("namespace"),
            "uid": raw_meta.get("uid"),
            "resourceVersion": raw_meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "source": {"component": REPORTING_COMPONENT},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": instance,
    }

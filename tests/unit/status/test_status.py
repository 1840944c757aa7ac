"""Status computation and transition Events, one test per spec rule, per mode."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from reconciler.status.compute import compute_status, status_equal
from reconciler.status.engine_pods import CrashLoop, InjectedPodsObservation, KernelCheckReport
from reconciler.status.events import transition_events
from reconciler.status.observed import (
    EngineObservation,
    Observed,
    ProbeObservation,
    WorkloadObservation,
)
from shared.api.duration import parse_go_duration
from shared.api.models import CacheBackend
from shared.backend_mode import Mode
from shared.conditions import find
from shared.constants import REASON_UNSUPPORTED_RUNTIME_PAIR
from tests.builders import ENDPOINT, MANAGED_SPEC, NO_GATE, T0, external_spec
from tests.builders import condition_of as cond
from tests.builders import selected_pod as _pod
from tests.builders import selector_cb as _cb
from tests.builders import status_backend as obj


def must_find(conditions: Any, type_: str) -> dict[str, Any]:
    """The condition of ``type_``; the test fails when it is missing."""
    found = find(conditions, type_)
    assert found is not None, f"no {type_} condition in {conditions}"
    return found


def workload(
    desired: int = 1,
    available: int | None = None,
    *,
    generation: int = 1,
    observed: int = 1,
    updated: int | None = None,
    replicas: int | None = None,
    deadline: bool = False,
) -> WorkloadObservation:
    return WorkloadObservation(
        kind="Deployment",
        generation=generation,
        observed_generation=observed,
        spec_replicas=desired,
        replicas=desired if replicas is None else replicas,
        updated_replicas=desired if updated is None else updated,
        available_replicas=desired if available is None else available,
        ready_replicas=desired if available is None else available,
        progress_deadline_exceeded=deadline,
    )


def managed_obs(w: WorkloadObservation | None = None, **kw: Any) -> Observed:
    return Observed(workload=w if w is not None else workload(), service_endpoint=ENDPOINT, **kw)


def run(
    o: dict[str, Any], observed: Observed | None = None, now: dt.datetime = T0
) -> dict[str, Any]:
    return compute_status(
        CacheBackend.model_validate(o), o.get("status"), observed or Observed(), now
    ).status


def types(status: dict[str, Any]) -> set[str]:
    return {c["type"] for c in status.get("conditions") or []}


def step(o: dict[str, Any], observed: Observed, now: dt.datetime) -> dict[str, Any]:
    """One reconcile: compute and persist the new status on the object."""
    o = dict(o)
    o["status"] = run(o, observed, now)
    return o


# ======================================================================= managed


def test_managed_first_apply_is_rollout_in_progress() -> None:
    st = run(obj(), Observed(workload=None, service_endpoint=ENDPOINT))
    assert cond(st, "Ready") == ("False", "RolloutInProgress")
    assert cond(st, "Progressing") == ("True", "RolloutInProgress")
    assert cond(st, "Degraded") == ("False", "NotDegraded")


def test_managed_rollout_in_progress_until_generation_observed_and_replicas_updated() -> None:
    for w in (
        workload(observed=0),
        workload(desired=2, updated=1),
        workload(desired=2, replicas=3),
    ):
        assert cond(run(obj(), managed_obs(w)), "Ready") == ("False", "RolloutInProgress")


def test_managed_rolled_out_but_replicas_unavailable_is_degraded_even_on_first_rollout() -> None:
    # "Degraded: rolled out but replicas unavailable (reason ReplicasUnavailable)".
    st = run(obj(), managed_obs(workload(available=0)))
    assert cond(st, "Ready") == ("False", "ReplicasUnavailable")
    assert cond(st, "Degraded") == ("True", "ReplicasUnavailable")
    assert cond(st, "Progressing") == ("False", "Degraded")


def test_managed_replicas_unavailable_after_having_been_available_is_degraded() -> None:
    o = step(obj(annotations=NO_GATE), managed_obs(), T0)
    assert cond(o["status"], "Ready") == ("True", "BackendReady")
    st = run(o, managed_obs(workload(available=0)), T0)
    assert cond(st, "Ready") == ("False", "ReplicasUnavailable")
    assert cond(st, "Degraded") == ("True", "ReplicasUnavailable")
    assert cond(st, "Progressing") == ("False", "Degraded")


def test_managed_progress_deadline_exceeded_is_replicas_unavailable() -> None:
    st = run(obj(), managed_obs(workload(available=0, deadline=True)))
    assert cond(st, "Degraded") == ("True", "ReplicasUnavailable")


def test_managed_scaled_to_zero() -> None:
    spec = dict(MANAGED_SPEC, replicas=0)
    st = run(obj(spec), managed_obs(workload(desired=0)))
    assert cond(st, "Ready") == ("False", "ScaledToZero")
    assert cond(st, "Progressing") == ("False", "ScaledToZero")
    assert cond(st, "Degraded") == ("False", "NotDegraded")


def test_managed_backend_ready_when_the_kv_event_gate_is_opted_out() -> None:
    st = run(obj(annotations=NO_GATE), managed_obs())
    assert cond(st, "Ready") == ("True", "BackendReady")
    assert cond(st, "Progressing") == ("False", "Synced")
    assert st["endpoint"] == ENDPOINT
    assert types(st) == {"Ready", "Degraded", "Progressing"}


def test_hpa_owned_replica_count_compares_against_workload_spec_replicas() -> None:
    spec = dict(MANAGED_SPEC, replicas=1, autoscaling={"minReplicas": 1, "maxReplicas": 5})
    # The HPA scaled the Deployment to 3; only 1 is updated → still rolling out.
    st = run(
        obj(spec, annotations=NO_GATE),
        managed_obs(workload(desired=3, updated=1, available=1, replicas=1)),
    )
    assert cond(st, "Ready") == ("False", "RolloutInProgress")
    st = run(obj(spec, annotations=NO_GATE), managed_obs(workload(desired=3)))
    assert cond(st, "Ready") == ("True", "BackendReady")


def test_managed_endpoint_is_the_observed_service_endpoint() -> None:
    assert run(obj(), managed_obs())["endpoint"] == ENDPOINT


# --------------------------------------------------------------- KV-event gate


def test_kv_gate_awaiting_first_event_within_timeout_requeues_at_deadline() -> None:
    res = compute_status(CacheBackend.model_validate(obj()), obj().get("status"), managed_obs(), T0)
    assert cond(res.status, "Ready") == ("False", "AwaitingFirstKVEvent")
    assert cond(res.status, "Progressing") == ("True", "AwaitingFirstKVEvent")
    assert cond(res.status, "Degraded") == ("False", "NotDegraded")
    assert res.status["firstAvailableAt"] == "2026-01-01T12:00:00Z"
    assert res.requeue_after is not None
    assert 300 <= res.requeue_after <= 301


def test_kv_gate_first_available_at_latches_only_when_available() -> None:
    st = run(obj(), managed_obs(workload(available=0)))
    assert "firstAvailableAt" not in st


def test_kv_gate_no_kv_events_observed_after_timeout_is_degraded() -> None:
    o = step(obj(), managed_obs(), T0)
    st = run(o, managed_obs(), T0 + dt.timedelta(minutes=5, seconds=1))
    assert cond(st, "Ready") == ("False", "NoKVEventsObserved")
    assert cond(st, "Degraded") == ("True", "NoKVEventsObserved")
    assert cond(st, "Progressing") == ("False", "Degraded")


def test_kv_gate_honours_observation_first_event_timeout() -> None:
    spec = dict(MANAGED_SPEC, observation={"firstEventTimeout": "30s"})
    o = step(obj(spec), managed_obs(), T0)
    assert cond(run(o, managed_obs(), T0 + dt.timedelta(seconds=29)), "Ready") == (
        "False",
        "AwaitingFirstKVEvent",
    )
    assert cond(run(o, managed_obs(), T0 + dt.timedelta(seconds=31)), "Ready") == (
        "False",
        "NoKVEventsObserved",
    )


@pytest.mark.parametrize("zero", ["0", "0s", "0.0h"])
def test_kv_gate_first_event_timeout_zero_reports_no_kv_events_at_once(zero: str) -> None:
    """firstEventTimeout 0 is no grace period, not "disabled" (docs/decisions.md; the
    require-kv-events annotation turns the gate off): Degraded/NoKVEventsObserved as
    soon as the backend is up, with no requeue timer, until the first event."""
    spec = dict(MANAGED_SPEC, observation={"firstEventTimeout": zero})
    res = compute_status(
        CacheBackend.model_validate(obj(spec)), obj(spec).get("status"), managed_obs(), T0
    )
    assert cond(res.status, "Ready") == ("False", "NoKVEventsObserved")
    assert cond(res.status, "Degraded") == ("True", "NoKVEventsObserved")
    assert res.requeue_after is None or res.requeue_after > 0
    # Still not Ready while the workload is rolling out: the clock starts when it is up.
    st = run(obj(spec), managed_obs(workload(available=0)))
    assert cond(st, "Ready") != ("False", "NoKVEventsObserved")
    # The first event clears it.
    o = step(obj(spec), managed_obs(), T0)
    o["status"]["indexParticipation"] = {"prefixCount": 1, "lastEventAt": "2026-01-01T12:00:01Z"}
    assert cond(run(o, managed_obs(), T0 + dt.timedelta(seconds=2)), "Ready") == (
        "True",
        "KVEventsObserved",
    )
    # Opting out of the gate is the annotation, whatever the timeout.
    opted_out = run(obj(spec, annotations=NO_GATE), managed_obs())
    assert cond(opted_out, "Ready") == ("True", "BackendReady")


def test_kv_gate_events_observed_latches_first_kv_event_observed_at() -> None:
    o = step(obj(), managed_obs(), T0)
    o["status"]["indexParticipation"] = {"prefixCount": 3, "lastEventAt": "2026-01-01T12:01:00Z"}
    st = run(o, managed_obs(), T0 + dt.timedelta(minutes=2))
    assert cond(st, "Ready") == ("True", "KVEventsObserved")
    assert cond(st, "Progressing") == ("False", "Synced")
    assert st["firstKVEventObservedAt"] == "2026-01-01T12:02:00Z"
    assert st["indexParticipation"] == {"prefixCount": 3, "lastEventAt": "2026-01-01T12:01:00Z"}


def test_kv_gate_event_present_on_first_reconcile_counts() -> None:
    o = obj(
        status={"indexParticipation": {"prefixCount": 0, "lastEventAt": "2026-01-01T11:00:00Z"}}
    )
    assert cond(run(o, managed_obs()), "Ready") == ("True", "KVEventsObserved")


@pytest.mark.parametrize(
    "last_event_at",
    ["1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "not-a-time", ""],
)
def test_kv_gate_zero_or_unreadable_last_event_at_is_not_an_event(last_event_at: str) -> None:
    """Index Participation: lastEventAt is "Unset until the first event arrives;
    readiness gates must treat the absent value as 'not yet observed' rather than
    epoch", and docs/server-contract.md: "a zero or omitted value means no event" —
    Go's zero time (0001-01-01) included."""
    o = obj(status={"indexParticipation": {"prefixCount": 0, "lastEventAt": last_event_at}})
    st = run(o, managed_obs())
    assert cond(st, "Ready") == ("False", "AwaitingFirstKVEvent")
    assert "firstKVEventObservedAt" not in st


def test_kv_gate_ever_observed_survives_last_event_at_being_cleared() -> None:
    o = obj(
        status={"indexParticipation": {"prefixCount": 0, "lastEventAt": "2026-01-01T11:00:00Z"}}
    )
    o = step(o, managed_obs(), T0)
    o["status"]["indexParticipation"] = {"prefixCount": 0}
    st = run(o, managed_obs(), T0 + dt.timedelta(hours=1))
    assert cond(st, "Ready") == ("True", "KVEventsObserved")


def test_kv_gate_no_kv_events_is_sticky_until_an_event_arrives() -> None:
    o = step(obj(), managed_obs(), T0)
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=6))
    # The operator raises the timeout: the verdict stays Degraded until an event.
    o["spec"] = dict(MANAGED_SPEC, observation={"firstEventTimeout": "1h"})
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=7))
    assert cond(o["status"], "Ready") == ("False", "NoKVEventsObserved")
    o["status"]["indexParticipation"] = {"prefixCount": 1, "lastEventAt": "2026-01-01T12:08:00Z"}
    assert cond(run(o, managed_obs(), T0 + dt.timedelta(minutes=8)), "Ready") == (
        "True",
        "KVEventsObserved",
    )


def test_kv_gate_availability_flap_after_timeout_cannot_bounce_back_to_awaiting() -> None:
    o = step(obj(), managed_obs(), T0)
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=6))
    o = step(o, managed_obs(workload(available=0)), T0 + dt.timedelta(minutes=7))
    assert cond(o["status"], "Ready") == ("False", "ReplicasUnavailable")
    assert o["status"]["firstAvailableAt"] == "2026-01-01T12:00:00Z"
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=8))
    assert cond(o["status"], "Ready") == ("False", "NoKVEventsObserved")


def test_kv_gate_first_available_at_stable_across_flaps() -> None:
    o = step(obj(), managed_obs(), T0)
    o = step(o, managed_obs(workload(available=0)), T0 + dt.timedelta(minutes=1))
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=2))
    assert o["status"]["firstAvailableAt"] == "2026-01-01T12:00:00Z"
    assert cond(o["status"], "Ready") == ("False", "AwaitingFirstKVEvent")


def test_kv_gate_managed_to_events_only_reanchors_and_bypasses_sticky() -> None:
    o = step(obj(), managed_obs(), T0)
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=6))
    assert cond(o["status"], "Ready") == ("False", "NoKVEventsObserved")
    o["spec"] = {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}
    flip = T0 + dt.timedelta(minutes=10)
    o = step(o, Observed(), flip)
    assert o["status"]["firstAvailableAt"] == "2026-01-01T12:10:00Z"
    assert cond(o["status"], "Ready") == ("False", "AwaitingFirstKVEvent")
    assert cond(o["status"], "Degraded") == ("False", "NotDegraded")
    # Anchored at the flip: the next reconcile does not re-anchor again.
    o = step(o, Observed(), flip + dt.timedelta(minutes=1))
    assert o["status"]["firstAvailableAt"] == "2026-01-01T12:10:00Z"


def test_kv_gate_events_only_to_managed_waits_for_the_workload_anchor() -> None:
    o = step(obj({"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}), Observed(), T0)
    assert o["status"]["firstAvailableAt"] == "2026-01-01T12:00:00Z"
    o["spec"] = dict(MANAGED_SPEC)
    o = step(o, managed_obs(workload(updated=0, available=0)), T0 + dt.timedelta(minutes=10))
    assert "firstAvailableAt" not in o["status"]
    assert cond(o["status"], "Ready") == ("False", "RolloutInProgress")
    o = step(o, managed_obs(), T0 + dt.timedelta(minutes=11))
    assert o["status"]["firstAvailableAt"] == "2026-01-01T12:11:00Z"


def test_kv_gate_unmanaged_transition_clears_anchor_but_keeps_event_latch() -> None:
    o = obj(
        status={"indexParticipation": {"prefixCount": 0, "lastEventAt": "2026-01-01T11:00:00Z"}}
    )
    o = step(o, managed_obs(), T0)
    o["spec"] = {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "External", "endpoint": "h:1"},
    }
    st = run(o, Observed(), T0)
    assert "firstAvailableAt" not in st
    assert st["firstKVEventObservedAt"] == "2026-01-01T12:00:00Z"


# ======================================================================= events-only


EVENTS_ONLY = {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}


def test_events_only_base_reason_is_events_only_active_and_endpoint_empty() -> None:
    st = run(obj(EVENTS_ONLY, annotations=NO_GATE))
    assert cond(st, "Ready") == ("True", "EventsOnlyActive")
    assert "endpoint" not in st


def test_events_only_clock_starts_on_first_reconcile() -> None:
    st = run(obj(EVENTS_ONLY))
    assert st["firstAvailableAt"] == "2026-01-01T12:00:00Z"
    assert cond(st, "Ready") == ("False", "AwaitingFirstKVEvent")


def test_events_only_times_out_to_no_kv_events_observed() -> None:
    o = step(obj(EVENTS_ONLY), Observed(), T0)
    st = run(o, Observed(), T0 + dt.timedelta(minutes=6))
    assert cond(st, "Ready") == ("False", "NoKVEventsObserved")
    assert cond(st, "Degraded") == ("True", "NoKVEventsObserved")


def test_events_only_kv_events_observed() -> None:
    o = obj(EVENTS_ONLY, status={"indexParticipation": {"lastEventAt": "2026-01-01T11:00:00Z"}})
    assert cond(run(o), "Ready") == ("True", "KVEventsObserved")


def test_events_only_publishes_exactly_three_conditions_and_clears_managed_advisories() -> None:
    prior = [
        {
            "type": t,
            "status": "True",
            "reason": "x",
            "message": "",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }
        for t in ("FunctionalProbeOK", "EngineKernelsHealthy", "T2Degraded", "EngineCompatibility")
    ]
    st = run(obj(EVENTS_ONLY, status={"conditions": prior, "endpoint": "old:1"}))
    assert types(st) == {"Ready", "Degraded", "Progressing"}
    assert "endpoint" not in st


# ======================================================================= host-only


HOST_ONLY = {"runtime": "SGLang", "lmCache": {"hostMemory": {"capacity": "8Gi"}}}


def test_host_only_base_reason_is_host_only_active() -> None:
    st = run(obj(HOST_ONLY, annotations=NO_GATE))
    assert cond(st, "Ready") == ("True", "HostOnlyActive")
    assert cond(st, "Degraded") == ("False", "NotDegraded")
    assert "endpoint" not in st


def test_host_only_runs_the_kv_event_gate() -> None:
    assert cond(run(obj(HOST_ONLY)), "Ready") == ("False", "AwaitingFirstKVEvent")


def test_host_only_keeps_engine_side_advisory_conditions() -> None:
    prior = [
        {
            "type": "EngineKernelsHealthy",
            "status": "True",
            "reason": "KernelsHealthy",
            "message": "",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }
    ]
    assert "EngineKernelsHealthy" in types(run(obj(HOST_ONLY, status={"conditions": prior})))


# ======================================================================= external


def test_external_endpoint_accepted_mirrors_trimmed_endpoint() -> None:
    st = run(obj(external_spec("LMCacheServer", "  lm://cache.example:65432 ")))
    assert cond(st, "Ready") == ("True", "ExternalEndpointAccepted")
    assert cond(st, "Progressing") == ("False", "ExternalEndpointAccepted")
    assert st["endpoint"] == "lm://cache.example:65432"


def test_external_endpoint_missing() -> None:
    for endpoint in (None, "   "):
        st = run(obj(external_spec("LMCacheServer", endpoint)))
        assert cond(st, "Ready") == ("False", "ExternalEndpointMissing")
        assert cond(st, "Progressing") == ("False", "ExternalEndpointMissing")
        assert "endpoint" not in st


def test_external_endpoint_invalid_names_the_field() -> None:
    st = run(obj(external_spec("Redis", "lm://redis:6379")))
    assert cond(st, "Ready") == ("False", "ExternalEndpointInvalid")
    assert "spec.remoteStorage.endpoint" in must_find(st["conditions"], "Ready")["message"]


def test_external_publishes_ready_and_progressing_only_and_never_gates() -> None:
    prior = run(obj(), managed_obs())
    st = run(obj(external_spec("LMCacheServer", "h:1"), status=prior))
    assert types(st) == {"Ready", "Progressing"}


# ======================================================================= hicache / unsupported


def test_sglang_hicache_publishes_no_ready() -> None:
    spec = {"runtime": "SGLang", "type": "SGLangHiCache", "hiCache": {"ratio": "2.0"}}
    prior = run(obj(HOST_ONLY))
    st = run(obj(spec, status=prior))
    assert "Ready" not in types(st)
    assert types(st) == {"Progressing"}
    assert cond(st, "Progressing") == ("False", "Synced")
    assert "firstAvailableAt" not in st


def test_unsupported_runtime_pair() -> None:
    spec = {"runtime": "VLLM", "type": "SGLangHiCache"}
    res = compute_status(
        CacheBackend.model_validate(obj(spec)), obj(spec).get("status"), Observed(), T0
    )
    assert res.mode == Mode.UNSUPPORTED
    assert cond(res.status, "Ready") == ("False", REASON_UNSUPPORTED_RUNTIME_PAIR)


# ======================================================================= common fields


def test_observed_generation_and_fail_open_echo() -> None:
    st = run(obj(dict(MANAGED_SPEC, integration={"failOpen": False}), generation=7), managed_obs())
    assert st["observedGeneration"] == 7
    assert st["failOpen"] is False
    assert must_find(st["conditions"], "Ready")["observedGeneration"] == 7
    assert run(obj(), managed_obs())["failOpen"] is True


def test_matched_engine_pods_unset_without_claim_capable_selector() -> None:
    engines = EngineObservation(matched_pods=3)
    selectors: list[dict[str, Any] | None] = [None, {"matchLabels": {}}]
    for sel in selectors:
        spec = dict(MANAGED_SPEC)
        if sel is not None:
            spec["engineSelector"] = sel
        st = run(obj(spec, status={"matchedEnginePods": 2}), managed_obs(engines=engines))
        assert "matchedEnginePods" not in st


def test_matched_engine_pods_counted_and_message_when_zero_and_expected() -> None:
    spec = dict(MANAGED_SPEC, engineSelector={"matchLabels": {"app": "vllm"}})
    st = run(obj(spec), managed_obs(engines=EngineObservation(matched_pods=2)))
    assert st["matchedEnginePods"] == 2
    assert "engineSelectorMessage" not in st
    st = run(obj(spec), managed_obs(engines=EngineObservation(matched_pods=0)))
    assert st["matchedEnginePods"] == 0
    assert st["engineSelectorMessage"].startswith('spec.engineSelector.matchLabels={"app":"vllm"}')


def test_engine_selector_message_empty_when_matching_deployment_scaled_to_zero() -> None:
    spec = dict(MANAGED_SPEC, engineSelector={"matchLabels": {"app": "vllm"}})
    engines = EngineObservation(
        matched_pods=0, matching_deployments=1, matching_deployment_replicas=0
    )
    st = run(obj(spec), managed_obs(engines=engines))
    assert st["matchedEnginePods"] == 0
    assert "engineSelectorMessage" not in st


def test_engine_churn_requeues_every_5s_while_pod_count_differs_from_desired() -> None:
    spec = dict(MANAGED_SPEC, engineSelector={"matchLabels": {"app": "vllm"}})
    churn = EngineObservation(
        matched_pods=1, matching_deployments=1, matching_deployment_replicas=2
    )
    res = compute_status(
        CacheBackend.model_validate(obj(spec, annotations=NO_GATE)),
        obj(spec, annotations=NO_GATE).get("status"),
        managed_obs(engines=churn),
        T0,
    )
    assert res.requeue_after == 5.0
    steady = EngineObservation(
        matched_pods=2, matching_deployments=1, matching_deployment_replicas=2
    )
    assert (
        compute_status(
            CacheBackend.model_validate(obj(spec, annotations=NO_GATE)),
            obj(spec, annotations=NO_GATE).get("status"),
            managed_obs(engines=steady),
            T0,
        ).requeue_after
        is None
    )


def test_t2_degraded_from_t2_hit_rate() -> None:
    o = obj(status={"indexParticipation": {"t2HitRate": "0"}})
    assert cond(run(o, managed_obs()), "T2Degraded") == ("True", "T2ZeroHitRate")
    o = obj(status={"indexParticipation": {"t2HitRate": "0.4"}})
    assert cond(run(o, managed_obs()), "T2Degraded") == ("False", "T2Serving")
    assert cond(run(obj(), managed_obs()), "T2Degraded") is None


def test_idle_reconcile_produces_an_identical_status() -> None:
    spec = dict(MANAGED_SPEC, engineSelector={"matchLabels": {"app": "vllm"}})
    observed = managed_obs(engines=EngineObservation(matched_pods=0))
    o = step(obj(spec), observed, T0)
    again = run(o, observed, T0 + dt.timedelta(seconds=30))
    assert status_equal(o["status"], again)


# ======================================================================= functional probe


def probe_obs(outcome: str, **kw: Any) -> Observed:
    return managed_obs(probe=ProbeObservation(outcome=outcome, **kw))


READY_OBJ = obj(annotations=NO_GATE)


def test_functional_probe_ok_keeps_ready() -> None:
    st = run(READY_OBJ, probe_obs("ok"))
    assert cond(st, "FunctionalProbeOK") == ("True", "ProbeOK")
    assert cond(st, "Ready") == ("True", "BackendReady")


@pytest.mark.parametrize(
    ("stage", "reason"),
    [("ingest", "ProbeIngestFailed"), ("routing", "ProbeRoutingFailed"), ("t2", "ProbeT2Failed")],
)
def test_functional_probe_stage_failure_downgrades_ready(stage: str, reason: str) -> None:
    st = run(READY_OBJ, probe_obs("failed", failed_stage=stage, message="boom"))
    assert cond(st, "FunctionalProbeOK") == ("False", reason)
    assert cond(st, "Ready") == ("False", reason)
    assert cond(st, "Degraded") == ("False", "NotDegraded"), "the probe never drives Degraded"


def test_functional_probe_transport_error_is_unknown_and_leaves_ready() -> None:
    st = run(READY_OBJ, probe_obs("error"))
    assert cond(st, "FunctionalProbeOK") == ("Unknown", "ProbeError")
    assert cond(st, "Ready") == ("True", "BackendReady")


def test_functional_probe_error_after_failure_is_sticky_false() -> None:
    o = step(READY_OBJ, probe_obs("failed", failed_stage="routing", message="m"), T0)
    for outcome in ("error", "rate_limited"):
        st = run(o, probe_obs(outcome), T0)
        assert cond(st, "FunctionalProbeOK") == ("False", "ProbeRoutingFailed")
        assert cond(st, "Ready") == ("False", "ProbeRoutingFailed")


def test_rate_limited_probe_requeues_at_the_window_expiry() -> None:
    """Functional-probe gate: "rate-limited reconcile → no probe call ... The reconciler
    also schedules a requeue at the rate-limit window expiry so a quiet stuck backend
    re-probes even without external watch events." """
    o = step(READY_OBJ, probe_obs("failed", failed_stage="routing", message="m"), T0)
    res = compute_status(
        CacheBackend.model_validate(o),
        o.get("status"),
        probe_obs("rate_limited", retry_after_seconds=12.5),
        T0,
    )
    assert cond(res.status, "Ready") == ("False", "ProbeRoutingFailed")
    assert res.requeue_after == 12.5
    # A healthy backend is re-probed each window too (the next probe is what would
    # notice a regression), and the earlier of two deadlines wins.
    ok = step(READY_OBJ, probe_obs("ok"), T0)
    res = compute_status(
        CacheBackend.model_validate(ok),
        ok.get("status"),
        probe_obs("rate_limited", retry_after_seconds=20.0),
        T0,
    )
    assert cond(res.status, "FunctionalProbeOK") == ("True", "ProbeOK")
    assert res.requeue_after == 20.0


def test_functional_probe_bypassed_by_annotation() -> None:
    st = run(READY_OBJ, probe_obs("bypassed"))
    assert cond(st, "FunctionalProbeOK") == ("True", "ProbeBypassed")
    assert cond(st, "Ready") == ("True", "BackendReady")


def test_functional_probe_gate_off_clears_stale_condition() -> None:
    o = step(READY_OBJ, probe_obs("ok"), T0)
    assert cond(run(o, managed_obs()), "FunctionalProbeOK") is None


# ======================================================================= Events


def test_event_backend_degraded_and_recovered() -> None:
    o = step(obj(annotations=NO_GATE), managed_obs(), T0)
    deg = step(o, managed_obs(workload(available=0)), T0)
    assert [e.reason for e in transition_events(o["status"], deg["status"])] == ["BackendDegraded"]
    assert transition_events(deg["status"], run(deg, managed_obs(workload(available=0)), T0)) == []
    rec = run(deg, managed_obs(), T0)
    assert [e.reason for e in transition_events(deg["status"], rec)] == ["BackendRecovered"]


def test_event_fail_closed_enabled_and_fail_open_restored() -> None:
    closed = run(obj(dict(MANAGED_SPEC, integration={"failOpen": False})), managed_obs())
    assert [e.reason for e in transition_events({}, closed) if e.reason.startswith("Fail")] == [
        "FailClosedEnabled"
    ]
    opened = run(obj(), managed_obs())
    assert [e.reason for e in transition_events(closed, opened) if e.reason.startswith("Fail")] == [
        "FailOpenRestored"
    ]
    assert [e.type for e in transition_events({}, closed) if e.reason == "FailClosedEnabled"] == [
        "Warning"
    ]


def test_event_kv_gate_awaiting_observed_and_no_events() -> None:
    o = step(obj(), managed_obs(workload(available=0)), T0)
    awaiting = step(o, managed_obs(), T0)
    assert [e.reason for e in transition_events(o["status"], awaiting["status"])] == [
        "AwaitingFirstKVEvent"
    ]
    timed_out = step(awaiting, managed_obs(), T0 + dt.timedelta(minutes=6))
    events = transition_events(awaiting["status"], timed_out["status"])
    assert [(e.type, e.reason) for e in events] == [("Warning", "NoKVEventsObserved")]
    timed_out["status"]["indexParticipation"] = {"lastEventAt": "2026-01-01T12:07:00Z"}
    observed = run(timed_out, managed_obs(), T0 + dt.timedelta(minutes=7))
    assert [e.reason for e in transition_events(timed_out["status"], observed)] == [
        "KVEventsObserved"
    ]


def test_event_engine_selector_unmatched_rules() -> None:
    spec = dict(MANAGED_SPEC, engineSelector={"matchLabels": {"app": "vllm"}})
    zero = managed_obs(engines=EngineObservation(matched_pods=0))
    some = managed_obs(engines=EngineObservation(matched_pods=2))

    def reasons(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        return [
            e.reason for e in transition_events(old, new) if e.reason == "EngineSelectorUnmatched"
        ]

    first = step(obj(spec), zero, T0)
    assert reasons({}, first["status"]) == ["EngineSelectorUnmatched"]
    assert reasons(first["status"], run(first, zero, T0)) == []
    matched = step(first, some, T0)
    assert reasons(first["status"], matched["status"]) == []
    dropped = run(matched, zero, T0)
    assert reasons(matched["status"], dropped) == ["EngineSelectorUnmatched"]
    legacy = {"matchedEnginePods": 0}
    assert reasons(legacy, dropped) == ["EngineSelectorUnmatched"]


def test_idle_transition_emits_nothing() -> None:
    o = step(obj(dict(MANAGED_SPEC, integration={"failOpen": False})), managed_obs(), T0)
    assert transition_events(o["status"], run(o, managed_obs(), T0)) == []


# ======================================================================= helpers


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m", 300.0),
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("", None),
        ("5 m", None),
        ("m", None),
        # Exactly Go's time.ParseDuration grammar.
        ("0", 0.0),
        ("0s", 0.0),
        ("-1s", -1.0),
        ("+0", 0.0),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("1μs", 1e-6),
        ("1d", None),
        (".", None),
        ("9223372036854775808ns", None),
    ],
)
def test_parse_go_duration(text: str, seconds: float | None) -> None:
    assert parse_go_duration(text) == seconds


# ======================================================================= /snapshot projection


def test_index_participation_attributes_each_replica_to_one_backend() -> None:
    from reconciler.work.snapshot import project_index_participation

    pods = {
        ("ns", "p1"): _pod("ns", "p1", {"app": "vllm"}),
        ("ns", "p2"): _pod("ns", "p2", {"app": "vllm"}, injected="ns/zeta"),
    }
    backends = [
        _cb("ns", "beta", {"app": "vllm"}),
        _cb("ns", "alpha", {"app": "vllm"}),
        _cb("ns", "zeta", None),
        _cb("ns", "catchall", {}),
        _cb(
            "ns",
            "drained",
            {"app": "gone"},
            ip={"prefixCount": 7, "lastEventAt": "2026-01-01T00:00:00Z"},
        ),
    ]
    snapshot = {
        "replicas": [
            {
                "replicaId": "p1",
                "tenant": "ns",
                "prefixCount": 5,
                "lastEventAt": "2026-01-01T10:00:00Z",
                "t2HitTokens": 1,
                "t2QueryTokens": 4,
            },
            {
                "replicaId": "p2",
                "tenant": "ns",
                "prefixCount": 2,
                "lastEventAt": "0001-01-01T00:00:00Z",
            },
            {"replicaId": "vanished", "tenant": "ns", "prefixCount": 9},
        ]
    }
    out = project_index_participation(snapshot, pods, backends)
    # First match by name wins among selectors; injected-by beats selectors.
    assert out["ns/alpha"] == {
        "prefixCount": 5,
        "lastEventAt": "2026-01-01T10:00:00Z",
        "t2HitRate": "0.25",
    }
    assert out["ns/zeta"] == {"prefixCount": 2}
    assert "ns/beta" not in out
    assert "ns/catchall" not in out
    # A drained backend is reset to 0 rather than keeping stale positives.
    assert out["ns/drained"] == {"prefixCount": 0}


def test_index_participation_empty_selector_never_claims_by_vacuous_truth() -> None:
    """Index Participation: 'A CacheBackend without an EngineSelector (or with empty
    MatchLabels) is excluded from the selector fallback — otherwise a misconfigured
    backend would silently claim every replica in its namespace by vacuous truth — but
    a pod can still be attributed to it via the injected-by annotation.' The empty
    selector sorts first here, so only the exclusion keeps it from claiming."""
    from reconciler.work.snapshot import project_index_participation

    pods = {
        ("ns", "stray"): _pod("ns", "stray", {"app": "other"}),
        ("ns", "wired"): _pod("ns", "wired", {"app": "other"}, injected="ns/a-empty"),
    }
    backends = [_cb("ns", "a-empty", {}), _cb("ns", "a-none", None), _cb("ns", "z", {"app": "x"})]
    snapshot = {
        "replicas": [
            {"replicaId": "stray", "tenant": "ns", "prefixCount": 3},
            {"replicaId": "wired", "tenant": "ns", "prefixCount": 4},
        ]
    }
    out = project_index_participation(snapshot, pods, backends)
    assert out == {"ns/a-empty": {"prefixCount": 4}}


def test_index_participation_ignores_an_injected_by_claim_on_another_namespace() -> None:
    """Index Participation step 2 (injected-by resolves the owner directly) applies to
    claims the webhook can have written: it only selects backends in the pod's own
    namespace. A claim on another namespace's backend falls back to step 3 (the
    selector rule) and never feeds that backend's indexParticipation."""
    from reconciler.work.snapshot import project_index_participation

    pods = {
        ("a", "forged"): _pod("a", "forged", {"app": "vllm"}, injected="b/victim"),
        ("a", "stray"): _pod("a", "stray", {"app": "other"}, injected="b/victim"),
    }
    backends = [_cb("a", "local", {"app": "vllm"}), _cb("b", "victim", {"app": "vllm"})]
    snapshot = {
        "replicas": [
            {"replicaId": "forged", "tenant": "a", "prefixCount": 3},
            {"replicaId": "stray", "tenant": "a", "prefixCount": 4},
        ]
    }
    out = project_index_participation(snapshot, pods, backends)
    assert out == {"a/local": {"prefixCount": 3}}


def test_probe_result_passes_only_when_every_stage_ok_or_skipped() -> None:
    from reconciler.steps.server_client import interpret_probe_result

    assert (
        interpret_probe_result({"ingest": "ok", "routing": "ok", "t2": "skipped"}).outcome == "ok"
    )
    failed = interpret_probe_result(
        {
            "ingest": "ok",
            "routing": "failed",
            "t2": "skipped",
            "errors": [{"stage": "routing", "message": "no hint"}],
        }
    )
    assert (failed.outcome, failed.failed_stage, failed.message) == ("failed", "routing", "no hint")
    assert interpret_probe_result({}).outcome == "failed", "an empty result fails closed"
    assert interpret_probe_result(None).outcome == "failed"


# ======================================================================= engine-side advisories


def kernels(*reports: tuple[str, str, str]) -> InjectedPodsObservation:
    """(pod, mode, state) reports; errors carry a fixed detail."""
    return InjectedPodsObservation(
        kernel_checks=tuple(KernelCheckReport(p, m, s, f"{p} boom") for p, m, s in reports)
    )


def ready_managed(**kw: Any) -> Observed:
    return managed_obs(**kw)


def test_engine_kernels_healthy_absent_without_a_reporting_pod() -> None:
    st = run(obj(annotations=NO_GATE), ready_managed(injected_pods=InjectedPodsObservation()))
    assert cond(st, "EngineKernelsHealthy") is None


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        ((("a", "report-only", "ok"), ("b", "report-only", "ok")), ("True", "KernelsHealthy")),
        (
            (("a", "report-only", "ok"), ("b", "report-only", "failed")),
            ("False", "KernelLoadFailed"),
        ),
        (
            (("a", "report-only", "error"), ("b", "report-only", "failed")),
            ("False", "KernelLoadFailed"),
        ),
        (
            (("a", "report-only", "pending"), ("b", "report-only", "error")),
            ("Unknown", "KernelCheckError"),
        ),
        (
            (("a", "report-only", "ok"), ("b", "report-only", "pending")),
            ("Unknown", "KernelCheckPending"),
        ),
    ],
)
def test_engine_kernels_healthy_aggregates_every_reporting_pod(
    reports: tuple[tuple[str, str, str], ...], expected: tuple[str, str]
) -> None:
    st = run(obj(annotations=NO_GATE), ready_managed(injected_pods=kernels(*reports)))
    assert cond(st, "EngineKernelsHealthy") == expected
    # report-only never touches Ready
    assert cond(st, "Ready") == ("True", "BackendReady")


def test_kernel_load_failed_message_names_the_pods_and_the_error() -> None:
    obs = kernels(("b", "strict", "failed"), ("a", "report-only", "failed"), ("c", "x", "ok"))
    st = run(obj(annotations=NO_GATE), ready_managed(injected_pods=obs))
    message = must_find(st["conditions"], "EngineKernelsHealthy")["message"]
    assert "2/3 engine pod(s)" in message
    assert "b (strict): b boom" in message
    assert "a (report-only): a boom" in message


def test_strict_kernel_failure_downgrades_ready_report_only_does_not() -> None:
    strict = kernels(("a", "report-only", "ok"), ("b", "strict", "failed"))
    st = run(obj(annotations=NO_GATE), ready_managed(injected_pods=strict))
    assert cond(st, "Ready") == ("False", "EngineKernelDegraded")
    assert "b" in must_find(st["conditions"], "Ready")["message"]
    assert cond(st, "Degraded") == ("False", "NotDegraded")
    # Only Ready is downgraded: the workload itself has converged.
    assert cond(st, "Progressing") == ("False", "Synced")
    report_only = kernels(("b", "report-only", "failed"))
    st = run(obj(annotations=NO_GATE), ready_managed(injected_pods=report_only))
    assert cond(st, "Ready") == ("True", "BackendReady")
    # A strict check still running or erroring is not a load failure.
    pending = kernels(("b", "strict", "pending"), ("c", "strict", "error"))
    st = run(obj(annotations=NO_GATE), ready_managed(injected_pods=pending))
    assert cond(st, "Ready") == ("True", "BackendReady")


def test_strict_downgrade_does_not_mask_an_upstream_not_ready_reason() -> None:
    strict = kernels(("b", "strict", "failed"))
    st = run(obj(), ready_managed(injected_pods=strict))  # KV gate on: awaiting
    assert cond(st, "Ready") == ("False", "AwaitingFirstKVEvent")
    assert cond(st, "EngineKernelsHealthy") == ("False", "KernelLoadFailed")


def test_strict_downgrade_recovers_when_the_pods_are_healthy() -> None:
    o = step(
        obj(annotations=NO_GATE),
        ready_managed(injected_pods=kernels(("b", "strict", "failed"))),
        T0,
    )
    st = run(o, ready_managed(injected_pods=kernels(("c", "strict", "ok"))), T0)
    assert cond(st, "Ready") == ("True", "BackendReady")
    assert cond(st, "EngineKernelsHealthy") == ("True", "KernelsHealthy")


def test_pod_list_failure_preserves_engine_advisories_and_the_strict_downgrade() -> None:
    obs = InjectedPodsObservation(
        kernel_checks=(KernelCheckReport("b", "strict", "failed", "x"),),
        crash_loops=(CrashLoop("b", ("vllm",)),),
    )
    o = step(obj(annotations=NO_GATE), ready_managed(injected_pods=obs), T0)
    again = run(o, ready_managed(injected_pods=None), T0 + dt.timedelta(seconds=30))
    assert status_equal(o["status"], again)
    assert cond(again, "Ready") == ("False", "EngineKernelDegraded")
    assert cond(again, "EngineCompatibility") == ("False", "InjectedEngineCrashLooping")


def test_pod_list_failure_keeps_a_report_only_failure_from_downgrading_ready() -> None:
    """EngineKernelsHealthy: "Default mode is fail-open observability — it does NOT gate
    Ready unless strict"; "report-only mode never downgrades Ready". A preserved
    report-only KernelLoadFailed (pods not listed this time) must not turn into a
    strict-style EngineKernelDegraded downgrade."""
    o = step(
        obj(annotations=NO_GATE),
        ready_managed(injected_pods=kernels(("b", "report-only", "failed"))),
        T0,
    )
    assert cond(o["status"], "Ready") == ("True", "BackendReady")
    again = run(o, ready_managed(injected_pods=None), T0 + dt.timedelta(seconds=30))
    assert cond(again, "EngineKernelsHealthy") == ("False", "KernelLoadFailed")
    assert cond(again, "Ready") == ("True", "BackendReady")
    assert status_equal(o["status"], again)


def test_engine_compatibility_crash_loop_is_advisory_and_clears() -> None:
    loops = InjectedPodsObservation(crash_loops=(CrashLoop("b", ("vllm",)),))
    o = step(obj(annotations=NO_GATE), ready_managed(injected_pods=loops), T0)
    assert cond(o["status"], "EngineCompatibility") == ("False", "InjectedEngineCrashLooping")
    message = must_find(o["status"]["conditions"], "EngineCompatibility")["message"]
    assert "b (container vllm)" in message
    assert "EventsOnly" in message
    assert cond(o["status"], "Ready") == ("True", "BackendReady")  # never gates Ready
    st = run(o, ready_managed(injected_pods=InjectedPodsObservation()), T0)
    assert cond(st, "EngineCompatibility") is None


def test_crash_looping_event_fires_once_on_the_transition() -> None:
    loops = InjectedPodsObservation(crash_loops=(CrashLoop("b", ("vllm",)),))
    o = obj(annotations=NO_GATE)
    o1 = step(o, ready_managed(injected_pods=InjectedPodsObservation()), T0)
    o2 = step(o1, ready_managed(injected_pods=loops), T0)
    events = transition_events(o1["status"], o2["status"])
    assert [(e.type, e.reason) for e in events] == [("Warning", "InjectedEngineCrashLooping")]
    more = InjectedPodsObservation(crash_loops=(*loops.crash_loops, CrashLoop("c", ("vllm",))))
    o3 = step(o2, ready_managed(injected_pods=more), T0)  # message changes, no new Event
    assert transition_events(o2["status"], o3["status"]) == []
    o4 = step(o3, ready_managed(injected_pods=None), T0)  # list failure: preserved, silent
    assert transition_events(o3["status"], o4["status"]) == []


def test_host_only_publishes_engine_advisories_and_strict_downgrade() -> None:
    obs = InjectedPodsObservation(
        kernel_checks=(KernelCheckReport("b", "strict", "failed", "x"),),
        crash_loops=(CrashLoop("b", ("vllm",)),),
    )
    spec = {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}}
    st = run(obj(spec, annotations=NO_GATE), Observed(injected_pods=obs))
    assert cond(st, "EngineKernelsHealthy") == ("False", "KernelLoadFailed")
    assert cond(st, "EngineCompatibility") == ("False", "InjectedEngineCrashLooping")
    assert cond(st, "Ready") == ("False", "EngineKernelDegraded")
    assert "T2Degraded" not in types(st)
    assert "FunctionalProbeOK" not in types(st)


@pytest.mark.parametrize(
    "spec",
    [
        {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}},
        {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "External",
                              "endpoint": "h:1"},
        },
    ],
    ids=["events-only", "external"],
)  # fmt: skip
def test_engine_advisories_never_on_events_only_or_external(spec: dict[str, Any]) -> None:
    obs = InjectedPodsObservation(
        kernel_checks=(KernelCheckReport("b", "strict", "failed", "x"),),
        crash_loops=(CrashLoop("b", ("vllm",)),),
    )
    st = run(obj(spec, annotations=NO_GATE), Observed(injected_pods=obs))
    assert not types(st) & {"EngineKernelsHealthy", "EngineCompatibility", "T2Degraded"}
    assert cond(st, "Ready") != ("False", "EngineKernelDegraded")


def test_offload_to_events_only_flip_clears_all_four_advisories() -> None:
    obs = InjectedPodsObservation(
        kernel_checks=(KernelCheckReport("b", "report-only", "failed", "x"),),
        crash_loops=(CrashLoop("b", ("vllm",)),),
    )
    o = obj(status={"indexParticipation": {"t2HitRate": "0"}}, annotations=NO_GATE)
    o = step(o, ready_managed(injected_pods=obs, probe=ProbeObservation("ok")), T0)
    assert {"FunctionalProbeOK", "T2Degraded", "EngineKernelsHealthy", "EngineCompatibility"} <= (
        types(o["status"])
    )
    o["spec"] = {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}
    st = run(o, Observed(injected_pods=obs), T0 + dt.timedelta(seconds=5))
    assert types(st) == {"Ready", "Degraded", "Progressing"}


def test_t2_degraded_never_gates_ready_and_ignores_unreadable_rates() -> None:
    o = obj(status={"indexParticipation": {"t2HitRate": "0.0"}}, annotations=NO_GATE)
    st = run(o, managed_obs())
    assert cond(st, "T2Degraded") == ("True", "T2ZeroHitRate")
    assert cond(st, "Ready") == ("True", "BackendReady")
    o = obj(status={"indexParticipation": {"t2HitRate": "n/a"}}, annotations=NO_GATE)
    assert cond(run(o, managed_obs()), "T2Degraded") is None
    host_only = {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}}
    o = obj(host_only, status={"indexParticipation": {"t2HitRate": "0"}}, annotations=NO_GATE)
    assert cond(run(o), "T2Degraded") is None


# ======================================================================= observedServerInstance


def test_observed_server_instance_set_by_the_shell_decision_and_kept_without_one() -> None:
    o = step(obj(annotations=NO_GATE), managed_obs(server_instance="u1:0"), T0)
    assert o["status"]["observedServerInstance"] == "u1:0"
    assert run(o, managed_obs(), T0)["observedServerInstance"] == "u1:0"
    assert "observedServerInstance" not in run(o, managed_obs(server_instance=""), T0)


@pytest.mark.parametrize(
    "spec",
    [
        {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}},
        {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}},
        {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "External",
                              "endpoint": "h:1"},
        },
        {"runtime": "SGLang", "type": "SGLangHiCache", "hiCache": {"ratio": "2"}},
    ],
    ids=["events-only", "host-only", "external", "hicache"],
)  # fmt: skip
def test_observed_server_instance_cleared_off_the_managed_path(spec: dict[str, Any]) -> None:
    o = obj(spec, status={"observedServerInstance": "u1:0"})
    assert "observedServerInstance" not in run(o, Observed(server_instance="u2:0"))

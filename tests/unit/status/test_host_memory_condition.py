"""EngineHostMemory, the engine-side advisory condition on pinned host memory (docs/api.md,
"Conditions" and "Host memory per pod"; spec "Conditions": host-only backends publish
"the engine-side advisory conditions when applicable"): False/PinnedHostMemoryOverLimit
while an injected pod cannot hold what its wiring pins, absent otherwise, never gating
Ready, and one PinnedHostMemoryOverLimit Warning Event per transition."""

from __future__ import annotations

from typing import Any

from reconciler.status.compute import compute_status
from reconciler.status.engine_pods import InjectedPodsObservation, observe_injected_pods
from reconciler.status.events import transition_events
from reconciler.status.observed import Observed
from shared import constants as c
from shared.api.models import CacheBackend
from shared.conditions import find
from tests.builders import NO_GATE, T0, UID
from tests.builders import condition_of as cond
from tests.builders import status_backend as obj

HOST_ONLY = {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "32Gi"}}}


def engine_pod(name: str, limit: str | None, tp: str = "4", size: str = "8.0") -> dict[str, Any]:
    resources = {"limits": {"memory": limit}} if limit else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {c.ANNOTATION_INJECTED_BY: "ns/cb", c.ANNOTATION_INJECTED_BY_UID: UID},
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "command": ["vllm", "serve", "m", "-tp", tp],
                    "env": [{"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": size}],
                    "resources": resources,
                }
            ]
        },
    }


def observed(*pods: dict[str, Any]) -> InjectedPodsObservation:
    return observe_injected_pods(list(pods), "ns", "cb", UID)


def step(o: dict[str, Any], injected: InjectedPodsObservation | None) -> dict[str, Any]:
    out = dict(o)
    out["status"] = compute_status(
        CacheBackend.model_validate(o), o.get("status"), Observed(injected_pods=injected), T0
    ).status
    return out


def test_observation_names_only_pods_over_their_limit() -> None:
    obs = observed(engine_pod("a", "16Gi"), engine_pod("b", "64Gi"), engine_pod("c", None))
    assert [item.pod for item in obs.host_memory] == ["a"]
    (pin,) = obs.host_memory[0].containers
    assert (pin.container, pin.pinned_bytes, pin.limit) == ("vllm", 32 * 1024**3, "16Gi")


def test_condition_names_pods_and_numbers_and_never_gates_ready() -> None:
    o = step(obj(HOST_ONLY, annotations=NO_GATE), observed(engine_pod("a", "16Gi")))
    st = o["status"]
    assert cond(st, c.COND_ENGINE_HOST_MEMORY) == ("False", c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT)
    message = (find(st["conditions"], c.COND_ENGINE_HOST_MEMORY) or {})["message"]
    assert "a: container vllm pins 32 GiB" in message
    assert "16Gi" in message
    assert cond(st, c.COND_READY) == ("True", c.REASON_HOST_ONLY_ACTIVE)


def test_fitting_pods_get_no_condition_and_no_event() -> None:
    o = step(obj(HOST_ONLY, annotations=NO_GATE), observed(engine_pod("a", "64Gi")))
    assert cond(o["status"], c.COND_ENGINE_HOST_MEMORY) is None
    assert not [
        e
        for e in transition_events(None, o["status"])
        if e.reason == c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT
    ]


def test_event_once_per_transition_and_preserved_on_a_failed_list() -> None:
    o0 = step(obj(HOST_ONLY, annotations=NO_GATE), observed())
    o1 = step(o0, observed(engine_pod("a", "16Gi")))
    events = [
        (e.type, e.reason)
        for e in transition_events(o0["status"], o1["status"])
        if e.reason == c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT
    ]
    assert events == [("Warning", c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT)]
    o2 = step(o1, observed(engine_pod("a", "16Gi"), engine_pod("b", "8Gi")))  # new message
    assert transition_events(o1["status"], o2["status"]) == []
    o3 = step(o2, None)  # the pods could not be listed: kept, silent
    assert cond(o3["status"], c.COND_ENGINE_HOST_MEMORY) == cond(
        o2["status"], c.COND_ENGINE_HOST_MEMORY
    )
    assert transition_events(o2["status"], o3["status"]) == []
    o4 = step(o3, observed(engine_pod("a", "64Gi")))  # fixed: the condition goes
    assert cond(o4["status"], c.COND_ENGINE_HOST_MEMORY) is None


def test_events_only_flip_clears_it() -> None:
    """Spec "Events-only mode": exactly Ready, Degraded, Progressing; an Offload to
    EventsOnly flip drops the engine-side advisories, this one included."""
    o = step(obj(HOST_ONLY, annotations=NO_GATE), observed(engine_pod("a", "16Gi")))
    assert cond(o["status"], c.COND_ENGINE_HOST_MEMORY) is not None
    o["spec"] = {**HOST_ONLY, "integration": {"mode": "EventsOnly"}}
    flipped = step(o, observed(engine_pod("a", "16Gi")))
    assert cond(flipped["status"], c.COND_ENGINE_HOST_MEMORY) is None

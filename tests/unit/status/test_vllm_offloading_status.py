"""Type VLLMOffloading's host-only condition set (docs/api.md "vLLM's built-in
offloading", "Conditions"): Ready is EnginePodsWired once the webhook wired a selected
engine pod, NoEnginePodsWired (Progressing) before; no endpoint, no provider workload;
a pod whose limit cannot hold the /dev/shm regions raises EngineHostMemory and its
Event, without gating Ready."""

from __future__ import annotations

from typing import Any

from reconciler.status.compute import compute_status
from reconciler.status.engine_pods import InjectedPodsObservation, observe_injected_pods
from reconciler.status.events import transition_events
from reconciler.status.observed import Observed
from shared import constants as c
from shared.api.models import CacheBackend
from shared.backend_mode import Mode
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from tests.builders import CTX, NO_GATE, T0, UID
from tests.builders import backend as make_backend
from tests.builders import condition_of as cond
from tests.builders import container as make_container
from tests.builders import pod as make_pod
from tests.builders import status_backend as obj

SPEC = {
    "runtime": "VLLM",
    "type": "VLLMOffloading",
    "engineSelector": {"matchLabels": {"app": "engine"}},
    "vllmOffloading": {"cpu": {"capacity": "64Gi"}},
}


def wired_pod(name: str, limit: str) -> dict[str, Any]:
    """An engine pod as the Pod webhook wires it, named and in namespace ns for cb."""
    pod = make_pod(
        make_container(
            image="vllm/vllm-openai:v0.34.0",
            args=["--model", "m", "-tp", "2", "-dp", "2"],
            resources={"limits": {"memory": limit}},
        )
    )
    backend = make_backend(
        "cb",
        namespace="ns",
        type_=c.TYPE_VLLM_OFFLOADING,
        vllmOffloading={"cpu": {"capacity": "64Gi"}},
    )
    pod["metadata"]["namespace"] = "ns"
    result = wire_pod(pod, [backend], CTX)
    assert result.outcome == OUTCOME_INJECTED, result.message
    out = result.pod
    out["metadata"]["name"] = name
    out["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY_UID] = UID
    return out


def step(o: dict[str, Any], injected: InjectedPodsObservation | None) -> Any:
    return compute_status(
        CacheBackend.model_validate(o), o.get("status"), Observed(injected_pods=injected), T0
    )


def test_ready_once_a_selected_engine_pod_is_wired() -> None:
    pods = [wired_pod("engine-a", "512Gi")]
    result = step(obj(SPEC, annotations=NO_GATE), observe_injected_pods(pods, "ns", "cb", UID))
    assert result.mode == Mode.HOST_ONLY
    assert cond(result.status, c.COND_READY) == ("True", c.REASON_ENGINE_PODS_WIRED)
    assert cond(result.status, c.COND_PROGRESSING) == ("False", c.REASON_SYNCED)
    assert not result.status.get("endpoint")
    assert cond(result.status, c.COND_ENGINE_HOST_MEMORY) is None


def test_not_ready_while_no_selected_engine_pod_is_wired() -> None:
    for injected in (observe_injected_pods([], "ns", "cb", UID), None):
        result = step(obj(SPEC, annotations=NO_GATE), injected)
        assert cond(result.status, c.COND_READY) == ("False", c.REASON_NO_ENGINE_PODS_WIRED)
        assert cond(result.status, c.COND_PROGRESSING) == ("True", c.REASON_NO_ENGINE_PODS_WIRED)


def test_limit_below_the_shm_regions_raises_the_host_memory_condition_and_event() -> None:
    o = obj(SPEC, annotations=NO_GATE)
    injected = observe_injected_pods([wired_pod("engine-a", "48Gi")], "ns", "cb", UID)
    result = step(o, injected)
    assert cond(result.status, c.COND_ENGINE_HOST_MEMORY) == (
        "False",
        c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT,
    )
    assert cond(result.status, c.COND_READY) == ("True", c.REASON_ENGINE_PODS_WIRED)
    events = transition_events(None, result.status)
    assert [e.reason for e in events].count(c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT) == 1

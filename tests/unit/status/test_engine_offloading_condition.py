"""EngineOffloading, the engine-side advisory condition on selected pods the Pod webhook
left unwired because their own ``--kv-offloading-size`` overwrites the connector
(docs/api.md, "The pod's own KV configuration" and "Conditions"):
False/EngineOffloadingConflict while there is one, absent otherwise, never gating Ready,
one EngineOffloadingConflict Warning Event per transition."""

from __future__ import annotations

from typing import Any

from reconciler.status.compute import compute_status
from reconciler.status.engine_pods import offloading_declined_pods
from reconciler.status.events import transition_events
from reconciler.status.observed import Observed
from shared import constants as c
from shared.api.models import CacheBackend
from shared.conditions import find
from tests.builders import NO_GATE, T0
from tests.builders import condition_of as cond
from tests.builders import status_backend as obj

HOST_ONLY = {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "32Gi"}}}


def engine_pod(name: str, by: str = "ns/cb", **meta: Any) -> dict[str, Any]:
    annotations = {
        c.ANNOTATION_INJECT_DECLINED: c.REASON_ENGINE_OFFLOADING_CONFLICT,
        c.ANNOTATION_INJECT_DECLINED_BY: by,
    }
    return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations, **meta}}


def declined(*pods: dict[str, Any]) -> tuple[str, ...]:
    return offloading_declined_pods(list(pods), "ns", "cb")


def step(o: dict[str, Any], names: tuple[str, ...] | None) -> dict[str, Any]:
    out = dict(o)
    out["status"] = compute_status(
        CacheBackend.model_validate(o), o.get("status"), Observed(offloading_declined=names), T0
    ).status
    return out


def test_observation_counts_only_this_backends_live_declined_pods() -> None:
    pods = [
        engine_pod("b"),
        engine_pod("a"),
        engine_pod("other", by="ns/another"),
        engine_pod("gone", deletionTimestamp="2026-01-01T00:00:00Z"),
        {"metadata": {"name": "wired", "annotations": {c.ANNOTATION_INJECTED_BY: "ns/cb"}}},
    ]
    assert declined(*pods) == ("a", "b")


def test_condition_names_the_pods_and_never_gates_ready() -> None:
    o = step(obj(HOST_ONLY, annotations=NO_GATE), declined(engine_pod("a")))
    st = o["status"]
    assert cond(st, c.COND_ENGINE_OFFLOADING) == ("False", c.REASON_ENGINE_OFFLOADING_CONFLICT)
    message = (find(st["conditions"], c.COND_ENGINE_OFFLOADING) or {})["message"]
    assert "--kv-offloading-size" in message
    assert ": a." in message
    assert cond(st, c.COND_READY) == ("True", c.REASON_HOST_ONLY_ACTIVE)


def test_event_once_per_transition_kept_on_a_failed_list_gone_when_fixed() -> None:
    o0 = step(obj(HOST_ONLY, annotations=NO_GATE), declined())
    assert cond(o0["status"], c.COND_ENGINE_OFFLOADING) is None
    o1 = step(o0, declined(engine_pod("a")))
    events = [
        (e.type, e.reason)
        for e in transition_events(o0["status"], o1["status"])
        if e.reason == c.EVENT_ENGINE_OFFLOADING_CONFLICT
    ]
    assert events == [("Warning", c.EVENT_ENGINE_OFFLOADING_CONFLICT)]
    o2 = step(o1, declined(engine_pod("a"), engine_pod("b")))  # new message, no new event
    assert transition_events(o1["status"], o2["status"]) == []
    o3 = step(o2, None)  # the pods could not be listed: kept, silent
    assert cond(o3["status"], c.COND_ENGINE_OFFLOADING) == cond(
        o2["status"], c.COND_ENGINE_OFFLOADING
    )
    assert transition_events(o2["status"], o3["status"]) == []
    o4 = step(o3, declined())  # the flags were removed and the pods rolled
    assert cond(o4["status"], c.COND_ENGINE_OFFLOADING) is None


def test_events_only_flip_clears_it() -> None:
    o = step(obj(HOST_ONLY, annotations=NO_GATE), declined(engine_pod("a")))
    assert cond(o["status"], c.COND_ENGINE_OFFLOADING) is not None
    o["spec"] = {**HOST_ONLY, "integration": {"mode": "EventsOnly"}}
    flipped = step(o, declined(engine_pod("a")))
    assert cond(flipped["status"], c.COND_ENGINE_OFFLOADING) is None

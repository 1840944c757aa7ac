"""Reconcile spec cases: one row per sentence of the spec (docs/api.md).

Every case drives the pure pipeline of one reconcile with realistic observed inputs —
the CacheBackend as stored (spec, annotations, generation, previous status), the
managed workload and Service as rendered by ``render_managed_objects(cb)`` and then read back with a
Deployment/StatefulSet status the test writes (there is no controller-manager on the
scenario control plane, and the HPA writes ``spec.replicas``), the namespace's pods
and Deployments, the functional-probe outcome, and the clock — and asserts:

* the exact set of published conditions, each as (status, reason);
* the status fields the spec names (``ABSENT``: the field must not be there);
* the Events the old→new transition records, as (type, reason);
* and that a second, unchanged pass computes an identical status and no Event
  (an idle reconcile writes nothing).

Each case id starts with the spec section and quotes (or closely paraphrases) the
sentence it checks.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from reconciler.status.compute import compute_status, status_equal
from reconciler.status.engine_pods import observe_injected_pods
from reconciler.status.events import transition_events
from reconciler.status.observed import (
    EngineObservation,
    Observed,
    ProbeObservation,
    WorkloadObservation,
)
from reconciler.steps.reads import LiveReads, template_labels
from reconciler.steps.reconcile import observe_engines
from shared.api.models import CacheBackend
from shared.labels import labels_match
from shared.storage_providers.render import render_managed_objects, service_endpoint
from tests.builders import NO_GATE
from tests.builders import external_spec as external
from tests.builders import stored_pod as pod
from tests.fakes import FakeKube

NS = "team-a"
NAME = "cb"
UID = "cb-uid-1"
T0 = dt.datetime(2026, 3, 1, 9, 0, 0, tzinfo=dt.UTC)
T0S = "2026-03-01T09:00:00Z"


def ago(**kw: float) -> str:
    return (T0 - dt.timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

# ------------------------------------------------------------------ spec shapes

LMSERVER: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
}
REDIS: dict[str, Any] = {
    "runtime": "SGLang",
    "remoteStorage": {
        "provider": "Redis",
        "ownership": "Managed",
        "redis": {"resources": {"limits": {"memory": "2Gi"}}},
    },
}
MOONCAKE: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
}
HOST_ONLY: dict[str, Any] = {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}}
EVENTS_ONLY: dict[str, Any] = {
    "runtime": "VLLM",
    "integration": {"mode": "EventsOnly"},
    "observation": {"modelID": "Qwen/Qwen3-Next"},
}
HICACHE: dict[str, Any] = {
    "runtime": "SGLang",
    "type": "SGLangHiCache",
    "engineSelector": {"matchLabels": {"app": "sglang"}},
    "hiCache": {"ratio": "2.0"},
}


def spec(base: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out.update(extra)
    return out


# ------------------------------------------------------------------ observed objects


@dataclass(frozen=True)
class Workload:
    """What the test writes onto the rendered workload (as the deployment controller
    or the HPA would)."""

    observed_generation: int = 1
    replicas: int = 1
    updated: int = 1
    ready: int = 1
    available: int = 1
    generation: int = 1
    spec_replicas: int | None = None  # HPA-written; None keeps the rendered value
    deadline_exceeded: bool = False
    empty_status: bool = False  # freshly created, nothing has written status yet
    omit_available: bool = False  # a StatefulSet status without availableReplicas


AVAILABLE = Workload()
FRESH = Workload(empty_status=True)


def workload_object(cb_obj: dict[str, Any], w: Workload) -> dict[str, Any]:
    """The rendered Deployment/StatefulSet as the API server would return it."""
    (obj,) = [
        o
        for o in render_managed_objects(CacheBackend.model_validate(cb_obj))
        if o["kind"] in ("Deployment", "StatefulSet")
    ]
    obj = copy.deepcopy(obj)
    obj["metadata"]["generation"] = w.generation
    obj["metadata"]["uid"] = "workload-uid"
    # API-server defaulting: replicas=1 when the renderer left it to the HPA.
    obj["spec"].setdefault("replicas", 1)
    if w.spec_replicas is not None:
        obj["spec"]["replicas"] = w.spec_replicas
    if w.empty_status:
        obj["status"] = {}
        return obj
    status: dict[str, Any] = {
        "observedGeneration": w.observed_generation,
        "replicas": w.replicas,
        "updatedReplicas": w.updated,
        "readyReplicas": w.ready,
        "availableReplicas": w.available,
    }
    if w.omit_available:
        del status["availableReplicas"]
    if obj["kind"] == "Deployment":
        status["conditions"] = [
            {
                "type": "Available",
                "status": "True" if w.available >= obj["spec"]["replicas"] else "False",
                "reason": "MinimumReplicasAvailable",
            },
            {
                "type": "Progressing",
                "status": "False" if w.deadline_exceeded else "True",
                "reason": "ProgressDeadlineExceeded"
                if w.deadline_exceeded
                else "NewReplicaSetAvailable",
            },
        ]
    obj["status"] = status
    return obj


def rendered_service(cb_obj: dict[str, Any]) -> dict[str, Any] | None:
    for o in render_managed_objects(CacheBackend.model_validate(cb_obj)):
        if o["kind"] == "Service":
            return o
    return None


def engine_deployment(name: str, labels: dict[str, str], replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels}}},
    }


def crash_looping_injected_pod(name: str) -> dict[str, Any]:
    return pod(
        name,
        {"app": "vllm"},
        meta={
            "annotations": {
                "inferencecache.io/injected-by": f"{NS}/{NAME}",
                "inferencecache.io/injected-by-uid": UID,
            }
        },
        status={
            "containerStatuses": [
                {
                    "name": "vllm",
                    "ready": False,
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                }
            ]
        },
    )


class _CaseReads(LiveReads):
    """The engine reads of one case: its pods and Deployments, filtered as the API
    server filters a label selector."""

    def __init__(self, pods: list[dict[str, Any]], deployments: list[dict[str, Any]]) -> None:
        super().__init__(FakeKube())
        self.pods = pods
        self.deployments = deployments

    def engine_pods(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        return [p for p in self.pods if labels_match(labels, p["metadata"].get("labels"))]

    def engine_deployments(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        return [d for d in self.deployments if labels_match(labels, template_labels(d))]


# ------------------------------------------------------------------ the table


@dataclass
class Case:
    id: str
    spec: dict[str, Any]
    annotations: dict[str, str] | None = None
    generation: int = 1
    prev: dict[str, Any] | None = None
    workload: Workload | None = None  # managed only; None = not created yet
    pods: list[dict[str, Any]] | None = None  # None: the pod list failed / not listed
    deployments: list[dict[str, Any]] = field(default_factory=list)
    probe: ProbeObservation | None = None
    now: dt.datetime = T0
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)
    message_contains: dict[str, str] = field(default_factory=dict)


def cb_object(case: Case) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": NAME,
        "namespace": NS,
        "uid": UID,
        "generation": case.generation,
        "resourceVersion": "42",
    }
    if case.annotations:
        meta["annotations"] = dict(case.annotations)
    o: dict[str, Any] = {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": meta,
        "spec": copy.deepcopy(case.spec),
    }
    if case.prev is not None:
        o["status"] = copy.deepcopy(case.prev)
    return o


def observe(case: Case, cb_obj: dict[str, Any]) -> Observed:
    cb = CacheBackend.model_validate(cb_obj)
    workload = None
    if case.workload is not None:
        workload = WorkloadObservation.from_object(workload_object(cb_obj, case.workload))
    service = rendered_service(cb_obj)
    engines: EngineObservation | None = None
    if case.pods is not None:
        _, engines = observe_engines(_CaseReads(case.pods, case.deployments), cb)
    injected = observe_injected_pods(case.pods, NS, NAME, UID) if case.pods is not None else None
    return Observed(
        workload=workload,
        service_endpoint=service_endpoint(service) if service else "",
        engines=engines,
        probe=case.probe,
        injected_pods=injected,
    )


def conditions_of(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def ready(status: str, reason: str) -> dict[str, tuple[str, str]]:
    return {"Ready": (status, reason)}


def triplet(
    ready_: tuple[str, str], progressing: tuple[str, str], degraded: tuple[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    return {
        "Ready": ready_,
        "Degraded": degraded or ("False", "NotDegraded"),
        "Progressing": progressing,
    }


AWAITING = triplet(("False", "AwaitingFirstKVEvent"), ("True", "AwaitingFirstKVEvent"))
OBSERVED = triplet(("True", "KVEventsObserved"), ("False", "Synced"))
NO_EVENTS = triplet(
    ("False", "NoKVEventsObserved"),
    ("False", "Degraded"),
    ("True", "NoKVEventsObserved"),
)
UNAVAILABLE = triplet(
    ("False", "ReplicasUnavailable"),
    ("False", "Degraded"),
    ("True", "ReplicasUnavailable"),
)
ROLLING = triplet(("False", "RolloutInProgress"), ("True", "RolloutInProgress"))
BACKEND_READY = triplet(("True", "BackendReady"), ("False", "Synced"))

N_AWAITING = ("Normal", "AwaitingFirstKVEvent")
N_OBSERVED = ("Normal", "KVEventsObserved")
W_NO_EVENTS = ("Warning", "NoKVEventsObserved")
W_DEGRADED = ("Warning", "BackendDegraded")
N_RECOVERED = ("Normal", "BackendRecovered")
W_FAIL_CLOSED = ("Warning", "FailClosedEnabled")
N_FAIL_OPEN = ("Normal", "FailOpenRestored")
N_UNMATCHED = ("Normal", "EngineSelectorUnmatched")


def cond(type_: str, status: str, reason: str, at: str = T0S, message: str = "m") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "observedGeneration": 1,
    }


def prev_status(
    *conds: dict[str, Any], endpoint: str | None = None, **fields: Any
) -> dict[str, Any]:
    st: dict[str, Any] = {"observedGeneration": 1, "failOpen": True, "conditions": list(conds)}
    if endpoint is not None:
        st["endpoint"] = endpoint
    st.update(fields)
    return st


LM_ENDPOINT = f"{NAME}-lmcache-server.{NS}.svc:65432"

PREV_AWAITING = prev_status(
    cond("Ready", "False", "AwaitingFirstKVEvent", ago(minutes=6)),
    cond("Degraded", "False", "NotDegraded", ago(minutes=6)),
    cond("Progressing", "True", "AwaitingFirstKVEvent", ago(minutes=6)),
    endpoint=LM_ENDPOINT,
    firstAvailableAt=ago(minutes=6),
)
PREV_NO_EVENTS = prev_status(
    cond("Ready", "False", "NoKVEventsObserved", ago(minutes=1)),
    cond("Degraded", "True", "NoKVEventsObserved", ago(minutes=1)),
    cond("Progressing", "False", "Degraded", ago(minutes=1)),
    endpoint=LM_ENDPOINT,
    firstAvailableAt=ago(minutes=6),
)
PREV_REPLICAS_UNAVAILABLE = prev_status(
    cond("Ready", "False", "ReplicasUnavailable", ago(minutes=1)),
    cond("Degraded", "True", "ReplicasUnavailable", ago(minutes=1)),
    cond("Progressing", "False", "Degraded", ago(minutes=1)),
    endpoint=LM_ENDPOINT,
    firstAvailableAt=ago(minutes=30),
    firstKVEventObservedAt=ago(minutes=20),
)
PREV_OBSERVED = prev_status(
    cond("Ready", "True", "KVEventsObserved", ago(minutes=20)),
    cond("Degraded", "False", "NotDegraded", ago(minutes=30)),
    cond("Progressing", "False", "Synced", ago(minutes=20)),
    endpoint=LM_ENDPOINT,
    firstAvailableAt=ago(minutes=30),
    firstKVEventObservedAt=ago(minutes=20),
)
EVENT_SEEN = {"indexParticipation": {"prefixCount": 12, "lastEventAt": ago(seconds=5)}}

SELECTOR = {"engineSelector": {"matchLabels": {"app": "vllm"}}}
UNMATCHED_MESSAGE = (
    'spec.engineSelector.matchLabels={"app":"vllm"} matches no Pods in namespace team-a.'
)

CASES: list[Case] = [
    # ------------------------------------------------------------ managed: workload
    Case(
        "progressing/first-apply: 'Progressing True while ... (rollout in flight, first apply ...)'",
        LMSERVER,
        workload=None,
        conditions=ROLLING,
        fields={
            "endpoint": LM_ENDPOINT,
            "failOpen": True,
            "observedGeneration": 1,
            "firstAvailableAt": ABSENT,
            "matchedEnginePods": ABSENT,
        },
    ),
    Case(
        "ready/fresh-deployment-no-status: not yet 'rolled out its current generation'",
        LMSERVER,
        workload=FRESH,
        conditions=ROLLING,
    ),
    Case(
        "ready/generation-not-observed: 'has rolled out its current generation'",
        LMSERVER,
        generation=2,
        workload=Workload(generation=2, observed_generation=1),
        conditions=ROLLING,
        fields={"observedGeneration": 2},
    ),
    Case(
        "ready/updated-short: 'has enough updated + available replicas to serve traffic'",
        spec(LMSERVER, replicas=3),
        workload=Workload(spec_replicas=3, replicas=3, updated=2, ready=3, available=3),
        conditions=ROLLING,
    ),
    Case(
        "ready/old-replicas-left: rollout in flight while old-revision replicas remain",
        spec(LMSERVER, replicas=2),
        workload=Workload(spec_replicas=2, replicas=3, updated=2, ready=3, available=3),
        conditions=ROLLING,
    ),
    Case(
        "degraded/rolled-out-unavailable: 'rolled out but replicas unavailable (reason "
        "ReplicasUnavailable)' + 'BackendDegraded (Warning) on entering Degraded=True'",
        LMSERVER,
        workload=Workload(ready=0, available=0),
        conditions=UNAVAILABLE,
        events=[W_DEGRADED],
        fields={"firstAvailableAt": ABSENT},
    ),
    Case(
        "degraded/partly-available: rolled out, 2 of 3 available is ReplicasUnavailable",
        spec(LMSERVER, replicas=3),
        workload=Workload(spec_replicas=3, replicas=3, updated=3, ready=2, available=2),
        conditions=UNAVAILABLE,
        events=[W_DEGRADED],
    ),
    Case(
        "degraded/progress-deadline: a Deployment stuck at ProgressDeadlineExceeded is terminal",
        LMSERVER,
        workload=Workload(updated=0, ready=0, available=0, deadline_exceeded=True),
        conditions=UNAVAILABLE,
        events=[W_DEGRADED],
    ),
    Case(
        "degraded/steady: 'never on steady-state reconciles' — still unavailable, no new Event",
        LMSERVER,
        prev=PREV_REPLICAS_UNAVAILABLE,
        workload=Workload(ready=0, available=0),
        conditions=UNAVAILABLE,
    ),
    Case(
        "kv-gate/awaiting: 'no event yet, within firstEventTimeout → Ready=False/"
        "AwaitingFirstKVEvent, Degraded=False' + firstAvailableAt latched when Available",
        LMSERVER,
        workload=AVAILABLE,
        conditions=AWAITING,
        events=[N_AWAITING],
        fields={"firstAvailableAt": T0S, "firstKVEventObservedAt": ABSENT},
    ),
    Case(
        "ready/backend-ready: 'BackendReady (both gates disabled and Available)'",
        LMSERVER,
        annotations=NO_GATE,
        workload=AVAILABLE,
        conditions=BACKEND_READY,
        fields={"firstAvailableAt": T0S},
    ),
    Case(
        "kv-gate/event-on-first-reconcile: 'An event already present on the first reconcile "
        "counts — there is no required transition through AwaitingFirstKVEvent'",
        LMSERVER,
        prev={**EVENT_SEEN},
        workload=AVAILABLE,
        conditions=OBSERVED,
        events=[N_OBSERVED],
        fields={
            "firstKVEventObservedAt": T0S,
            "indexParticipation": EVENT_SEEN["indexParticipation"],
        },
    ),
    Case(
        "kv-gate/latch-waits-for-gate: firstKVEventObservedAt is 'the first time the KV-event "
        "readiness gate observed' lastEventAt — the gate runs once the Deployment is Available",
        LMSERVER,
        prev={**EVENT_SEEN},
        workload=Workload(updated=0, ready=0, available=0),
        conditions=ROLLING,
        fields={"firstKVEventObservedAt": ABSENT},
    ),
    Case(
        "kv-gate/opted-out: 'opt-out per CR with the annotation inferencecache.io/"
        'require-kv-events: "false"\' — no gate, no latch',
        LMSERVER,
        annotations=NO_GATE,
        prev={**EVENT_SEEN},
        workload=AVAILABLE,
        conditions=BACKEND_READY,
        fields={"firstKVEventObservedAt": ABSENT},
    ),
    Case(
        "kv-gate/timeout: 'no event by firstEventTimeout → Ready=False/NoKVEventsObserved, "
        "Degraded=True/NoKVEventsObserved' + NoKVEventsObserved (Warning)",
        LMSERVER,
        prev=PREV_AWAITING,
        workload=AVAILABLE,
        conditions=NO_EVENTS,
        events=[W_NO_EVENTS],
        fields={"firstAvailableAt": ago(minutes=6)},
    ),
    Case(
        "kv-gate/custom-timeout: observation.firstEventTimeout shortens the window",
        spec(LMSERVER, observation={"firstEventTimeout": "30s"}),
        prev=prev_status(
            cond("Ready", "False", "AwaitingFirstKVEvent", ago(seconds=31)),
            cond("Degraded", "False", "NotDegraded", ago(seconds=31)),
            cond("Progressing", "True", "AwaitingFirstKVEvent", ago(seconds=31)),
            endpoint=LM_ENDPOINT,
            firstAvailableAt=ago(seconds=31),
        ),
        workload=AVAILABLE,
        conditions=NO_EVENTS,
        events=[W_NO_EVENTS],
    ),
    Case(
        "kv-gate/within-custom-timeout: still awaiting inside a 1h window",
        spec(LMSERVER, observation={"firstEventTimeout": "1h"}),
        prev=PREV_AWAITING,
        workload=AVAILABLE,
        conditions=AWAITING,
    ),
    Case(
        "kv-gate/sticky: 'Once Degraded it stays Degraded until an event arrives' (even with "
        "a raised timeout)",
        spec(LMSERVER, observation={"firstEventTimeout": "2h"}),
        prev=PREV_NO_EVENTS,
        workload=AVAILABLE,
        conditions=NO_EVENTS,
    ),
    Case(
        "kv-gate/sticky-then-event: '... then transitions to Ready' + KVEventsObserved "
        "(Normal); BackendRecovered 'suppressed when recovering from NoKVEventsObserved'",
        LMSERVER,
        prev={**PREV_NO_EVENTS, **EVENT_SEEN},
        workload=AVAILABLE,
        conditions=OBSERVED,
        events=[N_OBSERVED],
        fields={"firstKVEventObservedAt": T0S},
    ),
    Case(
        "kv-gate/ever-observed: 'a drained-but-healthy backend' stays Ready — the latch, not "
        "the cleared lastEventAt",
        LMSERVER,
        prev={**PREV_OBSERVED, "indexParticipation": {"prefixCount": 0}},
        workload=AVAILABLE,
        conditions=OBSERVED,
        fields={"firstKVEventObservedAt": ago(minutes=20)},
    ),
    Case(
        "kv-gate/flap-after-timeout: 'a later flap cannot bounce it back to AwaitingFirstKVEvent'",
        LMSERVER,
        prev=prev_status(
            cond("Ready", "False", "ReplicasUnavailable", ago(minutes=1)),
            cond("Degraded", "True", "ReplicasUnavailable", ago(minutes=1)),
            cond("Progressing", "False", "Degraded", ago(minutes=1)),
            endpoint=LM_ENDPOINT,
            firstAvailableAt=ago(minutes=9),
        ),
        workload=AVAILABLE,
        conditions=NO_EVENTS,
        events=[W_NO_EVENTS],
        fields={"firstAvailableAt": ago(minutes=9)},
    ),
    Case(
        "events/recovered: 'BackendRecovered (Normal) on the transition back to Ready=True' "
        "(ReplicasUnavailable → KVEventsObserved)",
        LMSERVER,
        prev=PREV_REPLICAS_UNAVAILABLE,
        workload=AVAILABLE,
        conditions=OBSERVED,
        events=[N_RECOVERED],
    ),
    Case(
        "events/recovered-gate-off: ReplicasUnavailable → BackendReady narrates BackendRecovered",
        LMSERVER,
        annotations=NO_GATE,
        prev=PREV_REPLICAS_UNAVAILABLE,
        workload=AVAILABLE,
        conditions=BACKEND_READY,
        events=[N_RECOVERED],
    ),
    Case(
        "ready/scaled-to-zero: 'Deployment-level reasons: ... ScaledToZero'; Progressing "
        "'False once ... scaled to zero (ScaledToZero)'",
        spec(LMSERVER, replicas=0),
        workload=Workload(spec_replicas=0, replicas=0, updated=0, ready=0, available=0),
        conditions=triplet(("False", "ScaledToZero"), ("False", "ScaledToZero")),
        fields={"firstAvailableAt": ABSENT},
    ),
    Case(
        "hpa/owned-count-ready: 'compares the Ready condition against the HPA-written "
        "Deployment spec.replicas rather than the user-set spec.replicas'",
        spec(LMSERVER, replicas=1, autoscaling={"minReplicas": 1, "maxReplicas": 5}),
        annotations=NO_GATE,
        workload=Workload(spec_replicas=3, replicas=3, updated=3, ready=3, available=3),
        conditions=BACKEND_READY,
    ),
    Case(
        "hpa/owned-count-short: HPA wrote 3, 2 available → ReplicasUnavailable (not Ready "
        "against spec.replicas=1)",
        spec(LMSERVER, replicas=1, autoscaling={"minReplicas": 1, "maxReplicas": 5}),
        annotations=NO_GATE,
        workload=Workload(spec_replicas=3, replicas=3, updated=3, ready=2, available=2),
        conditions=UNAVAILABLE,
        events=[W_DEGRADED],
    ),
    Case(
        "hpa/scaled-down: spec.replicas=5 but the HPA wrote 2 and both are available",
        spec(LMSERVER, replicas=5, autoscaling={"minReplicas": 2, "maxReplicas": 6}),
        annotations=NO_GATE,
        workload=Workload(spec_replicas=2, replicas=2, updated=2, ready=2, available=2),
        conditions=BACKEND_READY,
    ),
    Case(
        "statefulset/awaiting: deploymentKind StatefulSet is observed the same way",
        spec(LMSERVER, deploymentKind="StatefulSet"),
        workload=AVAILABLE,
        conditions=AWAITING,
        events=[N_AWAITING],
        fields={"endpoint": LM_ENDPOINT, "firstAvailableAt": T0S},
    ),
    Case(
        "statefulset/unavailable: rolled-out StatefulSet short of ready replicas",
        spec(LMSERVER, deploymentKind="StatefulSet"),
        workload=Workload(ready=0, available=0),
        conditions=UNAVAILABLE,
        events=[W_DEGRADED],
    ),
    Case(
        "statefulset/ready-replicas: a StatefulSet status counting readyReplicas only (no "
        "availableReplicas) is available",
        spec(LMSERVER, deploymentKind="StatefulSet"),
        annotations=NO_GATE,
        workload=Workload(omit_available=True),
        conditions=BACKEND_READY,
    ),
    Case(
        "endpoint/redis: 'for Managed remote storage it is populated from the "
        "controller-rendered Service'",
        REDIS,
        workload=AVAILABLE,
        conditions=AWAITING,
        events=[N_AWAITING],
        fields={"endpoint": f"{NAME}-redis.{NS}.svc:6379"},
    ),
    Case(
        "endpoint/mooncake: 'The Service exposes the master's RPC port (50051) first so ... "
        "publishes it into status.endpoint'",
        MOONCAKE,
        workload=AVAILABLE,
        conditions=AWAITING,
        events=[N_AWAITING],
        fields={"endpoint": f"{NAME}-mooncake.{NS}.svc:50051"},
    ),
    Case(
        "endpoint/statefulset-mooncake: a StatefulSet Mooncake master publishes the same RPC "
        "endpoint",
        spec(MOONCAKE, deploymentKind="StatefulSet"),
        annotations=NO_GATE,
        workload=AVAILABLE,
        conditions=BACKEND_READY,
        fields={"endpoint": f"{NAME}-mooncake.{NS}.svc:50051"},
    ),
    # ------------------------------------------------------------ failOpen
    Case(
        "failopen/created-closed: 'Setting it to false ... surfaces this as a Warning "
        "Kubernetes Event' (FailClosedEnabled) + 'explicit false is serialized'",
        spec(LMSERVER, integration={"failOpen": False}),
        workload=FRESH,
        conditions=ROLLING,
        events=[W_FAIL_CLOSED],
        fields={"failOpen": False},
    ),
    Case(
        "failopen/closed-later: true → false records FailClosedEnabled",
        spec(LMSERVER, integration={"failOpen": False}),
        annotations=NO_GATE,
        prev=prev_status(
            cond("Ready", "True", "BackendReady"),
            cond("Degraded", "False", "NotDegraded"),
            cond("Progressing", "False", "Synced"),
            endpoint=LM_ENDPOINT,
            firstAvailableAt=ago(hours=1),
        ),
        workload=AVAILABLE,
        conditions=BACKEND_READY,
        events=[W_FAIL_CLOSED],
        fields={"failOpen": False},
    ),
    Case(
        "failopen/restored: 'the FailClosedEnabled / FailOpenRestored pair' — back to true",
        LMSERVER,
        annotations=NO_GATE,
        prev={
            **prev_status(
                cond("Ready", "True", "BackendReady"),
                cond("Degraded", "False", "NotDegraded"),
                cond("Progressing", "False", "Synced"),
                endpoint=LM_ENDPOINT,
                firstAvailableAt=ago(hours=1),
            ),
            "failOpen": False,
        },
        workload=AVAILABLE,
        conditions=BACKEND_READY,
        events=[N_FAIL_OPEN],
        fields={"failOpen": True},
    ),
    Case(
        "failopen/events-only-closed: the Warning is mode-independent",
        spec(EVENTS_ONLY, integration={"mode": "EventsOnly", "failOpen": False}),
        annotations=NO_GATE,
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        events=[W_FAIL_CLOSED],
        fields={"failOpen": False},
    ),
    Case(
        "status/observed-generation: 'The .metadata.generation last reconciled by the controller'",
        LMSERVER,
        generation=7,
        annotations=NO_GATE,
        workload=Workload(generation=3, observed_generation=3),
        conditions=BACKEND_READY,
        fields={"observedGeneration": 7},
    ),
    # ------------------------------------------------------------ functional probe
    Case(
        "probe/ok: 'all stages ok (or skipped) → FunctionalProbeOK=True/ProbeOK, no Ready change'",
        LMSERVER,
        prev={**PREV_OBSERVED},
        workload=AVAILABLE,
        probe=ProbeObservation("ok", retry_after_seconds=30),
        conditions={**OBSERVED, "FunctionalProbeOK": ("True", "ProbeOK")},
    ),
    Case(
        "probe/stage-failed: 'Ready is downgraded to False with the same reason'; 'The "
        "functional-probe gate does NOT participate in Degraded'",
        LMSERVER,
        prev={**PREV_OBSERVED},
        workload=AVAILABLE,
        probe=ProbeObservation("failed", "routing", "no route", retry_after_seconds=30),
        conditions={
            **triplet(("False", "ProbeRoutingFailed"), ("False", "Synced")),
            "FunctionalProbeOK": ("False", "ProbeRoutingFailed"),
        },
        message_contains={"FunctionalProbeOK": "no route"},
    ),
    Case(
        "probe/unreachable: 'If FunctionalProbeOK is absent OR True, write "
        "FunctionalProbeOK=Unknown/ProbeError and leave Ready alone'",
        LMSERVER,
        prev={**PREV_OBSERVED},
        workload=AVAILABLE,
        probe=ProbeObservation("error", message="connection refused", retry_after_seconds=30),
        conditions={**OBSERVED, "FunctionalProbeOK": ("Unknown", "ProbeError")},
    ),
    Case(
        "probe/sticky-false: 'an HTTP error while a False/Probe*Failed is already published "
        "preserves the prior failure and keeps Ready downgraded'",
        LMSERVER,
        prev={
            **PREV_OBSERVED,
            "conditions": [
                cond("Ready", "False", "ProbeIngestFailed", message="ingest broken"),
                cond("Degraded", "False", "NotDegraded"),
                cond("Progressing", "False", "Synced"),
                cond("FunctionalProbeOK", "False", "ProbeIngestFailed", message="ingest broken"),
            ],
        },
        workload=AVAILABLE,
        probe=ProbeObservation("error", retry_after_seconds=30),
        conditions={
            **triplet(("False", "ProbeIngestFailed"), ("False", "Synced")),
            "FunctionalProbeOK": ("False", "ProbeIngestFailed"),
        },
    ),
    Case(
        "probe/bypassed: 'FunctionalProbeOK=True/ProbeBypassed is published — the Ready gate "
        "does not downgrade'",
        LMSERVER,
        annotations={"inferencecache.io/skip-functional-probe": "true"},
        prev={**PREV_OBSERVED},
        workload=AVAILABLE,
        probe=ProbeObservation("bypassed"),
        conditions={**OBSERVED, "FunctionalProbeOK": ("True", "ProbeBypassed")},
    ),
    Case(
        'probe/gate-off: \'--server-probe-url="" ... clears any stale FunctionalProbeOK '
        "condition'",
        LMSERVER,
        prev={
            **PREV_OBSERVED,
            "conditions": [
                *PREV_OBSERVED["conditions"],
                cond("FunctionalProbeOK", "True", "ProbeOK"),
            ],
        },
        workload=AVAILABLE,
        conditions=OBSERVED,
    ),
    Case(
        "t2/zero: 'True/T2ZeroHitRate when it was queried but served zero reloads' — never "
        "gates Ready",
        LMSERVER,
        prev={**PREV_OBSERVED, "indexParticipation": {"prefixCount": 3, "t2HitRate": "0"}},
        workload=AVAILABLE,
        conditions={**OBSERVED, "T2Degraded": ("True", "T2ZeroHitRate")},
    ),
    Case(
        "t2/serving: 'False/T2Serving when it is serving reloads (hit-rate > 0)'",
        LMSERVER,
        prev={**PREV_OBSERVED, "indexParticipation": {"prefixCount": 3, "t2HitRate": "0.42"}},
        workload=AVAILABLE,
        conditions={**OBSERVED, "T2Degraded": ("False", "T2Serving")},
    ),
    Case(
        "t2/unexercised: 'Absent entirely until the tier is exercised (distinct from False)'",
        LMSERVER,
        prev={**PREV_OBSERVED, "indexParticipation": {"prefixCount": 3}},
        workload=AVAILABLE,
        conditions=OBSERVED,
    ),
    Case(
        "compat/crash-loop: 'EngineCompatibility=False/InjectedEngineCrashLooping' + "
        "'InjectedEngineCrashLooping (Warning) is emitted once' — never gates Ready",
        LMSERVER,
        prev={**PREV_OBSERVED},
        workload=AVAILABLE,
        pods=[crash_looping_injected_pod("vllm-0")],
        conditions={
            **OBSERVED,
            "EngineCompatibility": ("False", "InjectedEngineCrashLooping"),
        },
        events=[("Warning", "InjectedEngineCrashLooping")],
    ),
    # ------------------------------------------------------------ External
    Case(
        "external/accepted-lm: 'Ready True ExternalEndpointAccepted'; Progressing 'Always "
        "False; the reason matches Ready'; 'publishes Ready + Progressing only'",
        external("LMCacheServer", "  lm://cache.example:65432 "),
        conditions={
            "Ready": ("True", "ExternalEndpointAccepted"),
            "Progressing": ("False", "ExternalEndpointAccepted"),
        },
        fields={"endpoint": "lm://cache.example:65432", "firstAvailableAt": ABSENT},
    ),
    Case(
        "external/accepted-redis: 'Redis accepts bare host:port'",
        external("Redis", "redis.cache.svc:6379"),
        conditions={
            "Ready": ("True", "ExternalEndpointAccepted"),
            "Progressing": ("False", "ExternalEndpointAccepted"),
        },
        fields={"endpoint": "redis.cache.svc:6379"},
    ),
    Case(
        "external/accepted-mooncake: 'Mooncake accepts host:port or mooncakestore://host:port'",
        external("Mooncake", "mooncakestore://10.0.0.5:50051"),
        conditions={
            "Ready": ("True", "ExternalEndpointAccepted"),
            "Progressing": ("False", "ExternalEndpointAccepted"),
        },
        fields={"endpoint": "mooncakestore://10.0.0.5:50051"},
    ),
    Case(
        "external/missing: 'Ready False ExternalEndpointMissing — The active endpoint field is "
        "empty or whitespace-only'",
        external("LMCacheServer", "   "),
        conditions={
            "Ready": ("False", "ExternalEndpointMissing"),
            "Progressing": ("False", "ExternalEndpointMissing"),
        },
        fields={"endpoint": ABSENT},
    ),
    Case(
        "external/invalid: 'Ready False ExternalEndpointInvalid ... The message names "
        "spec.remoteStorage.endpoint'; status.endpoint 'mirrors spec.remoteStorage.endpoint'",
        external("Redis", "lm://cache.example:65432"),
        conditions={
            "Ready": ("False", "ExternalEndpointInvalid"),
            "Progressing": ("False", "ExternalEndpointInvalid"),
        },
        fields={"endpoint": "lm://cache.example:65432"},
        message_contains={"Ready": "spec.remoteStorage.endpoint"},
    ),
    Case(
        "external/invalid-port: 'A numeric port in 1-65535 is always required'",
        external("LMCacheServer", "cache.example:70000"),
        conditions={
            "Ready": ("False", "ExternalEndpointInvalid"),
            "Progressing": ("False", "ExternalEndpointInvalid"),
        },
    ),
    Case(
        "external/exempt: 'External ownership is always exempt' from the KV gate — a "
        "populated lastEventAt affects columns but not readiness",
        external("LMCacheServer", "cache.example:65432"),
        prev={**EVENT_SEEN},
        conditions={
            "Ready": ("True", "ExternalEndpointAccepted"),
            "Progressing": ("False", "ExternalEndpointAccepted"),
        },
        fields={
            "firstKVEventObservedAt": ABSENT,
            "indexParticipation": EVENT_SEEN["indexParticipation"],
        },
    ),
    Case(
        "external/from-managed: firstKVEventObservedAt 'is intentionally left in place'; "
        "firstAvailableAt: 'an unmanaged transition clears it'; observedServerInstance "
        "'Inert and cleared'",
        external("LMCacheServer", "cache.example:65432"),
        prev={
            **PREV_OBSERVED,
            "observedServerInstance": "pod-uid:0",
            "conditions": [
                *PREV_OBSERVED["conditions"],
                cond("T2Degraded", "False", "T2Serving"),
                cond("EngineCompatibility", "False", "InjectedEngineCrashLooping"),
            ],
        },
        conditions={
            "Ready": ("True", "ExternalEndpointAccepted"),
            "Progressing": ("False", "ExternalEndpointAccepted"),
        },
        fields={
            "firstKVEventObservedAt": ago(minutes=20),
            "firstAvailableAt": ABSENT,
            "observedServerInstance": ABSENT,
            "endpoint": "cache.example:65432",
        },
    ),
    # ------------------------------------------------------------ host-only
    Case(
        "host-only/awaiting: 'HostOnlyActive is the base Ready=True reason before the KV-event "
        "gate overlays AwaitingFirstKVEvent'; 'Their endpoint stays empty'",
        HOST_ONLY,
        conditions=AWAITING,
        events=[N_AWAITING],
        fields={"endpoint": ABSENT, "firstAvailableAt": T0S},
    ),
    Case(
        "host-only/opted-out: base reason HostOnlyActive",
        HOST_ONLY,
        annotations=NO_GATE,
        conditions=triplet(("True", "HostOnlyActive"), ("False", "Synced")),
        fields={"firstAvailableAt": T0S},
    ),
    Case(
        "host-only/observed: '... overlays ... KVEventsObserved'",
        HOST_ONLY,
        prev={
            **prev_status(
                cond("Ready", "False", "AwaitingFirstKVEvent", ago(minutes=1)),
                cond("Degraded", "False", "NotDegraded", ago(minutes=1)),
                cond("Progressing", "True", "AwaitingFirstKVEvent", ago(minutes=1)),
                firstAvailableAt=ago(minutes=1),
            ),
            **EVENT_SEEN,
        },
        conditions=OBSERVED,
        events=[N_OBSERVED],
        fields={"firstKVEventObservedAt": T0S, "firstAvailableAt": ago(minutes=1)},
    ),
    Case(
        "host-only/timeout: '... or NoKVEventsObserved'",
        HOST_ONLY,
        prev=prev_status(
            cond("Ready", "False", "AwaitingFirstKVEvent", ago(minutes=6)),
            cond("Degraded", "False", "NotDegraded", ago(minutes=6)),
            cond("Progressing", "True", "AwaitingFirstKVEvent", ago(minutes=6)),
            firstAvailableAt=ago(minutes=6),
        ),
        conditions=NO_EVENTS,
        events=[W_NO_EVENTS],
    ),
    Case(
        "host-only/advisory: 'plus the engine-side advisory conditions when applicable'",
        HOST_ONLY,
        annotations=NO_GATE,
        prev=prev_status(
            cond("Ready", "True", "HostOnlyActive"),
            cond("Degraded", "False", "NotDegraded"),
            cond("Progressing", "False", "Synced"),
            firstAvailableAt=ago(minutes=1),
        ),
        pods=[crash_looping_injected_pod("vllm-0")],
        conditions={
            **triplet(("True", "HostOnlyActive"), ("False", "Synced")),
            "EngineCompatibility": ("False", "InjectedEngineCrashLooping"),
        },
        events=[("Warning", "InjectedEngineCrashLooping")],
    ),
    # ------------------------------------------------------------ events-only
    Case(
        "events-only/first-reconcile: 'status.firstAvailableAt is latched on the first "
        "reconcile' + 'Ready=False/AwaitingFirstKVEvent until the first event' + 'publish "
        "exactly three'",
        EVENTS_ONLY,
        conditions=AWAITING,
        events=[N_AWAITING],
        fields={"firstAvailableAt": T0S, "endpoint": ABSENT},
    ),
    Case(
        "events-only/opted-out: 'The base Ready reason is EventsOnlyActive'",
        EVENTS_ONLY,
        annotations=NO_GATE,
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"firstAvailableAt": T0S},
    ),
    Case(
        "events-only/observed: 'Ready=True/KVEventsObserved once status.indexParticipation."
        "lastEventAt is observed'",
        EVENTS_ONLY,
        prev={
            **prev_status(
                cond("Ready", "False", "AwaitingFirstKVEvent", ago(minutes=2)),
                cond("Degraded", "False", "NotDegraded", ago(minutes=2)),
                cond("Progressing", "True", "AwaitingFirstKVEvent", ago(minutes=2)),
                firstAvailableAt=ago(minutes=2),
            ),
            **EVENT_SEEN,
        },
        conditions=OBSERVED,
        events=[N_OBSERVED],
        fields={"firstKVEventObservedAt": T0S},
    ),
    Case(
        "events-only/timeout: 'Ready=False/NoKVEventsObserved, Degraded=True if the window "
        "elapses with no event'",
        EVENTS_ONLY,
        prev=prev_status(
            cond("Ready", "False", "AwaitingFirstKVEvent", ago(minutes=5, seconds=1)),
            cond("Degraded", "False", "NotDegraded", ago(minutes=5, seconds=1)),
            cond("Progressing", "True", "AwaitingFirstKVEvent", ago(minutes=5, seconds=1)),
            firstAvailableAt=ago(minutes=5, seconds=1),
        ),
        conditions=NO_EVENTS,
        events=[W_NO_EVENTS],
    ),
    Case(
        "events-only/flip: 'a server-bearing→EventsOnly flip re-anchors it to the flip moment "
        "(and bypasses the sticky NoKVEventsObserved reason)'; 'an Offload→EventsOnly flip "
        "clears all four'",
        EVENTS_ONLY,
        prev={
            **PREV_NO_EVENTS,
            "observedServerInstance": "pod-uid:0",
            "conditions": [
                *PREV_NO_EVENTS["conditions"],
                cond("FunctionalProbeOK", "True", "ProbeOK"),
                cond("T2Degraded", "True", "T2ZeroHitRate"),
                cond("EngineKernelsHealthy", "True", "KernelsHealthy"),
                cond("EngineCompatibility", "False", "InjectedEngineCrashLooping"),
            ],
        },
        conditions={
            "Ready": ("False", "AwaitingFirstKVEvent"),
            "Degraded": ("False", "NotDegraded"),
            "Progressing": ("True", "AwaitingFirstKVEvent"),
        },
        events=[N_AWAITING],
        fields={
            "firstAvailableAt": T0S,
            "endpoint": ABSENT,
            "observedServerInstance": ABSENT,
        },
    ),
    Case(
        "events-only/to-managed: the EventsOnly anchor is not the managed workload's — a "
        "flip back to Offload waits for the workload to be Available",
        LMSERVER,
        prev=prev_status(
            cond("Ready", "False", "AwaitingFirstKVEvent", ago(minutes=4)),
            cond("Degraded", "False", "NotDegraded", ago(minutes=4)),
            cond("Progressing", "True", "AwaitingFirstKVEvent", ago(minutes=4)),
            firstAvailableAt=ago(minutes=4),
        ),
        workload=FRESH,
        conditions=ROLLING,
        fields={"firstAvailableAt": ABSENT, "endpoint": LM_ENDPOINT},
    ),
    # ------------------------------------------------------------ HiCache, unsupported
    Case(
        "hicache/no-ready: 'The first implementation intentionally publishes no Ready "
        "condition'; 'It does not create a ... endpoint'",
        HICACHE,
        pods=[pod("sglang-0", {"app": "sglang"})],
        conditions={"Progressing": ("False", "Synced")},
        fields={"endpoint": ABSENT, "firstAvailableAt": ABSENT, "matchedEnginePods": 1},
    ),
    Case(
        "hicache/drops-gate-conditions: no Ready, no KV gate — earlier Ready/Degraded go",
        HICACHE,
        prev={**PREV_AWAITING, **EVENT_SEEN},
        pods=[],
        conditions={"Progressing": ("False", "Synced")},
        fields={"endpoint": ABSENT, "firstAvailableAt": ABSENT, "firstKVEventObservedAt": ABSENT},
        events=[N_UNMATCHED],
    ),
    Case(
        "unsupported: a stored (runtime, type) pair with no adapter reports it and provisions "
        "nothing",
        {"runtime": "VLLM", "type": "SGLangHiCache", "hiCache": {"ratio": "2.0"}},
        conditions={
            "Ready": ("False", "UnsupportedRuntimePair"),
            "Progressing": ("False", "UnsupportedRuntimePair"),
        },
        fields={"endpoint": ABSENT, "firstAvailableAt": ABSENT},
    ),
    # ------------------------------------------------------------ engine selector
    Case(
        "selector/absent: 'The field stays nil when no claim-capable selector is configured'",
        EVENTS_ONLY,
        annotations=NO_GATE,
        pods=[pod("vllm-0", {"app": "vllm"})],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": ABSENT, "engineSelectorMessage": ABSENT},
    ),
    Case(
        "selector/empty-match-labels: '... AND when spec.engineSelector.matchLabels is present "
        "but empty'; 'A CR that ... just lost it gets its prior value cleared back to nil'",
        spec(EVENTS_ONLY, engineSelector={"matchLabels": {}}),
        annotations=NO_GATE,
        prev={"matchedEnginePods": 3, "failOpen": True},
        pods=[pod("vllm-0", {"app": "vllm"})],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": ABSENT, "engineSelectorMessage": ABSENT},
    ),
    Case(
        "selector/initial-zero: 'message echoes the selector (spec.engineSelector.matchLabels="
        "{...}) and states that no Pods in the namespace match' + EngineSelectorUnmatched "
        "'when the initial observation is zero'",
        spec(EVENTS_ONLY, **SELECTOR),
        annotations=NO_GATE,
        pods=[pod("other-0", {"app": "other"})],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": 0, "engineSelectorMessage": UNMATCHED_MESSAGE},
        events=[N_UNMATCHED],
    ),
    Case(
        "selector/matched: snapshot count of pods 'whose labels satisfy spec.engineSelector' — "
        "a superset of labels matches, a partial one does not; 'Cleared once at least one pod "
        "matches'",
        spec(EVENTS_ONLY, engineSelector={"matchLabels": {"app": "vllm", "tier": "a"}}),
        annotations=NO_GATE,
        prev={"matchedEnginePods": 0, "engineSelectorMessage": "old", "failOpen": True},
        pods=[
            pod("vllm-0", {"app": "vllm", "tier": "a", "pod-template-hash": "x"}),
            pod("vllm-1", {"app": "vllm", "tier": "a"}),
            pod("vllm-2", {"app": "vllm"}),
        ],
        deployments=[engine_deployment("vllm", {"app": "vllm", "tier": "a"}, 2)],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": 2, "engineSelectorMessage": ABSENT},
    ),
    Case(
        "selector/scaled-to-zero: 'If the selector matches a Deployment that is intentionally "
        "scaled to zero, matchedEnginePods still reports the observed 0, but this message "
        "stays empty'",
        spec(EVENTS_ONLY, **SELECTOR),
        annotations=NO_GATE,
        pods=[],
        deployments=[engine_deployment("vllm", {"app": "vllm"}, 0)],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": 0, "engineSelectorMessage": ABSENT},
    ),
    Case(
        "selector/to-zero: EngineSelectorUnmatched 'when a previously non-zero match count "
        "transitions to zero'",
        spec(LMSERVER, **SELECTOR),
        annotations=NO_GATE,
        prev={
            **prev_status(
                cond("Ready", "True", "BackendReady"),
                cond("Degraded", "False", "NotDegraded"),
                cond("Progressing", "False", "Synced"),
                endpoint=LM_ENDPOINT,
                firstAvailableAt=ago(hours=1),
            ),
            "matchedEnginePods": 2,
        },
        workload=AVAILABLE,
        pods=[],
        deployments=[engine_deployment("vllm", {"app": "vllm"}, 2)],
        conditions=BACKEND_READY,
        fields={"matchedEnginePods": 0, "engineSelectorMessage": UNMATCHED_MESSAGE},
        events=[N_UNMATCHED],
    ),
    Case(
        "selector/upgrade: 'or when upgrading an existing zero-count status that did not yet "
        "have the diagnostic message'",
        spec(EVENTS_ONLY, **SELECTOR),
        annotations=NO_GATE,
        prev={
            **prev_status(
                cond("Ready", "True", "EventsOnlyActive"),
                cond("Degraded", "False", "NotDegraded"),
                cond("Progressing", "False", "Synced"),
                firstAvailableAt=ago(hours=1),
            ),
            "matchedEnginePods": 0,
        },
        pods=[],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": 0, "engineSelectorMessage": UNMATCHED_MESSAGE},
        events=[N_UNMATCHED],
    ),
    Case(
        "selector/steady-zero: 'steady-state zero with an unchanged message does not re-emit'",
        spec(EVENTS_ONLY, **SELECTOR),
        annotations=NO_GATE,
        prev={
            **prev_status(
                cond("Ready", "True", "EventsOnlyActive"),
                cond("Degraded", "False", "NotDegraded"),
                cond("Progressing", "False", "Synced"),
                firstAvailableAt=ago(hours=1),
            ),
            "matchedEnginePods": 0,
            "engineSelectorMessage": UNMATCHED_MESSAGE,
        },
        pods=[],
        conditions=triplet(("True", "EventsOnlyActive"), ("False", "Synced")),
        fields={"matchedEnginePods": 0, "engineSelectorMessage": UNMATCHED_MESSAGE},
    ),
    Case(
        "selector/list-failed: a failed pod list keeps the previous count and message and "
        "fires nothing",
        spec(LMSERVER, **SELECTOR),
        annotations=NO_GATE,
        prev={
            **prev_status(
                cond("Ready", "True", "BackendReady"),
                cond("Degraded", "False", "NotDegraded"),
                cond("Progressing", "False", "Synced"),
                endpoint=LM_ENDPOINT,
                firstAvailableAt=ago(hours=1),
            ),
            "matchedEnginePods": 4,
        },
        workload=AVAILABLE,
        pods=None,
        conditions=BACKEND_READY,
        fields={"matchedEnginePods": 4, "engineSelectorMessage": ABSENT},
    ),
    Case(
        "selector/external: the count is kept for every shape, External included",
        spec(external("LMCacheServer", "cache.example:65432"), **SELECTOR),
        pods=[pod("vllm-0", {"app": "vllm"})],
        conditions={
            "Ready": ("True", "ExternalEndpointAccepted"),
            "Progressing": ("False", "ExternalEndpointAccepted"),
        },
        fields={"matchedEnginePods": 1},
    ),
    Case(
        "index-participation: 'Populated by the CacheIndex poller (status-only)' — carried "
        "over untouched by the reconciler",
        LMSERVER,
        prev={
            **PREV_OBSERVED,
            "indexParticipation": {
                "prefixCount": 42,
                "lastEventAt": ago(seconds=3),
                "t2HitRate": "0.5",
            },
        },
        workload=AVAILABLE,
        conditions={**OBSERVED, "T2Degraded": ("False", "T2Serving")},
        fields={
            "indexParticipation": {
                "prefixCount": 42,
                "lastEventAt": ago(seconds=3),
                "t2HitRate": "0.5",
            }
        },
    ),
]


def _ids() -> list[str]:
    return [c.id.split(":")[0] for c in CASES]


def test_case_ids_are_unique_and_plenty() -> None:
    assert len(set(_ids())) == len(CASES)
    assert len(CASES) >= 50


@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_spec_case(case: Case) -> None:
    cb_obj = cb_object(case)
    observed = observe(case, cb_obj)
    old = copy.deepcopy(cb_obj.get("status") or {})
    result = compute_status(
        CacheBackend.model_validate(cb_obj), cb_obj.get("status"), observed, case.now
    )
    new = result.status

    assert conditions_of(new) == case.conditions, case.id
    for key, want in case.fields.items():
        if want is ABSENT:
            assert key not in new, (case.id, key, new.get(key))
        else:
            assert new.get(key) == want, (case.id, key, new.get(key))
    for type_, text in case.message_contains.items():
        (got,) = [c["message"] for c in new["conditions"] if c["type"] == type_]
        assert text in got, (case.id, got)
    # Every condition carries the generation it was computed for.
    assert {c["observedGeneration"] for c in new["conditions"]} <= {case.generation}
    assert new["observedGeneration"] == case.generation
    assert "failOpen" in new

    events = [(e.type, e.reason) for e in transition_events(old, new)]
    assert events == case.events, case.id

    # An unchanged second pass: same status, no Event — nothing to write.
    again_obj = copy.deepcopy(cb_obj)
    again_obj["status"] = copy.deepcopy(new)
    again = compute_status(
        CacheBackend.model_validate(again_obj),
        again_obj.get("status"),
        observe(case, again_obj),
        case.now,
    ).status
    assert status_equal(again, new), case.id
    assert transition_events(new, again) == [], case.id


def test_unchanged_conditions_keep_their_transition_time() -> None:
    """lastTransitionTime moves only when a condition's status changes."""
    (case,) = [c for c in CASES if c.id.startswith("kv-gate/sticky:")]
    new = compute_status(
        CacheBackend.model_validate(cb_object(case)),
        cb_object(case).get("status"),
        observe(case, cb_object(case)),
        T0,
    ).status
    degraded = next(c for c in new["conditions"] if c["type"] == "Degraded")
    assert degraded["lastTransitionTime"] == ago(minutes=1)


def test_awaiting_requeues_at_the_first_event_deadline() -> None:
    """'no event by firstEventTimeout' must flip on time without any watch event."""
    (case,) = [c for c in CASES if c.id.startswith("kv-gate/awaiting:")]
    result = compute_status(
        CacheBackend.model_validate(cb_object(case)),
        cb_object(case).get("status"),
        observe(case, cb_object(case)),
        T0,
    )
    assert result.requeue_after is not None
    assert 300 <= result.requeue_after <= 301

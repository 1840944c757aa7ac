"""End to end: reconciles read their worker's watch caches, scoped to each backend.

Pods here are shaped as the Pod webhook leaves them (``shared.pod_wiring.wire_pod``:
the injected-by / injected-by-uid annotations and the injected-by-uid label). There is
no kubelet: tests write pod status themselves.
"""

from __future__ import annotations

import time
from typing import Any

from kubeio import client as k
from shared.pod_wiring import wire_pod
from shared.runtime_adapters.base import InjectContext
from tests.builders import NO_GATE
from tests.e2e.conftest import (
    WORKER_USER,
    Cluster,
    Stack,
    condition,
    engine_deployment_as_the_controller_leaves_it,
    matched,
    poll,
    selector_message,
    set_pod_status,
)

CTX = InjectContext(kvevent_subscriber_image="ghcr.io/inference-cache/kvevent-subscriber:1")


def host_only(app: str) -> dict[str, Any]:
    return {"runtime": "VLLM", "engineSelector": {"matchLabels": {"app": app}}}


def engine_pod(
    cluster: Cluster, ns: str, name: str, app: str, backend: dict[str, Any] | None
) -> dict[str, Any]:
    """An engine pod, wired to ``backend`` as the webhook would (None: not wired)."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
    }
    if backend is not None:
        pod = wire_pod(pod, [backend], CTX).pod
    return poll(lambda: cluster.kube.create(k.PODS, ns, pod), timeout=30, what=f"pod {name}")


def crash_loop(cluster: Cluster, ns: str, name: str) -> None:
    set_pod_status(
        cluster,
        ns,
        name,
        {"containerStatuses": [{"name": "vllm", "ready": False, "restartCount": 4,
                                "image": "vllm:1", "imageID": "",
                                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    )  # fmt: skip


def test_an_idle_resync_reads_nothing_from_the_api_server(cluster: Cluster, stack: Stack) -> None:
    """Idle cost must not grow with the objects we do not own: once converged, a resync
    of every backend makes no request at all (the worker's caches answer), whatever
    else the namespace holds."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    managed = {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        "engineSelector": {"matchLabels": {"app": "llama"}},
    }
    cluster.create_cb(ns, "managed", managed, NO_GATE)
    cluster.create_cb(ns, "hostonly", host_only("qwen"), NO_GATE)
    live = cluster.wait_cb(
        ns, "managed", lambda o: bool((o.get("status") or {}).get("endpoint")), "endpoint"
    )
    for i in range(3):
        engine_pod(cluster, ns, f"llama-{i}", "llama", live)
    engine_pod(cluster, ns, "qwen-0", "qwen", cluster.cb(ns, "hostonly"))
    for i in range(20):
        engine_pod(cluster, ns, f"web-{i}", f"web-{i}", None)
    cluster.wait_cb(ns, "managed", lambda o: matched(o) == 3, "3 engine pods")
    cluster.wait_cb(ns, "hostonly", lambda o: matched(o) == 1, "1 engine pod")

    def worker_requests(mark: int) -> list[Any]:
        return [
            e
            for e in cluster.cp.audit_events(mark)
            if e.user == WORKER_USER and e.verb != "watch" and e.namespace in (ns, "")
        ]

    def quiet_since() -> int | None:
        mark = cluster.cp.audit_offset()
        time.sleep(stack.resync_period * 1.5)
        return mark if not [e for e in worker_requests(mark) if e.is_write] else None

    mark = poll(quiet_since, timeout=30, what="the worker to go quiet", interval=0)
    since = time.monotonic()
    poll(
        lambda: all(
            sum(1 for r in stack.reconcile_runs().get(f"{ns}/{n}", []) if r.start >= since) >= 2
            for n in ("managed", "hostonly")
        ),
        timeout=20,
        what="two resyncs of each backend",
    )
    cluster.cp.audit_barrier(mark)
    requests = worker_requests(mark)
    assert requests == [], [(e.verb, e.resource, e.uri) for e in requests]


def test_pod_changes_reach_the_status_through_the_cache(cluster: Cluster, stack: Stack) -> None:
    """matchedEnginePods and EngineCompatibility follow pods that come, change labels,
    crash-loop, and outlive a deleted-and-recreated backend; two backends in one
    namespace count their own."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    a = cluster.create_cb(ns, "a", host_only("llama"), NO_GATE)
    b = cluster.create_cb(ns, "b", host_only("qwen"), NO_GATE)
    engine_pod(cluster, ns, "a-0", "llama", a)
    engine_pod(cluster, ns, "a-1", "llama", a)
    engine_pod(cluster, ns, "b-0", "qwen", b)
    cluster.wait_cb(ns, "a", lambda o: matched(o) == 2, "a's two pods")
    cluster.wait_cb(ns, "b", lambda o: matched(o) == 1, "b's pod")

    # A crash-loop of a's injected engine is a's, not b's.
    crash_loop(cluster, ns, "a-1")
    cluster.wait_condition(ns, "a", "EngineCompatibility", "False", "InjectedEngineCrashLooping")
    assert condition(cluster.cb(ns, "b"), "EngineCompatibility") is None

    # Relabelled after injection: no longer matched by a's selector (matched by b's),
    # still a's injected pod.
    cluster.kube.patch(
        k.PODS, ns, "a-1", {"metadata": {"labels": {"app": "qwen"}}}, content_type=k.MERGE_PATCH
    )
    cluster.wait_cb(ns, "a", lambda o: matched(o) == 1, "a-1 left a's selector")
    cluster.wait_cb(ns, "b", lambda o: matched(o) == 2, "a-1 entered b's selector")
    obj = cluster.cb(ns, "a")
    assert condition(obj, "EngineCompatibility") == ("False", "InjectedEngineCrashLooping")
    assert condition(cluster.cb(ns, "b"), "EngineCompatibility") is None

    # a is deleted and created again under its name: a new uid. Its old pods still
    # match the selector but are not this incarnation's injected pods.
    cluster.kube.delete(k.CACHEBACKENDS, ns, "a")
    poll(
        lambda: cluster.kube.get_or_none(k.CACHEBACKENDS, ns, "a") is None,
        timeout=30,
        what="a gone",
    )
    crash_loop(cluster, ns, "a-0")
    cluster.create_cb(ns, "a", host_only("llama"), NO_GATE)
    obj = cluster.wait_cb(ns, "a", lambda o: matched(o) == 1, "the new a sees a-0")
    poll(
        lambda: "conditions" in (cluster.cb(ns, "a").get("status") or {}),
        timeout=30,
        what="the new a's conditions",
    )
    assert condition(cluster.cb(ns, "a"), "EngineCompatibility") is None

    # A pod that comes and goes.
    engine_pod(cluster, ns, "b-1", "qwen", b)
    cluster.wait_cb(ns, "b", lambda o: matched(o) == 3, "b-1 counted")
    cluster.kube.delete(k.PODS, ns, "b-1")
    cluster.wait_cb(ns, "b", lambda o: matched(o) == 2, "b-1 gone")


def test_engine_selector_message_through_the_cache(cluster: Cluster, stack: Stack) -> None:
    """engineSelectorMessage is set while a Deployment the selector matches expects
    engines whose pods do not exist (with an EngineSelectorUnmatched Event), stays empty
    while that Deployment is scaled to zero, and is cleared once a pod matches."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(ns, "cb", host_only("gemma"), NO_GATE)
    engine_deployment_as_the_controller_leaves_it(cluster, ns, "gemma", "gemma", 2)
    cluster.wait_cb(ns, "cb", lambda o: "matches no Pods" in selector_message(o), "message set")
    poll(
        lambda: any(
            e.get("reason") == "EngineSelectorUnmatched"
            and (e.get("involvedObject") or {}).get("name") == "cb"
            for e in cluster.kube.list(k.EVENTS, ns).get("items") or []
        ),
        timeout=30,
        what="the EngineSelectorUnmatched Event",
    )

    # Scaled to zero (the controller rewrites desired-replicas): intentionally idle.
    cluster.kube.patch(
        k.REPLICASETS,
        ns,
        "gemma-h1",
        {"metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": "0"}}},
        content_type=k.MERGE_PATCH,
    )
    cluster.wait_cb(ns, "cb", lambda o: selector_message(o) == "", "scaled to zero: no message")
    cluster.kube.patch(
        k.REPLICASETS,
        ns,
        "gemma-h1",
        {"metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": "2"}}},
        content_type=k.MERGE_PATCH,
    )
    cluster.wait_cb(ns, "cb", lambda o: "matches no Pods" in selector_message(o), "set again")

    engine_pod(cluster, ns, "gemma-0", "gemma", None)
    obj = cluster.wait_cb(ns, "cb", lambda o: matched(o) == 1, "the pod counted")
    assert selector_message(obj) == ""

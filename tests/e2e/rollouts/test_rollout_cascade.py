"""The engine cascade on real rollouts, beyond one engine Deployment: which engine
Deployments the reconciler restarts when the cache server is replaced, and which
container restarts count.

Spec, Status, observedServerInstance: on a transition that reflects an actual
replacement the reconciler "cascade-restarts every engine Deployment that owns pods
carrying this backend's inferencecache.io/injected-by + matching injected-by-uid, by
patching inferencecache.io/cache-server-restart-trigger onto each Deployment's pod
template"; <restart-sum> counts only "the container names declared on the owned
Deployment's pod template", so sidecars injected by other admission plugins are
excluded. kube-controller-manager, kube-scheduler and kwok drive every workload here;
the real ``icache webhook`` wires the engine pods at admission.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeio import client as k
from shared import constants as c
from tests.e2e import cascade
from tests.e2e.cascade import SERVER
from tests.e2e.conftest import WORKER_USER, Cluster, Stack, condition, poll
from tests.e2e.workloads import (
    owner_name,
    pods_of,
    reconciled_since,
    replicasets_of,
    restart_in_place,
    wait_rolled_out,
    wait_workload,
    workload,
)

pytestmark = pytest.mark.real_controllers

INJECTED = ("vllm-a", "vllm-b")
SKIPPED = "vllm-skip"
NATIVE_SIDECAR = "mesh-native"


# The shared fixtures, requested here under the same names: ``wired`` (the real Pod
# webhook registered for a namespace) and ``sidecar_policies`` (deletes the admission
# policies a test creates).
wired = cascade.wired
sidecar_policies = cascade.sidecar_policies


def engine(name: str, template_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The shared vLLM Deployment under ``name``: still selected by the backend's
    engineSelector (app=vllm), with a label of its own so each Deployment's selector
    (and :func:`pods_of`) sees only its pods."""
    dep = cascade.engine_deployment()
    dep["metadata"]["name"] = name
    labels = {**cascade.ENGINE_LABELS, "engine": name}
    dep["spec"]["selector"]["matchLabels"] = labels
    meta = dep["spec"]["template"]["metadata"]
    meta["labels"] = labels
    if template_annotations:
        meta["annotations"] = template_annotations
    return dep


def trigger_of(cluster: Cluster, ns: str, name: str) -> str | None:
    dep = workload(cluster, ns, "Deployment", name)
    annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
    return annotations.get(c.ANNOTATION_CACHE_SERVER_RESTART_TRIGGER)


def worker_writes(cluster: Cluster, ns: str, name: str, mark: int) -> list[str]:
    """The verbs of the worker's writes to Deployment ``name`` since ``mark``."""
    events = cluster.cp.write_events(
        mark, user=WORKER_USER, resource="deployments", namespace=ns, name=name
    )
    return [e.verb for e in events]


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def test_a_replaced_cache_server_pod_restarts_each_injected_engine_deployment_once_and_no_other(
    cluster: Cluster, stack: Stack, wired: str
) -> None:
    """Spec, Status, observedServerInstance cascade: a replacement of the cache-server
    pod (the ReplicaSet really recreates a deleted pod) restarts every engine
    Deployment owning pods injected by this backend — both of them, each once, each
    really rolling to a new ReplicaSet — and not an engine Deployment the backend's
    engineSelector matches whose pods opted out (inferencecache.io/skip-inject on its
    template: admitted unwired, so it owns no injected pod)."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    cluster.create_cb(ns, "cb", cascade.WIRED_SPEC, cascade.WIRED_ANNOTATIONS)
    server = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    (first,) = pods_of(cluster, ns, server)
    cluster.wait_cb(
        ns, "cb",
        lambda o: cascade.server_instance(o) == f"{first['metadata']['uid']}:0",
        "the baseline",
    )  # fmt: skip
    cb = cluster.cb(ns, "cb")
    cascade.wait_webhook_wires(cluster, ns, "cb")
    for name in INJECTED:
        cluster.kube.create(k.DEPLOYMENTS, ns, engine(name))
    cluster.kube.create(k.DEPLOYMENTS, ns, engine(SKIPPED, {c.ANNOTATION_SKIP_INJECT: "true"}))
    old_pods: dict[str, set[str]] = {}
    for name in (*INJECTED, SKIPPED):
        dep = wait_rolled_out(cluster, ns, "Deployment", name)
        pods = pods_of(cluster, ns, dep)
        assert len(pods) == 2
        old_pods[name] = {p["metadata"]["uid"] for p in pods}
        for pod in pods:
            annotations = annotations_of(pod)
            if name == SKIPPED:
                assert c.ANNOTATION_INJECTED_BY not in annotations
                assert annotations.get(c.ANNOTATION_INJECT_SKIPPED) == c.INJECT_SKIPPED_VALUE
            else:
                assert annotations.get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"
                assert annotations.get(c.ANNOTATION_INJECTED_BY_UID) == cb["metadata"]["uid"]
        assert trigger_of(cluster, ns, name) is None
    skipped = workload(cluster, ns, "Deployment", SKIPPED)

    mark = cluster.cp.audit_offset()
    cluster.kube.delete(k.PODS, ns, first["metadata"]["name"])
    server = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    (second,) = pods_of(cluster, ns, server)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert owner_name(second, "ReplicaSet") == owner_name(first, "ReplicaSet")
    cluster.wait_cb(
        ns, "cb",
        lambda o: cascade.server_instance(o) == f"{second['metadata']['uid']}:0",
        "observedServerInstance on the replacement",
    )  # fmt: skip
    stamps = poll(
        lambda: (
            {name: trigger_of(cluster, ns, name) for name in INJECTED}
            if all(trigger_of(cluster, ns, name) for name in INJECTED)
            else None
        ),
        timeout=30,
        what="the restart trigger on both injected engine Deployments",
    )

    # Each injected engine Deployment really rolls: a new ReplicaSet, new (wired) pods.
    for name in INJECTED:
        dep = wait_workload(
            cluster, ns, "Deployment", name,
            lambda d: (d.get("status") or {}).get("observedGeneration") == 2,
            "the new generation",
        )  # fmt: skip
        dep = wait_rolled_out(cluster, ns, "Deployment", name)
        assert len(replicasets_of(cluster, ns, dep)) == 2
        new_pods = pods_of(cluster, ns, dep)
        assert len(new_pods) == 2
        assert not old_pods[name] & {p["metadata"]["uid"] for p in new_pods}
        for pod in new_pods:
            assert annotations_of(pod).get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"

    # Exactly once each, and the opted-out Deployment untouched, after later reconciles
    # (the engine pods changed under the backend meanwhile).
    obj = reconciled_since(stack, cluster, ns, "cb")
    for name in INJECTED:
        assert trigger_of(cluster, ns, name) == stamps[name]
        assert worker_writes(cluster, ns, name, mark) == ["patch"], name
    after = workload(cluster, ns, "Deployment", SKIPPED)
    assert after["metadata"]["generation"] == skipped["metadata"]["generation"]
    assert trigger_of(cluster, ns, SKIPPED) is None
    assert worker_writes(cluster, ns, SKIPPED, mark) == []
    assert len(replicasets_of(cluster, ns, after)) == 1
    assert {p["metadata"]["uid"] for p in pods_of(cluster, ns, after)} == old_pods[SKIPPED]
    assert cascade.server_instance(obj) == f"{second['metadata']['uid']}:0"
    assert condition(obj, "Ready") == ("True", "BackendReady")


def inject_native_sidecar(
    cluster: Cluster, ns: str, match_labels: dict[str, str], created: list[str]
) -> None:
    """A MutatingAdmissionPolicy adding a native sidecar (an init container with
    ``restartPolicy: Always``, as Istio's native-sidecar mode does) to the pods of
    ``ns`` carrying ``match_labels``."""
    cascade.inject_container(
        cluster, ns, match_labels, created,
        policy_name=f"native-sidecar-{ns}", field="initContainers",
        container=f'name: "{NATIVE_SIDECAR}", image: "mesh/proxy:1", restartPolicy: "Always"',
        container_name=NATIVE_SIDECAR,
    )  # fmt: skip


def test_a_native_sidecar_restart_on_the_cache_server_pod_neither_advances_nor_cascades(
    cluster: Cluster, stack: Stack, wired: str, sidecar_policies: list[str]
) -> None:
    """Spec, Status, observedServerInstance: <restart-sum> counts only the containers
    declared on the owned Deployment's pod template; "sidecars injected by other
    admission webhooks ... are intentionally excluded — a sidecar crash-loop must not
    advance the identifier and roll the engine fleet". Here the sidecar is a native
    one (an init container with restartPolicy Always, reported in
    initContainerStatuses), injected at pod admission by another plugin, so the
    Deployment's template never carries it."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    inject_native_sidecar(cluster, ns, {"app.kubernetes.io/instance": "cb"}, sidecar_policies)
    cluster.create_cb(ns, "cb", cascade.WIRED_SPEC, cascade.WIRED_ANNOTATIONS)
    server = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    template = server["spec"]["template"]["spec"]
    declared = {
        x["name"] for key in ("containers", "initContainers") for x in template.get(key) or []
    }
    assert NATIVE_SIDECAR not in declared
    (pod,) = pods_of(cluster, ns, server)
    (sidecar,) = (x for x in pod["spec"]["initContainers"] if x["name"] == NATIVE_SIDECAR)
    assert sidecar["restartPolicy"] == "Always"
    uid = pod["metadata"]["uid"]
    cluster.wait_cb(ns, "cb", lambda o: cascade.server_instance(o) == f"{uid}:0", "the baseline")
    cascade.start_wired_engine(cluster, ns, cluster.cb(ns, "cb"))
    mark = cluster.cp.audit_offset()

    # kwok restarts the native sidecar in place: same pod, its restartCount 1 in
    # initContainerStatuses, the server's own containers untouched.
    assert restart_in_place(cluster, ns, pod["metadata"]["name"], NATIVE_SIDECAR) == 1
    live = cluster.kube.get(k.PODS, ns, pod["metadata"]["name"])
    assert live["metadata"]["uid"] == uid
    (status,) = (s for s in live["status"]["initContainerStatuses"] if s["name"] == NATIVE_SIDECAR)
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert "running" in status["state"]
    assert all(s["restartCount"] == 0 for s in live["status"]["containerStatuses"])

    obj = reconciled_since(stack, cluster, ns, "cb")
    assert cascade.server_instance(obj) == f"{uid}:0"
    assert cascade.restart_trigger(cluster, ns) is None
    assert cascade.engine_writes(cluster, ns, mark) == []
    assert condition(obj, "Ready") == ("True", "BackendReady")

"""Workloads on the control plane with real controllers (tests marked ``real_controllers``).

kube-controller-manager rolls Deployments and StatefulSets out, kube-scheduler binds
their pods to kwok's fake nodes, kwok reports them Running and Ready. These helpers
read what those controllers wrote and act the way an operator or a node would:
nothing here writes workload status.

* :func:`wait_rolled_out`: ``kubectl rollout status``, plus the live pods agreeing.
* :func:`hold_pool` / :func:`open_pool`: a node pool nobody has yet, so a backend's
  pods stay Pending (a rollout stays in flight for as long as a test needs), and the
  node that later joins it.
* :func:`trigger`: a kwok stage on a pod (restart a container in place, fail the pod,
  turn it not Ready): see :mod:`tests.harness.kwok`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubeio import client as k
from tests.e2e.conftest import Cluster, Stack, poll
from tests.harness import kwok

POOL_LABEL = "harness.inferencecache.io/pool"


def selector_string(match_labels: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(match_labels.items()))


def workload(cluster: Cluster, ns: str, kind: str, name: str) -> dict[str, Any]:
    return cluster.kube.get(k.BY_KIND[kind], ns, name)


def pods_of(cluster: Cluster, ns: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The live (not terminating) pods a Deployment/StatefulSet selects, by name."""
    selector = selector_string(obj["spec"]["selector"]["matchLabels"])
    items = cluster.kube.list(k.PODS, ns, label_selector=selector).get("items") or []
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return sorted(live, key=lambda p: str(p["metadata"]["name"]))


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def rolled_out(obj: dict[str, Any], live_ready_pods: int) -> bool:
    """``kubectl rollout status`` says done, and as many Ready pods exist."""
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    want = int(spec.get("replicas", 1))
    done = (
        int(st.get("observedGeneration") or 0) >= int(obj["metadata"]["generation"])
        and int(st.get("updatedReplicas") or 0) == want
        and int(st.get("replicas") or 0) == want
        and int(st.get("readyReplicas") or 0) == want
        and int(st.get("availableReplicas") or 0) == want
    )
    if obj.get("kind") == "StatefulSet":
        done = done and st.get("currentRevision") == st.get("updateRevision")
    return done and live_ready_pods == want


def wait_rolled_out(
    cluster: Cluster, ns: str, kind: str, name: str, *, timeout: float = 60.0
) -> dict[str, Any]:
    """Poll until the workload has rolled out (see :func:`rolled_out`); returns it."""

    def check() -> dict[str, Any] | None:
        obj = workload(cluster, ns, kind, name)
        ready = sum(1 for p in pods_of(cluster, ns, obj) if pod_ready(p))
        return obj if rolled_out(obj, ready) else None

    return poll(check, timeout=timeout, what=f"{kind} {ns}/{name} rolled out")


def wait_workload(
    cluster: Cluster,
    ns: str,
    kind: str,
    name: str,
    check: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 60.0,
) -> dict[str, Any]:
    def ok() -> dict[str, Any] | None:
        obj = cluster.kube.get_or_none(k.BY_KIND[kind], ns, name)
        return obj if obj is not None and check(obj) else None

    return poll(ok, timeout=timeout, what=f"{kind} {ns}/{name}: {what}")


def replicasets_of(cluster: Cluster, ns: str, deployment: dict[str, Any]) -> list[dict[str, Any]]:
    """The ReplicaSets the Deployment controls (by controller ownerReference)."""
    uid = deployment["metadata"]["uid"]
    items = cluster.kube.list(k.REPLICASETS, ns).get("items") or []
    return [
        rs
        for rs in items
        if any(
            ref.get("uid") == uid and ref.get("controller")
            for ref in rs["metadata"].get("ownerReferences") or []
        )
    ]


def owner_name(obj: dict[str, Any], kind: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return str(ref["name"])
    return None


# ---------------------------------------------------------------- node pools


def hold_pool(ns: str) -> dict[str, str]:
    """A nodeSelector no node satisfies yet: pods using it stay Pending."""
    return {POOL_LABEL: ns}


def open_pool(cluster: Cluster, ns: str, *, gpus: int = 0) -> str:
    """A fake node joins :func:`hold_pool`'s pool (as a cluster autoscaler would add
    one); kwok makes it Ready and the scheduler binds the waiting pods to it.
    Removed with the test's namespaces."""
    name = f"pool-{ns}"
    node = kwok.FakeNode(name, gpus=gpus, labels=hold_pool(ns)).manifest()
    cluster.kube.request("POST", "/api/v1/nodes", body=node)
    cluster.nodes.append(name)
    return name


# ---------------------------------------------------------------- kwok stages


def trigger(cluster: Cluster, ns: str, pod: str, patch: dict[str, Any]) -> None:
    """Annotate ``pod`` with a kwok stage trigger (tests/harness/kwok.py)."""
    cluster.kube.request("PATCH", k.PODS.item(ns, pod), body=patch, content_type=k.MERGE_PATCH)


def restart_in_place(cluster: Cluster, ns: str, pod: str, container: str) -> int:
    """Ask kwok to restart ``container`` of ``pod`` once (same pod UID, restartCount
    + 1, as a kubelet respawning a crashed container); waits for it and returns the
    new restartCount."""
    live = cluster.kube.get(k.PODS, ns, pod)
    want = kwok.restart_count(live, container) + 1
    trigger(cluster, ns, pod, kwok.restart_patch(live, [container]))
    poll(
        lambda: kwok.restart_count(cluster.kube.get(k.PODS, ns, pod), container) == want,
        timeout=30,
        what=f"{ns}/{pod}: container {container} restarted (restartCount {want})",
    )
    return want


# ---------------------------------------------------------------- the reconciler


def reconciled_since(stack: Stack, cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    """The CacheBackend once the stack's workers have run two whole reconciles of it
    that began after this call (from their reconcile trace; reconciles of one key never
    overlap). The workers read from watch caches, so one run may begin on a view a
    moment older than the call; the change that view lacked wakes another."""
    key = f"{ns}/{name}"
    mark = time.monotonic()

    def done() -> bool:
        now = time.monotonic()
        # A run still open is reported ending now: only runs ended before count.
        runs = [r for r in stack.reconcile_runs().get(key, []) if r.start > mark and r.end < now]
        return len(runs) >= 2

    poll(done, timeout=60, what=f"two reconciles of {key}", interval=0.2)
    return cluster.cb(ns, name)


def one_container_deployment(
    name: str, labels: dict[str, str], container: dict[str, Any]
) -> dict[str, Any]:
    """A one-replica Deployment of ``container`` whose pods carry ``labels``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def dry_run_pod(
    cluster: Cluster, ns: str, deployment: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """A dry-run create of the Deployment's pod: the admitted pod and the API server's
    Warning headers (how the webhook's admission warnings reach a client)."""
    template = deployment["spec"]["template"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", **template["metadata"]},
        "spec": template["spec"],
    }
    answer = cluster.kube.answer("POST", k.PODS.collection(ns), query={"dryRun": "All"}, body=body)
    data = answer.read()
    assert 200 <= answer.status <= 299, data
    return json.loads(data), [str(w) for w in answer.getheaders().getlist("Warning")]

"""End to end on real rollouts: kube-controller-manager, kube-scheduler and kwok drive
the managed workloads; the tests only change specs, nodes and pods the way an operator
or a node would, and check the CacheBackend's conditions against the spec at each step
(/work spec "Conditions", "KV-event readiness gate", the observedServerInstance row of
"Status").
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeio import client as k
from tests.builders import NO_GATE
from tests.e2e import cascade
from tests.e2e.cascade import (
    ENGINE,
    SERVER,
    SIDECAR,
    WIRED_ANNOTATIONS,
    WIRED_SPEC,
    engine_writes,
    inject_sidecar,
    lmcache_server,
    restart_trigger,
    server_instance,
    start_wired_engine,
)
from tests.e2e.conftest import (
    WORKER_USER,
    Cluster,
    Stack,
    condition,
    poll,
)
from tests.e2e.workloads import (
    hold_pool,
    open_pool,
    owner_name,
    pod_ready,
    pods_of,
    reconciled_since,
    replicasets_of,
    restart_in_place,
    trigger,
    wait_rolled_out,
    wait_workload,
    workload,
)
from tests.harness import kwok

pytestmark = pytest.mark.real_controllers

# The shared fixtures, requested by the tests below under these names: ``wired`` (the
# real Pod webhook registered for a namespace) and ``sidecar_policies`` (deletes the
# admission policies a test creates).
wired = cascade.wired
sidecar_policies = cascade.sidecar_policies


def patch_spec(cluster: Cluster, ns: str, name: str, spec: dict[str, Any]) -> None:
    cluster.patch_cb(ns, name, {"spec": spec})


def message(obj: dict[str, Any], type_: str) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("message") or "")
    return ""


@pytest.mark.parametrize(
    ("annotations", "ready"),
    [(NO_GATE, ("True", "BackendReady")), ({}, ("False", "AwaitingFirstKVEvent"))],
    ids=["gate-off", "kv-event-gate"],
)
def test_managed_backend_is_rollout_in_progress_until_its_deployment_really_rolls_out(
    cluster: Cluster, stack: Stack, annotations: dict[str, str], ready: tuple[str, str]
) -> None:
    """Spec, Conditions: Ready is "True once the backend Deployment has rolled out its
    current generation, has enough updated + available replicas"; before that the
    Deployment-level reason is RolloutInProgress with Progressing=True ("still
    converging"), not Degraded. Then BackendReady, or AwaitingFirstKVEvent when the
    KV-event gate applies, with Progressing False/Synced or True respectively."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(
        ns, "cb", lmcache_server(template={"nodeSelector": hold_pool(ns)}), annotations
    )

    # The controllers created the ReplicaSet and its pod, which no node fits yet: the
    # Deployment reports it updated and unavailable, and keeps doing so.
    dep = wait_workload(
        cluster, ns, "Deployment", SERVER,
        lambda d: (d.get("status") or {}).get("updatedReplicas") == 1
        and (d.get("status") or {}).get("unavailableReplicas") == 1,
        "the pod created, updated and unavailable",
    )  # fmt: skip
    (pod,) = pods_of(cluster, ns, dep)
    assert pod["status"]["phase"] == "Pending"
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert condition(obj, "Ready") == ("False", "RolloutInProgress"), obj["status"]
    assert condition(obj, "Progressing") == ("True", "RolloutInProgress")
    assert condition(obj, "Degraded") == ("False", "NotDegraded")

    open_pool(cluster, ns)
    wait_rolled_out(cluster, ns, "Deployment", SERVER)
    obj = cluster.wait_condition(ns, "cb", "Ready", *ready)
    progressing = condition(obj, "Progressing")
    assert progressing is not None
    assert progressing[0] == ("False" if ready[0] == "True" else "True")
    assert condition(obj, "Degraded") == ("False", "NotDegraded")
    assert obj["status"]["firstAvailableAt"]
    (pod,) = pods_of(cluster, ns, workload(cluster, ns, "Deployment", SERVER))
    assert pod["spec"]["nodeName"] == f"pool-{ns}"
    assert obj["status"]["observedServerInstance"] == f"{pod['metadata']['uid']}:0"


def test_a_spec_change_rolls_a_new_replicaset_and_ready_follows_the_real_rollout(
    cluster: Cluster, stack: Stack
) -> None:
    """Spec, Conditions: Ready is True once the Deployment "has rolled out its current
    generation"; while a new template rolls out it is RolloutInProgress even though the
    old pod still serves, and BackendReady again once the new ReplicaSet's pod is
    available and the old ReplicaSet is scaled to zero."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    open_pool(cluster, ns)
    cluster.create_cb(ns, "cb", lmcache_server(template={"nodeSelector": hold_pool(ns)}), NO_GATE)
    first = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady")
    (old_rs,) = replicasets_of(cluster, ns, first)
    (old_pod,) = pods_of(cluster, ns, first)

    # A new template whose pod cannot be placed yet: the surge pod waits, the old one
    # keeps serving.
    moved = f"{ns}-next"
    patch_spec(cluster, ns, "cb", {"template": {"nodeSelector": hold_pool(moved)}})
    dep = wait_workload(
        cluster, ns, "Deployment", SERVER,
        lambda d: d["metadata"]["generation"] == 2
        and (d.get("status") or {}).get("observedGeneration") == 2
        and (d.get("status") or {}).get("updatedReplicas") == 1
        and (d.get("status") or {}).get("replicas") == 2,
        "a second ReplicaSet surging",
    )  # fmt: skip
    assert len(replicasets_of(cluster, ns, dep)) == 2
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert condition(obj, "Ready") == ("False", "RolloutInProgress"), obj["status"]
    assert condition(obj, "Progressing") == ("True", "RolloutInProgress")
    assert condition(obj, "Degraded") == ("False", "NotDegraded")

    open_pool(cluster, moved)
    dep = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady")
    rs_replicas = {
        rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in replicasets_of(cluster, ns, dep)
    }
    new_rs = next(name for name in rs_replicas if name != old_rs["metadata"]["name"])
    assert rs_replicas == {old_rs["metadata"]["name"]: 0, new_rs: 1}
    (new_pod,) = pods_of(cluster, ns, dep)
    assert new_pod["metadata"]["uid"] != old_pod["metadata"]["uid"]
    assert owner_name(new_pod, "ReplicaSet") == new_rs
    assert new_pod["spec"]["nodeName"] == f"pool-{moved}"
    # The baseline follows the replacement (a prior pod is gone).
    cluster.wait_cb(
        ns, "cb",
        lambda o: o["status"].get("observedServerInstance") == f"{new_pod['metadata']['uid']}:0",
        "observedServerInstance on the new pod",
    )  # fmt: skip


def test_scaling_to_zero_removes_the_pods_and_reports_scaled_to_zero(
    cluster: Cluster, stack: Stack
) -> None:
    """Spec, Conditions: Ready=False/ScaledToZero with Progressing=False/ScaledToZero
    ("stuck/degraded (or scaled to zero)"), not Degraded; observedServerInstance is
    stale-while-unavailable (keeps its value with no Ready pod); scaling back up rolls
    out a new pod and Ready returns."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(ns, "cb", lmcache_server(replicas=2), NO_GATE)
    dep = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    before = {p["metadata"]["uid"] for p in pods_of(cluster, ns, dep)}
    baseline = cluster.wait_cb(
        ns, "cb",
        lambda o: len((o["status"].get("observedServerInstance") or "").split(",")) == 2,
        "a two-pod baseline",
    )["status"]["observedServerInstance"]  # fmt: skip

    patch_spec(cluster, ns, "cb", {"replicas": 0})
    obj = cluster.wait_condition(ns, "cb", "Ready", "False", "ScaledToZero")
    assert condition(obj, "Progressing") == ("False", "ScaledToZero")
    assert condition(obj, "Degraded") == ("False", "NotDegraded")
    wait_workload(
        cluster, ns, "Deployment", SERVER,
        lambda d: d["spec"]["replicas"] == 0
        and not (d.get("status") or {}).get("replicas")
        and not pods_of(cluster, ns, d),
        "scaled to zero, pods gone",
    )  # fmt: skip
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert condition(obj, "Ready") == ("False", "ScaledToZero")
    assert obj["status"]["observedServerInstance"] == baseline

    patch_spec(cluster, ns, "cb", {"replicas": 1})
    dep = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady")
    (pod,) = pods_of(cluster, ns, dep)
    assert pod["metadata"]["uid"] not in before


def test_an_hpa_owned_backend_keeps_the_replicas_the_hpa_controller_writes(
    cluster: Cluster, stack: Stack
) -> None:
    """Spec, Conditions: "When the desired replica count is owned by an HPA
    (spec.autoscaling set) the controller compares the Ready condition against the
    HPA-written Deployment spec.replicas"; the workload starts at minReplicas.

    There is no metrics server, so the HPA controller cannot compute a utilisation
    (ScalingActive=False/FailedGetResourceMetric) — but it still enforces the
    min/max bounds through the scale subresource, which is what this test drives:
    raising minReplicas makes the HPA controller, not the reconciler, scale the
    Deployment, and the reconciler keeps that count through later applies."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    spec = lmcache_server(replicas=1, autoscaling={"minReplicas": 2, "maxReplicas": 4})
    cluster.create_cb(ns, "hpa", spec, NO_GATE)
    name = "hpa-lmcache-server"
    dep = wait_rolled_out(cluster, ns, "Deployment", name)
    assert dep["spec"]["replicas"] == 2
    cluster.wait_condition(ns, "hpa", "Ready", "True", "BackendReady")

    # The HPA controller has looked at it, and says why it cannot autoscale on CPU.
    def hpa_condition(type_: str) -> tuple[str, str] | None:
        hpa = cluster.kube.get(k.HPAS, ns, name)
        return condition(hpa, type_)

    poll(
        lambda: hpa_condition("ScalingActive") == ("False", "FailedGetResourceMetric"),
        timeout=30,
        what="the HPA controller's ScalingActive condition",
    )

    mark = cluster.cp.audit_offset()
    cluster.patch_cb(ns, "hpa", {"spec": {"autoscaling": {"minReplicas": 3}}})
    dep = wait_workload(
        cluster, ns, "Deployment", name, lambda d: d["spec"]["replicas"] == 3, "scaled to 3"
    )
    scalers = {
        e.user
        for e in cluster.cp.write_events(
            mark, resource="deployments", subresource="scale", namespace=ns, name=name
        )
    }
    assert scalers == {"system:serviceaccount:kube-system:horizontal-pod-autoscaler"}
    wait_rolled_out(cluster, ns, "Deployment", name)
    obj = cluster.wait_cb(
        ns, "hpa",
        lambda o: condition(o, "Ready") == ("True", "BackendReady")
        and "3/3" in message(o, "Ready"),
        "Ready against the HPA's 3 replicas",
    )  # fmt: skip
    assert obj["spec"]["replicas"] == 1

    # A later apply of the Deployment (a template change) keeps the HPA's count.
    cluster.patch_cb(ns, "hpa", {"spec": {"template": {"nodeSelector": {"pool": "cpu"}}}})
    dep = wait_workload(
        cluster, ns, "Deployment", name,
        lambda d: d["spec"]["template"]["spec"].get("nodeSelector") == {"pool": "cpu"},
        "the template re-applied",
    )  # fmt: skip
    assert dep["spec"]["replicas"] == 3, "the reconciler fought the HPA"
    dep = wait_rolled_out(cluster, ns, "Deployment", name)
    assert {p["spec"]["nodeName"] for p in pods_of(cluster, ns, dep)} <= {
        "kwok-cpu-0",
        "kwok-cpu-1",
    }
    cluster.wait_condition(ns, "hpa", "Ready", "True", "BackendReady")
    assert [e.user for e in cluster.cp.write_events(mark, resource="deployments",
            subresource="scale", namespace=ns, name=name, user=WORKER_USER)] == []  # fmt: skip


# ------------------------------------------------------------------ the cascade


def test_a_deleted_cache_server_pod_is_replaced_and_the_engine_deployment_rolls_once(
    cluster: Cluster, stack: Stack, wired: str
) -> None:
    """Spec, Status, observedServerInstance: a transition that reflects an actual
    replacement (a prior pod is gone) cascade-restarts every engine Deployment owning
    pods injected by this backend, by patching
    inferencecache.io/cache-server-restart-trigger onto its pod template — once. Here
    the ReplicaSet really replaces the deleted pod (new UID), the webhook really wired
    the engine pods, and the engine Deployment really rolls to a new ReplicaSet."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    cb = cluster.create_cb(ns, "cb", WIRED_SPEC, WIRED_ANNOTATIONS)
    server = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    (first,) = pods_of(cluster, ns, server)
    cluster.wait_cb(
        ns, "cb", lambda o: server_instance(o) == f"{first['metadata']['uid']}:0", "the baseline"
    )
    engine = start_wired_engine(cluster, ns, cluster.cb(ns, "cb"))
    old_engine_pods = {p["metadata"]["uid"] for p in pods_of(cluster, ns, engine)}
    assert restart_trigger(cluster, ns) is None

    mark = cluster.cp.audit_offset()
    cluster.kube.delete(k.PODS, ns, first["metadata"]["name"])
    server = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    (second,) = pods_of(cluster, ns, server)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert owner_name(second, "ReplicaSet") == owner_name(first, "ReplicaSet")
    cluster.wait_cb(
        ns, "cb",
        lambda o: server_instance(o) == f"{second['metadata']['uid']}:0",
        "observedServerInstance on the replacement",
    )  # fmt: skip
    poll(lambda: restart_trigger(cluster, ns), timeout=30, what="the restart trigger")
    stamp = restart_trigger(cluster, ns)

    # The engine Deployment really rolls: a new ReplicaSet, new (again wired) pods.
    engine = wait_workload(
        cluster, ns, "Deployment", ENGINE,
        lambda d: (d.get("status") or {}).get("observedGeneration") == 2, "the new generation",
    )  # fmt: skip
    engine = wait_rolled_out(cluster, ns, "Deployment", ENGINE)
    assert len(replicasets_of(cluster, ns, engine)) == 2
    new_pods = pods_of(cluster, ns, engine)
    assert len(new_pods) == 2
    assert not old_engine_pods & {p["metadata"]["uid"] for p in new_pods}
    for pod in new_pods:
        assert (pod["metadata"].get("annotations") or {}).get(
            "inferencecache.io/injected-by"
        ) == f"{ns}/cb"

    # Exactly once: later reconciles (the engine pods changed under the backend) leave
    # the trigger alone.
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert restart_trigger(cluster, ns) == stamp
    assert engine_writes(cluster, ns, mark) == ["patch"]
    assert server_instance(obj) == f"{second['metadata']['uid']}:0"
    assert condition(obj, "Ready") == ("True", "BackendReady")
    assert cb["metadata"]["uid"] == obj["metadata"]["uid"]


def test_an_in_place_restart_of_the_server_container_cascades_but_a_sidecar_restart_does_not(
    cluster: Cluster, stack: Stack, wired: str, sidecar_policies: list[str]
) -> None:
    """Spec, Status, observedServerInstance: <restart-sum> sums the restartCount of the
    cache-server's own containers (the names on the owned Deployment's pod template);
    "a sidecar crash-loop must not advance the identifier and roll the engine fleet",
    while "an in-place restart of a cache-server container ... DOES advance the
    identifier" (same pod UID) and cascades."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    server_labels = {"app.kubernetes.io/instance": "cb"}
    inject_sidecar(cluster, ns, server_labels, sidecar_policies)
    cluster.create_cb(ns, "cb", WIRED_SPEC, WIRED_ANNOTATIONS)
    server = wait_rolled_out(cluster, ns, "Deployment", SERVER)
    (pod,) = pods_of(cluster, ns, server)
    own = [c["name"] for c in server["spec"]["template"]["spec"]["containers"]]
    assert SIDECAR not in own
    assert [c["name"] for c in pod["spec"]["containers"]] == [*own, SIDECAR]
    uid = pod["metadata"]["uid"]
    cluster.wait_cb(ns, "cb", lambda o: server_instance(o) == f"{uid}:0", "the baseline")
    start_wired_engine(cluster, ns, cluster.cb(ns, "cb"))
    mark = cluster.cp.audit_offset()

    # The sidecar restarts in place: not the cache server's, nothing moves.
    restart_in_place(cluster, ns, pod["metadata"]["name"], SIDECAR)
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert server_instance(obj) == f"{uid}:0"
    assert restart_trigger(cluster, ns) is None
    assert engine_writes(cluster, ns, mark) == []

    # The cache-server container restarts in place: same pod, restart-sum 1, cascade.
    restart_in_place(cluster, ns, pod["metadata"]["name"], own[0])
    cluster.wait_cb(ns, "cb", lambda o: server_instance(o) == f"{uid}:1", "restart-sum 1")
    poll(lambda: restart_trigger(cluster, ns), timeout=30, what="the restart trigger")
    engine = wait_workload(
        cluster, ns, "Deployment", ENGINE,
        lambda d: (d.get("status") or {}).get("observedGeneration") == 2, "the new generation",
    )  # fmt: skip
    wait_rolled_out(cluster, ns, "Deployment", ENGINE)
    assert len(replicasets_of(cluster, ns, engine)) == 2
    (same,) = pods_of(cluster, ns, workload(cluster, ns, "Deployment", SERVER))
    assert same["metadata"]["uid"] == uid
    reconciled_since(stack, cluster, ns, "cb")
    assert engine_writes(cluster, ns, mark) == ["patch"]


def test_a_statefulset_backend_converges_and_a_failed_pod_is_recreated_under_its_name(
    cluster: Cluster, stack: Stack
) -> None:
    """Spec: deploymentKind StatefulSet renders the managed workload as a StatefulSet;
    Ready follows its real ordered rollout (BackendReady with every replica Ready);
    observedServerInstance lists each Ready pod as <uid>:<restarts> sorted by pod name.
    A failed pod is recreated by the StatefulSet controller under the same name with a
    new UID: a replacement, which the baseline follows."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    spec = lmcache_server(deploymentKind="StatefulSet", replicas=2)
    cluster.create_cb(ns, "cb", spec, NO_GATE)
    sts = wait_rolled_out(cluster, ns, "StatefulSet", SERVER)
    pods = pods_of(cluster, ns, sts)
    assert [p["metadata"]["name"] for p in pods] == [f"{SERVER}-0", f"{SERVER}-1"]
    expected = ",".join(f"{p['metadata']['uid']}:0" for p in pods)
    cluster.wait_cb(ns, "cb", lambda o: server_instance(o) == expected, "both pods")
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady")
    assert condition(obj, "Progressing") == ("False", "Synced")
    assert obj["status"]["endpoint"] == f"{SERVER}.{ns}.svc:65432"
    assert cluster.kube.get(k.SERVICES, ns, SERVER)

    failed = pods[1]
    trigger(cluster, ns, failed["metadata"]["name"], kwok.fail_patch())
    poll(
        lambda: (
            (p := cluster.kube.get_or_none(k.PODS, ns, failed["metadata"]["name"])) is not None
            and p["metadata"]["uid"] != failed["metadata"]["uid"]
            and pod_ready(p)
        ),
        timeout=60,
        what="the failed pod recreated under its name",
    )
    sts = wait_rolled_out(cluster, ns, "StatefulSet", SERVER)
    pods = pods_of(cluster, ns, sts)
    assert pods[0]["metadata"]["uid"] == expected.split(":")[0]
    expected = ",".join(f"{p['metadata']['uid']}:0" for p in pods)
    cluster.wait_cb(ns, "cb", lambda o: server_instance(o) == expected, "the new baseline")
    cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady")

"""On the real API server: the reconciler never adopts or overwrites an
object it does not own.

For each owned kind (Deployment, StatefulSet, Service, HPA) a foreign object of the
rendered name exists before the CacheBackend does. The reconcile — run as the worker's
ServiceAccount, so the RBAC is proven too — leaves it exactly as it was (same
resourceVersion, managedFields, spec: nothing was written), reports Ready=False/
NameConflict naming kind and name plus a Warning Event, writes nothing more while the
conflict is unchanged, and converges once the foreign object is deleted. The last test
runs the same story through the real dispatcher and worker processes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubeio import access as kubeaccess
from kubeio import client as k
from reconciler.status.ownership import owned_by
from tests.e2e.conftest import Cluster, Stack, condition, poll
from tests.fakes import in_process_reconciler

NO_GATE = {"inferencecache.io/require-kv-events": "false"}
MANAGED = {"provider": "LMCacheServer", "ownership": "Managed"}
NAME = "cb-lmcache-server"
THEIR_LABELS = {"app": "theirs"}
THEIR_TEMPLATE = {
    "metadata": {"labels": THEIR_LABELS},
    "spec": {"containers": [{"name": "app", "image": "registry.example/theirs:1"}]},
}

# kind -> (the backend spec that renders an object of that kind, the foreign object)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "Deployment": (
        {"runtime": "VLLM", "remoteStorage": MANAGED},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "spec": {"replicas": 3, "selector": {"matchLabels": THEIR_LABELS},
                     "template": THEIR_TEMPLATE},
        },
    ),
    "StatefulSet": (
        {"runtime": "VLLM", "deploymentKind": "StatefulSet", "remoteStorage": MANAGED},
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "spec": {"serviceName": "theirs", "selector": {"matchLabels": THEIR_LABELS},
                     "template": THEIR_TEMPLATE},
        },
    ),
    "Service": (
        {"runtime": "VLLM", "remoteStorage": MANAGED},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "spec": {"selector": THEIR_LABELS, "ports": [{"name": "http", "port": 80}]},
        },
    ),
    "HorizontalPodAutoscaler": (
        {"runtime": "VLLM", "remoteStorage": MANAGED,
         "autoscaling": {"minReplicas": 1, "maxReplicas": 3}},
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "theirs"},
                     "minReplicas": 1, "maxReplicas": 2},
        },
    ),
}  # fmt: skip


@pytest.fixture
def worker_kube(cluster: Cluster) -> Iterator[k.Kube]:
    kube = kubeaccess.connect(str(cluster.worker_kubeconfig))
    try:
        yield kube
    finally:
        kube.close()


def create_foreign(cluster: Cluster, ns: str, kind: str, name: str = NAME) -> dict[str, Any]:
    body = dict(CASES[kind][1])
    body["metadata"] = {"name": name, "labels": {"team": "theirs"}}
    return cluster.kube.create(k.BY_KIND[kind], ns, body)


def conflict_events(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [e for e in cluster.events(ns, name) if e.get("reason") == "NameConflict"]


def owned_names(cluster: Cluster, ns: str, uid: str) -> set[tuple[str, str]]:
    out = set()
    for res in (k.DEPLOYMENTS, k.STATEFULSETS, k.SERVICES, k.HPAS):
        for item in cluster.kube.list(res, ns).get("items") or []:
            if owned_by(item, uid):
                out.add((res.kind, item["metadata"]["name"]))
    return out


@pytest.mark.parametrize("kind", list(CASES))
def test_a_foreign_object_of_each_owned_kind_is_never_written_and_is_reported(
    cluster: Cluster, worker_kube: k.Kube, kind: str
) -> None:
    ns = cluster.namespace()
    try:
        theirs = create_foreign(cluster, ns, kind)
        cb = cluster.create_cb(ns, "cb", CASES[kind][0], annotations=NO_GATE)
        uid = cb["metadata"]["uid"]
        rec = in_process_reconciler(worker_kube)
        rec.reconcile(f"{ns}/cb")

        after = cluster.kube.get(k.BY_KIND[kind], ns, NAME)
        # Nothing written: the API server returns the very same object.
        assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
        assert after["metadata"]["managedFields"] == theirs["metadata"]["managedFields"]
        assert after["spec"] == theirs["spec"]
        assert after == theirs
        # Held as a unit: none of the backend's other objects were created either.
        assert owned_names(cluster, ns, uid) == set()

        got = cluster.cb(ns, "cb")
        assert condition(got, "Ready") == ("False", "NameConflict")
        ready = next(c for c in got["status"]["conditions"] if c["type"] == "Ready")
        assert f"{kind} {NAME}" in ready["message"]
        events = conflict_events(cluster, ns, "cb")
        assert [e["type"] for e in events] == ["Warning"]
        assert f"{kind} {NAME}" in events[0]["message"]
        assert events[0]["involvedObject"]["uid"] == uid

        # An unchanged conflict writes nothing further: no status write, no Event.
        result = rec.reconcile(f"{ns}/cb")
        assert result.writes == 0
        assert result.requeue_after is not None
        assert (
            cluster.cb(ns, "cb")["metadata"]["resourceVersion"]
            == got["metadata"]["resourceVersion"]
        )
        assert len(conflict_events(cluster, ns, "cb")) == 1
        assert cluster.kube.get(k.BY_KIND[kind], ns, NAME) == theirs

        # The foreign object goes away: the next reconcile converges.
        cluster.kube.delete(k.BY_KIND[kind], ns, NAME)
        poll(
            lambda: cluster.kube.get_or_none(k.BY_KIND[kind], ns, NAME) is None,
            timeout=30,
            what=f"{kind} {NAME} deleted",
        )
        rec.reconcile(f"{ns}/cb")
        assert (kind, NAME) in owned_names(cluster, ns, uid)
        assert ("Service", NAME) in owned_names(cluster, ns, uid)
        got = cluster.cb(ns, "cb")
        assert condition(got, "Ready") == ("False", "RolloutInProgress")
        assert got["status"]["endpoint"] == f"{NAME}.{ns}.svc:65432"
    finally:
        cluster.delete_backends([ns])


def test_a_foreign_object_recreated_between_read_and_write_is_refused(
    cluster: Cluster, worker_kube: k.Kube
) -> None:
    """The update path applies with the uid it read as a precondition: an object
    deleted and recreated by someone else in between is refused (409), not adopted."""
    ns = cluster.namespace()
    try:
        cluster.create_cb(ns, "cb", CASES["Service"][0], annotations=NO_GATE)
        in_process_reconciler(worker_kube).reconcile(f"{ns}/cb")
        ours = cluster.kube.get(k.SERVICES, ns, NAME)
        cluster.kube.delete(k.SERVICES, ns, NAME)
        theirs = create_foreign(cluster, ns, "Service")
        body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME},
                "spec": {"selector": {"app": "ours"}}}  # fmt: skip
        with pytest.raises(k.ApiError) as err:
            worker_kube.apply(k.SERVICES, ns, body, uid=ours["metadata"]["uid"])
        assert err.value.conflict
        assert cluster.kube.get(k.SERVICES, ns, NAME) == theirs
    finally:
        cluster.delete_backends([ns])


def test_a_backend_named_chat_never_takes_over_a_foreign_chat_redis_service(
    cluster: Cluster, stack: Stack
) -> None:
    """A CacheBackend named chat never takes over a team's existing chat-redis Service,
    through the real dispatcher and worker: reported, never touched, converged once it
    is gone."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    theirs = cluster.kube.create(
        k.SERVICES,
        ns,
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "chat-redis", "labels": {"team": "chat"}},
         "spec": {"selector": {"app": "team-redis"}, "ports": [{"port": 6379}]}},
    )  # fmt: skip
    spec = {"runtime": "SGLang", "remoteStorage": {"provider": "Redis", "ownership": "Managed"}}
    cb = cluster.create_cb(ns, "chat", spec)
    cluster.wait_condition(ns, "chat", "Ready", "False", "NameConflict", timeout=60)
    poll(lambda: conflict_events(cluster, ns, "chat"), timeout=30, what="NameConflict Event")
    # Several resyncs (2 s in the stack) later, still untouched and reported once.
    time.sleep(5)  # not synchronisation: a window in which no write may happen
    assert cluster.kube.get(k.SERVICES, ns, "chat-redis") == theirs
    assert cluster.kube.get_or_none(k.DEPLOYMENTS, ns, "chat-redis") is None
    assert len(conflict_events(cluster, ns, "chat")) == 1

    cluster.kube.delete(k.SERVICES, ns, "chat-redis")
    cluster.wait_cb(
        ns, "chat", lambda o: bool((o.get("status") or {}).get("endpoint")), "endpoint", 60
    )
    svc = cluster.kube.get(k.SERVICES, ns, "chat-redis")
    assert owned_by(svc, cb["metadata"]["uid"])
    assert condition(cluster.cb(ns, "chat"), "Ready") == ("False", "RolloutInProgress")


def test_shedding_on_a_mode_flip_never_deletes_a_foreign_lookalike(
    cluster: Cluster, worker_kube: k.Kube
) -> None:
    """Never adopt, deletion path: a foreign StatefulSet carrying our labels (but no
    controller reference to the backend) survives the flip that sheds ours."""
    ns = cluster.namespace()
    try:
        cluster.create_cb(ns, "cb", CASES["Deployment"][0], annotations=NO_GATE)
        rec = in_process_reconciler(worker_kube)
        rec.reconcile(f"{ns}/cb")
        labels = cluster.kube.get(k.DEPLOYMENTS, ns, NAME)["metadata"]["labels"]
        body = dict(CASES["StatefulSet"][1])
        body["metadata"] = {"name": NAME, "labels": labels}
        lookalike = cluster.kube.create(k.STATEFULSETS, ns, body)
        cluster.patch_cb(
            ns, "cb", {"spec": {"remoteStorage": None, "integration": {"mode": "EventsOnly"}}}
        )
        rec.reconcile(f"{ns}/cb")
        assert cluster.kube.get_or_none(k.DEPLOYMENTS, ns, NAME) is None
        assert cluster.kube.get_or_none(k.SERVICES, ns, NAME) is None
        assert cluster.kube.get(k.STATEFULSETS, ns, NAME) == lookalike
    finally:
        cluster.delete_backends([ns])

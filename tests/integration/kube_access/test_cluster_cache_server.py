"""A worker's watch caches against the real API server: scoped watches that follow the
backends' selectors, the freshness barrier a run waits at (a fence for a change is
passed once every store it moves holds it, and a read right after sees it), and a
watch gap (a real 410 Gone) that is healed by a re-list which reports what the gap
hid."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kubeio import client as k
from reconciler.steps.reads import LiveReads
from reconciler.watch.cluster_cache import CachedReads, ClusterCache
from reconciler.watch.freshness import Fence, fence_for
from reconciler.watch.watch_cache import Reflector, WatchSpec
from shared import constants as c
from tests.fakes import GapKube
from tests.harness.controlplane import ControlPlane
from tests.harness.polling import poll


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[k.Kube]:
    client = k.Kube(control_plane.api_client())
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def ns(kube: k.Kube) -> str:
    name = f"cache-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    return name


def create_backend(kube: k.Kube, ns: str, name: str, selector: dict[str, str]) -> dict[str, Any]:
    return kube.create(
        k.CACHEBACKENDS,
        ns,
        {
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": {"name": name},
            "spec": {"runtime": "VLLM", "engineSelector": {"matchLabels": selector}},
        },
    )


def create_pod(
    kube: k.Kube,
    ns: str,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]},
    }
    # The harness creates the namespace's default ServiceAccount a moment later.
    return poll(lambda: kube.create(k.PODS, ns, body), timeout=30, what=f"pod {name}")


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(str(o["metadata"]["name"]) for o in items)


@pytest.fixture
def cache(kube: k.Kube, cachebackend_crd: dict[str, Any]) -> Iterator[ClusterCache]:
    cluster_cache = ClusterCache(kube, watch_timeout=30).start()
    try:
        assert cluster_cache.wait_synced(30)
        yield cluster_cache
    finally:
        cluster_cache.stop()


def test_engine_pod_watches_follow_new_selectors_and_hold_only_matching_pods(
    kube: k.Kube, ns: str, cache: ClusterCache
) -> None:
    cluster_cache = cache
    reads = CachedReads(cluster_cache, LiveReads(kube))
    app_a, app_b = f"a-{ns}", f"b-{ns}"
    create_backend(kube, ns, "a", {"app": app_a})
    create_pod(kube, ns, "a-1", {"app": app_a})
    create_pod(kube, ns, "web", {"app": f"web-{ns}"})
    # a's labels in a namespace without a backend: no watch covers that namespace.
    other = f"{ns}-x"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": other}})
    create_pod(kube, other, "stray", {"app": app_a})
    poll(
        lambda: names(reads.engine_pods(ns, {"app": app_a})) == ["a-1"],
        timeout=30,
        what="a's engine pod in the cache",
    )
    # A second backend: its selector value is watched too, a's stays covered meanwhile.
    create_backend(kube, ns, "b", {"app": app_b})
    create_pod(kube, ns, "b-1", {"app": app_b})
    poll(
        lambda: (
            (group := cluster_cache.engine_pods.covering(ns, {"app": app_b}, 0.1)) is not None
            and names(group.store.in_namespace(ns)) == ["a-1", "b-1"]
        ),
        timeout=30,
        what="b's selector watched",
    )
    assert names(reads.engine_pods(ns, {"app": app_a})) == ["a-1"]
    # The unrelated pod, and the same-labelled one of the other namespace, are in no
    # store of the cache.
    grouped = [
        *cluster_cache.engine_pods.reflectors(),
        *cluster_cache.engine_replicasets.reflectors(),
    ]
    # (Other tests' backends on this shared API server have watches of their own.)
    watched_namespaces = {r.spec.namespace for r in grouped}
    assert ns in watched_namespaces
    assert other not in watched_namespaces
    for store in [r.store for r in [*cluster_cache.reflectors(), *grouped]]:
        assert "web" not in names(store.in_namespace(ns))
        assert "stray" not in names(list(store.all()))

    # Relabelled from a's selector to b's. The fence of that change (what the dispatcher
    # leaves beside the keys it wakes) is passed once the cache holds it, and a read
    # right after sees it: no polling.
    relabelled = kube.patch(
        k.PODS, ns, "a-1", {"metadata": {"labels": {"app": app_b}}}, content_type=k.MERGE_PATCH
    )
    fence = fence_for(k.PODS.plural, relabelled)
    assert fence is not None
    assert cluster_cache.caught_up([fence], timeout=30)
    assert names(reads.engine_pods(ns, {"app": app_b})) == ["a-1", "b-1"]
    assert reads.engine_pods(ns, {"app": app_a}) == []
    # A change the API server has not made yet is never called caught up: the wait ends
    # at its bound, and the run would read the API server.
    ahead = Fence(k.PODS.plural, ns, "a-1", "9" * 18, {"app": app_b})
    assert not cluster_cache.caught_up([ahead], timeout=0.5)


def test_cached_reads_agree_with_the_api_servers_scoped_reads(
    kube: k.Kube, ns: str, cache: ClusterCache
) -> None:
    cluster_cache = cache
    cb = create_backend(kube, ns, "cb", {"app": f"e-{ns}"})
    uid = cb["metadata"]["uid"]
    wiring = {
        c.ANNOTATION_INJECTED_BY: f"{ns}/cb",
        c.ANNOTATION_INJECTED_BY_UID: uid,
    }
    create_pod(kube, ns, "wired", {"app": f"e-{ns}", c.LABEL_INJECTED_BY_UID: uid}, wiring)
    create_pod(kube, ns, "moved", {"app": "elsewhere", c.LABEL_INJECTED_BY_UID: uid}, wiring)
    create_pod(kube, ns, "plain", {"app": f"e-{ns}"})
    cached, live = CachedReads(cluster_cache, LiveReads(kube)), LiveReads(kube, fresh=True)
    selector = {"app": f"e-{ns}"}
    poll(
        lambda: (
            names(cached.engine_pods(ns, selector)) == ["plain", "wired"]
            and names(cached.injected_pods(ns, uid)) == ["moved", "wired"]
        ),
        timeout=30,
        what="the cache to hold the pods",
    )
    assert names(live.engine_pods(ns, selector)) == ["plain", "wired"]
    assert names(live.injected_pods(ns, uid)) == ["moved", "wired"]
    assert cached.backend(ns, "cb") is not None
    assert cached.backend(ns, "cb")["metadata"]["uid"] == uid  # type: ignore[index]


def test_engine_deployments_are_read_through_their_replicasets(
    kube: k.Kube, ns: str, cache: ClusterCache
) -> None:
    """The cache derives an engine Deployment from the ReplicaSets the deployment
    controller makes (created here as it would: template labels plus pod-template-hash,
    a controller reference, the revision and desired-replicas annotations), and agrees
    with the API-server read of the Deployment; a scale's fence is passed once the
    derived Deployment shows it."""
    cluster_cache = cache
    app = f"e-{ns}"
    create_backend(kube, ns, "cb", {"app": app})
    template = {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]},
    }
    dep = kube.create(
        k.DEPLOYMENTS,
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "engine"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": app}},
                     "template": template},
        },
    )  # fmt: skip

    def replicaset(name: str, revision: int, replicas: int, labels: dict[str, str]) -> None:
        kube.create(
            k.REPLICASETS,
            ns,
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": name,
                    "labels": {**labels, "pod-template-hash": name},
                    "annotations": {
                        "deployment.kubernetes.io/revision": str(revision),
                        "deployment.kubernetes.io/desired-replicas": str(replicas),
                    },
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                         "name": "engine", "uid": dep["metadata"]["uid"],
                                         "controller": True}],
                },
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {**labels, "pod-template-hash": name}},
                    "template": {**template, "metadata": {"labels": {
                        **labels, "pod-template-hash": name}}},
                },
            },
        )  # fmt: skip

    replicaset("r1", 1, 1, {"app": app})
    replicaset("r2", 2, 3, {"app": app})
    cached, live = CachedReads(cluster_cache, LiveReads(kube)), LiveReads(kube, fresh=True)

    def shape(deployments: list[dict[str, Any]]) -> list[tuple[str, int, dict[str, str]]]:
        return [
            (
                d["metadata"]["name"],
                d["spec"]["replicas"],
                d["spec"]["template"]["metadata"]["labels"],
            )
            for d in deployments
        ]

    expected = [("engine", 3, {"app": app})]
    poll(
        lambda: shape(cached.engine_deployments(ns, {"app": app})) == expected,
        timeout=30,
        what="the engine Deployment derived from its ReplicaSets",
    )
    assert shape(live.engine_deployments(ns, {"app": app})) == expected
    assert cluster_cache.engine_replicasets.covering(ns, {"app": app}, 0.1) is not None

    # Scaled: the controller rewrites the newest ReplicaSet's desired-replicas.
    scaled = kube.patch(
        k.REPLICASETS,
        ns,
        "r2",
        {"metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": "0"}}},
        content_type=k.MERGE_PATCH,
    )
    fence = fence_for(k.REPLICASETS.plural, scaled)
    assert fence is not None
    assert cluster_cache.caught_up([fence], timeout=30)
    assert shape(cached.engine_deployments(ns, {"app": app})) == [("engine", 0, {"app": app})]


def compact_etcd(cp: ControlPlane, revision: str) -> None:
    """Compact etcd's history up to ``revision`` (the API server does it every few
    minutes): a watch from an older resourceVersion is then answered 410 Gone."""
    body = json.dumps({"revision": revision, "physical": True}).encode()
    request = urllib.request.Request(f"{cp.etcd_url}/v3/kv/compaction", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200


@pytest.fixture(scope="module")
def etcd_watch_plane() -> Iterator[ControlPlane]:
    """A control plane serving watches from etcd (no watch cache), so a compacted
    resourceVersion is answered 410 Gone at once — as the watch cache answers one that
    has left its window, which takes minutes to arrange."""
    cp = ControlPlane(extra_apiserver_args=["--watch-cache=false"])
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


def test_a_watch_gap_is_healed_by_a_relist_that_reports_what_the_gap_hid(
    etcd_watch_plane: ControlPlane,
) -> None:
    control_plane = etcd_watch_plane
    kube = k.Kube(control_plane.api_client())
    ns = f"gap-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    selector = f"gap={ns}"
    gap = GapKube(kube)
    seen: list[tuple[str, str]] = []
    causes: list[str] = []
    reflector = Reflector(
        gap,
        WatchSpec(k.PODS, selector, metadata_only=True),
        on_restart=causes.append,
        on_change=lambda kind, old, new: seen.append(
            (kind, str((new or old or {})["metadata"]["name"]))
        ),
        watch_timeout=30,
    ).start()
    try:
        assert reflector.wait_synced(30)
        for name in ("p1", "p2"):
            create_pod(kube, ns, name, {"gap": ns})
        poll(lambda: names(list(reflector.store.all())) == ["p1", "p2"], timeout=30, what="p1, p2")

        gap.drop()
        kube.delete(k.PODS, ns, "p1")  # the event that breaks the stream: lost
        assert gap.dropped.wait(30)
        p3 = create_pod(kube, ns, "p3", {"gap": ns})  # while no watch is open
        compact_etcd(control_plane, p3["metadata"]["resourceVersion"])
        seen.clear()
        gap.resume()
        # The resume hits a real 410 Gone; the re-list shows p1 gone and p3 new.
        poll(lambda: names(list(reflector.store.all())) == ["p2", "p3"], timeout=30, what="re-list")
        assert ("DELETED", "p1") in seen
        assert ("ADDED", "p3") in seen
        assert causes[-2:] == ["error", "expired"]  # the dropped stream, then 410 Gone
        # Still watching afterwards: a later change arrives as an event.
        create_pod(kube, ns, "p4", {"gap": ns})
        poll(lambda: ("ADDED", "p4") in seen, timeout=30, what="p4 after the re-list")
    finally:
        reflector.stop()
        kube.close()

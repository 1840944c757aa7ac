"""The /snapshot poller reads only the pods a replica can be attributed to: the pods
labelled injected-by-uid and those a backend's engine selector matches (from the
worker's cache, else a few metadata-only lists per namespace), never every pod."""

from __future__ import annotations

from typing import Any, cast

import redis

from reconciler.steps.server_client import ServerClient
from reconciler.watch.cluster_cache import ClusterCache
from reconciler.work.snapshot import SnapshotPoller
from tests.builders import NS
from tests.builders import engine_pod as engine
from tests.builders import selecting_backend as backend
from tests.fakes import FakeIndexServer, FakeKube
from tests.fakes import fake_cluster as cluster


def fleet() -> FakeKube:
    return cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("pods", engine("wired", {"app": "llama"}, by="a", uid="uid-a", label_uid="uid-a")),
        ("pods", engine("moved", {"app": "renamed"}, by="a", uid="uid-a", label_uid="uid-a")),
        ("pods", engine("plain", {"app": "llama"})),
        ("pods", engine("web", {"app": "storefront"})),
    )


def replica(pod: str, prefixes: int) -> dict[str, Any]:
    return {"tenant": NS, "replicaId": pod, "prefixCount": prefixes}


def poller(kube: FakeKube, cache: ClusterCache | None = None) -> SnapshotPoller:
    server = FakeIndexServer(
        replicas=[replica("wired", 1), replica("moved", 10), replica("plain", 100)]
    )
    return SnapshotPoller(kube, cast(ServerClient, server), cast(redis.Redis, None), cache=cache)


def test_attribution_reads_only_labelled_and_selected_pods_from_the_api_server() -> None:
    kube = fleet()
    p = poller(kube)
    backends = p._backends()
    pods = p._attributable_pods(NS, backends)
    assert sorted({o["metadata"]["name"] for o in pods}) == ["moved", "plain", "wired"]
    assert p.poll_once() == 1
    status = kube.objects[("cachebackends", NS, "a")]["status"]
    assert status["indexParticipation"]["prefixCount"] == 111


def test_attribution_from_the_workers_cache() -> None:
    kube = fleet()
    cache = ClusterCache(kube).start()
    try:
        assert cache.wait_synced(10)
        assert cache.engine_pods.covering(NS, {"app": "llama"}, 10) is not None
        p = poller(kube, cache)
        pods = p._attributable_pods(NS, p._backends())
        assert sorted({o["metadata"]["name"] for o in pods}) == ["moved", "plain", "wired"]
        assert p.poll_once() == 1
    finally:
        cache.stop()
    assert kube.objects[("cachebackends", NS, "a")]["status"]["indexParticipation"] == {
        "prefixCount": 111
    }

"""A worker's reads scoped to one backend, from its watch caches and from the API server.

The spec rules that depend on pods — matchedEnginePods (pods whose labels satisfy
spec.engineSelector), EngineCompatibility (the engine pods *this backend injected*:
injected-by + matching injected-by-uid) and engineSelectorMessage / the 5 s churn
cadence (Deployments whose pod template matches) — must come out the same whichever
way the pods are read, including for the pods the scoped reads could miss: a pod
relabelled after injection, a pod injected by a deleted-and-recreated backend (a new
uid), engine pods of two backends in one namespace, a pod injected before the webhook
stamped the injected-by-uid label, a forged label.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from reconciler import metrics
from reconciler.steps.reads import LiveReads
from reconciler.steps.reconcile import Reconciler
from reconciler.watch import cluster_cache, selector_watches
from reconciler.watch.cluster_cache import CachedReads, ClusterCache, engine_pod_metadata
from reconciler.watch.engine_deployments import (
    ANNOTATION_DESIRED_REPLICAS,
    ANNOTATION_REVISION,
    deployments_from_replicasets,
    replicaset_metadata,
)
from reconciler.watch.selector_watches import (
    regroup_needed,
    selector_group_key,
    selector_groups,
    set_selector,
)
from shared import constants as c
from tests.builders import NS, replicaset
from tests.builders import engine_pod as engine
from tests.builders import selecting_backend as backend
from tests.fakes import FakeKube, in_process_reconciler
from tests.fakes import fake_cluster as cluster

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def deployment(name: str, labels: dict[str, str], replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels}}},
    }


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """FakeKube's watches deliver no changes, so a reconcile's own write never shows
    in the cache and its wait for it (WRITE_VISIBLE_SECONDS) always runs out; the
    selector watches settle before regrouping. Neither wait decides a rule these
    tests check, so both are cut to keep the pure suite fast."""
    monkeypatch.setattr(cluster_cache, "WRITE_VISIBLE_SECONDS", 0.05)
    monkeypatch.setattr(selector_watches, "SELECTOR_SETTLE_SECONDS", 0.01)


@pytest.fixture(params=["cache", "api"])
def reads_from(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def reconciler(kube: FakeKube, reads_from: str) -> Iterator[Reconciler]:
    if reads_from == "api":
        yield in_process_reconciler(kube, clock=lambda: NOW)
        return
    cache = ClusterCache(kube).start()
    try:
        assert cache.wait_synced(10)
        yield in_process_reconciler(
            kube, clock=lambda: NOW, reads=CachedReads(cache, LiveReads(kube))
        )
    finally:
        cache.stop()


def status_after_reconcile(kube: FakeKube, reads_from: str, *names: str) -> dict[str, Any]:
    out = {}
    for rec in reconciler(kube, reads_from):
        for name in names:
            rec.reconcile(f"{NS}/{name}")
            out[name] = kube.objects[("cachebackends", NS, name)].get("status") or {}
    return out


def compatibility(status: dict[str, Any]) -> tuple[str, str, str] | None:
    for cond in status.get("conditions") or []:
        if cond["type"] == "EngineCompatibility":
            return cond["status"], cond["reason"], cond["message"]
    return None


# ------------------------------------------------------------------ the spec rules


def test_engine_pods_of_two_backends_in_one_namespace_count_for_their_own_backend(
    reads_from: str,
) -> None:
    # matchedEnginePods: pods whose labels satisfy *this* backend's selector;
    # EngineCompatibility: the engine pods *this* backend injected.
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("cachebackends", backend("b", "uid-b", {"app": "qwen"})),
        ("pods", engine("a-1", {"app": "llama"}, by="a", uid="uid-a", label_uid="uid-a")),
        ("pods", engine("a-2", {"app": "llama"}, by="a", uid="uid-a", label_uid="uid-a")),
        (
            "pods",
            engine("b-1", {"app": "qwen"}, by="b", uid="uid-b", label_uid="uid-b", crash=True),
        ),
        ("pods", engine("web", {"app": "storefront"})),
    )
    st = status_after_reconcile(kube, reads_from, "a", "b")
    assert st["a"]["matchedEnginePods"] == 2
    assert compatibility(st["a"]) is None
    assert st["b"]["matchedEnginePods"] == 1
    verdict = compatibility(st["b"])
    assert verdict is not None
    assert verdict[:2] == ("False", "InjectedEngineCrashLooping")
    assert "b-1 (container vllm)" in verdict[2]


def test_a_pod_relabelled_after_injection_is_still_its_backends_injected_pod(
    reads_from: str,
) -> None:
    # The labels no longer satisfy the selector (not counted as matched), but the pod
    # still carries the backend's wiring: its crash-loop is the backend's to report.
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        (
            "pods",
            engine("moved", {"app": "renamed"}, by="a", uid="uid-a", label_uid="uid-a", crash=True),
        ),
    )
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert st["matchedEnginePods"] == 0
    verdict = compatibility(st)
    assert verdict is not None
    assert "moved (container vllm)" in verdict[2]


def test_a_pod_injected_by_a_deleted_and_recreated_backend_is_not_the_new_ones(
    reads_from: str,
) -> None:
    # Same name, new uid: the pod still matches the selector (counted), but it was
    # wired by the previous incarnation, so its crash-loop is not this backend's.
    kube = cluster(
        ("cachebackends", backend("a", "uid-new", {"app": "llama"})),
        (
            "pods",
            engine("old", {"app": "llama"}, by="a", uid="uid-old", label_uid="uid-old", crash=True),
        ),
    )
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert st["matchedEnginePods"] == 1
    assert compatibility(st) is None


def test_a_forged_injected_by_uid_label_does_not_make_a_pod_injected(reads_from: str) -> None:
    # The label only narrows what is read; the annotation rule decides.
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("pods", engine("forged", {"app": "other"}, label_uid="uid-a", crash=True)),
        (
            "pods",
            engine("copied", {"app": "other"}, by="a", uid="uid-x", label_uid="uid-a", crash=True),
        ),
    )
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert compatibility(st) is None


def test_a_pod_injected_before_the_label_existed_is_read_by_name(reads_from: str) -> None:
    # Annotations only (admitted by an older webhook): found through the selector's
    # metadata, then read whole.
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("pods", engine("legacy", {"app": "llama"}, by="a", uid="uid-a", crash=True)),
    )
    before = unlabelled_reads()
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert st["matchedEnginePods"] == 1
    verdict = compatibility(st)
    assert verdict is not None
    assert "legacy (container vllm)" in verdict[2]
    # One GET per reconcile, counted where an operator can see it.
    assert kube.calls.count(("get", f"{NS}/legacy")) == 1
    assert unlabelled_reads() == before + 1


def unlabelled_reads() -> float:
    metrics.register_metrics(metrics.WORKER)
    return (
        REGISTRY.get_sample_value(
            "inferencecache_worker_cache_live_reads_total", {"read": "unlabelled-injected-pod"}
        )
        or 0.0
    )


def test_engine_deployment_scaled_to_zero_clears_the_message_and_churn_requeues(
    reads_from: str,
) -> None:
    # engineSelectorMessage: empty when every matching Deployment is scaled to zero.
    # The 5 s cadence: matched pods differ from the matching Deployments' replicas.
    kube = cluster(
        ("cachebackends", backend("idle", "uid-i", {"app": "idle"})),
        ("cachebackends", backend("rolling", "uid-r", {"app": "rolling"})),
        ("deployments", deployment("idle", {"app": "idle"}, 0)),
        ("deployments", deployment("rolling", {"app": "rolling", "tier": "gpu"}, 2)),
        ("replicasets", replicaset("idle-1", "idle", {"app": "idle"}, replicas=0)),
        ("replicasets", replicaset("rolling-1", "rolling", {"app": "rolling", "tier": "gpu"},
                                   revision=1, replicas=1)),
        ("replicasets", replicaset("rolling-2", "rolling", {"app": "rolling", "tier": "gpu"},
                                   revision=2, replicas=2)),
        ("pods", engine("rolling-1-a", {"app": "rolling", "tier": "gpu"})),
    )  # fmt: skip
    for rec in reconciler(kube, reads_from):
        rec.reconcile(f"{NS}/idle")
        result = rec.reconcile(f"{NS}/rolling")
    idle = kube.objects[("cachebackends", NS, "idle")]["status"]
    assert idle["matchedEnginePods"] == 0
    assert "engineSelectorMessage" not in idle
    assert kube.objects[("cachebackends", NS, "rolling")]["status"]["matchedEnginePods"] == 1
    assert result.requeue_after == 5.0


def test_engine_selector_message_is_set_while_expected_pods_are_missing_and_cleared_by_one(
    reads_from: str,
) -> None:
    # engineSelectorMessage: set while matchedEnginePods is zero and a Deployment the
    # selector matches expects replicas (with an EngineSelectorUnmatched Event),
    # cleared once a pod matches.
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("deployments", deployment("llama", {"app": "llama"}, 2)),
        ("replicasets", replicaset("llama-1", "llama", {"app": "llama"}, replicas=2)),
        ("pods", engine("web", {"app": "web"})),
    )
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert st["matchedEnginePods"] == 0
    assert "matches no Pods in namespace team-a" in st["engineSelectorMessage"]
    assert [e["reason"] for e in kube.events.values()] == ["EngineSelectorUnmatched"]

    kube.put("pods", engine("llama-1-x", {"app": "llama", "pod-template-hash": "1"}))
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert st["matchedEnginePods"] == 1
    assert "engineSelectorMessage" not in st


def test_a_same_labelled_pod_in_a_namespace_without_a_backend_counts_for_nothing(
    reads_from: str,
) -> None:
    # matchedEnginePods counts pods of the backend's own namespace only.
    elsewhere = {
        **engine("b-1", {"app": "llama"}),
        "metadata": {**engine("b-1", {"app": "llama"})["metadata"], "namespace": "team-b"},
    }
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("pods", engine("a-1", {"app": "llama"})),
        ("pods", elsewhere),
        ("replicasets", replicaset("b-1", "b", {"app": "llama"}, replicas=3,
                                   namespace="team-b")),
    )  # fmt: skip
    for rec in reconciler(kube, reads_from):
        result = rec.reconcile(f"{NS}/a")
    assert kube.objects[("cachebackends", NS, "a")]["status"]["matchedEnginePods"] == 1
    assert result.requeue_after is None  # team-b's Deployment is not a's


def test_an_invalid_selector_matches_nothing_without_a_read(reads_from: str) -> None:
    kube = cluster(("cachebackends", backend("a", "uid-a", {"app": "not a label value"})))
    st = status_after_reconcile(kube, reads_from, "a")["a"]
    assert st["matchedEnginePods"] == 0
    assert "matches no Pods" in st["engineSelectorMessage"]


# ------------------------------------------------------------------ the cache itself


def test_the_cache_holds_only_pods_that_can_matter_to_a_backend() -> None:
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("pods", engine("a-1", {"app": "llama"}, by="a", uid="uid-a", label_uid="uid-a")),
        ("pods", engine("moved", {"app": "x"}, by="a", uid="uid-a", label_uid="uid-a")),
        *[("pods", engine(f"web-{i}", {"app": f"web-{i}"})) for i in range(20)],
        # The same labels in a namespace without a backend: never cached.
        ("pods", {**engine("b-1", {"app": "llama"}),
                  "metadata": {**engine("b-1", {"app": "llama"})["metadata"],
                               "namespace": "team-b"}}),
        ("replicasets", replicaset("b-1", "b", {"app": "llama"}, replicas=1,
                                   namespace="team-b")),
        ("replicasets", replicaset("a-1", "a", {"app": "llama"}, replicas=1)),
    )  # fmt: skip
    cache = ClusterCache(kube).start()
    try:
        assert cache.wait_synced(10)
        group = cache.engine_pods.covering(NS, {"app": "llama"}, 10)
        assert group is not None
        assert group.spec.namespace == NS
        assert sorted(p["metadata"]["name"] for p in group.store.all()) == ["a-1"]
        assert cache.engine_pods.covering("team-b", {"app": "llama"}, 0.1) is None
        replicasets = cache.engine_replicasets.covering(NS, {"app": "llama"}, 10)
        assert replicasets is not None
        assert [r["metadata"]["name"] for r in replicasets.store.all()] == ["a-1"]
        assert sorted(p["metadata"]["name"] for p in cache.injected_pods.store.all()) == [
            "a-1",
            "moved",
        ]
        assert len(cache.server_pods.store) == 0
        # Reduced: no managedFields kept, engine pods as metadata only.
        held = cache.injected_pods.store.get(NS, "a-1")
        assert held is not None
        assert "managedFields" not in held["metadata"]
        assert "spec" not in next(iter(group.store.all()))
    finally:
        cache.stop()


def test_a_read_the_cache_cannot_answer_goes_to_the_api_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster_cache, "SYNC_WAIT_SECONDS", 0.01)
    kube = cluster(
        ("cachebackends", backend("a", "uid-a", {"app": "llama"})),
        ("pods", engine("a-1", {"app": "llama"})),
    )
    reads = CachedReads(ClusterCache(kube), LiveReads(kube))  # never started: not synced
    assert reads.backend(NS, "a") is not None
    assert [p["metadata"]["name"] for p in reads.engine_pods(NS, {"app": "llama"})] == ["a-1"]


# ------------------------------------------------------------------ pure parts


def test_engine_watches_group_selectors_by_namespace_and_first_key() -> None:
    assert selector_group_key({"tier": "gpu", "app": "llama"}) == "app"
    assert selector_group_key({"app": "", "tier": "gpu"}) == "tier"
    assert selector_group_key({"app": ""}) is None
    assert selector_group_key({"app": "not valid!"}) is None
    groups = selector_groups(
        [
            ("ns-1", {"app": "a"}),
            ("ns-1", {"app": "b", "tier": "x"}),
            ("ns-1", {"team": "t"}),
            ("ns-2", {"app": "a"}),
            ("ns-2", {}),
        ]
    )
    # By namespace too: ns-2's watch holds ns-2's pods only, and no watch covers a
    # namespace without a backend.
    assert groups == {
        ("ns-1", "app"): frozenset({"a", "b"}),
        ("ns-1", "team"): frozenset({"t"}),
        ("ns-2", "app"): frozenset({"a"}),
    }
    assert set_selector("app", {"b", "a"}) == "app in (a,b)"


def test_a_watch_is_replaced_for_a_new_value_or_when_mostly_unused() -> None:
    assert regroup_needed(frozenset({"a"}), frozenset({"a", "b"}))
    assert not regroup_needed(frozenset({"a", "b", "c", "d"}), frozenset({"a", "b", "c"}))
    assert regroup_needed(frozenset({"a", "b", "c", "d"}), frozenset({"a"}))


def test_reduced_objects_keep_what_the_rules_read() -> None:
    pod = engine("p", {"app": "x"}, by="a", uid="uid-a")
    pod["metadata"]["annotations"]["team/note"] = "kept out"
    pod["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "name": "rs", "controller": True},
        {"kind": "Thing", "name": "t"},
    ]
    meta = engine_pod_metadata(pod)["metadata"]
    assert meta["annotations"] == {
        c.ANNOTATION_INJECTED_BY: f"{NS}/a",
        c.ANNOTATION_INJECTED_BY_UID: "uid-a",
    }
    assert meta["ownerReferences"] == [{"kind": "ReplicaSet", "name": "rs", "controller": True}]
    # The decline record EngineOffloading counts is kept too.
    declined = engine("q", {"app": "x"})
    declined["metadata"]["annotations"] = {
        c.ANNOTATION_INJECT_DECLINED: c.REASON_ENGINE_OFFLOADING_CONFLICT,
        c.ANNOTATION_INJECT_DECLINED_BY: f"{NS}/a",
    }
    assert engine_pod_metadata(declined)["metadata"]["annotations"] == {
        c.ANNOTATION_INJECT_DECLINED: c.REASON_ENGINE_OFFLOADING_CONFLICT,
        c.ANNOTATION_INJECT_DECLINED_BY: f"{NS}/a",
    }
    rs = replicaset("d-1", "d", {"app": "x"}, replicas=3)
    rs["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] = "4"
    rs["spec"] = {"replicas": 3, "template": {"spec": {"containers": []}}}
    reduced = replicaset_metadata(rs)
    assert "spec" not in reduced
    assert reduced["metadata"]["annotations"] == {
        ANNOTATION_REVISION: "1",
        ANNOTATION_DESIRED_REPLICAS: "3",
    }


def test_an_engine_deployment_is_its_newest_replicasets_replicas_and_template_labels() -> None:
    # The deployment controller's annotations: revision (the newest ReplicaSet holds the
    # current template) and desired-replicas (the Deployment's spec.replicas).
    derived = deployments_from_replicasets(
        [
            replicaset("d-old", "d", {"app": "x", "v": "1"}, revision=9, replicas=5),
            replicaset("d-new", "d", {"app": "x", "v": "2"}, revision=10, replicas=3),
            replicaset("e-1", "e", {"app": "x"}, revision=1, replicas=0),
            replicaset("e-1", "e", {"app": "x"}, revision=1, replicas=4, namespace="other"),
            # Not made by a deployment controller: no revision, or no desired replicas.
            replicaset("f-1", "f", {"app": "x"}, revision=None, replicas=2),
            replicaset("g-1", "g", {"app": "x"}, revision=1, replicas=None),
            {**replicaset("h-1", "h", {"app": "x"}, replicas=1),
             "metadata": {**replicaset("h-1", "h", {"app": "x"}, replicas=1)["metadata"],
                          "ownerReferences": []}},
        ]
    )  # fmt: skip
    shapes = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): (
            d["spec"]["replicas"],
            d["spec"]["template"]["metadata"]["labels"],
        )
        for d in derived
    }
    assert shapes == {
        (NS, "d"): (3, {"app": "x", "v": "2"}),
        (NS, "e"): (0, {"app": "x"}),
        ("other", "e"): (4, {"app": "x"}),
    }
    d = next(d for d in derived if d["metadata"]["name"] == "d")
    assert d["metadata"]["uid"] == "uid-d"

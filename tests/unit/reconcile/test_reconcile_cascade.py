"""observedServerInstance transitions, convergence, cascade targets and the shell around them."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from reconciler.status.cascade import (
    Why,
    cascade_targets,
    deployment_converged,
    format_server_instance,
    observed_server_instance_transition,
    parse_server_instance,
    restart_trigger_patch,
)
from reconciler.status.engine_pods import ServerPod
from reconciler.status.observed import WorkloadObservation
from reconciler.steps.reads import LiveReads
from reconciler.steps.reconcile import Reconciler
from tests.fakes import FakeKube, InProcessCascadeLimiter, in_process_reconciler


def p(name: str, restarts: int = 0, ready: bool = True, uid: str | None = None) -> ServerPod:
    return ServerPod(name=name, uid=uid or f"u-{name}", ready=ready, restarts=restarts)


# ------------------------------------------------------------------ identifier


def test_identifier_is_uid_and_restart_sum_of_ready_pods_sorted_by_pod_name() -> None:
    pods = [p("b", 2, uid="zz"), p("a", 0, uid="yy"), p("c", 1, ready=False)]
    assert format_server_instance(pods) == "yy:0,zz:2"
    assert parse_server_instance("yy:0,zz:2") == {"yy": 0, "zz": 2}
    assert parse_server_instance("") == {}
    assert parse_server_instance("garbage") is None
    assert parse_server_instance("u:x") is None


# ------------------------------------------------------------------ transitions


def t(prior: str, pods: list[ServerPod], converged: bool = False) -> tuple[str, bool, Why]:
    tr = observed_server_instance_transition(prior, pods, converged)
    return tr.value, tr.cascade, tr.why


def test_empty_to_set_is_a_baseline_and_never_cascades() -> None:
    assert t("", [p("a")]) == ("u-a:0", False, Why.BASELINE)
    assert t("", [p("a"), p("b")], converged=False) == ("u-a:0,u-b:0", False, Why.BASELINE)


def test_unreadable_prior_is_re_baselined_without_cascade() -> None:
    assert t("not-an-id", [p("a")]) == ("u-a:0", False, Why.BASELINE)


def test_unchanged() -> None:
    assert t("u-a:0", [p("a")]) == ("u-a:0", False, Why.UNCHANGED)


@pytest.mark.parametrize(
    "pods",
    [[], [p("a", ready=False)], [p("new", ready=False)]],
    ids=["scaled-to-zero", "not-ready", "replacement-not-ready-yet"],
)
def test_no_ready_pod_keeps_the_prior_value(pods: list[ServerPod]) -> None:
    assert t("u-a:0", pods) == ("u-a:0", False, Why.UNAVAILABLE)


def test_recovery_after_an_outage_with_a_new_pod_cascades() -> None:
    # a was replaced while nothing was Ready: the stale value makes this a replacement.
    assert t("u-a:0", [p("a2")]) == ("u-a2:0", True, Why.REPLACEMENT)


def test_replaced_pod_cascades() -> None:
    assert t("u-a:0,u-b:0", [p("a"), p("c")], converged=True) == (
        "u-a:0,u-c:0",
        True,
        Why.REPLACEMENT,
    )


def test_scale_down_removes_a_prior_pod_and_cascades() -> None:
    assert t("u-a:0,u-b:0", [p("a")], converged=True) == ("u-a:0", True, Why.REPLACEMENT)


def test_in_place_restart_advances_the_restart_sum_and_cascades() -> None:
    assert t("u-a:0", [p("a", restarts=1)]) == ("u-a:1", True, Why.REPLACEMENT)


def test_restart_of_a_pod_that_is_not_ready_waits_until_it_is_ready() -> None:
    assert t("u-a:0,u-b:0", [p("a"), p("b", restarts=3, ready=False)]) == (
        "u-a:0,u-b:0",
        False,
        Why.NOT_READY,
    )
    assert t("u-a:0,u-b:0", [p("a"), p("b", restarts=3)]) == (
        "u-a:0,u-b:3",
        True,
        Why.REPLACEMENT,
    )


def test_strict_superset_is_persisted_only_when_converged() -> None:
    assert t("u-a:0", [p("a"), p("b")], converged=True) == ("u-a:0,u-b:0", False, Why.SCALE_UP)
    assert t("u-a:0", [p("a"), p("b")], converged=False) == ("u-a:0", False, Why.MIDPOINT)


def test_rolled_back_rollout_does_not_cascade() -> None:
    # Rollout midpoint: the new pod is briefly Ready (not persisted) ...
    value, cascade, _ = t("u-a:0", [p("a"), p("new")], converged=False)
    assert (value, cascade) == ("u-a:0", False)
    # ... then the rollback kills it, leaving the original pod alone: no cascade.
    assert t(value, [p("a")]) == ("u-a:0", False, Why.UNCHANGED)


def test_completed_rollout_replaces_the_old_pod_and_cascades() -> None:
    value, _, _ = t("u-a:0", [p("a"), p("new")], converged=False)
    assert t(value, [p("new")], converged=True) == ("u-new:0", True, Why.REPLACEMENT)


def test_added_pod_then_replaced_is_seen_after_a_converged_scale_up() -> None:
    value, _, _ = t("u-a:0", [p("a"), p("b")], converged=True)
    assert t(value, [p("a"), p("b2")], converged=True) == ("u-a:0,u-b2:0", True, Why.REPLACEMENT)


def test_prior_pod_flapping_not_ready_keeps_the_baseline() -> None:
    assert t("u-a:0,u-b:0", [p("a"), p("b", ready=False)]) == (
        "u-a:0,u-b:0",
        False,
        Why.NOT_READY,
    )
    # A new Ready pod beside a not-Ready prior one: still not a replacement.
    assert t("u-a:0,u-b:0", [p("a"), p("b", ready=False), p("c")], converged=True)[1] is False


# ------------------------------------------------------------------ convergence


def w(spec: int, ready: int, updated: int, generation: int = 2, observed: int = 2) -> Any:
    return WorkloadObservation(
        kind="Deployment",
        generation=generation,
        observed_generation=observed,
        spec_replicas=spec,
        ready_replicas=ready,
        updated_replicas=updated,
    )


def test_deployment_converged_cross_checks_the_live_ready_pods() -> None:
    assert deployment_converged(w(2, 2, 2), 2)
    assert not deployment_converged(w(2, 2, 2), 3)  # stale status mid-rollout
    assert not deployment_converged(w(2, 1, 2), 2)
    assert not deployment_converged(w(2, 2, 1), 2)
    assert not deployment_converged(w(2, 2, 2, generation=3, observed=2), 2)
    assert deployment_converged(w(2, 2, 2, generation=2, observed=3), 2)
    assert not deployment_converged(None, 0)


# ------------------------------------------------------------------ targets


def engine_pod(name: str, rs: str | None, *, uid: str = "cb-uid", by: str = "ns/cb") -> Any:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "annotations": {
            "inferencecache.io/injected-by": by,
            "inferencecache.io/injected-by-uid": uid,
        },
    }
    if rs:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": rs, "controller": True}]
    return {"metadata": meta}


def replicaset(name: str, deployment: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deployment:
        meta["ownerReferences"] = [{"kind": "Deployment", "name": deployment, "controller": True}]
    return {"metadata": meta}


def test_cascade_targets_are_deployments_owning_this_backends_injected_pods() -> None:
    pods = [
        engine_pod("e1", "vllm-a-123"),
        engine_pod("e2", "vllm-a-456"),
        engine_pod("e3", "vllm-b-1"),
        engine_pod("forged", "vllm-c-1", uid="old-uid"),
        engine_pod("other", "vllm-d-1", by="ns/other"),
        engine_pod("bare", "bare-rs"),
        engine_pod("no-owner", None),
    ]
    rss = [
        replicaset("vllm-a-123", "vllm-a"),
        replicaset("vllm-a-456", "vllm-a"),
        replicaset("vllm-b-1", "vllm-b"),
        replicaset("vllm-c-1", "vllm-c"),
        replicaset("vllm-d-1", "vllm-d"),
        replicaset("bare-rs", None),
    ]
    assert cascade_targets(pods, rss, "ns", "cb", "cb-uid") == ["vllm-a", "vllm-b"]


def test_restart_trigger_patch_is_a_pod_template_annotation() -> None:
    assert restart_trigger_patch("2026-01-01T00:00:00Z") == {
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        "inferencecache.io/cache-server-restart-trigger": "2026-01-01T00:00:00Z"
                    }
                }
            }
        }
    }


def test_in_process_limiter_once_per_window_and_recognises_its_own_cascade() -> None:
    limiter = InProcessCascadeLimiter(window=60)
    assert limiter.claim("ns/cb", "v1") == ("go", 0.0)
    assert limiter.claim("ns/cb", "v1") == ("done", 0.0)
    verdict, wait = limiter.claim("ns/cb", "v2")
    assert verdict == "wait"
    assert 0 < wait <= 60
    assert limiter.claim("ns/other", "v2") == ("go", 0.0)
    limiter.release("ns/cb")
    assert limiter.claim("ns/cb", "v2") == ("go", 0.0)


# ------------------------------------------------------------------ the shell


NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
SERVER = "cb-lmcache-server"


def setup() -> tuple[FakeKube, Reconciler]:
    kube = FakeKube()
    kube.put(
        "cachebackends",
        {
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": {
                "name": "cb",
                "namespace": "ns",
                "uid": "cb-uid",
                "generation": 1,
                "annotations": {"inferencecache.io/require-kv-events": "false"},
            },
            "spec": {
                "runtime": "VLLM",
                "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
                "engineSelector": {"matchLabels": {"app": "vllm"}},
            },
        },
    )
    rec = in_process_reconciler(
        kube, clock=lambda: NOW, cascade_limiter=InProcessCascadeLimiter(60)
    )
    rec.reconcile("ns/cb")  # creates the workload and Service
    dep = kube.objects[("deployments", "ns", SERVER)]
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
    }
    # the engine workload
    kube.put(
        "deployments",
        {"metadata": {"name": "vllm", "namespace": "ns"}, "spec": {"replicas": 1}},
    )
    kube.put(
        "replicasets",
        {
            "metadata": {
                "name": "vllm-1",
                "namespace": "ns",
                "ownerReferences": [{"kind": "Deployment", "name": "vllm", "controller": True}],
            }
        },
    )
    engine = {
        "metadata": {
            "name": "vllm-1-x",
            "namespace": "ns",
            "uid": "e-uid",
            "labels": {"app": "vllm"},
            "annotations": {
                "inferencecache.io/injected-by": "ns/cb",
                "inferencecache.io/injected-by-uid": "cb-uid",
            },
            "ownerReferences": [{"kind": "ReplicaSet", "name": "vllm-1", "controller": True}],
        },
        "spec": {"containers": [{"name": "vllm"}]},
        "status": {},
    }
    kube.put("pods", engine)
    kube.writes.clear()
    return kube, rec


def server_pod_obj(kube: FakeKube, name: str, restarts: int = 0, ready: bool = True) -> None:
    dep = kube.objects[("deployments", "ns", SERVER)]
    kube.put(
        "pods",
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": dict(dep["spec"]["selector"]["matchLabels"]),
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "containerStatuses": [
                    {"name": c["name"], "restartCount": restarts}
                    for c in dep["spec"]["template"]["spec"]["containers"]
                ]
                + [{"name": "mesh-proxy", "restartCount": 50}],
            },
        },
    )


def instance(kube: FakeKube) -> str | None:
    status = kube.objects[("cachebackends", "ns", "cb")].get("status") or {}
    return status.get("observedServerInstance")


def restart_trigger(kube: FakeKube) -> str | None:
    dep = kube.objects[("deployments", "ns", "vllm")]
    annotations = ((dep["spec"].get("template") or {}).get("metadata") or {}).get("annotations")
    return (annotations or {}).get("inferencecache.io/cache-server-restart-trigger")


def test_shell_baselines_then_cascades_once_and_is_idle_afterwards() -> None:
    kube, rec = setup()
    server_pod_obj(kube, "s-1")
    rec.reconcile("ns/cb")
    assert instance(kube) == "uid-s-1:0"  # baseline, sidecar restarts not counted
    assert restart_trigger(kube) is None

    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == []  # idle

    server_pod_obj(kube, "s-1", restarts=1)  # in-place restart of the server container
    result = rec.reconcile("ns/cb")
    assert restart_trigger(kube) == "2026-01-01T12:00:00Z"
    assert instance(kube) == "uid-s-1:1"
    assert ("patch", "deployments", "vllm") in kube.writes
    assert result.writes >= 2

    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == []


def test_shell_rate_limited_cascade_keeps_the_prior_value_and_requeues() -> None:
    kube, rec = setup()
    server_pod_obj(kube, "s-1")
    rec.reconcile("ns/cb")
    server_pod_obj(kube, "s-1", restarts=1)
    rec.reconcile("ns/cb")
    assert instance(kube) == "uid-s-1:1"
    kube.writes.clear()
    server_pod_obj(kube, "s-1", restarts=2)
    result = rec.reconcile("ns/cb")
    assert kube.writes == []  # no roll inside the window, no status change
    assert instance(kube) == "uid-s-1:1"
    assert result.requeue_after is not None
    assert 0 < result.requeue_after <= 60
    # The window passes: the pending replacement cascades.
    rec.cascade_limiter = InProcessCascadeLimiter(60)
    rec.reconcile("ns/cb")
    assert instance(kube) == "uid-s-1:2"
    assert ("patch", "deployments", "vllm") in kube.writes


def test_shell_cascade_already_done_for_this_value_is_not_repeated() -> None:
    kube, rec = setup()
    server_pod_obj(kube, "s-1")
    rec.reconcile("ns/cb")
    server_pod_obj(kube, "s-1", restarts=1)
    rec.cascade_limiter.claim("ns/cb", "uid-s-1:1")  # as if a lost-race run had cascaded
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert instance(kube) == "uid-s-1:1"
    assert ("patch", "deployments", "vllm") not in kube.writes


def test_shell_replacement_without_engine_deployments_just_moves_the_baseline() -> None:
    kube, rec = setup()
    del kube.objects[("pods", "ns", "vllm-1-x")]
    server_pod_obj(kube, "s-1")
    rec.reconcile("ns/cb")
    del kube.objects[("pods", "ns", "s-1")]
    server_pod_obj(kube, "s-2")
    rec.reconcile("ns/cb")
    assert instance(kube) == "uid-s-2:0"
    assert ("patch", "deployments", "vllm") not in kube.writes


def test_shell_pod_list_failure_keeps_value_and_advisories() -> None:
    kube, rec = setup()
    server_pod_obj(kube, "s-1")
    engine = kube.objects[("pods", "ns", "vllm-1-x")]
    engine["status"] = {
        "containerStatuses": [
            {"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]
    }
    rec.reconcile("ns/cb")
    assert ("create", "events", "InjectedEngineCrashLooping") in kube.writes
    before = copy.deepcopy(kube.objects[("cachebackends", "ns", "cb")]["status"])
    kube.fail_pod_list = True
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == []
    assert kube.objects[("cachebackends", "ns", "cb")]["status"] == before


class StaleServerPods(LiveReads):
    """Reads whose view of the cache-server pods is behind the API server (a watch
    cache that has not caught up)."""

    def __init__(self, kube: FakeKube, pods: list[dict[str, Any]]) -> None:
        super().__init__(kube)
        self.pods = pods

    def workload_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)


def test_shell_cascade_only_when_a_fresh_read_confirms_the_replacement() -> None:
    """The cascade rolls other teams' engine Deployments: a view of the server pods
    that is not the API server's current one must not cause it."""
    kube, rec = setup()
    server_pod_obj(kube, "s-1")
    rec.reconcile("ns/cb")
    assert instance(kube) == "uid-s-1:0"
    # The cached view still shows a pod the API server has since replaced by s-1
    # again (e.g. a stale list): it looks like a replacement, the fresh read does not.
    stale = copy.deepcopy(kube.objects[("pods", "ns", "s-1")])
    stale["metadata"]["uid"] = "uid-s-0"
    rec.reads = StaleServerPods(kube, [stale])
    kube.writes.clear()
    result = rec.reconcile("ns/cb")
    assert ("patch", "deployments", "vllm") not in kube.writes
    assert instance(kube) == "uid-s-1:0"
    assert result.requeue_after == 2.0
    # Once the API server agrees (s-1 really replaced), the cascade runs.
    del kube.objects[("pods", "ns", "s-1")]
    server_pod_obj(kube, "s-2")
    rec.reads = LiveReads(kube)
    rec.reconcile("ns/cb")
    assert ("patch", "deployments", "vllm") in kube.writes
    assert instance(kube) == "uid-s-2:0"


def test_reconciler_has_no_default_limiters() -> None:
    """The cascade and /probe windows are shared across workers (Redis, in
    reconciler/work/rate_limits.py): a Reconciler built without naming its limiters would
    enforce them per process only, so the constructor requires both."""
    with pytest.raises(TypeError, match=r"probe_rate_limiter|cascade_limiter"):
        Reconciler(FakeKube())  # type: ignore[call-arg]

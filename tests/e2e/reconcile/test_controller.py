"""End to end: real API server, real Redis, real `icache dispatcher` and `icache worker`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kubeio import client as k
from tests.e2e.conftest import (
    DISPATCHER_USER,
    WORKER_USER,
    Cluster,
    Stack,
    condition,
    converged,
    converged_with_endpoint,
    create_pod,
    injected,
    poll,
    set_pod_status,
)
from tests.e2e.workloads import (
    hold_pool,
    open_pool,
    pods_of,
    reconciled_since,
    trigger,
    wait_rolled_out,
    wait_workload,
    workload,
)
from tests.fakes import queue_state
from tests.harness import kwok

NO_GATE = {"inferencecache.io/require-kv-events": "false"}


def names(cluster: Cluster, res: k.Resource, ns: str) -> set[str]:
    return {o["metadata"]["name"] for o in cluster.kube.list(res, ns).get("items") or []}


def test_backends_of_every_shape_get_the_right_objects_and_status(
    cluster: Cluster, stack: Stack
) -> None:
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    shapes: dict[str, dict[str, Any]] = {
        "redis": {
            "runtime": "SGLang",
            "remoteStorage": {
                "provider": "Redis",
                "ownership": "Managed",
                "redis": {"resources": {"limits": {"memory": "1Gi"}}},
            },
        },
        "lmserver": {
            "runtime": "VLLM",
            "deploymentKind": "StatefulSet",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        },
        "mooncake": {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
            "template": {"nodeSelector": {"pool": "cache"}},
        },
        "autoscaled": {
            "runtime": "VLLM",
            "replicas": 2,
            "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        },
        "external": {
            "runtime": "VLLM",
            "remoteStorage": {
                "provider": "LMCacheServer",
                "ownership": "External",
                "endpoint": " lm://cache.example.com:65432 ",
            },
        },
        "hostonly": {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}},
        "eventsonly": {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}},
        "hicache": {
            "runtime": "SGLang",
            "type": "SGLangHiCache",
            "engineSelector": {"matchLabels": {"app": "sglang-hicache"}},
            "hiCache": {"ratio": "2.0"},
        },
    }
    for name, spec in shapes.items():
        cluster.create_cb(ns, name, spec)
    for name in shapes:
        cluster.wait_cb(ns, name, converged, "observedGeneration")

    assert names(cluster, k.DEPLOYMENTS, ns) == {
        "redis-redis",
        "mooncake-mooncake",
        "autoscaled-lmcache-server",
    }
    assert names(cluster, k.STATEFULSETS, ns) == {"lmserver-lmcache-server"}
    assert names(cluster, k.SERVICES, ns) == {
        "redis-redis",
        "lmserver-lmcache-server",
        "mooncake-mooncake",
        "autoscaled-lmcache-server",
    }
    assert names(cluster, k.HPAS, ns) == {"autoscaled-lmcache-server"}

    mooncake_svc = cluster.kube.get(k.SERVICES, ns, "mooncake-mooncake")
    assert mooncake_svc["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in mooncake_svc["spec"]["ports"]] == [50051, 8080]
    pod = cluster.kube.get(k.DEPLOYMENTS, ns, "mooncake-mooncake")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["nodeSelector"] == {"pool": "cache"}
    # Created at the HPA floor (minReplicas), not the API server's default 1
    # (docs/decisions.md, "Writes").
    autoscaled = cluster.kube.get(k.DEPLOYMENTS, ns, "autoscaled-lmcache-server")
    assert autoscaled["spec"]["replicas"] == 2

    status = {name: cluster.cb(ns, name)["status"] for name in shapes}
    assert status["redis"]["endpoint"] == f"redis-redis.{ns}.svc:6379"
    assert status["mooncake"]["endpoint"] == f"mooncake-mooncake.{ns}.svc:50051"
    assert status["external"]["endpoint"] == "lm://cache.example.com:65432"
    for name in ("hostonly", "eventsonly", "hicache"):
        assert "endpoint" not in status[name]
    ready = {name: condition({"status": st}, "Ready") for name, st in status.items()}
    assert ready["redis"] == ("False", "RolloutInProgress")
    assert ready["external"] == ("True", "ExternalEndpointAccepted")
    assert ready["hostonly"] == ("False", "AwaitingFirstKVEvent")
    assert ready["eventsonly"] == ("False", "AwaitingFirstKVEvent")
    assert ready["hicache"] is None
    assert {c["type"] for c in status["external"]["conditions"]} == {"Ready", "Progressing"}
    assert all(st["failOpen"] is True for st in status.values())


@pytest.mark.real_controllers
def test_workload_status_moves_conditions_through_their_reasons(
    cluster: Cluster, stack: Stack
) -> None:
    """Spec, Conditions and the KV-event readiness gate, through a real rollout: Ready
    RolloutInProgress → AwaitingFirstKVEvent → NoKVEventsObserved (Degraded) →
    KVEventsObserved; the Deployment really losing its available replica (the pod's
    readiness fails) is Degraded/ReplicasUnavailable and recovers; scaling to zero is
    ScaledToZero; the transition Events are each recorded once."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    spec = {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        # Long enough that a loaded 2-core machine still observes AwaitingFirstKVEvent
        # before the requeue-after hint flips it.
        "observation": {"firstEventTimeout": "5s"},
        "integration": {"failOpen": False},
        # No node is in this pool yet: the rollout stays in flight until one joins.
        "template": {"nodeSelector": hold_pool(ns)},
    }
    cluster.create_cb(ns, "cb", spec)
    cluster.wait_condition(ns, "cb", "Ready", "False", "RolloutInProgress")
    dep = "cb-lmcache-server"

    open_pool(cluster, ns)
    wait_rolled_out(cluster, ns, "Deployment", dep)
    cluster.wait_condition(ns, "cb", "Ready", "False", "AwaitingFirstKVEvent")
    # No event within firstEventTimeout: the requeue-after hint flips it on time.
    obj = cluster.wait_condition(ns, "cb", "Degraded", "True", "NoKVEventsObserved", timeout=20)
    assert condition(obj, "Ready") == ("False", "NoKVEventsObserved")

    # The snapshot poller (simulated) reports an event.
    cluster.patch_cb(
        ns,
        "cb",
        {
            "status": {
                "indexParticipation": {"prefixCount": 4, "lastEventAt": "2026-01-01T00:00:00Z"}
            }
        },
        status=True,
    )
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "KVEventsObserved")
    assert obj["status"]["firstKVEventObservedAt"]
    assert obj["status"]["indexParticipation"]["prefixCount"] == 4

    # The workload loses its replica (its readiness probe fails), then recovers.
    (pod,) = pods_of(cluster, ns, workload(cluster, ns, "Deployment", dep))
    trigger(cluster, ns, pod["metadata"]["name"], kwok.readiness_patch(False))
    wait_workload(
        cluster, ns, "Deployment", dep,
        lambda d: not (d.get("status") or {}).get("availableReplicas"), "no replica available",
    )  # fmt: skip
    cluster.wait_condition(ns, "cb", "Degraded", "True", "ReplicasUnavailable")
    trigger(cluster, ns, pod["metadata"]["name"], kwok.readiness_patch(True))
    wait_rolled_out(cluster, ns, "Deployment", dep)
    cluster.wait_condition(ns, "cb", "Ready", "True", "KVEventsObserved")

    # Scale to zero.
    cluster.kube.request(
        "PATCH",
        k.CACHEBACKENDS.item(ns, "cb"),
        body={"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    cluster.wait_condition(ns, "cb", "Ready", "False", "ScaledToZero")
    wait_workload(
        cluster, ns, "Deployment", dep,
        lambda d: not (d.get("status") or {}).get("replicas"), "scaled to zero",
    )  # fmt: skip

    def reasons() -> list[str] | None:
        got = [e["reason"] for e in cluster.events(ns, "cb")]
        wanted = {
            "FailClosedEnabled",
            "AwaitingFirstKVEvent",
            "NoKVEventsObserved",
            "KVEventsObserved",
            "BackendDegraded",
            "BackendRecovered",
        }
        return got if wanted <= set(got) else None

    got = poll(reasons, timeout=10, what="transition Events")
    assert got.count("BackendDegraded") == 1
    assert got.count("FailClosedEnabled") == 1


def test_mode_switches_shed_owned_objects(cluster: Cluster, stack: Stack) -> None:
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(
        ns,
        "cb",
        {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            "autoscaling": {"maxReplicas": 2},
        },
        NO_GATE,
    )
    poll(lambda: names(cluster, k.HPAS, ns) == {"cb-lmcache-server"}, timeout=30, what="HPA")

    def patch(spec: dict[str, Any]) -> None:
        cluster.kube.request(
            "PATCH",
            k.CACHEBACKENDS.item(ns, "cb"),
            body={"spec": spec},
            content_type="application/merge-patch+json",
        )

    patch({"deploymentKind": "StatefulSet", "autoscaling": None})
    poll(
        lambda: (
            names(cluster, k.STATEFULSETS, ns) == {"cb-lmcache-server"}
            and not names(cluster, k.DEPLOYMENTS, ns)
            and not names(cluster, k.HPAS, ns)
        ),
        timeout=30,
        what="Deployment+HPA → StatefulSet",
    )
    patch(
        {
            "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
            "deploymentKind": "Deployment",
        }
    )
    poll(
        lambda: (
            names(cluster, k.DEPLOYMENTS, ns) == {"cb-mooncake"}
            and names(cluster, k.SERVICES, ns) == {"cb-mooncake"}
            and not names(cluster, k.STATEFULSETS, ns)
        ),
        timeout=30,
        what="switch to Mooncake",
    )
    patch(
        {
            "remoteStorage": {
                "provider": "Mooncake",
                "ownership": "External",
                "endpoint": "mooncakestore://m:50051",
            }
        }
    )
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "ExternalEndpointAccepted")
    poll(
        lambda: not names(cluster, k.DEPLOYMENTS, ns) and not names(cluster, k.SERVICES, ns),
        timeout=30,
        what="External sheds the workload",
    )
    assert obj["status"]["endpoint"] == "mooncakestore://m:50051"
    patch({"remoteStorage": None, "integration": {"mode": "EventsOnly"}})
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "EventsOnlyActive")
    assert "endpoint" not in obj["status"]
    assert {c["type"] for c in obj["status"]["conditions"]} == {"Ready", "Degraded", "Progressing"}


@pytest.mark.real_controllers
def test_steady_state_resync_makes_zero_write_requests(cluster: Cluster, stack: Stack) -> None:
    """Spec: Events and status writes only on meaningful state changes, never on
    steady-state reconciles — with the workloads really rolled out (kube-controller-
    manager keeps writing their status, kwok their pods') and engine-side observations
    in place, a full resync of every backend writes nothing."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    specs = {
        "managed": {
            "runtime": "SGLang",
            "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
            "engineSelector": {"matchLabels": {"app": "sglang"}},
        },
        # An HPA-owned replica count (created at minReplicas) is not drift either.
        "autoscaled": {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            "autoscaling": {"minReplicas": 2, "maxReplicas": 3},
        },
        "external": {
            "runtime": "VLLM",
            "remoteStorage": {
                "provider": "Mooncake",
                "ownership": "External",
                "endpoint": "m:50051",
            },
        },
        "eventsonly": {"runtime": "VLLM", "integration": {"mode": "EventsOnly", "failOpen": False}},
        "hostonly": {"runtime": "VLLM", "engineSelector": {"matchLabels": {"app": "none"}}},
        "hicache": {
            "runtime": "SGLang",
            "type": "SGLangHiCache",
            "engineSelector": {"matchLabels": {"app": "sglang-hicache"}},
            "hiCache": {"ratio": "2.0"},
        },
        # Quantities the API server canonicalises, template overrides, host networking.
        "mooncake": {
            "runtime": "VLLM",
            "deploymentKind": "StatefulSet",
            "remoteStorage": {
                "provider": "Mooncake",
                "ownership": "Managed",
                "mooncake": {"resources": {"requests": {"memory": "1024Mi", "cpu": "0.5"},
                                           "limits": {"memory": "2Gi"}}},
            },
            "template": {"tolerations": [{"key": "cache", "operator": "Exists"}],
                         "terminationGracePeriodSeconds": 5},
        },
    }  # fmt: skip
    for name, spec in specs.items():
        cluster.create_cb(ns, name, spec)
    for name in specs:
        cluster.wait_cb(ns, name, converged, "converged")
    wait_rolled_out(cluster, ns, "Deployment", "managed-redis")
    wait_rolled_out(cluster, ns, "StatefulSet", "mooncake-mooncake")
    wait_rolled_out(cluster, ns, "Deployment", "autoscaled-lmcache-server")
    cluster.wait_condition(ns, "mooncake", "Ready", "False", "AwaitingFirstKVEvent")
    cluster.wait_condition(ns, "managed", "Ready", "False", "AwaitingFirstKVEvent")
    # Engine-side observations are idle too: the Ready cache-server pod (the cascade
    # baseline) and an injected engine pod whose engine crash-loops (its status
    # written here: it is bound to no node).
    server = cluster.kube.get(k.DEPLOYMENTS, ns, "managed-redis")
    (server_pod,) = pods_of(cluster, ns, server)
    server_uid = server_pod["metadata"]["uid"]
    create_pod(
        cluster, ns, "sglang-0", injected(cluster.cb(ns, "managed")), labels={"app": "sglang"}
    )
    set_pod_status(
        cluster,
        ns,
        "sglang-0",
        {"containerStatuses": [{"name": "vllm", "ready": False, "restartCount": 3,
                                "image": "engine:1", "imageID": "",
                                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    )  # fmt: skip
    cluster.wait_cb(
        ns,
        "managed",
        lambda o: (
            o["status"].get("observedServerInstance") == f"{server_uid}:0"
            and condition(o, "EngineCompatibility") == ("False", "InjectedEngineCrashLooping")
        ),
        "engine-side observations",
    )

    def controller_writes(mark: int) -> list[Any]:
        # This test's namespace (and cluster scope): backends of other tests sharing the
        # control plane have their own clocks (a KV-event timeout may fire any time).
        return [
            e
            for e in cluster.cp.write_events(mark)
            if e.user in (WORKER_USER, DISPATCHER_USER)
            and e.resource != "leases"
            and e.namespace in (ns, "")
        ]

    # Let in-flight follow-up reconciles (triggered by our own writes) settle:
    # wait until a full resync period passes with no write by the controller. The
    # window is measured, not slept on for synchronisation: what follows waits for
    # the worker's own reads of every backend.
    def quiet_since() -> int | None:
        mark = cluster.cp.audit_offset()
        time.sleep(stack.resync_period * 1.5)
        return mark if not controller_writes(mark) else None

    mark = poll(quiet_since, timeout=30, what="the controller to go quiet", interval=0)
    since = time.monotonic()
    # Observe at least two resyncs of every backend (the worker's reconcile runs)...
    poll(
        lambda: all(
            sum(1 for r in stack.reconcile_runs().get(f"{ns}/{name}", []) if r.start >= since) >= 2
            for name in specs
        ),
        timeout=20,
        what="two resyncs of every backend",
    )
    # ...and not a single write request from the controller (Lease renewals aside).
    writes = controller_writes(mark)
    assert writes == [], [(e.verb, e.resource, e.name) for e in writes]


@pytest.mark.real_controllers
def test_dropping_autoscaling_sheds_the_hpa_and_returns_the_replicas_to_spec_replicas(
    cluster: Cluster, stack: Stack
) -> None:
    """Spec: with spec.autoscaling the controller renders an HPA and the replica count
    is the HPA's (test_rollouts.py drives the HPA controller's own scale writes);
    without it the count is spec.replicas again. Dropping autoscaling sheds the HPA
    (an object the spec no longer renders), so the HPA controller stops holding the
    Deployment at its floor, and the Deployment really rolls to spec.replicas."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    spec: dict[str, Any] = {
        "runtime": "VLLM",
        "replicas": 1,
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        "autoscaling": {"minReplicas": 3, "maxReplicas": 6},
    }
    cluster.create_cb(ns, "hpa", spec, NO_GATE)
    name = "hpa-lmcache-server"
    dep = wait_rolled_out(cluster, ns, "Deployment", name)
    assert dep["spec"]["replicas"] == 3
    assert cluster.kube.get(k.HPAS, ns, name)["spec"]["minReplicas"] == 3

    cluster.patch_cb(ns, "hpa", {"spec": {"autoscaling": None, "replicas": 2}})
    poll(
        lambda: cluster.kube.get_or_none(k.HPAS, ns, name) is None or None,
        timeout=30,
        what="the HPA shed",
    )
    dep = wait_workload(
        cluster, ns, "Deployment", name, lambda d: d["spec"]["replicas"] == 2, "spec.replicas"
    )
    dep = wait_rolled_out(cluster, ns, "Deployment", name)
    assert len(pods_of(cluster, ns, dep)) == 2
    obj = reconciled_since(stack, cluster, ns, "hpa")
    assert condition(obj, "Ready") == ("True", "BackendReady")
    assert workload(cluster, ns, "Deployment", name)["spec"]["replicas"] == 2


def test_worker_killed_mid_reconcile_and_redis_restart_still_converge(
    cluster: Cluster, stack: Stack
) -> None:
    stack.start_dispatcher()
    victim = stack.start_worker("worker-victim", concurrency=2)
    ns = cluster.namespace()
    queue = stack.queue()
    names_ = [f"b{i}" for i in range(8)]
    for name in names_:
        cluster.create_cb(
            ns,
            name,
            {
                "runtime": "VLLM",
                "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            },
            NO_GATE,
        )

    # SIGKILL the worker while it holds a key (or as soon as it has started work).
    poll(
        lambda: queue_state(queue)["processing"] or None,
        timeout=30,
        what="a reconcile in flight",
        interval=0.005,
    )
    victim.kill()
    assert not victim.alive
    orphaned = queue_state(queue)["processing"]
    stack.start_worker("worker-2")
    if orphaned:
        # The dead worker's claim is not renewed: the dispatcher reaps it and the
        # key runs again (at-least-once).
        dispatcher = next(p for p in stack.procs if p.name == "dispatcher-a")
        poll(
            lambda: "worker lease expired" in dispatcher.log() or None,
            timeout=30,
            what=f"the orphaned lease(s) {sorted(orphaned)} to be reaped",
        )
    for name in names_:
        cluster.wait_cb(
            ns,
            name,
            converged_with_endpoint,
            "converged after SIGKILL",
            timeout=60,
        )

    # Redis restarts and loses everything (no persistence); the stack recovers.
    stack.redis_server.restart()
    cluster.create_cb(
        ns, "after-restart", {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}, NO_GATE
    )
    cluster.kube.request(
        "PATCH",
        k.CACHEBACKENDS.item(ns, "b0"),
        body={"spec": {"replicas": 2}},
        content_type="application/merge-patch+json",
    )
    cluster.wait_condition(ns, "after-restart", "Ready", "True", "EventsOnlyActive", timeout=60)
    poll(
        lambda: cluster.kube.get(k.DEPLOYMENTS, ns, "b0-lmcache-server")["spec"]["replicas"] == 2,
        timeout=60,
        what="b0 scaled after the Redis restart",
    )
    cluster.wait_cb(ns, "b0", converged, "b0 status after restart", timeout=60)


def test_two_dispatchers_elect_one_leader_and_fail_over(cluster: Cluster, stack: Stack) -> None:
    a = stack.start_dispatcher("dispatcher-a")
    b = stack.start_dispatcher("dispatcher-b")
    stack.start_worker()
    # The Lease outlives earlier stacks (a dispatcher that was not stopped cleanly never
    # released it): wait for one of ours to hold it, not for any holder.
    ours = {stack.identity(a.name), stack.identity(b.name)}
    holder = poll(
        lambda: (h := stack.lease_holder()) in ours and h, timeout=30, what="one of ours leads"
    )
    leader, standby = (a, b) if holder == stack.identity("dispatcher-a") else (b, a)
    poll(lambda: "became leader" in leader.log() or None, timeout=10, what="leader log")
    ns = cluster.namespace()
    cluster.create_cb(
        ns, "before", {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}, NO_GATE
    )
    cluster.wait_condition(ns, "before", "Ready", "True", "EventsOnlyActive")
    assert "became leader" not in standby.log()

    leader.kill()  # SIGKILL: no lease release, the standby waits for expiry
    poll(
        lambda: stack.lease_holder() == stack.identity(standby.name) or None,
        timeout=30,
        what="standby takeover",
    )
    poll(lambda: "became leader" in standby.log() or None, timeout=10, what="standby leads")
    cluster.create_cb(
        ns, "after", {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}, NO_GATE
    )
    cluster.wait_condition(ns, "after", "Ready", "True", "EventsOnlyActive")

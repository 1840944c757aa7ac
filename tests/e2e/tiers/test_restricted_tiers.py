"""On the real control plane (kube-apiserver with its PodSecurity admission plugin,
kube-controller-manager, kube-scheduler, kwok) with the real `icache dispatcher` and
`icache worker`: managed tiers run where engines run, and a tier that cannot start
says why (decisions "Managed tiers restricted by default" and "A tier that cannot start
says why").

* In a namespace enforcing Pod Security ``restricted`` and in a ``baseline`` one, a
  Managed Redis and a Managed LMCacheServer each get running pods, the same Ready
  condition, and no ServiceAccount token.
* A tier whose pods the API server refuses (a template override asking for root)
  reports Ready=False and Progressing=False with reason PodCreationFailed and the
  Pod Security message, with exactly one Warning Event, for a Deployment (its
  ReplicaFailure condition) and a StatefulSet (its FailedCreate Events); `icache
  doctor` names the cause and the fix; removing the override lets it roll out.
"""

from __future__ import annotations

from typing import Any

import pytest

from icache_install.doctor.diagnose import Scope, diagnose
from icache_install.doctor.reader import ClusterReader
from kubeio import client as k
from shared import constants as c
from shared.storage_providers.render import ANNOTATION_SPEC_HASH
from tests.builders import NO_GATE
from tests.e2e.conftest import Cluster, Stack, condition, poll
from tests.e2e.workloads import (
    hold_pool,
    open_pool,
    pod_ready,
    pods_of,
    reconciled_since,
    wait_rolled_out,
    workload,
)

pytestmark = pytest.mark.real_controllers

ENFORCE = "pod-security.kubernetes.io/enforce"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def tiers(ns: str) -> dict[str, dict[str, Any]]:
    """A Managed Redis and a Managed LMCacheServer, their pods bound to the test's pool."""
    template = {"nodeSelector": hold_pool(ns)}
    return {
        "redis": {
            "runtime": "SGLang",
            "engineSelector": {"matchLabels": {"app": "sglang"}},
            "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
            "template": template,
        },
        "lm": {
            "runtime": "VLLM",
            "engineSelector": {"matchLabels": {"app": "vllm"}},
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            "template": template,
        },
    }


WORKLOADS = {"redis": "redis-redis", "lm": "lm-lmcache-server"}


def mounts_a_token(pod: dict[str, Any]) -> bool:
    spec = pod["spec"]
    projected = any(
        any("serviceAccountToken" in src for src in (v.get("projected") or {}).get("sources", []))
        for v in spec.get("volumes") or []
    )
    mounted = any(
        m.get("mountPath", "").startswith(TOKEN_PATH)
        for ctr in spec["containers"]
        for m in ctr.get("volumeMounts") or []
    )
    return projected or mounted


def warning_events(cluster: Cluster, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    uid = cluster.cb(ns, name)["metadata"]["uid"]
    items = cluster.kube.list(k.EVENTS, ns).get("items") or []
    return [
        e
        for e in items
        if (e.get("involvedObject") or {}).get("uid") == uid and e.get("reason") == reason
    ]


def test_managed_tiers_run_in_restricted_and_baseline_namespaces_alike(
    cluster: Cluster, stack: Stack
) -> None:
    """Restricted by default: the API server admits the tiers' pods under Pod Security
    ``restricted``; the pods run, mount no ServiceAccount token, and the backends'
    Ready conditions agree with those of a ``baseline`` namespace."""
    stack.start_dispatcher()
    stack.start_worker()
    readiness: dict[str, dict[str, tuple[str, str] | None]] = {}
    for level in ("restricted", "baseline"):
        ns = cluster.namespace(labels={ENFORCE: level})
        open_pool(cluster, ns)
        for name, spec in tiers(ns).items():
            cluster.create_cb(ns, name, spec, NO_GATE)
        readiness[level] = {}
        for name, workload_name in WORKLOADS.items():
            dep = wait_rolled_out(cluster, ns, "Deployment", workload_name, timeout=90)
            pods = pods_of(cluster, ns, dep)
            assert pods
            assert all(p["status"]["phase"] == "Running" for p in pods), pods
            assert all(pod_ready(p) for p in pods)
            assert not any(mounts_a_token(p) for p in pods), [p["spec"] for p in pods]
            obj = cluster.wait_condition(ns, name, "Ready", "True", "BackendReady", timeout=60)
            readiness[level][name] = condition(obj, "Ready")
    assert readiness["restricted"] == readiness["baseline"]


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_a_tier_whose_pods_are_refused_says_why_once(
    cluster: Cluster, stack: Stack, kind: str
) -> None:
    """A tier that cannot start says why: Ready=False and Progressing=False with reason
    PodCreationFailed and the API server's Pod Security message, Degraded by the
    spec's rules (not rolled out: False), one Warning Event however many reconciles
    follow; without the override the tier rolls out."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace(labels={ENFORCE: "restricted"})
    open_pool(cluster, ns)
    spec = tiers(ns)["lm"]
    spec["deploymentKind"] = kind
    spec["template"] = {**spec["template"], "securityContext": {"runAsUser": 0}}
    cluster.create_cb(ns, "lm", spec, NO_GATE)

    obj = cluster.wait_condition(ns, "lm", "Ready", "False", c.REASON_POD_CREATION_FAILED, 90)
    assert condition(obj, "Progressing") == ("False", c.REASON_POD_CREATION_FAILED)
    assert condition(obj, "Degraded") == ("False", c.REASON_NOT_DEGRADED)
    ready = next(x for x in obj["status"]["conditions"] if x["type"] == "Ready")
    assert "violates PodSecurity" in ready["message"], ready
    assert "runAsUser=0" in ready["message"], ready
    poll(
        lambda: len(warning_events(cluster, ns, "lm", c.EVENT_POD_CREATION_FAILED)) == 1,
        timeout=30,
        what="one PodCreationFailed Event",
    )
    reconciled_since(stack, cluster, ns, "lm")
    reconciled_since(stack, cluster, ns, "lm")
    events = warning_events(cluster, ns, "lm", c.EVENT_POD_CREATION_FAILED)
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    assert events[0].get("count", 1) == 1
    # icache doctor names the cause and the fix.
    findings = diagnose(ClusterReader(cluster.kube), Scope(ns)).findings
    (refused,) = [f for f in findings if f.code == "backend.PodCreationFailed"]
    assert refused.severity == "error"
    assert "violates PodSecurity" in refused.message
    assert "spec.template" in refused.next_step

    cluster.patch_cb(ns, "lm", {"spec": {"template": {"securityContext": None}}})
    wait_rolled_out(cluster, ns, kind, WORKLOADS["lm"], timeout=90)
    cluster.wait_condition(ns, "lm", "Ready", "True", "BackendReady", timeout=60)
    assert not any(
        mounts_a_token(p)
        for p in pods_of(cluster, ns, workload(cluster, ns, kind, "lm-lmcache-server"))
    )


def test_an_existing_tier_gets_the_hardened_template_in_one_rollout(
    cluster: Cluster, stack: Stack
) -> None:
    """Upgrade: a tier whose workload an earlier release rendered (no securityContext,
    a token mounted, another spec hash) gets the hardened template on its next
    reconcile: one new generation, then none however many reconciles follow."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace(labels={ENFORCE: "baseline"})
    open_pool(cluster, ns)
    cluster.create_cb(ns, "lm", tiers(ns)["lm"], NO_GATE)
    name = WORKLOADS["lm"]
    wait_rolled_out(cluster, ns, "Deployment", name, timeout=90)
    stack.stop()

    # What the earlier release left: the old pod template and its spec hash.
    old = workload(cluster, ns, "Deployment", name)
    template = old["spec"]["template"]
    pod = template["spec"]
    pod.pop("securityContext", None)
    pod.pop("automountServiceAccountToken", None)
    pod.pop("volumes", None)
    for ctr in pod["containers"]:
        for key in ("securityContext", "volumeMounts", "env"):
            ctr.pop(key, None)
    old["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = "earlier-release"
    replaced = cluster.kube.request("PUT", k.DEPLOYMENTS.item(ns, name), body=old)
    before = int(replaced["metadata"]["generation"])

    stack.start_dispatcher("dispatcher-b")
    stack.start_worker("worker-b")
    hardened = poll(
        lambda: (
            d
            if (d := workload(cluster, ns, "Deployment", name))["spec"]["template"]["spec"].get(
                "automountServiceAccountToken"
            )
            is False
            else None
        ),
        timeout=60,
        what="the hardened template applied",
    )
    assert int(hardened["metadata"]["generation"]) == before + 1
    reconciled_since(stack, cluster, ns, "lm")
    reconciled_since(stack, cluster, ns, "lm")
    assert int(workload(cluster, ns, "Deployment", name)["metadata"]["generation"]) == before + 1
    wait_rolled_out(cluster, ns, "Deployment", name, timeout=90)
    cluster.wait_condition(ns, "lm", "Ready", "True", "BackendReady", timeout=60)

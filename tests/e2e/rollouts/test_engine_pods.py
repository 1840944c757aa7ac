"""End to end: engine pods (wired by annotations, as the Pod webhook leaves them) drive
the engine-side advisory conditions, the pod Events and the cache-server cascade.

The managed cache servers really roll out (kube-controller-manager, kube-scheduler,
kwok). The engine pods here report what a kubelet would after running an init
container or crash-looping, so they stay bound to no node and the tests write their
status, as envtest users do. tests/e2e/rollouts/test_rollouts.py has the cascade end to end
with webhook-wired engine Deployments.
"""

from __future__ import annotations

import json

import pytest

from kubeio import client as k
from tests.builders import MANAGED_VLLM_SPEC as MANAGED
from tests.builders import NO_GATE
from tests.e2e.conftest import (
    KERNEL_CHECK,
    Cluster,
    Stack,
    condition,
    create_pod,
    injected,
    poll,
    scrape_metrics,
    set_pod_status,
)
from tests.e2e.workloads import wait_rolled_out
from tests.harness.controlplane import free_port


def pod_event_reasons(cluster: Cluster, ns: str, pod: str) -> list[str]:
    return [
        e["reason"]
        for e in cluster.kube.list(k.EVENTS, ns).get("items") or []
        if (e.get("involvedObject") or {}).get("kind") == "Pod"
        and (e.get("involvedObject") or {}).get("name") == pod
    ]


@pytest.mark.real_controllers
def test_engine_pods_drive_advisories_events_and_the_t2_gauge(
    cluster: Cluster, stack: Stack
) -> None:
    port = free_port()
    dispatcher = stack.start_dispatcher(extra=["--metrics-port", str(port)])
    stack.start_worker()
    ns = cluster.namespace()
    cb = cluster.create_cb(ns, "cb", MANAGED, NO_GATE)
    cluster.wait_cb(ns, "cb", lambda o: bool((o.get("status") or {}).get("endpoint")), "endpoint")
    wait_rolled_out(cluster, ns, "Deployment", "cb-lmcache-server")
    cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady")

    create_pod(cluster, ns, "e-strict", injected(cb, "strict"), kernel_check=True)
    create_pod(cluster, ns, "e-report", injected(cb, "report-only"), kernel_check=True)
    skip = {
        "inferencecache.io/skip-inject": "true",
        "inferencecache.io/inject-skipped": "skip-inject-annotation",
    }
    create_pod(cluster, ns, "e-skipped", skip)
    forged = {**injected(cb), "inferencecache.io/injected-by-uid": "not-the-live-uid"}
    create_pod(cluster, ns, "e-forged", forged)

    # Not run yet (no kubelet): pending, Ready untouched.
    obj = cluster.wait_cb(
        ns,
        "cb",
        lambda o: (
            o["status"].get("matchedEnginePods") == 4
            and condition(o, "EngineKernelsHealthy") == ("Unknown", "KernelCheckPending")
        ),
        "four engine pods seen, kernel checks pending",
    )
    assert condition(obj, "Ready") == ("True", "BackendReady")

    ok = json.dumps({"mode": "report-only", "result": "ok", "error": ""})
    failed = json.dumps({"mode": "strict", "result": "failed", "error": "ImportError: libcudart"})
    set_pod_status(
        cluster,
        ns,
        "e-report",
        {"initContainerStatuses": [{"name": KERNEL_CHECK, "ready": False, "restartCount": 0,
                                    "image": "engine:1", "imageID": "",
                                    "state": {"terminated": {"exitCode": 0, "message": ok}}}]},
    )  # fmt: skip
    set_pod_status(
        cluster,
        ns,
        "e-strict",
        {"initContainerStatuses": [{"name": KERNEL_CHECK, "ready": False, "restartCount": 2,
                                    "image": "engine:1", "imageID": "",
                                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                    "lastState": {"terminated": {"exitCode": 1,
                                                                 "message": failed}}}]},
    )  # fmt: skip
    obj = cluster.wait_condition(ns, "cb", "Ready", "False", "EngineKernelDegraded", timeout=20)
    kernels = next(c for c in obj["status"]["conditions"] if c["type"] == "EngineKernelsHealthy")
    assert (kernels["status"], kernels["reason"]) == ("False", "KernelLoadFailed")
    assert "e-strict (strict): ImportError: libcudart" in kernels["message"]

    # The engine container crash-loops: advisory only, narrated once on the backend.
    set_pod_status(
        cluster,
        ns,
        "e-report",
        {"containerStatuses": [{"name": "vllm", "ready": False, "restartCount": 5,
                                "image": "engine:1", "imageID": "",
                                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    )  # fmt: skip
    obj = cluster.wait_condition(
        ns, "cb", "EngineCompatibility", "False", "InjectedEngineCrashLooping", timeout=20
    )
    assert condition(obj, "Ready") == ("False", "EngineKernelDegraded")
    poll(
        lambda: "InjectedEngineCrashLooping" in [e["reason"] for e in cluster.events(ns, "cb")],
        timeout=10,
        what="InjectedEngineCrashLooping Event",
    )

    # Pod Events from the dispatcher's engine-pod events controller.
    poll(
        lambda: (
            pod_event_reasons(cluster, ns, "e-strict") == ["InjectedByCacheBackend"]
            and pod_event_reasons(cluster, ns, "e-report") == ["InjectedByCacheBackend"]
            and pod_event_reasons(cluster, ns, "e-skipped") == ["SkippedByOperator"]
        ),
        timeout=20,
        what="InjectedByCacheBackend / SkippedByOperator pod Events",
    )

    # A forged UID claim gets no Event. Absence only means something once the
    # dispatcher has decided on that pod, which it logs.
    def forged_claim_decided() -> bool:
        # One JSON object per line, the decision's values as fields (structured logs).
        for line in dispatcher.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(entry, dict)
                and entry.get("namespace") == ns
                and entry.get("pod") == "e-forged"
                and entry.get("backend") == f"{ns}/cb"
                and entry.get("claimed_uid") == "not-the-live-uid"
                and entry.get("live_uid")
            ):
                return True
        return False

    poll(forged_claim_decided, timeout=20, what="the dispatcher's decision on e-forged")
    assert pod_event_reasons(cluster, ns, "e-forged") == []
    event = next(
        e
        for e in cluster.kube.list(k.EVENTS, ns)["items"]
        if e["reason"] == "InjectedByCacheBackend" and e["involvedObject"]["name"] == "e-strict"
    )
    pod_uid = cluster.kube.get(k.PODS, ns, "e-strict")["metadata"]["uid"]
    assert event["involvedObject"]["uid"] == pod_uid
    assert event["type"] == "Normal"

    # T2 hit rate (as the snapshot poller writes it): condition and the leader's gauge.
    cluster.patch_cb(
        ns, "cb", {"status": {"indexParticipation": {"prefixCount": 1, "t2HitRate": "0"}}},
        status=True,
    )  # fmt: skip
    cluster.wait_condition(ns, "cb", "T2Degraded", "True", "T2ZeroHitRate")
    sample = f'inferencecache_backend_t2_hit_rate{{backend="{ns}/cb"}} 0.0'
    poll(lambda: sample in scrape_metrics(port), timeout=10, what="the t2 hit-rate gauge")

    # Offload → EventsOnly clears all four advisories.
    cluster.patch_cb(
        ns, "cb", {"spec": {"remoteStorage": None, "integration": {"mode": "EventsOnly"}}}
    )
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "EventsOnlyActive")
    assert {c["type"] for c in obj["status"]["conditions"]} == {"Ready", "Degraded", "Progressing"}
    # Each pod Event was recorded exactly once.
    assert pod_event_reasons(cluster, ns, "e-strict") == ["InjectedByCacheBackend"]

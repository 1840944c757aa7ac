"""End to end: a host-only vLLM backend's budget is the pod's, and an engine pod whose
memory limit cannot hold what the wiring pins is flagged, never blocked (docs/api.md
"Host memory per pod", "Conditions", "Events"; docs/decisions.md "The host-memory
budget is per pod").

The real `icache webhook` is registered with the API server and wires the engine
Deployments' pods at admission; kube-controller-manager, kube-scheduler and kwok roll
them out on the GPU pool; the dispatcher and a worker reconcile the backend. A TP=4
Deployment whose 16Gi limit cannot hold the 32Gi budget gets the admission warning,
EngineHostMemory=False/PinnedHostMemoryOverLimit and exactly one Warning Event; a
fitting one gets neither. Ready is never changed by it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kubeio import client as k
from shared import constants as c
from tests.builders import NO_GATE
from tests.e2e.conftest import Cluster, Stack, condition, condition_message, poll
from tests.e2e.workloads import (
    dry_run_pod,
    one_container_deployment,
    pods_of,
    reconciled_since,
    wait_rolled_out,
)
from tests.webhook_process import TEST_NAMESPACE_LABEL, WebhookProcess, registered, run_webhook

pytestmark = pytest.mark.real_controllers

# The Warning Event of an engine pod whose limit cannot hold what it pins.
OVER_LIMIT = c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT

ENGINE = "vllm"
LABELS = {"app": "vllm-tp4"}
SPEC = {
    "runtime": "VLLM",
    "lmCache": {"hostMemory": {"capacity": "32Gi"}},
    "engineSelector": {"matchLabels": LABELS},
}
# No kernel-check init container on the GPU engine pods: kwok runs no check to report.
ANNOTATIONS = {**NO_GATE, "inferencecache.io/lmcache-kernel-check": "off"}


@pytest.fixture
def wired(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """Two namespaces where the real webhook wires engine pods at admission."""
    suffix = f"hostmem-{uuid.uuid4().hex[:6]}"
    api = cluster.cp.api_client()
    hook: WebhookProcess
    try:
        with run_webhook(cluster.cp.kubeconfig_path) as hook, registered(api, hook, suffix):
            yield (
                cluster.namespace(labels={TEST_NAMESPACE_LABEL: suffix}),
                cluster.namespace(labels={TEST_NAMESPACE_LABEL: suffix}),
            )
    finally:
        api.close()


def tp4_deployment(memory_limit: str) -> dict[str, Any]:
    """vLLM with --tensor-parallel-size 4 on four GPUs, its container limited to
    ``memory_limit``."""
    container = {
        "name": ENGINE,
        "image": "vllm/vllm-openai:v0.11.0",
        "args": ["--model", "m", "--tensor-parallel-size", "4"],
        "resources": {
            "requests": {"memory": "1Gi"},
            "limits": {"nvidia.com/gpu": "4", "memory": memory_limit},
        },
    }
    return one_container_deployment(ENGINE, LABELS, container)


def dry_run(cluster: Cluster, ns: str, memory_limit: str) -> tuple[dict[str, Any], list[str]]:
    """The TP=4 Deployment's pod, limited to ``memory_limit``, created in dry run."""
    return dry_run_pod(cluster, ns, tp4_deployment(memory_limit))


def wired_engine(cluster: Cluster, ns: str, memory_limit: str) -> dict[str, Any]:
    """The Deployment's rolled-out pod, wired at admission to ``ns``/cb."""
    cb = cluster.cb(ns, "cb")

    def webhook_wires() -> bool:
        pod, _ = dry_run(cluster, ns, memory_limit)
        annotations = pod["metadata"].get("annotations") or {}
        return annotations.get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"

    poll(webhook_wires, timeout=30, what=f"the webhook wiring engine pods to {ns}/cb")
    cluster.kube.create(k.DEPLOYMENTS, ns, tp4_deployment(memory_limit))
    dep = wait_rolled_out(cluster, ns, "Deployment", ENGINE)
    (pod,) = pods_of(cluster, ns, dep)
    annotations = pod["metadata"].get("annotations") or {}
    assert annotations.get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"
    assert annotations.get(c.ANNOTATION_INJECTED_BY_UID) == cb["metadata"]["uid"]
    assert annotations.get(c.ANNOTATION_HOST_MEMORY_PROCESSES) == "4"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "8.0"  # 32Gi over four workers
    return pod


def test_tp4_pod_over_its_limit_is_flagged_once_and_a_fitting_one_is_not(
    cluster: Cluster, stack: Stack, wired: tuple[str, str]
) -> None:
    """A TP=4 Deployment whose limit is too small gets the condition and one Event; a
    fitting one gets neither. Neither changes Ready."""
    stack.start_dispatcher()
    stack.start_worker()
    short_ns, fitting_ns = wired
    cluster.create_cb(short_ns, "cb", SPEC, ANNOTATIONS)
    cluster.create_cb(fitting_ns, "cb", SPEC, ANNOTATIONS)

    pod = wired_engine(cluster, short_ns, "16Gi")
    _, warnings = dry_run(cluster, short_ns, "16Gi")
    assert any("'vllm' pins 32 GiB" in w and "resources.limits.memory 16Gi" in w for w in warnings)
    obj = cluster.wait_condition(
        short_ns, "cb", c.COND_ENGINE_HOST_MEMORY, "False", c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT,
        timeout=60,
    )  # fmt: skip
    message = condition_message(obj, c.COND_ENGINE_HOST_MEMORY)
    assert pod["metadata"]["name"] in message
    assert "pins 32 GiB" in message
    assert "16Gi" in message
    assert condition(obj, c.COND_READY) == ("True", c.REASON_HOST_ONLY_ACTIVE)
    poll(
        lambda: len(cluster.events(short_ns, "cb", OVER_LIMIT)) == 1,
        timeout=60,
        what="the Warning Event",
    )
    (event,) = cluster.events(short_ns, "cb", OVER_LIMIT)
    assert event["type"] == "Warning"
    assert pod["metadata"]["name"] in event["message"]
    # Later reconciles keep the condition and record no second Event.
    obj = reconciled_since(stack, cluster, short_ns, "cb")
    assert condition(obj, c.COND_ENGINE_HOST_MEMORY) == (
        "False", c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT,
    )  # fmt: skip
    assert len(cluster.events(short_ns, "cb", OVER_LIMIT)) == 1
    assert sum(int(e.get("count") or 1) for e in cluster.events(short_ns, "cb", OVER_LIMIT)) == 1

    wired_engine(cluster, fitting_ns, "64Gi")
    assert not [w for w in dry_run(cluster, fitting_ns, "64Gi")[1] if "pins" in w]
    obj = reconciled_since(stack, cluster, fitting_ns, "cb")
    assert condition(obj, c.COND_ENGINE_HOST_MEMORY) is None
    assert condition(obj, c.COND_READY) == ("True", c.REASON_HOST_ONLY_ACTIVE)
    assert cluster.events(fitting_ns, "cb", OVER_LIMIT) == []

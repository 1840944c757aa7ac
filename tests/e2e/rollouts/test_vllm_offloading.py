"""End to end: a VLLMOffloading backend wires vLLM's own CPU offloading into the engine
pods a real rollout creates (docs/api.md "vLLM's built-in offloading").

The real `icache webhook` is registered with the API server and wires the engine
Deployment's pods at admission; kube-controller-manager, kube-scheduler and kwok roll
them out on the GPU pool; the dispatcher and a worker reconcile the backend. A vLLM
0.34.0 Deployment with ``--tensor-parallel-size 2 --data-parallel-size 2`` (two engines
of two workers each, four GPUs) selected by a 64Gi backend gets:

- ``--kv-transfer-config`` with the OffloadingConnector, ``cpu_bytes_to_use`` 32Gi per
  engine (capacity / the pod's two data-parallel engines) and ``eviction_policy`` lru;
- a memory-backed emptyDir at ``/dev/shm`` that holds both regions plus headroom;
- with a 16Gi memory limit, the admission warning, EngineHostMemory=False /
  PinnedHostMemoryOverLimit and exactly one Warning Event, while Ready stays
  EnginePodsWired.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeio import client as k
from shared import constants as c
from tests.builders import NO_GATE
from tests.e2e import cascade
from tests.e2e.conftest import Cluster, Stack, condition, condition_message, poll
from tests.e2e.workloads import (
    dry_run_pod,
    one_container_deployment,
    pods_of,
    reconciled_since,
    wait_rolled_out,
)

pytestmark = pytest.mark.real_controllers

# The Warning Event of an engine pod whose limit cannot hold what it pins.
OVER_LIMIT = c.EVENT_PINNED_HOST_MEMORY_OVER_LIMIT

ENGINE = "vllm"
LABELS = {"app": "vllm-offload-tp2-dp2"}
GIB = 1 << 30
SPEC = {
    "runtime": "VLLM",
    "type": c.TYPE_VLLM_OFFLOADING,
    "vllmOffloading": {"cpu": {"capacity": "64Gi"}, "evictionPolicy": "LRU"},
    "engineSelector": {"matchLabels": LABELS},
}
SHM_PATH = "/dev/shm"
MEMORY_LIMIT = "16Gi"


# The real webhook wiring the namespace the test requests as ``wired``.
wired = cascade.wired


def tp2_dp2_deployment() -> dict[str, Any]:
    """vLLM 0.34.0, TP=2 x DP=2 on four GPUs, its container limited to 16Gi."""
    container = {
        "name": ENGINE,
        "image": "vllm/vllm-openai:v0.34.0",
        "args": ["--model", "m", "--tensor-parallel-size", "2", "--data-parallel-size", "2"],
        "resources": {
            "requests": {"memory": "1Gi"},
            "limits": {"nvidia.com/gpu": "4", "memory": MEMORY_LIMIT},
        },
    }
    return one_container_deployment(ENGINE, LABELS, container)


def last_value(args: list[str], flag: str) -> str:
    values = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]
    assert values, f"no {flag} in {args}"
    return values[-1]


def quantity_bytes(text: str) -> int:
    units = {"Mi": 1 << 20, "Gi": GIB}
    return int(text[:-2]) * units[text[-2:]]


def assert_offloading_wired(pod: dict[str, Any]) -> None:
    """The OffloadingConnector at 32Gi per engine with lru, never the size flag, and a
    memory-backed /dev/shm that holds both engines' regions."""
    (engine,) = pod["spec"]["containers"]
    args = [*(engine.get("command") or []), *(engine.get("args") or [])]
    assert "--kv-offloading-size" not in args
    config = json.loads(last_value(args, "--kv-transfer-config"))
    assert config["kv_connector"] == "OffloadingConnector"
    extra = config["kv_connector_extra_config"]
    assert extra["cpu_bytes_to_use"] == 32 * GIB  # 64Gi over the pod's two DP engines
    assert extra["eviction_policy"] == "lru"
    (mount,) = [m for m in engine.get("volumeMounts") or [] if m["mountPath"] == SHM_PATH]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert quantity_bytes(volume["emptyDir"]["sizeLimit"]) > 64 * GIB  # regions + headroom


def test_tp2_dp2_pod_gets_its_offloading_its_dev_shm_and_one_over_limit_event(
    cluster: Cluster, stack: Stack, wired: str
) -> None:
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    cb = cluster.create_cb(ns, "cb", SPEC, NO_GATE)

    def webhook_wires() -> bool:
        pod, _ = dry_run_pod(cluster, ns, tp2_dp2_deployment())
        annotations = pod["metadata"].get("annotations") or {}
        return annotations.get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"

    poll(webhook_wires, timeout=30, what=f"the webhook wiring engine pods to {ns}/cb")
    probe, warnings = dry_run_pod(cluster, ns, tp2_dp2_deployment())
    assert_offloading_wired(probe)
    assert any(
        "OffloadingConnector 32 GiB x 2 engines" in w
        and f"resources.limits.memory {MEMORY_LIMIT}" in w
        for w in warnings
    ), warnings

    cluster.kube.create(k.DEPLOYMENTS, ns, tp2_dp2_deployment())
    dep = wait_rolled_out(cluster, ns, "Deployment", ENGINE)
    (pod,) = pods_of(cluster, ns, dep)
    annotations = pod["metadata"].get("annotations") or {}
    assert annotations.get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"
    assert annotations.get(c.ANNOTATION_INJECTED_BY_UID) == cb["metadata"]["uid"]
    decision = json.loads(annotations[c.ANNOTATION_VLLM_OFFLOADING])
    assert decision["engines"] == 2
    assert_offloading_wired(pod)

    obj = cluster.wait_condition(
        ns, "cb", c.COND_ENGINE_HOST_MEMORY, "False", c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT,
        timeout=60,
    )  # fmt: skip
    message = condition_message(obj, c.COND_ENGINE_HOST_MEMORY)
    assert pod["metadata"]["name"] in message
    assert MEMORY_LIMIT in message
    obj = cluster.wait_condition(ns, "cb", c.COND_READY, "True", c.REASON_ENGINE_PODS_WIRED)
    poll(
        lambda: len(cluster.events(ns, "cb", OVER_LIMIT)) == 1,
        timeout=60,
        what="the Warning Event",
    )
    (event,) = cluster.events(ns, "cb", OVER_LIMIT)
    assert event["type"] == "Warning"
    assert pod["metadata"]["name"] in event["message"]
    # Later reconciles keep the condition and record no second Event.
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert condition(obj, c.COND_ENGINE_HOST_MEMORY) == (
        "False", c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT,
    )  # fmt: skip
    assert condition(obj, c.COND_READY) == ("True", c.REASON_ENGINE_PODS_WIRED)
    assert sum(int(e.get("count") or 1) for e in cluster.events(ns, "cb", OVER_LIMIT)) == 1

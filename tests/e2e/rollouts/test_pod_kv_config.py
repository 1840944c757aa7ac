"""End to end: the Pod webhook composes with an engine pod's own KV configuration and
never reports a pod as wired when vLLM would overwrite the wiring (docs/api.md, "The
pod's own KV configuration"; docs/decisions.md, "Compose with the pod's own KV
configuration, never clobber it").

The real `icache webhook` is registered with the API server; kube-controller-manager,
kube-scheduler and kwok roll the engine Deployments out; the dispatcher and a worker
reconcile the backend. A NIXL prefill Deployment comes out wired with one
`--kv-transfer-config`: a MultiConnector with its NIXL connector first and unchanged and
LMCache after it. A Deployment with vLLM's own `--kv-offloading-size` comes out as
written, not wired, with the admission warning and the decline record; the backend gets
EngineOffloading=False/EngineOffloadingConflict and exactly one Warning Event, and Ready
is unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeio import client as k
from shared import constants as c
from shared.runtime_adapters.kv_config import read_kv_tokens
from shared.runtime_adapters.podspec import cli_tokens
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

LABELS = {"app": "vllm-pd"}
SPEC = {
    "runtime": "VLLM",
    "lmCache": {"hostMemory": {"capacity": "8Gi"}},
    "engineSelector": {"matchLabels": LABELS},
}
# No kernel-check init container on the GPU engine pods: kwok runs no check to report.
ANNOTATIONS = {**NO_GATE, "inferencecache.io/lmcache-kernel-check": "off"}
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}

# The real webhook wiring the namespace the test requests as ``wired``.
wired = cascade.wired


def deployment(name: str, args: list[str]) -> dict[str, Any]:
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.34.0",
        "args": ["--model", "m", *args],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    labels = {**LABELS, "role": name}
    return one_container_deployment(name, labels, container)


def rolled_out_pod(cluster: Cluster, ns: str, dep: dict[str, Any]) -> dict[str, Any]:
    cluster.kube.create(k.DEPLOYMENTS, ns, dep)
    (pod,) = pods_of(
        cluster, ns, wait_rolled_out(cluster, ns, "Deployment", dep["metadata"]["name"])
    )
    return pod


def events(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return [
        e for e in cluster.events(ns, "cb") if e.get("reason") == c.EVENT_ENGINE_OFFLOADING_CONFLICT
    ]


def test_nixl_pod_is_composed_and_an_offloading_pod_is_declined_once(
    cluster: Cluster, stack: Stack, wired: str
) -> None:
    ns = wired
    stack.start_dispatcher()
    stack.start_worker()
    cluster.create_cb(ns, "cb", SPEC, ANNOTATIONS)
    prefill = deployment("prefill", ["--kv-transfer-config", json.dumps(NIXL)])

    def webhook_wires() -> bool:
        pod, _ = dry_run_pod(cluster, ns, prefill)
        return (pod["metadata"].get("annotations") or {}).get(
            c.ANNOTATION_INJECTED_BY
        ) == f"{ns}/cb"

    poll(webhook_wires, timeout=30, what=f"the webhook wiring engine pods to {ns}/cb")

    # The NIXL prefill pod: composed, its connector first and unchanged, one flag.
    pod = rolled_out_pod(cluster, ns, prefill)
    assert (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_INJECTED_BY) == f"{ns}/cb"
    kv = read_kv_tokens(cli_tokens(pod["spec"]["containers"][0]))
    assert kv.transfer_occurrences == 1
    assert kv.transfer_config is not None
    assert kv.transfer_config["kv_connector"] == "MultiConnector"
    assert kv.transfer_config["kv_role"] == "kv_producer"
    assert kv.transfer_config["kv_connector_extra_config"]["connectors"] == [
        NIXL,
        {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
    ]

    # vLLM's own offloading: admitted as written, not wired, warned, recorded.
    offload = deployment("offload", ["--kv-offloading-size", "64"])
    probe, warnings = dry_run_pod(cluster, ns, offload)
    assert any("--kv-offloading-size 64" in w and "overwrite" in w for w in warnings), warnings
    assert probe["spec"]["containers"][0]["args"] == ["--model", "m", "--kv-offloading-size", "64"]
    pod = rolled_out_pod(cluster, ns, offload)
    annotations = pod["metadata"].get("annotations") or {}
    assert c.ANNOTATION_INJECTED_BY not in annotations
    assert annotations.get(c.ANNOTATION_INJECT_DECLINED) == c.REASON_ENGINE_OFFLOADING_CONFLICT
    assert annotations.get(c.ANNOTATION_INJECT_DECLINED_BY) == f"{ns}/cb"
    assert not [e for e in pod["spec"]["containers"][0].get("env") or [] if "LMCACHE" in e["name"]]

    obj = cluster.wait_condition(
        ns, "cb", c.COND_ENGINE_OFFLOADING, "False", c.REASON_ENGINE_OFFLOADING_CONFLICT,
        timeout=60,
    )  # fmt: skip
    message = condition_message(obj, c.COND_ENGINE_OFFLOADING)
    assert pod["metadata"]["name"] in message
    assert condition(obj, c.COND_READY) == ("True", c.REASON_HOST_ONLY_ACTIVE)
    poll(lambda: len(events(cluster, ns)) == 1, timeout=60, what="the Warning Event")
    (event,) = events(cluster, ns)
    assert event["type"] == "Warning"
    # Later reconciles keep the condition and record no second Event.
    obj = reconciled_since(stack, cluster, ns, "cb")
    assert condition(obj, c.COND_ENGINE_OFFLOADING) == (
        "False", c.REASON_ENGINE_OFFLOADING_CONFLICT,
    )  # fmt: skip
    assert len(events(cluster, ns)) == 1
    assert sum(int(e.get("count") or 1) for e in events(cluster, ns)) == 1

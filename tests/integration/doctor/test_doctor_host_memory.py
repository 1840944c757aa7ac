"""`icache doctor` against the real API server: the pinned-host-memory finding
(docs/doctor.md, ``pod.PinnedHostMemoryOverLimit``; docs/api.md, "Host memory per pod").

A host-only vLLM CacheBackend and two TP=4 engine pods wired to it (8 GiB per worker,
32 GiB pinned), without a kernel-check init container: one limited to 16Gi, one to
64Gi. The doctor reads their spec through the API server (pods in full, once) and must
name the pod over its limit only, with the container and the numbers.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from icache_install.doctor.diagnose import Scope, diagnose
from icache_install.doctor.host_memory import PINNED_HOST_MEMORY_CODE
from icache_install.doctor.reader import ClusterReader
from kubeio.client import Kube
from shared import constants as c
from tests.builders import findings_with_code
from tests.kube_helpers import create_namespace

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"


def create_backend(api: client.ApiClient, ns: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CacheBackend",
        "metadata": {"name": "cb"},
        "spec": {
            "runtime": "VLLM",
            "lmCache": {"hostMemory": {"capacity": "32Gi"}},
            "engineSelector": {"matchLabels": {"app": "vllm"}},
        },
    }
    custom: Any = client.CustomObjectsApi(api)
    out: dict[str, Any] = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    return out


def create_engine(
    api: client.ApiClient, ns: str, cb: dict[str, Any], name: str, limit: str
) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {"app": "vllm"},
                "annotations": {
                    c.ANNOTATION_INJECTED_BY: f"{ns}/cb",
                    c.ANNOTATION_INJECTED_BY_UID: cb["metadata"]["uid"],
                    c.ANNOTATION_HOST_MEMORY_PROCESSES: "4",
                },
            },
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:v0.11.0",
                        "args": ["--model", "m", "--tensor-parallel-size", "4"],
                        "env": [{"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": "8.0"}],
                        "resources": {"limits": {"memory": limit}},
                    }
                ]
            },
        },
    )


def test_doctor_names_the_pod_whose_limit_cannot_hold_the_pinned_host_memory(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> None:
    ns = create_namespace(kube_api_client, "doc-hostmem")
    cb = create_backend(kube_api_client, ns)
    create_engine(kube_api_client, ns, cb, "e-short", "16Gi")
    create_engine(kube_api_client, ns, cb, "e-fits", "64Gi")

    found = diagnose(ClusterReader(Kube(kube_api_client)), Scope(ns)).findings
    [short] = findings_with_code(found, PINNED_HOST_MEMORY_CODE)
    assert short.object.name == "e-short"
    assert short.severity == "warning"
    assert "container vllm pins 32 GiB" in short.message
    assert "resources.limits.memory 16Gi" in short.message
    assert short.details["pinnedBytes"] == 32 * 1024**3

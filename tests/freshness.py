"""A CacheBackend created a moment ago wires the very next pod.

Pod CREATE is one-shot, so a Pod webhook that answered from a view older than the
request would leave the pod unwired for good. Each round creates a CacheBackend with
a selector no earlier backend has, then at once a pod only that backend matches,
through the real API server with the webhooks registered, and requires the pod to
come back wired by it. Shared by the integration test and benchmarks/bench_webhook.py.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from shared import constants as c

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"


class NotWiredError(AssertionError):
    pass


def fresh_backend_wires_next_pod(api: client.ApiClient, namespace: str, rounds: int) -> float:
    """Run ``rounds`` rounds; raise NotWiredError on the first unwired pod; return seconds."""
    custom = client.CustomObjectsApi(api)
    core: Any = client.CoreV1Api(api)
    run = f"{time.monotonic_ns() % 10**8:x}"
    started = time.monotonic()
    for i in range(rounds):
        name = f"fresh-{run}-{i}"
        labels = {"app": name}
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "CacheBackend",
                "metadata": {"name": name},
                "spec": {
                    "runtime": "VLLM",
                    "lmCache": {"hostMemory": {"capacity": "8Gi"}},
                    "engineSelector": {"matchLabels": labels},
                    "observation": {"modelID": "m"},
                },
            },
        )
        pod = core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
            },
        )
        wired_by = (pod.metadata.annotations or {}).get(c.ANNOTATION_INJECTED_BY)
        if wired_by != f"{namespace}/{name}":
            raise NotWiredError(
                f"round {i + 1}/{rounds}: pod {name} created right after its CacheBackend "
                f"was accepted came back wired by {wired_by!r}"
            )
        # Keep the namespace's list at one backend: every round costs the same.
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    return time.monotonic() - started

"""`icache doctor`'s pinned-host-memory finding (docs/doctor.md,
``pod.PinnedHostMemoryOverLimit``; docs/api.md, "Host memory per pod"): the same rule as
the admission warning and EngineHostMemory, over a backend's injected pods read in full."""

from __future__ import annotations

from typing import Any

from icache_install.doctor.findings import CODES, Severity
from icache_install.doctor.host_memory import PINNED_HOST_MEMORY_CODE, check_host_memory, wants_pods
from shared import constants as c
from tests.builders import backend


def engine(
    name: str, cb: dict[str, Any], limit: str | None, *, uid: str | None = None
) -> dict[str, Any]:
    """A TP=4 vLLM pod the webhook wired to ``cb`` (8 GiB per worker, 32 GiB pinned)."""
    meta = cb["metadata"]
    resources = {"limits": {"memory": limit}} if limit else {}
    return {
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "annotations": {
                c.ANNOTATION_INJECTED_BY: f"{meta['namespace']}/{meta['name']}",
                c.ANNOTATION_INJECTED_BY_UID: uid or meta["uid"],
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "command": ["vllm", "serve", "m", "--tensor-parallel-size", "4"],
                    "env": [{"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": "8.0"}],
                    "resources": resources,
                }
            ]
        },
    }


def test_pod_over_its_limit_is_a_warning_naming_container_and_numbers() -> None:
    cb = backend()
    found = check_host_memory(cb, [engine("b", cb, "16Gi"), engine("a", cb, "64Gi")])
    assert [(f.code, f.object.name) for f in found] == [(PINNED_HOST_MEMORY_CODE, "b")]
    (item,) = found
    assert item.severity == Severity.WARNING == CODES[PINNED_HOST_MEMORY_CODE][0]
    assert "container vllm pins 32 GiB" in item.message
    assert "resources.limits.memory 16Gi" in item.message
    assert item.details["pinnedBytes"] == 32 * 1024**3


def test_no_limit_or_another_backends_pod_is_no_finding() -> None:
    cb = backend()
    assert check_host_memory(cb, [engine("a", cb, None)]) == []
    assert check_host_memory(cb, [engine("a", cb, "1Gi", uid="another-uid")]) == []


def test_pods_are_read_in_full_only_for_a_backend_with_injected_pods() -> None:
    cb = backend()
    assert wants_pods(cb, [engine("a", cb, None)])
    assert not wants_pods(cb, [engine("a", cb, None, uid="another-uid")])

"""Per-CacheBackend pinned host memory: each injected engine pod whose container limit
cannot hold the host memory the cache wiring pins in it. Pure functions of the backend
and its pods read in full (the pod spec carries the sizes and limits); the rule is the
webhook's and the worker's (shared/runtime_adapters/host_memory_fit.py), so doctor,
the admission warning and the EngineHostMemory condition agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from icache_install.doctor.findings import Finding, ObjectRef, finding
from shared.backend_keys import injected_by
from shared.objects import meta
from shared.runtime_adapters.host_memory_fit import (
    gib_text,
    pinned_host_memory_exceeds_limit,
)

Obj = Mapping[str, Any]
PINNED_HOST_MEMORY_CODE = "pod.PinnedHostMemoryOverLimit"


def wants_pods(cb: Obj, pods: Sequence[Obj]) -> bool:
    """Whether the backend has an injected pod (only then are its pods read in full):
    ``pods`` as metadata."""
    return any(injected_by(p, cb) for p in pods)


def check_host_memory(cb: Obj, pods: Sequence[Obj]) -> list[Finding]:
    """One warning per injected pod of ``cb`` that pins more than a container's
    memory limit; ``pods`` read in full."""
    out = []
    for pod in sorted(pods, key=lambda p: meta(p).name):
        if not injected_by(pod, cb):
            continue
        view = meta(pod)
        ref = ObjectRef("Pod", view.name, view.namespace)
        for pin in pinned_host_memory_exceeds_limit(dict(pod)):
            out.append(
                finding(
                    PINNED_HOST_MEMORY_CODE,
                    ref,
                    f"container {pin.container} pins {gib_text(pin.pinned_bytes)} of host "
                    f"memory for the KV cache ({pin.how}), over its resources.limits.memory "
                    f"{pin.limit}: the kernel's OOM killer may end it as the cache fills",
                    "raise the container's memory limit or lower the CacheBackend's host-memory "
                    "budget (docs/api.md, Host memory per pod), then roll the workload",
                    container=pin.container,
                    pinnedBytes=pin.pinned_bytes,
                    limit=pin.limit,
                )
            )
    return out

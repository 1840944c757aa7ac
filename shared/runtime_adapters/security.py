"""securityContext and resources of the containers the Pod webhook adds.

Mutating webhooks run before Pod Security admission and ResourceQuota, so whatever the
webhook adds is judged with the pod. Every added container (the kvevent-subscriber
sidecar, the SGLang MP-worker native sidecar, the lmcache-kernel-check init container)
therefore carries the Pod Security "restricted" controls that cannot break a container:
no privilege escalation, every capability dropped, the RuntimeDefault seccomp profile.
The engine's own containers are never touched.

Running as non-root is the one control that depends on the image:

- the subscriber runs our own image, which must declare a numeric non-root USER: it
  gets ``runAsNonRoot: true`` unless the pod itself explicitly runs as root (pod-level
  ``runAsUser: 0`` or ``runAsNonRoot: false``), where the kubelet would only refuse to
  start it and no restricted namespace would have admitted the pod anyway;
- the MP worker and the kernel check run from the engine's image, which often runs as
  root (vLLM and SGLang images do): forcing ``runAsNonRoot`` would make the kubelet
  refuse them on exactly those pods. They take the engine container's own identity
  (its ``runAsNonRoot``/``runAsUser``/``runAsGroup``; pod-level values apply to both
  anyway), so a restricted-compliant engine yields compliant added containers, the
  worker shares the engine's uid for the files they share, and a root engine keeps
  working as before.
"""

from __future__ import annotations

import copy
from typing import Any, Final

RESTRICTED_BASE: Final[dict[str, Any]] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
RUN_AS_FIELDS: Final = ("runAsNonRoot", "runAsUser", "runAsGroup")

# The subscriber reads the engine's loopback ZMQ stream and reports to the index server:
# small, and bounded so a runaway cannot eat the engine's node memory.
SUBSCRIBER_RESOURCES: Final[dict[str, Any]] = {
    "requests": {"cpu": "10m", "memory": "32Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}
# The MP worker holds the L1 (whole GiB) plus a Python/torch/LMCache process.
WORKER_CPU_REQUEST: Final = "100m"
WORKER_CPU_LIMIT: Final = "2"
WORKER_OVERHEAD_REQUEST_GIB: Final = 1
WORKER_OVERHEAD_LIMIT_GIB: Final = 2


def _pod_security_context(pod: dict[str, Any]) -> dict[str, Any]:
    sc = (pod.get("spec") or {}).get("securityContext")
    return sc if isinstance(sc, dict) else {}


def pod_runs_as_root(pod: dict[str, Any]) -> bool:
    """The pod explicitly runs its containers as root."""
    sc = _pod_security_context(pod)
    return sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False


def own_image_security_context(pod: dict[str, Any]) -> dict[str, Any]:
    """The subscriber's securityContext (our image: non-root unless the pod says root)."""
    sc = copy.deepcopy(RESTRICTED_BASE)
    if not pod_runs_as_root(pod):
        sc["runAsNonRoot"] = True
    return sc


def engine_image_security_context(engine: dict[str, Any]) -> dict[str, Any]:
    """The securityContext of a container run from the engine's image (MP worker,
    kernel check): the restricted controls plus the engine container's identity."""
    sc = copy.deepcopy(RESTRICTED_BASE)
    engine_sc = engine.get("securityContext")
    if isinstance(engine_sc, dict):
        for name in RUN_AS_FIELDS:
            if name in engine_sc:
                sc[name] = copy.deepcopy(engine_sc[name])
    return sc


def worker_resources(l1_gib: int) -> dict[str, Any]:
    """Requests that cover the L1 the worker allocates plus its process, and a memory
    limit with headroom (an OOM-killed worker wedges the SGLang engine, which has no
    cacheless path while --enable-lmcache is on)."""
    return {
        "requests": {
            "cpu": WORKER_CPU_REQUEST,
            "memory": f"{l1_gib + WORKER_OVERHEAD_REQUEST_GIB}Gi",
        },
        "limits": {
            "cpu": WORKER_CPU_LIMIT,
            "memory": f"{l1_gib + WORKER_OVERHEAD_LIMIT_GIB}Gi",
        },
    }

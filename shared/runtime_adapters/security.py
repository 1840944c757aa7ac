"""securityContext and resources of the containers the Pod webhook adds.

Mutating webhooks run before Pod Security admission and ResourceQuota, so whatever the
webhook adds is judged with the pod. Every added container (the kvevent-subscriber
sidecar, the SGLang MP-worker native sidecar, the lmcache-kernel-check init container)
therefore carries the Pod Security "restricted" controls that cannot break a container:
no privilege escalation, every capability dropped, the RuntimeDefault seccomp profile.
The engine's own containers are never touched.

Resources: the kernel check (an init container) copies the engine's
(shared/runtime_adapters/kernel_check.py). The subscriber and the MP worker add to
the pod's sum, so they keep requests and limits of their own, fitted to the engine
container by :func:`fit_to_engine` so that every per-container LimitRange bound the
engine fits, they fit too.

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
import math
from decimal import Decimal
from typing import Any, Final

from shared.quantity import parse_quantity

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


# What fit_to_engine fits: the resources the added containers declare.
FITTED_RESOURCES: Final = ("cpu", "memory")


def _quantity(values: dict[str, Any], name: str) -> Decimal | None:
    value = values.get(name)
    if value is None:
        return None
    try:
        amount = parse_quantity(value)
    except ValueError:
        return None  # the API server refuses the pod anyway
    return amount if amount > 0 else None


def _rendered(name: str, amount: Decimal) -> str:
    """``amount`` (exact) rounded up to a whole millicore of cpu or MiB of memory."""
    if name == "cpu":
        return f"{math.ceil(amount * 1000)}m"
    return f"{math.ceil(amount / 2**20)}Mi"


def _resources_of(container: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    declared = (container or {}).get("resources")
    if not isinstance(declared, dict):
        return {}, {}
    requests, limits = declared.get("requests"), declared.get("limits")
    return (
        requests if isinstance(requests, dict) else {},
        limits if isinstance(limits, dict) else {},
    )


def fit_to_engine(own: dict[str, Any], engine: dict[str, Any] | None) -> dict[str, Any]:
    """An added app container's resources (``own``: what it needs, its requests, and
    what it may use at most, its limits), fitted to the engine container's so that
    the added container passes every per-container LimitRange check the engine
    passes. LimitRanger applies a namespace's defaults to the engine before the Pod
    webhook runs, and checks every container, added ones included, after it; the
    engine's values are what is known to pass. Per cpu and memory:

    - the limit is the container's own, capped at the engine's limit (so under any
      ``max`` the engine is under), but never below its own request;
    - the request is its own, raised to keep the limit-to-request ratio within the
      engine's (so under any ``maxLimitRequestRatio`` the engine is under) and to the
      engine's request up to the limit (so over any ``min`` the engine is over), and
      never above the limit.

    So an added container reserves at most its own limit. Where the engine declares
    nothing for a resource, no LimitRange bounds it and the container's own values
    stand. The bounds the engine's values cannot vouch for (a ``min`` above the added
    container's own limit, a ``max`` below its own request) are beyond any
    container that does its job: the pod is then refused with LimitRanger's message."""
    fitted: dict[str, dict[str, Any]] = copy.deepcopy(
        {"requests": own.get("requests") or {}, "limits": own.get("limits") or {}}
    )
    if engine is None:
        return fitted
    engine_requests, engine_limits = _resources_of(engine)
    for name in FITTED_RESOURCES:
        own_request = _quantity(fitted["requests"], name)
        own_limit = _quantity(fitted["limits"], name)
        if own_request is None or own_limit is None:
            continue
        engine_request = _quantity(engine_requests, name)
        engine_limit = _quantity(engine_limits, name)
        # (amount, how it is written): values taken as they are keep their spelling.
        limit = (own_limit, fitted["limits"][name])
        if engine_limit is not None and engine_limit < own_limit:
            limit = max(
                (engine_limit, engine_limits[name]), (own_request, fitted["requests"][name])
            )
        request = (own_request, fitted["requests"][name])
        if engine_request is not None:
            request = max(request, min((engine_request, engine_requests[name]), limit))
            if engine_limit is not None:
                kept = limit[0] * engine_request / engine_limit
                if kept > request[0]:
                    request = min((kept, _rendered(name, kept)), limit)
        request = min(request, limit)
        fitted["limits"][name] = limit[1]
        fitted["requests"][name] = (
            limit[1] if parse_quantity(str(request[1])) > limit[0] else request[1]
        )
    return fitted

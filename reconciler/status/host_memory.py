"""The engine-side advisory condition on pinned host memory: one function per rule.

The wiring divides a vLLM backend's host-memory budget by the pod's engine processes,
but a pod can still pin more than its container may use: a memory limit below the
budget, an operator's own ``LMCACHE_MAX_LOCAL_CPU_SIZE`` (engineOverrides.env, never
divided), a process count the webhook could not read, HiCache's per-rank size. The
kernel's OOM killer then ends the engine with nothing on the CacheBackend saying why.

- ``engine_host_memory_condition``: ``EngineHostMemory=False/PinnedHostMemoryOverLimit``
  while an injected pod's container has a ``resources.limits.memory`` below what the
  wiring pins in it (the message names the pods, containers and numbers); absent
  otherwise (no injected pod, no limit, or every limit holds it). It never gates Ready:
  the engine is the operator's and the pod was admitted (fail-open). A pod list that
  failed this time keeps the prior condition.
- ``reconciler.status.events.pinned_host_memory_over_limit_event``: one Warning
  ``PinnedHostMemoryOverLimit`` when the condition enters
  False/PinnedHostMemoryOverLimit; none while it stays.
"""

from __future__ import annotations

from typing import Any

from reconciler.status.engine_pods import (
    MAX_PODS_NAMED,
    HostMemoryShortfall,
    InjectedPodsObservation,
)
from shared import constants as c
from shared.conditions import FALSE, DesiredCondition, as_desired
from shared.runtime_adapters.host_memory_fit import gib_text


def _shortfall_text(item: HostMemoryShortfall) -> str:
    containers = "; ".join(
        f"container {pin.container} pins {gib_text(pin.pinned_bytes)} ({pin.how}) over "
        f"resources.limits.memory {pin.limit}"
        for pin in item.containers
    )
    return f"{item.pod}: {containers}"


def engine_host_memory_condition(
    injected: InjectedPodsObservation | None, previous: dict[str, Any] | None
) -> DesiredCondition | None:
    """EngineHostMemory=False/PinnedHostMemoryOverLimit while an injected pod cannot
    hold the host memory its wiring pins; absent otherwise. Never gates Ready."""
    if injected is None:
        return as_desired(previous)
    if not injected.host_memory:
        return None
    named = [_shortfall_text(item) for item in injected.host_memory[:MAX_PODS_NAMED]]
    more = len(injected.host_memory) - MAX_PODS_NAMED
    return DesiredCondition(
        c.COND_ENGINE_HOST_MEMORY,
        FALSE,
        c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT,
        f"{len(injected.host_memory)} injected engine pod(s) pin more host memory for the "
        f"KV cache than their memory limit: {' | '.join(named)}"
        + (f" | and {more} more" if more > 0 else "")
        + ". The kernel's OOM killer may end the engine as the cache fills: raise "
        "resources.limits.memory or lower spec.lmCache.hostMemory.capacity "
        "(spec.hiCache.sizeGB for HiCache).",
    )

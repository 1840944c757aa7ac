"""The engine-side advisory condition on pods whose own KV offloading keeps them unwired.

A vLLM pod with ``--kv-offloading-size`` runs vLLM's own CPU offloading, which
overwrites any KV connector (``VllmConfig._post_init_kv_transfer_config``): the Pod
webhook admits it with its flags untouched and does not wire it, recording
``inferencecache.io/inject-declined: EngineOffloadingConflict`` and
``inferencecache.io/inject-declined-by: <ns>/<name>`` on the pod. Such a pod is selected
by the backend but served by no cache tier of it.

- ``reconciler.status.engine_pods.offloading_declined_pods``: the live selected pods
  carrying that record for this backend, by name.
- ``engine_offloading_condition``: ``EngineOffloading=False/EngineOffloadingConflict``
  while there is one (the message names the pods); absent otherwise. It never gates
  Ready: the engine is the operator's and the pod was admitted (fail-open). A pod list
  that failed this time keeps the prior condition.
- ``reconciler.status.events.engine_offloading_conflict_event``: one Warning
  ``EngineOffloadingConflict`` when the condition enters False/EngineOffloadingConflict;
  none while it stays.
"""

from __future__ import annotations

from typing import Any

from reconciler.status.engine_pods import MAX_PODS_NAMED
from shared import constants as c
from shared.conditions import FALSE, DesiredCondition, as_desired


def engine_offloading_condition(
    declined: tuple[str, ...] | None, previous: dict[str, Any] | None
) -> DesiredCondition | None:
    """EngineOffloading=False/EngineOffloadingConflict while a selected engine pod runs
    vLLM's own offloading and so is not wired; absent otherwise. Never gates Ready."""
    if declined is None:
        return as_desired(previous)
    if not declined:
        return None
    named = ", ".join(declined[:MAX_PODS_NAMED])
    more = len(declined) - MAX_PODS_NAMED
    return DesiredCondition(
        c.COND_ENGINE_OFFLOADING,
        FALSE,
        c.REASON_ENGINE_OFFLOADING_CONFLICT,
        f"{len(declined)} selected engine pod(s) set vLLM's own --kv-offloading-size, which "
        f"overwrites the KV connector, so they run without this backend: {named}"
        + (f" and {more} more" if more > 0 else "")
        + ". Remove --kv-offloading-size (and --kv-offloading-backend) from the engine to "
        "use this backend, or take the pods out of spec.engineSelector.",
    )

"""The conditions of the modes without a gate: Ready/Degraded/Progressing from one verdict,
External's pair, HiCache's Progressing only, and an unsupported pair.
"""

from __future__ import annotations

from reconciler.status.engine_pods import InjectedPodsObservation
from reconciler.status.managed_readiness import Verdict
from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.conditions import (
    FALSE,
    TRUE,
    DesiredCondition,
)
from shared.constants import (
    REASON_DEGRADED,
    REASON_UNSUPPORTED_RUNTIME_PAIR,
)
from shared.runtime_adapters import registry as runtime_registry


def verdict_triplet(v: Verdict, *, degraded_reason: str | None = None) -> list[DesiredCondition]:
    """Ready/Degraded/Progressing from one verdict.

    Progressing: True while converging (rollout, first apply, awaiting the first KV
    event) with the verdict's reason; False with the verdict's reason when stuck on a
    cause of its own (PodCreationFailed); False with Degraded when stuck (Degraded=True),
    ScaledToZero when scaled to zero, and Synced once converged — including when a
    later gate (functional probe, strict kernel check) downgrades only Ready.
    """
    ready = DesiredCondition(c.COND_READY, TRUE if v.ready else FALSE, v.reason, v.message)
    if v.degraded:
        degraded = DesiredCondition(
            c.COND_DEGRADED, TRUE, degraded_reason or v.degraded_reason or v.reason, v.message
        )
    else:
        degraded = DesiredCondition(
            c.COND_DEGRADED, FALSE, c.REASON_NOT_DEGRADED, "The backend is not degraded."
        )
    if v.progressing:
        progressing = DesiredCondition(c.COND_PROGRESSING, TRUE, v.reason, v.message)
    elif v.stuck:
        progressing = DesiredCondition(c.COND_PROGRESSING, FALSE, v.reason, v.message)
    elif v.degraded:
        progressing = DesiredCondition(c.COND_PROGRESSING, FALSE, REASON_DEGRADED, v.message)
    elif v.reason == c.REASON_SCALED_TO_ZERO:
        progressing = DesiredCondition(c.COND_PROGRESSING, FALSE, v.reason, v.message)
    else:
        progressing = DesiredCondition(
            c.COND_PROGRESSING, FALSE, c.REASON_SYNCED, "Live state matches the desired state."
        )
    return [ready, degraded, progressing]


def vllm_offloading_verdict(injected: InjectedPodsObservation | None) -> Verdict:
    """Type VLLMOffloading (host-only): no provider workload, no endpoint, so Ready is
    whether the webhook wired any selected engine pod (the CPU tier lives in them).
    Pods not listed this time: not Ready, waiting (Progressing)."""
    if injected is None:
        return Verdict(
            False,
            c.REASON_NO_ENGINE_PODS_WIRED,
            "vLLM offloading: the engine pods could not be listed this time.",
            progressing=True,
        )
    if not injected.wired:
        return Verdict(
            False,
            c.REASON_NO_ENGINE_PODS_WIRED,
            "vLLM offloading: no selected engine pod is wired with the OffloadingConnector "
            "yet (create or roll the engine workload; a pod left unwired says why in its "
            "admission warning).",
            progressing=True,
        )
    names = ", ".join(injected.wired[:5]) + (", ..." if len(injected.wired) > 5 else "")
    return Verdict(
        True,
        c.REASON_ENGINE_PODS_WIRED,
        f"vLLM offloading: {len(injected.wired)} engine pod(s) wired with the "
        f"OffloadingConnector ({names}); no provider workload, no endpoint.",
    )


def external_conditions(v: Verdict) -> list[DesiredCondition]:
    """External: Ready + Progressing only; Progressing is always False and mirrors
    Ready's reason (there is no rollout the controller drives)."""
    return [
        DesiredCondition(c.COND_READY, TRUE if v.ready else FALSE, v.reason, v.message),
        DesiredCondition(c.COND_PROGRESSING, FALSE, v.reason, v.message),
    ]


def hicache_conditions() -> list[DesiredCondition]:
    """SGLang native HiCache publishes no Ready (pod readiness does not prove a
    host-tier round trip) and provisions nothing that could degrade. Progressing
    False/Synced tells operators the controller has observed this generation and
    has nothing left to drive."""
    return [
        DesiredCondition(
            c.COND_PROGRESSING,
            FALSE,
            c.REASON_SYNCED,
            "SGLang HiCache is engine-local: no workload to provision; Ready is not published.",
        )
    ]


def unsupported_conditions(cb: CacheBackend) -> list[DesiredCondition]:
    spec = cb.spec
    pairs = ", ".join(runtime_registry.supported_pairs())
    message = (
        f"No adapter supports runtime {spec.runtime} with type {effective.cache_type(spec)}"
        + (
            f" and remote provider {spec.remote_storage.provider}"
            if spec.remote_storage and spec.remote_storage.provider
            else ""
        )
        + f"; supported pairs: {pairs}. Nothing is provisioned."
    )
    return [
        DesiredCondition(c.COND_READY, FALSE, REASON_UNSUPPORTED_RUNTIME_PAIR, message),
        DesiredCondition(c.COND_PROGRESSING, FALSE, REASON_UNSUPPORTED_RUNTIME_PAIR, message),
    ]

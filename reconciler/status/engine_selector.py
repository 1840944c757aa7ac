"""status.matchedEnginePods and the selector diagnostic, and the faster requeue while the
engine fleet churns.
"""

from __future__ import annotations

import json
from typing import Any, Final

from reconciler.status.observed import EngineObservation
from shared.api import effective
from shared.api.models import CacheBackend

# Cadences. The steady 30 s resync is the dispatcher's; these are per-backend hints.
ENGINE_CHURN_REQUEUE_SECONDS: Final = 5.0


def engine_selector_status(
    cb: CacheBackend, engines: EngineObservation | None, prev_status: dict[str, Any]
) -> tuple[int | None, str | None]:
    """(matchedEnginePods, engineSelectorMessage).

    Unset without a claim-capable selector (absent or empty matchLabels). The
    message is set when the count is zero while engine pods are expected — i.e.
    unless every Deployment the selector matches is intentionally scaled to zero.
    When the pods could not be listed the previous values stand.
    """
    labels = effective.claim_match_labels(cb.spec)
    if not labels:
        return None, None
    if engines is None:
        return prev_status.get("matchedEnginePods"), prev_status.get("engineSelectorMessage")
    matched = engines.matched_pods
    expected = not (engines.matching_deployments > 0 and engines.matching_deployment_replicas == 0)
    if matched == 0 and expected:
        selector = json.dumps(labels, sort_keys=True, separators=(",", ":"))
        return matched, (
            f"spec.engineSelector.matchLabels={selector} matches no Pods in namespace "
            f"{cb.metadata.namespace}."
        )
    return matched, None


def engine_churn_requeue(engines: EngineObservation | None) -> float | None:
    """5 s cadence while the matched pod count differs from the desired replica sum of
    the Deployments the selector matches (rolling restarts), without a Pod watch."""
    if engines is None or engines.matching_deployments == 0:
        return None
    if engines.matched_pods != engines.matching_deployment_replicas:
        return ENGINE_CHURN_REQUEUE_SECONDS
    return None

"""The functional-probe gate (FunctionalProbeOK and its Ready downgrade) and the T2Degraded
advisory derived from the tier-2 hit rate.
"""

from __future__ import annotations

from typing import Any, Final

from reconciler.status.managed_readiness import Verdict
from reconciler.status.observed import ProbeObservation
from shared import constants as c
from shared.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    DesiredCondition,
)

PROBE_STAGE_REASONS: Final[dict[str, str]] = {
    "ingest": c.REASON_PROBE_INGEST_FAILED,
    "routing": c.REASON_PROBE_ROUTING_FAILED,
    "t2": c.REASON_PROBE_T2_FAILED,
}
PROBE_FAILED_REASONS: Final = frozenset(PROBE_STAGE_REASONS.values())


def functional_probe_gate(
    base: Verdict,
    probe: ProbeObservation | None,
    previous: dict[str, Any] | None,
) -> tuple[Verdict, DesiredCondition | None]:
    """Functional-probe gate, composed after the KV-event gate on managed backends.

    Returns the (possibly downgraded) Ready verdict and the FunctionalProbeOK
    condition to publish (None: clear it — the gate is off). A stage failure
    downgrades Ready with the stage's reason; an unreachable /probe is Unknown and
    leaves Ready alone, unless a stage failure is already published (sticky-False).
    """
    if probe is None:
        return base, None
    prev_reason = previous.get("reason") if previous else None
    prev_failed = (
        previous is not None
        and previous.get("status") == FALSE
        and prev_reason in PROBE_FAILED_REASONS
    )
    if probe.outcome == "bypassed":
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            TRUE,
            c.REASON_PROBE_BYPASSED,
            f"Functional probe skipped by the {c.ANNOTATION_SKIP_FUNCTIONAL_PROBE} annotation.",
        )
    if not base.ready:
        # A broken upstream cannot be diagnosed by a downstream probe: keep whatever
        # verdict the probe last published, without downgrading further.
        if previous is None:
            return base, None
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            str(previous.get("status")),
            str(prev_reason),
            str(previous.get("message") or ""),
        )

    def downgraded(reason: str, message: str) -> Verdict:
        return Verdict(False, reason, message)

    if probe.outcome == "ok":
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            TRUE,
            c.REASON_PROBE_OK,
            "Every enabled probe stage round-tripped.",
        )
    if probe.outcome == "failed":
        reason = PROBE_STAGE_REASONS.get(probe.failed_stage, c.REASON_PROBE_INGEST_FAILED)
        message = probe.message or f"probe stage {probe.failed_stage} failed"
        return downgraded(reason, message), DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK, FALSE, reason, message
        )
    # "error" (could not reach) or "rate_limited" (not called this time).
    if prev_failed and previous is not None:
        message = str(previous.get("message") or "")
        return downgraded(str(prev_reason), message), DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK, FALSE, str(prev_reason), message
        )
    if probe.outcome == "error":
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            UNKNOWN,
            c.REASON_PROBE_ERROR,
            probe.message or "could not reach the cache-index server's /probe endpoint",
        )
    if previous is not None:  # rate-limited: keep the last verdict as it is
        return base, DesiredCondition(
            c.COND_FUNCTIONAL_PROBE_OK,
            str(previous.get("status")),
            str(prev_reason),
            str(previous.get("message") or ""),
        )
    return base, None


def t2_degraded_condition(prev_status: dict[str, Any]) -> DesiredCondition | None:
    """T2Degraded from indexParticipation.t2HitRate: absent until the tier has been
    exercised; "0" means queried but never served a reload."""
    rate = (prev_status.get("indexParticipation") or {}).get("t2HitRate")
    if rate is None or rate == "":
        return None
    try:
        value = float(rate)
    except ValueError:
        return None
    if value <= 0:
        return DesiredCondition(
            c.COND_T2_DEGRADED,
            TRUE,
            c.REASON_T2_ZERO_HIT_RATE,
            "Tier-2 was queried but served zero reloads (store/connection failure, "
            "under-sized remote server, or hash mismatch).",
        )
    return DesiredCondition(
        c.COND_T2_DEGRADED, FALSE, c.REASON_T2_SERVING, f"Tier-2 hit rate {rate}."
    )

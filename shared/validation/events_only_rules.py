"""Events-only mode: spec rules "Events-only requires spec.type=LMCache" and "Events-only forbids spec.autoscaling", and no remote storage."""

from __future__ import annotations

from shared import constants as c
from shared.api import effective
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    forbidden,
    invalid,
)
from shared.validation.vocabulary import AUTOSCALING, REMOTE, is_events_only

# --------------------------------------------------------------- events-only


def reject_events_only_with_non_lmcache_type(ctx: RuleContext) -> list[FieldError]:
    """Spec "Events-only requires spec.type=LMCache"."""
    spec = ctx.parsed
    cache_type = effective.cache_type(spec)
    if not is_events_only(spec) or cache_type == c.TYPE_LMCACHE:
        return []
    if cache_type == c.TYPE_VLLM_OFFLOADING:
        return []  # reported by reject_events_only_vllm_offloading
    # Scoped to spec.type, the field the rule names ("requires spec.type=LMCache").
    return [
        invalid(
            SPEC.child("type"),
            cache_type,
            f"spec.integration.mode EventsOnly requires spec.type LMCache, not {cache_type}: events-only wires "
            f"no KV connector, and LMCache supplies the kvevent-subscriber the routing tier "
            f"needs",
        )
    ]


def reject_events_only_with_remote_storage(ctx: RuleContext) -> list[FieldError]:
    """Spec "Events-only mode": spec.remoteStorage is forbidden (nothing would dial it)."""
    spec = ctx.parsed
    if not is_events_only(spec) or spec.remote_storage is None:
        return []
    return [
        forbidden(
            REMOTE,
            "spec.integration.mode EventsOnly wires no KV connector and provisions no provider; "
            "remove spec.remoteStorage (or use mode Offload)",
        )
    ]


def reject_events_only_with_autoscaling(ctx: RuleContext) -> list[FieldError]:
    """Spec "Events-only forbids spec.autoscaling" (field-scoped to spec.autoscaling)."""
    spec = ctx.parsed
    if not is_events_only(spec) or spec.autoscaling is None:
        return []
    return [
        forbidden(
            AUTOSCALING,
            "spec.integration.mode EventsOnly provisions no server workload, so there is "
            "nothing to autoscale",
        )
    ]

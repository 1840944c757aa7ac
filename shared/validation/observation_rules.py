"""Observation: the first KV event's timeout."""

from __future__ import annotations

from typing import Final

from shared.api.duration import DurationError, parse_go_duration_ns
from shared.api.models import CacheBackendSpec
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    invalid,
)

# --------------------------------------------------------------- observation

FIRST_EVENT_TIMEOUT: Final = SPEC.child("observation", "firstEventTimeout")


def _first_event_timeout(spec: CacheBackendSpec) -> str | None:
    return spec.observation.first_event_timeout if spec.observation else None


def reject_negative_first_event_timeout(ctx: RuleContext) -> list[FieldError]:
    """firstEventTimeout takes Go's duration grammar, whose leading sign
    makes "-1s" grammatical; a negative window for the first KV event means nothing."""
    value = _first_event_timeout(ctx.parsed)
    if value is None:
        return []
    try:
        ns = parse_go_duration_ns(value)
    except DurationError:
        return []  # reported by reject_out_of_range_first_event_timeout / the schema
    if ns >= 0:
        return []
    return [
        invalid(
            FIRST_EVENT_TIMEOUT,
            value,
            "must not be negative: it is how long the KV-event gate waits for the first "
            'event once the backend is up ("0" reports NoKVEventsObserved at once)',
        )
    ]


def reject_out_of_range_first_event_timeout(ctx: RuleContext) -> list[FieldError]:
    """exactly Go's time.ParseDuration, which also rejects a duration that
    does not fit int64 nanoseconds (the CRD pattern cannot express that bound)."""
    value = _first_event_timeout(ctx.parsed)
    if value is None:
        return []
    try:
        parse_go_duration_ns(value)
    except DurationError as exc:
        return [
            invalid(
                FIRST_EVENT_TIMEOUT,
                value,
                f"not a Go duration ({exc}): at most 2562047h47m16.854775807s",
            )
        ]
    return []

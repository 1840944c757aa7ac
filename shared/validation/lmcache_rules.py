"""LMCache: the host-memory tier's capacity."""

from __future__ import annotations

from shared import constants as c
from shared.api import effective
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    invalid,
)
from shared.validation.resource_entries import _parse_or_error

# ------------------------------------------------------------------- LMCache


def reject_non_positive_host_memory_capacity(ctx: RuleContext) -> list[FieldError]:
    """Spec "SGLang LMCache MP mode" bounds: lmCache.hostMemory.capacity is a positive
    quantity."""
    spec = ctx.parsed
    lm = spec.lm_cache
    if effective.cache_type(spec) != c.TYPE_LMCACHE or lm is None or lm.host_memory is None:
        return []
    capacity = lm.host_memory.capacity
    if capacity is None:
        return []
    path = SPEC.child("lmCache", "hostMemory", "capacity")
    value, error = _parse_or_error(capacity)
    if value is None:
        return [invalid(path, capacity, error or "not a quantity")]
    if value <= 0:
        return [invalid(path, capacity, "must be a positive quantity, such as 32Gi")]
    return []

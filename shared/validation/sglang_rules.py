"""SGLang: the supported roles, and the native HiCache tier's rules."""

from __future__ import annotations

import math
import re
from typing import Final

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackendSpec
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    forbidden,
    invalid,
    required,
)
from shared.validation.vocabulary import HICACHE, INTEGRATION

_RATIO_RE: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# -------------------------------------------------------------------- SGLang


def reject_unsupported_sglang_role(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectUnsupportedSGLangRole: (SGLang, LMCache) supports only ReadWrite."""
    spec = ctx.parsed
    role = effective.integration_role(spec)
    if (
        spec.runtime != c.RUNTIME_SGLANG
        or effective.cache_type(spec) != c.TYPE_LMCACHE
        or role == c.ROLE_READ_WRITE
    ):
        return []
    return [
        invalid(
            INTEGRATION.child("role"),
            role,
            "SGLang's LMCache integration has no kv_role split (it always both stores and "
            "retrieves); only ReadWrite is supported",
        )
    ]


# ------------------------------------------------------------------- HiCache


def _hicache_applies(spec: CacheBackendSpec) -> bool:
    return effective.cache_type(spec) == c.TYPE_SGLANG_HICACHE and spec.hi_cache is not None


def reject_missing_hicache_block(ctx: RuleContext) -> list[FieldError]:
    """Spec "SGLang native HiCache": spec.hiCache is required for type SGLangHiCache."""
    spec = ctx.parsed
    if effective.cache_type(spec) != c.TYPE_SGLANG_HICACHE or spec.hi_cache is not None:
        return []
    return [required(HICACHE, "type SGLangHiCache needs spec.hiCache with ratio or sizeGB")]


def _hicache(spec: CacheBackendSpec) -> bool:
    return effective.cache_type(spec) == c.TYPE_SGLANG_HICACHE


def reject_unsupported_hicache_role(ctx: RuleContext) -> list[FieldError]:
    """SGLang HiCache has no producer/consumer split (exactly as for
    SGLang+LMCache), so only ReadWrite is supported."""
    spec = ctx.parsed
    role = effective.integration_role(spec)
    if not _hicache(spec) or role == c.ROLE_READ_WRITE:
        return []
    return [
        invalid(
            INTEGRATION.child("role"),
            role,
            "SGLang HiCache has no producer/consumer split (the engine both stores to and "
            "reloads from its host tier); only ReadWrite is supported",
        )
    ]


def reject_hicache_fail_closed(ctx: RuleContext) -> list[FieldError]:
    """failOpen false on HiCache would be a silent no-op (no remote tier
    whose loss could close serving); the supported value is named."""
    spec = ctx.parsed
    if not _hicache(spec) or effective.fail_open(spec):
        return []
    return [
        invalid(
            INTEGRATION.child("failOpen"),
            False,
            "SGLang HiCache supports only failOpen: true (the default): its cache lives in "
            "the engine pod and has no remote tier whose loss could close serving, so false "
            "would be a silent no-op",
        )
    ]


def reject_hicache_without_engine_selector(ctx: RuleContext) -> list[FieldError]:
    """a HiCache backend does nothing unless it selects engine pods, so it
    needs a non-empty spec.engineSelector.matchLabels."""
    spec = ctx.parsed
    if not _hicache(spec):
        return []
    selector = spec.engine_selector
    if selector is not None and selector.match_labels:
        return []
    return [
        required(
            SPEC.child("engineSelector", "matchLabels"),
            "type SGLangHiCache configures the selected SGLang engine pods and provisions "
            "nothing else: set the labels of the engine pods to wire (an empty selector "
            "matches no pod)",
        )
    ]


def reject_ambiguous_hicache_capacity(ctx: RuleContext) -> list[FieldError]:
    """Spec "SGLang native HiCache": exactly one of ratio and sizeGB."""
    spec = ctx.parsed
    if not _hicache_applies(spec):
        return []
    hc = spec.hi_cache
    assert hc is not None
    if hc.ratio is not None and hc.size_gb is not None:
        return [
            forbidden(
                HICACHE.child("sizeGB"),
                "set exactly one of spec.hiCache.ratio and spec.hiCache.sizeGB, not both",
            )
        ]
    if hc.ratio is None and hc.size_gb is None:
        return [
            required(
                HICACHE,
                'exactly one of ratio (host-to-device pool ratio, such as "2.0") or sizeGB '
                "(host pool size in GB) is required",
            )
        ]
    return []


def reject_invalid_hicache_ratio(ctx: RuleContext) -> list[FieldError]:
    """Spec "SGLang native HiCache": ratio is a string with a finite number > 0."""
    spec = ctx.parsed
    if not _hicache_applies(spec):
        return []
    assert spec.hi_cache is not None
    ratio = spec.hi_cache.ratio
    if ratio is None or _valid_ratio(ratio):
        return []
    return [
        invalid(
            HICACHE.child("ratio"),
            ratio,
            'must be a finite decimal number greater than zero, such as "2.0"',
        )
    ]


def _valid_ratio(ratio: str) -> bool:
    if not _RATIO_RE.fullmatch(ratio):
        return False  # "nan", "inf", "-1", "abc", " 2", "1_0"
    try:
        value = float(ratio)
    except (ValueError, OverflowError):
        return False
    return math.isfinite(value) and value > 0

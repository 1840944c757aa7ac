"""Object-level rules: removed fields, the annotations' values, the runtime/cache pair (spec: "Runtime/cache pair must be supported by an installed adapter")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from shared import constants as c
from shared.api import effective
from shared.runtime_adapters import registry
from shared.tenancy import consent_annotation_error
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    FieldPath,
    forbidden,
    invalid,
)

# =========================================================== object-level rules


REMOVED_SPEC_FIELDS: Final[dict[tuple[str, ...], str]] = {
    ("integration", "engine"): (
        "spec.integration.engine was removed; the inference runtime is selected by "
        "spec.runtime (VLLM or SGLang)"
    ),
    ("integration", "firstEventTimeout"): (
        "spec.integration.firstEventTimeout was removed; use spec.observation.firstEventTimeout"
    ),
    ("backendConfig",): (
        "spec.backendConfig was removed; configure the engine cache in spec.lmCache (or "
        "spec.hiCache) and the provider workload in spec.remoteStorage.<provider> (image, "
        "command, resources)"
    ),
    ("resources",): (
        "spec.resources was removed; provider resources live under "
        "spec.remoteStorage.<provider>.resources (redis, lmCacheServer or mooncake)"
    ),
    ("storage",): (
        "spec.storage was removed: the managed LMCache server keeps KV in memory, so a PVC "
        "could not back it; choose a durable backend with spec.remoteStorage.provider: Mooncake"
    ),
}


def reject_removed_fields(ctx: RuleContext) -> list[FieldError]:
    """Spec "Breaking API cleanup": removed fields are not part of the served schema."""
    errors = []
    spec = ctx.raw_spec
    for parts, detail in REMOVED_SPEC_FIELDS.items():
        parent: Any = spec
        for part in parts[:-1]:
            parent = parent.get(part) if isinstance(parent, Mapping) else None
        if isinstance(parent, Mapping) and parent.get(parts[-1]) is not None:
            errors.append(forbidden(SPEC.child(*parts), detail))
    return errors


def reject_invalid_lmcache_kernel_check_annotation(ctx: RuleContext) -> list[FieldError]:
    """Spec "LMCache client kernels": the annotation is auto|report-only|strict|off, so a
    typo cannot silently relax strict enforcement."""
    value = ctx.annotations.get(c.ANNOTATION_LMCACHE_KERNEL_CHECK)
    # An explicit empty value is the same as unset (auto).
    if not value or value in c.KERNEL_CHECK_MODES:
        return []
    path = FieldPath("metadata").child("annotations").key(c.ANNOTATION_LMCACHE_KERNEL_CHECK)
    modes = ", ".join(f'"{mode}"' for mode in c.KERNEL_CHECK_MODES)
    return [
        invalid(
            path,
            value,
            f"must be one of {modes} (or unset, which means auto); an unrecognised value "
            f"would silently relax strict enforcement",
        )
    ]


def reject_invalid_skip_network_policy_annotation(ctx: RuleContext) -> list[FieldError]:
    """The NetworkPolicy opt-out is explicit: "true" or "false" (case-insensitive, or
    unset), so a typo never silently opens (or silently keeps closed) a cache tier."""
    value = ctx.annotations.get(c.ANNOTATION_SKIP_NETWORK_POLICY)
    if value is None or value.strip().lower() in c.SKIP_NETWORK_POLICY_VALUES:
        return []
    path = FieldPath("metadata").child("annotations").key(c.ANNOTATION_SKIP_NETWORK_POLICY)
    return [
        invalid(
            path,
            value,
            'must be "true" (no NetworkPolicy isolates the managed cache tier) or "false"',
        )
    ]


def reject_invalid_allowed_consumer_namespaces_annotation(ctx: RuleContext) -> list[FieldError]:
    """Cross-namespace consent is explicit and per namespace: a comma-separated list of
    namespace names, no wildcard, no empty entry (docs/decisions.md, "Cross-namespace
    consumers need the owner's consent")."""
    value = ctx.annotations.get(c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES)
    if value is None:
        return []
    error = consent_annotation_error(value)
    if error is None:
        return []
    path = FieldPath("metadata").child("annotations").key(c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES)
    return [invalid(path, value, error)]


def reject_unsupported_runtime_cache_pair(ctx: RuleContext) -> list[FieldError]:
    """Spec "Runtime/cache pair must be supported by an installed adapter"."""
    spec = ctx.parsed
    cache_type = effective.cache_type(spec)
    if registry.select_adapter(spec.runtime, cache_type) is not None:
        return []
    if cache_type == c.TYPE_VLLM_OFFLOADING:
        return []  # reported by reject_vllm_offloading_without_vllm_runtime
    pairs = ", ".join(registry.supported_pairs())
    # Scoped to spec.type: the runtime is a valid enum value, the engine-cache type is
    # what has no adapter for it.
    return [
        invalid(
            SPEC.child("type"),
            cache_type,
            f"no runtime adapter is installed for the (runtime {spec.runtime}, type "
            f"{cache_type}) pair {spec.runtime}/{cache_type}; supported (runtime/type) pairs: "
            f"{pairs}",
        )
    ]

"""Spec rules "Cache hierarchy must be internally consistent" and "Engine wire must accept the provider binding"."""

from __future__ import annotations

from shared import constants as c
from shared.api import effective
from shared.bindings import PROVIDER_PROTOCOL
from shared.runtime_adapters import registry
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    forbidden,
    invalid,
    required,
)
from shared.validation.vocabulary import (
    AUTOSCALING,
    HICACHE,
    PROVIDER_BLOCKS,
    REMOTE,
    is_events_only,
    is_managed_redis,
    is_mooncake,
)

# ----------------------------------------------------------- cache hierarchy


def reject_incomplete_remote_storage(ctx: RuleContext) -> list[FieldError]:
    """Spec "Cache hierarchy": a declared remote tier names its provider and its ownership."""
    rs = ctx.parsed.remote_storage
    if rs is None:
        return []
    errors = []
    if rs.provider is None:
        errors.append(
            required(
                REMOTE.child("provider"),
                "spec.remoteStorage selects a remote tier: set provider (Redis, LMCacheServer "
                "or Mooncake), or omit spec.remoteStorage for a host-only cache",
            )
        )
    if rs.ownership is None:
        errors.append(
            required(
                REMOTE.child("ownership"),
                "set Managed (the controller provisions the provider) or External (the "
                "operator runs it and sets spec.remoteStorage.endpoint)",
            )
        )
    return errors


def reject_provider_block_mismatch(ctx: RuleContext) -> list[FieldError]:
    """Spec "Cache hierarchy must be internally consistent": a provider's typed block only
    with that provider selected and Managed (it configures the managed workload)."""
    rs = ctx.parsed.remote_storage
    if rs is None:
        return []
    errors = []
    for block_provider, (wire, attr) in PROVIDER_BLOCKS.items():
        if getattr(rs, attr) is None:
            continue
        path = REMOTE.child(wire)
        if rs.provider is None:
            errors.append(
                forbidden(
                    path,
                    f"spec.remoteStorage.{wire} configures the {block_provider} provider, "
                    f"but spec.remoteStorage.provider is not set",
                )
            )
        elif rs.provider != block_provider:
            own_wire = PROVIDER_BLOCKS[rs.provider][0]
            errors.append(
                forbidden(
                    path,
                    f"spec.remoteStorage.{wire} configures the {block_provider} provider, but "
                    f"spec.remoteStorage.provider is {rs.provider}; move these settings to "
                    f"spec.remoteStorage.{own_wire}",
                )
            )
        elif rs.ownership == c.OWNERSHIP_EXTERNAL:
            errors.append(
                forbidden(
                    path,
                    f"spec.remoteStorage.{wire} configures the controller-managed "
                    f"{block_provider} workload; ownership External provisions none (remove "
                    f"it, or set ownership: Managed)",
                )
            )
    return errors


def reject_lmcache_block_with_non_lmcache_type(ctx: RuleContext) -> list[FieldError]:
    """Spec "Cache hierarchy": lmCache is used only with type LMCache."""
    spec = ctx.parsed
    cache_type = effective.cache_type(spec)
    if spec.lm_cache is None or cache_type == c.TYPE_LMCACHE:
        return []
    return [
        forbidden(
            SPEC.child("lmCache"),
            f"spec.lmCache configures the LMCache engine cache, but spec.type is {cache_type}"
            + (" (configure it in spec.hiCache)" if cache_type == c.TYPE_SGLANG_HICACHE else ""),
        )
    ]


def reject_hicache_block_with_non_hicache_type(ctx: RuleContext) -> list[FieldError]:
    """Spec "SGLang native HiCache": hiCache is used only with type SGLangHiCache."""
    spec = ctx.parsed
    cache_type = effective.cache_type(spec)
    if spec.hi_cache is None or cache_type == c.TYPE_SGLANG_HICACHE:
        return []
    return [
        forbidden(
            HICACHE,
            f"spec.hiCache configures SGLang native HiCache, but spec.type is {cache_type} "
            f"(set spec.type: SGLangHiCache, or remove spec.hiCache)",
        )
    ]


def reject_autoscaling_without_managed_workload(ctx: RuleContext) -> list[FieldError]:
    """Spec "Cache hierarchy": host-only (no remoteStorage) or External storage requests no
    workload, so there is nothing to autoscale."""
    spec = ctx.parsed
    if spec.autoscaling is None or is_events_only(spec) or is_mooncake(spec):
        return []  # reported by the events-only / Mooncake rules
    if is_managed_redis(spec):
        return []  # reported by reject_managed_redis_autoscaling
    if spec.remote_storage is None:
        reason = "this backend is host-only (no spec.remoteStorage) and provisions no workload"
    elif spec.remote_storage.ownership == c.OWNERSHIP_EXTERNAL:
        reason = "remoteStorage ownership External provisions no workload (the operator runs it)"
    else:
        return []
    return [
        forbidden(
            AUTOSCALING,
            f"spec.autoscaling scales a controller-managed provider workload; {reason}",
        )
    ]


# ----------------------------------------------------------- engine binding


def reject_unsupported_binding(ctx: RuleContext) -> list[FieldError]:
    """Spec "Engine wire must accept the provider binding": the (runtime, type) adapter
    must accept the selected provider's binding; native HiCache accepts only host-only."""
    spec = ctx.parsed
    adapter = registry.select_adapter(spec.runtime, effective.cache_type(spec))
    if adapter is None or is_events_only(spec):
        return []  # no adapter: reported by the pair rule; events-only wires no connector
    rs = spec.remote_storage
    if rs is not None and rs.provider is None:
        return []  # reported by reject_incomplete_remote_storage
    protocol = PROVIDER_PROTOCOL[rs.provider] if rs is not None and rs.provider else None
    if protocol in adapter.accepted_protocols:
        return []
    remote_ok = [
        f"{p} ({PROVIDER_PROTOCOL[p]})"
        for p in PROVIDER_BLOCKS
        if PROVIDER_PROTOCOL[p] in adapter.accepted_protocols
    ]
    if rs is None or rs.provider is None:
        # No adapter today needs a remote tier; kept so a future one is judged, not crashed.
        return [
            required(
                REMOTE,
                f"the {adapter.name} adapter needs a remote binding: " + ", ".join(remote_ok),
            )
        ]
    if not remote_ok:
        return [
            forbidden(
                REMOTE,
                f"the {adapter.name} adapter accepts only the host-only binding (its cache "
                f"lives inside the engine pod); remove spec.remoteStorage",
            )
        ]
    host_only = (
        " or no spec.remoteStorage (host-only)" if None in adapter.accepted_protocols else ""
    )
    return [
        invalid(
            REMOTE.child("provider"),
            rs.provider,
            f"the {adapter.name} adapter does not accept the {protocol} binding of the "
            f"{rs.provider} provider; it accepts {', '.join(remote_ok)}{host_only}",
        )
    ]

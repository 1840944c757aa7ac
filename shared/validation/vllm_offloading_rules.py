"""vLLM's built-in CPU offloading (type VLLMOffloading): the pair, its block, its capacity.

The rules that already cover the type are not repeated here: spec.remoteStorage is
refused by reject_unsupported_binding (the adapter accepts only the host-only
binding), spec.lmCache by reject_lmcache_block_with_non_lmcache_type, spec.hiCache by
reject_hicache_block_with_non_hicache_type, and an unknown evictionPolicy by the CRD
enum (the schema check).
"""

from __future__ import annotations

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
from shared.validation.resource_entries import _parse_or_error
from shared.validation.vocabulary import INTEGRATION, is_events_only

VLLM_OFFLOADING = SPEC.child("vllmOffloading")


def is_vllm_offloading(spec: CacheBackendSpec) -> bool:
    return effective.cache_type(spec) == c.TYPE_VLLM_OFFLOADING


def reject_vllm_offloading_without_vllm_runtime(ctx: RuleContext) -> list[FieldError]:
    """Type VLLMOffloading is vLLM's own OffloadingConnector: spec.runtime must be VLLM."""
    spec = ctx.parsed
    if not is_vllm_offloading(spec) or spec.runtime == c.RUNTIME_VLLM:
        return []
    return [
        invalid(
            SPEC.child("runtime"),
            spec.runtime,
            "type VLLMOffloading wires vLLM's built-in OffloadingConnector: spec.runtime must "
            "be VLLM (SGLang's own host tier is type SGLangHiCache)",
        )
    ]


def reject_events_only_vllm_offloading(ctx: RuleContext) -> list[FieldError]:
    """EventsOnly cannot carry a connector: type VLLMOffloading is one (the
    OffloadingConnector), so it runs only in mode Offload."""
    spec = ctx.parsed
    if not is_vllm_offloading(spec) or not is_events_only(spec):
        return []
    return [
        invalid(
            INTEGRATION.child("mode"),
            c.MODE_EVENTS_ONLY,
            "type VLLMOffloading is vLLM's OffloadingConnector, and mode EventsOnly wires no "
            "connector: use mode Offload (the kvevent-subscriber runs in both)",
        )
    ]


def reject_vllm_offloading_block_with_other_type(ctx: RuleContext) -> list[FieldError]:
    """spec.vllmOffloading is used only with type VLLMOffloading."""
    spec = ctx.parsed
    if spec.vllm_offloading is None or is_vllm_offloading(spec):
        return []
    return [
        forbidden(
            VLLM_OFFLOADING,
            f"spec.vllmOffloading configures vLLM's built-in CPU offloading, but spec.type is "
            f"{effective.cache_type(spec)} (set spec.type: VLLMOffloading, or remove it)",
        )
    ]


def reject_missing_vllm_offloading_capacity(ctx: RuleContext) -> list[FieldError]:
    """Type VLLMOffloading needs spec.vllmOffloading.cpu.capacity: the host memory the
    CPU tier may hold in one engine pod has no safe default."""
    spec = ctx.parsed
    if not is_vllm_offloading(spec) or effective.vllm_offloading_capacity(spec) is not None:
        return []
    return [
        required(
            VLLM_OFFLOADING.child("cpu", "capacity"),
            "type VLLMOffloading needs the host memory its CPU tier may hold in one engine "
            "pod, such as 64Gi",
        )
    ]


def reject_non_positive_vllm_offloading_capacity(ctx: RuleContext) -> list[FieldError]:
    """spec.vllmOffloading.cpu.capacity is a quantity above zero."""
    spec = ctx.parsed
    capacity = effective.vllm_offloading_capacity(spec)
    if not is_vllm_offloading(spec) or capacity is None:
        return []
    path = VLLM_OFFLOADING.child("cpu", "capacity")
    value, error = _parse_or_error(capacity)
    if value is None:
        return [invalid(path, capacity, error or "not a quantity")]
    if value <= 0:
        return [invalid(path, capacity, "must be a positive quantity, such as 64Gi")]
    return []

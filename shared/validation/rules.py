"""CacheBackend admission rules: one named, pure function per rule of the spec.

Each rule takes a :class:`RuleContext` and returns the ``FieldError`` list of its
violations (empty when the object satisfies it). Names are the spec's rule names in
snake_case (``rejectResourceClaims`` -> ``reject_resource_claims``) where the spec
names them, and ``reject_<what>`` for the rows of its Validating table and the other
admission constraints it states.

The rule functions live in modules named for the spec's groups of rules
(``object_rules``, ``hierarchy_rules``, ``endpoint_rules``, ``resource_rules``,
``replica_rules``, ``override_rules``, ``events_only_rules``, ``provider_rules``,
``sglang_rules``, ``lmcache_rules``, ``vllm_offloading_rules``, ``observation_rules``); this module holds the one
ordered registry of them. ``RULES`` is the ordered, pluggable list; :func:`validate` runs the schema check and
every rule and returns all violations, deduplicated, in a stable order. Each rule
declares which spec fields it reads so that a field the schema check rejected (and
pruned) does not make a rule judge a value the operator did not write.

Precedence, to give each mistake one error rather than several on the same field:

* spec.autoscaling that cannot apply is rejected by exactly one rule: events-only
  (reject_events_only_with_autoscaling), else Mooncake (reject_mooncake_autoscaling),
  else managed Redis (reject_managed_redis_autoscaling), else host-only/External
  (reject_autoscaling_without_managed_workload). The rules
  about the block's own fields (minReplicas with replicas 0, minReplicas <=
  maxReplicas) state their own conditions and judge it regardless.
* Type VLLMOffloading off its own ground is rejected once: a runtime other than VLLM
  by reject_vllm_offloading_without_vllm_runtime (not the pair rule), mode EventsOnly
  by reject_events_only_vllm_offloading (not the events-only type rule).
* Contents of a block that is itself rejected (lmCache on a non-LMCache type, hiCache
  on a non-HiCache type) are not judged further.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared import constants as c
from shared.api.models import CacheBackendSpec
from shared.validation.context import RuleContext, backend_annotations, judged_form, namespace_of
from shared.validation.endpoint_rules import (
    reject_cross_namespace_endpoint,
    reject_external_without_endpoint,
    reject_invalid_endpoint_shape,
    reject_managed_endpoint,
)
from shared.validation.events_only_rules import (
    reject_events_only_with_autoscaling,
    reject_events_only_with_non_lmcache_type,
    reject_events_only_with_remote_storage,
)
from shared.validation.field_errors import (
    FieldError,
)
from shared.validation.hierarchy_rules import (
    reject_autoscaling_without_managed_workload,
    reject_hicache_block_with_non_hicache_type,
    reject_incomplete_remote_storage,
    reject_lmcache_block_with_non_lmcache_type,
    reject_provider_block_mismatch,
    reject_unsupported_binding,
)
from shared.validation.lmcache_rules import reject_non_positive_host_memory_capacity
from shared.validation.object_rules import (
    reject_invalid_allowed_consumer_namespaces_annotation,
    reject_invalid_lmcache_kernel_check_annotation,
    reject_invalid_skip_network_policy_annotation,
    reject_removed_fields,
    reject_unsupported_runtime_cache_pair,
)
from shared.validation.observation_rules import (
    reject_negative_first_event_timeout,
    reject_out_of_range_first_event_timeout,
)
from shared.validation.override_rules import (
    reject_non_object_lmcache_extra_config,
    reject_reserved_engine_overrides,
)
from shared.validation.provider_rules import (
    reject_managed_redis_autoscaling,
    reject_managed_redis_multiple_replicas,
    reject_mooncake_autoscaling,
    reject_mooncake_multiple_replicas,
    reject_unneeded_engine_host_network,
)
from shared.validation.replica_rules import (
    reject_min_replicas_above_max_replicas,
    reject_zero_replicas_autoscaling_without_min_replicas,
)
from shared.validation.resource_rules import (
    reject_fractional_extended_resources,
    reject_invalid_resource_names,
    reject_malformed_resource_quantities,
    reject_misaligned_hugepage_quantities,
    reject_negative_resource_quantities,
    reject_requests_only_for_non_overcommittable_resources,
    reject_resource_claims,
    reject_resource_limits_below_requests,
)
from shared.validation.schema import Loc, parse_spec, spec_type_error
from shared.validation.sglang_rules import (
    reject_ambiguous_hicache_capacity,
    reject_hicache_fail_closed,
    reject_hicache_without_engine_selector,
    reject_invalid_hicache_ratio,
    reject_missing_hicache_block,
    reject_unsupported_hicache_role,
    reject_unsupported_sglang_role,
)
from shared.validation.vllm_offloading_rules import (
    reject_events_only_vllm_offloading,
    reject_missing_vllm_offloading_capacity,
    reject_non_positive_vllm_offloading_capacity,
    reject_vllm_offloading_block_with_other_type,
    reject_vllm_offloading_without_vllm_runtime,
)

# ===================================================================== registry


RuleCheck = Callable[[RuleContext], list[FieldError]]


@dataclass(frozen=True)
class Rule:
    """A rule and the spec fields it reads (wire names, dotted, relative to .spec).

    ``needs_spec=False`` rules read only ``ctx.raw``/``ctx.annotations`` and run even
    when the spec could not be parsed at all.
    """

    check: RuleCheck
    reads: tuple[str, ...] = ()
    needs_spec: bool = True

    @property
    def name(self) -> str:
        return self.check.__name__

    def blocked_by(self, pruned: Sequence[Loc]) -> bool:
        """Whether a field this rule reads was rejected (and pruned) by the schema check."""
        if not pruned:  # the usual case: nothing was pruned, nothing is blocked
            return False
        for read in self.reads:
            parts = tuple(read.split("."))
            for loc in pruned:
                n = min(len(parts), len(loc))
                if parts[:n] == tuple(loc[:n]):
                    return True
        return False


_PAIR = ("runtime", "type")
# The remote tier's selection: which provider, which lifecycle (a bad value inside a
# provider block does not change it, so it does not block rules that only read this).
_SELECTION = ("remoteStorage.provider", "remoteStorage.ownership")
_ENDPOINT = (*_SELECTION, "remoteStorage.endpoint")
# Resource rules read the selected block; any pruned entry in a block blocks them, so a
# relational rule never mistakes a rejected half for a missing one.
_BLOCKS = (
    *_SELECTION,
    "remoteStorage.redis.resources",
    "remoteStorage.lmCacheServer.resources",
    "remoteStorage.mooncake.resources",
)
_MODE = "integration.mode"
_MIN_REPLICAS = "autoscaling.minReplicas"

# A rule that only needs to know that a block is present does not read it: a block the
# schema check pruned entirely is absent for it too, while one that only lost a bad
# child is still there. A rule that reads a value reads its full path, so a pruned
# value is never mistaken for an omitted one.
RULES: list[Rule] = [
    Rule(reject_removed_fields, needs_spec=False),
    Rule(reject_invalid_lmcache_kernel_check_annotation, needs_spec=False),
    Rule(reject_invalid_skip_network_policy_annotation, needs_spec=False),
    Rule(reject_invalid_allowed_consumer_namespaces_annotation, needs_spec=False),
    Rule(reject_unsupported_runtime_cache_pair, _PAIR),
    # Cache hierarchy must be internally consistent.
    Rule(reject_incomplete_remote_storage, _SELECTION),
    Rule(reject_provider_block_mismatch, _SELECTION),
    Rule(reject_lmcache_block_with_non_lmcache_type, ("type",)),
    Rule(reject_hicache_block_with_non_hicache_type, ("type",)),
    Rule(reject_autoscaling_without_managed_workload, (*_SELECTION, _MODE)),
    # Endpoints.
    Rule(reject_external_without_endpoint, _ENDPOINT),
    Rule(reject_managed_endpoint, _ENDPOINT),
    Rule(reject_invalid_endpoint_shape, _ENDPOINT),
    Rule(reject_cross_namespace_endpoint, (*_ENDPOINT, "allowCrossNamespace")),
    # Engine wire must accept the provider binding.
    Rule(reject_unsupported_binding, (*_PAIR, *_SELECTION, _MODE)),
    # Provider resources, at the selected provider's path.
    Rule(reject_invalid_resource_names, _BLOCKS),
    Rule(reject_malformed_resource_quantities, _BLOCKS),
    Rule(reject_negative_resource_quantities, _BLOCKS),
    Rule(reject_resource_claims, _BLOCKS),
    Rule(reject_resource_limits_below_requests, _BLOCKS),
    Rule(reject_requests_only_for_non_overcommittable_resources, _BLOCKS),
    Rule(reject_fractional_extended_resources, _BLOCKS),
    Rule(reject_misaligned_hugepage_quantities, _BLOCKS),
    # Replicas and autoscaling.
    Rule(reject_zero_replicas_autoscaling_without_min_replicas, ("replicas", _MIN_REPLICAS)),
    Rule(reject_min_replicas_above_max_replicas, (_MIN_REPLICAS, "autoscaling.maxReplicas")),
    # Engine overrides (a list the schema pruned is absent: its entries were reported).
    Rule(reject_reserved_engine_overrides, _PAIR),
    Rule(reject_non_object_lmcache_extra_config, (*_PAIR, *_SELECTION)),
    # Events-only mode.
    Rule(reject_events_only_with_non_lmcache_type, ("type", _MODE)),
    Rule(reject_events_only_with_remote_storage, (_MODE,)),
    Rule(reject_events_only_with_autoscaling, (_MODE,)),
    # SGLang.
    Rule(reject_unsupported_sglang_role, (*_PAIR, "integration.role")),
    # Mooncake.
    Rule(reject_mooncake_multiple_replicas, (*_SELECTION, "replicas")),
    Rule(reject_mooncake_autoscaling, (*_SELECTION, _MODE)),
    # Managed Redis (one non-clustered instance).
    Rule(reject_managed_redis_multiple_replicas, (*_SELECTION, "replicas")),
    Rule(reject_managed_redis_autoscaling, (*_SELECTION, _MODE)),
    Rule(reject_unneeded_engine_host_network, (*_SELECTION, "integration.engineHostNetwork")),
    # SGLang native HiCache.
    Rule(reject_missing_hicache_block, ("type", "hiCache")),
    Rule(reject_unsupported_hicache_role, ("type", "integration.role")),
    Rule(reject_hicache_fail_closed, ("type", "integration.failOpen")),
    Rule(reject_hicache_without_engine_selector, ("type", "engineSelector.matchLabels")),
    Rule(reject_ambiguous_hicache_capacity, ("type", "hiCache.ratio", "hiCache.sizeGB")),
    Rule(reject_invalid_hicache_ratio, ("type", "hiCache.ratio")),
    # LMCache.
    Rule(reject_non_positive_host_memory_capacity, ("type", "lmCache.hostMemory.capacity")),
    # vLLM's built-in CPU offloading.
    Rule(reject_vllm_offloading_without_vllm_runtime, _PAIR),
    Rule(reject_events_only_vllm_offloading, ("type", _MODE)),
    Rule(reject_vllm_offloading_block_with_other_type, ("type",)),
    Rule(reject_missing_vllm_offloading_capacity, ("type", "vllmOffloading.cpu.capacity")),
    Rule(reject_non_positive_vllm_offloading_capacity, ("type", "vllmOffloading.cpu.capacity")),
    # Observation.
    Rule(reject_negative_first_event_timeout, ("observation.firstEventTimeout",)),
    Rule(reject_out_of_range_first_event_timeout, ("observation.firstEventTimeout",)),
]


# ==================================================================== validate


def dedupe(errors: Sequence[FieldError]) -> list[FieldError]:
    """First occurrence of each (Type, Field, BadValue, Detail), order kept."""
    seen: set[tuple[str, str, Any, str]] = set()
    out = []
    for error in errors:
        key = error.key()
        if key not in seen:
            seen.add(key)
            out.append(error)
    return out


def validate(
    obj: Mapping[str, Any], namespace: str = "", rules: Sequence[Rule] | None = None
) -> list[FieldError]:
    """Every violation of ``obj`` (a CacheBackend as JSON), judged as if applied.

    Omitted fields count as their CRD schema defaults. Schema errors come first, then
    each rule's in ``RULES`` order. ``namespace`` is the request's namespace (empty:
    metadata.namespace, else "default").
    """
    raw = judged_form(obj)
    ns = namespace_of(raw, namespace)
    errors: list[FieldError] = []
    raw_spec = raw.get("spec")
    spec: CacheBackendSpec | None = None
    pruned: list[Loc] = []
    if isinstance(raw_spec, dict):
        spec, schema_errors, pruned = parse_spec(raw_spec)
        errors.extend(schema_errors)
    else:
        errors.append(spec_type_error(raw_spec))
    ctx = RuleContext(spec, raw, ns, backend_annotations(raw))
    for rule in RULES if rules is None else rules:
        if rule.needs_spec and (spec is None or rule.blocked_by(pruned)):
            continue
        errors.extend(rule.check(ctx))
    return dedupe(errors)


MOONCAKE_HOST_NETWORK_WARNING: Final = (
    "Mooncake: set spec.integration.engineHostNetwork=true and roll the engine pods, or they "
    "stay off the host network and transfer zero KV while the backend reports Ready"
)


def warnings(obj: Mapping[str, Any]) -> list[str]:
    """Admission warnings for an object that may well be admitted."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    rs = spec.get("remoteStorage")
    integration = spec.get("integration")
    host_network = (
        integration.get("engineHostNetwork") if isinstance(integration, Mapping) else None
    )
    out = []
    if (
        isinstance(rs, Mapping)
        and rs.get("provider") == c.PROVIDER_MOONCAKE
        and host_network is not True
    ):
        out.append(MOONCAKE_HOST_NETWORK_WARNING)
    return out

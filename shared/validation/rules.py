"""CacheBackend admission rules: one named, pure function per rule of the spec.

Each rule takes a :class:`RuleContext` and returns the ``FieldError`` list of its
violations (empty when the object satisfies it). Names are the spec's rule names in
snake_case (``rejectResourceClaims`` -> ``reject_resource_claims``) where the spec
names them, and ``reject_<what>`` for the rows of its Validating table and the other
admission constraints it states.

``RULES`` is the ordered, pluggable list; :func:`validate` runs the schema check and
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
* Contents of a block that is itself rejected (lmCache on a non-LMCache type, hiCache
  on a non-HiCache type) are not judged further.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property, lru_cache
from typing import Any, Final, Literal, NamedTuple

from shared import constants as c
from shared.api import effective
from shared.api.defaults import with_spec_defaults
from shared.api.duration import DurationError, parse_go_duration_ns
from shared.api.models import CacheBackendSpec, ResourceRequirements
from shared.bindings import PROVIDER_PROTOCOL
from shared.endpoints import endpoint_shape_error, service_namespace
from shared.labels import is_qualified_name
from shared.quantity import is_integer, is_multiple_of, parse_quantity
from shared.runtime_adapters import registry
from shared.tenancy import consent_annotation_error
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    FieldPath,
    forbidden,
    invalid,
    required,
)
from shared.validation.schema import Loc, drop_nulls, parse_spec, spec_type_error

# ----------------------------------------------------------------------- context


@dataclass(frozen=True)
class RuleContext:
    """What a rule may look at. ``raw`` has the CRD's schema defaults applied."""

    spec: CacheBackendSpec | None
    raw: Mapping[str, Any]
    namespace: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def parsed(self) -> CacheBackendSpec:
        """The parsed spec; only rules with ``needs_spec`` (the default) use it."""
        if self.spec is None:
            raise RuntimeError("rule needs a parsed spec but none is available")
        return self.spec

    # The resource rules all read the selected provider's entries: parsed once per
    # object, not once per rule.
    @cached_property
    def resource_entries(self) -> tuple[_Entry, ...]:
        return tuple(_entries(self.parsed))

    @cached_property
    def judged_resource_entries(self) -> tuple[tuple[_Entry, ResourceKind, Decimal], ...]:
        return tuple(_judged_entries(self.resource_entries))

    @property
    def raw_spec(self) -> Mapping[str, Any]:
        spec = self.raw.get("spec")
        return spec if isinstance(spec, Mapping) else {}


def context_for(obj: Mapping[str, Any], namespace: str = "") -> RuleContext:
    """A context for one object (schema defaults applied); raises when the spec does not parse.

    For tests and callers that run a single rule; :func:`validate` builds its own.
    """
    raw = judged_form(obj)
    spec, errors, _ = parse_spec(dict(raw.get("spec") or {}))
    if spec is None or errors:
        raise ValueError(f"spec does not parse: {[str(e) for e in errors]}")
    return RuleContext(spec, raw, _namespace_of(raw, namespace), _annotations_of(raw))


# ------------------------------------------------------------------ vocabulary

REMOTE: Final = SPEC.child("remoteStorage")
AUTOSCALING: Final = SPEC.child("autoscaling")
INTEGRATION: Final = SPEC.child("integration")
HICACHE: Final = SPEC.child("hiCache")
OVERRIDES: Final = INTEGRATION.child("engineOverrides")

# Provider -> (wire name of its typed block, attribute on RemoteStorage).
PROVIDER_BLOCKS: Final[dict[str, tuple[str, str]]] = {
    c.PROVIDER_REDIS: ("redis", "redis"),
    c.PROVIDER_LMCACHE_SERVER: ("lmCacheServer", "lm_cache_server"),
    c.PROVIDER_MOONCAKE: ("mooncake", "mooncake"),
}

STANDARD_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX: Final = "hugepages-"

_RATIO_RE: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

ResourceKind = Literal["standard", "hugepages", "extended"]


def _mode(spec: CacheBackendSpec) -> str:
    return effective.integration_mode(spec)


def _events_only(spec: CacheBackendSpec) -> bool:
    return _mode(spec) == c.MODE_EVENTS_ONLY


def _provider(spec: CacheBackendSpec) -> str | None:
    return spec.remote_storage.provider if spec.remote_storage else None


def _ownership(spec: CacheBackendSpec) -> str | None:
    return spec.remote_storage.ownership if spec.remote_storage else None


def _endpoint(spec: CacheBackendSpec) -> str:
    """The trimmed endpoint ("" when unset or whitespace-only)."""
    rs = spec.remote_storage
    return (rs.endpoint or "").strip() if rs else ""


def _mooncake(spec: CacheBackendSpec) -> bool:
    """Spec: the Mooncake rules apply "when remoteStorage.provider: Mooncake"."""
    return _provider(spec) == c.PROVIDER_MOONCAKE


def _managed_redis(spec: CacheBackendSpec) -> bool:
    """the managed Redis rules apply with provider Redis and ownership Managed."""
    return _provider(spec) == c.PROVIDER_REDIS and _ownership(spec) == c.OWNERSHIP_MANAGED


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
    if spec.autoscaling is None or _events_only(spec) or _mooncake(spec):
        return []  # reported by the events-only / Mooncake rules
    if _managed_redis(spec):
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


# ------------------------------------------------------------------ endpoints


def reject_external_without_endpoint(ctx: RuleContext) -> list[FieldError]:
    """Spec "External remote storage requires an endpoint" (whitespace-only is empty)."""
    spec = ctx.parsed
    if _ownership(spec) != c.OWNERSHIP_EXTERNAL or _endpoint(spec):
        return []
    provider = _provider(spec) or "remote"
    return [
        required(
            REMOTE.child("endpoint"),
            f"ownership External needs the address of the operator-run {provider} storage "
            f"(host:port)",
        )
    ]


def reject_managed_endpoint(ctx: RuleContext) -> list[FieldError]:
    """Spec "Endpoint ownership is explicit": a Managed endpoint comes from the Service the
    controller provisions, so a user-supplied value is rejected."""
    spec = ctx.parsed
    if _ownership(spec) != c.OWNERSHIP_MANAGED or not _endpoint(spec):
        return []
    return [
        forbidden(
            REMOTE.child("endpoint"),
            "ownership Managed publishes the provisioned Service's address in status.endpoint; "
            "remove spec.remoteStorage.endpoint (or set ownership: External)",
        )
    ]


def reject_invalid_endpoint_shape(ctx: RuleContext) -> list[FieldError]:
    """Spec "Externally owned remote storage": the provider's endpoint shape."""
    spec = ctx.parsed
    provider = _provider(spec)
    if _ownership(spec) != c.OWNERSHIP_EXTERNAL or provider is None or not _endpoint(spec):
        return []
    assert spec.remote_storage is not None
    assert spec.remote_storage.endpoint is not None
    error = endpoint_shape_error(provider, spec.remote_storage.endpoint)
    if error is None:
        return []
    return [invalid(REMOTE.child("endpoint"), spec.remote_storage.endpoint, error)]


def reject_cross_namespace_endpoint(ctx: RuleContext) -> list[FieldError]:
    """Spec "Cross-namespace endpoint requires opt-in" (spec.allowCrossNamespace)."""
    spec = ctx.parsed
    provider = _provider(spec)
    endpoint = _endpoint(spec)
    if _ownership(spec) != c.OWNERSHIP_EXTERNAL or not endpoint or spec.allow_cross_namespace:
        return []
    if provider is not None and endpoint_shape_error(provider, endpoint) is not None:
        return []  # reject_invalid_endpoint_shape reports it; the namespace is moot
    namespace = service_namespace(endpoint, ctx.namespace)
    if namespace is None or namespace == ctx.namespace:
        return []
    assert spec.remote_storage is not None
    return [
        invalid(
            REMOTE.child("endpoint"),
            spec.remote_storage.endpoint,
            f'resolves to a Service in namespace "{namespace}", not the CacheBackend\'s '
            f'namespace "{ctx.namespace}"; set spec.allowCrossNamespace: true to cross that '
            f"tenancy boundary",
        )
    ]


# ----------------------------------------------------------- engine binding


def reject_unsupported_binding(ctx: RuleContext) -> list[FieldError]:
    """Spec "Engine wire must accept the provider binding": the (runtime, type) adapter
    must accept the selected provider's binding; native HiCache accepts only host-only."""
    spec = ctx.parsed
    adapter = registry.select_adapter(spec.runtime, effective.cache_type(spec))
    if adapter is None or _events_only(spec):
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


# ---------------------------------------------------------- provider resources


class _Entry(NamedTuple):
    """One requests/limits entry of the selected provider's resources (a tuple: built
    for every entry of every review, and a frozen dataclass costs several times more)."""

    block: FieldPath  # spec.remoteStorage.<provider>.resources
    which: str  # "requests" | "limits"
    name: str
    raw: int | str
    value: Decimal | None  # None: malformed, see error
    error: str | None

    @property
    def path(self) -> FieldPath:
        """Only errors name it: built when one is reported."""
        return self.block.child(self.which).key(self.name)


def _selected_resources(spec: CacheBackendSpec) -> tuple[FieldPath, ResourceRequirements] | None:
    """spec.remoteStorage.<selected provider>.resources, with its path."""
    rs = spec.remote_storage
    if rs is None or rs.provider is None:
        return None
    wire, attr = PROVIDER_BLOCKS[rs.provider]
    block = getattr(rs, attr)
    if block is None or block.resources is None:
        return None
    return REMOTE.child(wire, "resources"), block.resources


def _parse_or_error(raw: int | str) -> tuple[Decimal | None, str | None]:
    try:
        return parse_quantity(raw), None
    except ValueError as exc:
        return None, str(exc)


def _parse(raw: int | str) -> Decimal | None:
    return _parse_or_error(raw)[0]


def _entries(spec: CacheBackendSpec) -> Iterator[_Entry]:
    selected = _selected_resources(spec)
    if selected is None:
        return
    base, resources = selected
    for which in ("requests", "limits"):
        values = getattr(resources, which) or {}
        for name in sorted(values):
            raw = values[name]
            value, error = _parse_or_error(raw)
            yield _Entry(base, which, name, raw, value, error)


# Pure functions of a resource name, asked by several rules about every entry of every
# review: answered once per distinct name per process (bounded).
@lru_cache(maxsize=1024)
def resource_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid container resource name (the apiserver's rules)."""
    if name in STANDARD_RESOURCES:
        return None
    if name.startswith(HUGEPAGES_PREFIX):
        size = _parse(name[len(HUGEPAGES_PREFIX) :])
        if size is None or size <= 0:
            return (
                "hugepages-<size> needs a strictly positive page-size quantity, such as "
                "hugepages-2Mi or hugepages-1Gi"
            )
        return None
    if "/" not in name:
        return (
            "must be a standard resource for containers (cpu, memory, ephemeral-storage), "
            "hugepages-<size>, or a vendor-prefixed extended resource such as nvidia.com/gpu"
        )
    if "kubernetes.io/" in name:
        return (
            "the kubernetes.io/ and requests.kubernetes.io/ prefixes are reserved for native "
            "resources; extended resources carry their vendor's domain, such as nvidia.com/gpu"
        )
    if name.startswith("requests."):
        return "extended resource names must not start with requests."
    if not (is_qualified_name(name) and is_qualified_name("requests." + name)):
        return (
            "must be a qualified name: a DNS subdomain prefix, '/', and a name of at most 63 "
            "characters (alphanumerics, '-', '_' or '.', starting and ending with an "
            "alphanumeric), such as nvidia.com/gpu"
        )
    return None


@lru_cache(maxsize=1024)
def resource_kind(name: str) -> ResourceKind | None:
    """standard (overcommittable), hugepages, extended; None for an invalid name."""
    if resource_name_error(name) is not None:
        return None
    if name in STANDARD_RESOURCES:
        return "standard"
    if name.startswith(HUGEPAGES_PREFIX):
        return "hugepages"
    return "extended"


def _judged_entries(
    entries: Sequence[_Entry],
) -> Iterator[tuple[_Entry, ResourceKind, Decimal]]:
    """Entries with a valid name and a well-formed, non-negative quantity.

    Malformed names, malformed and negative quantities are each reported by their own
    rule; the relational rules below skip them rather than pile on.
    """
    for entry in entries:
        kind = resource_kind(entry.name)
        if kind is not None and entry.value is not None and entry.value >= 0:
            yield entry, kind, entry.value


def reject_invalid_resource_names(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectInvalidResourceNames: standard, hugepages-<positive size>, or a
    vendor-prefixed qualified name outside kubernetes.io/; names the offending key."""
    errors = []
    for entry in ctx.resource_entries:
        reason = resource_name_error(entry.name)
        if reason is not None:
            errors.append(invalid(entry.path, entry.name, reason))
    return errors


def reject_malformed_resource_quantities(ctx: RuleContext) -> list[FieldError]:
    """CRD schema: each requests/limits entry is a resource.Quantity (the apiserver's
    pattern check, repeated for replayed reviews that never went through it)."""
    return [
        invalid(entry.path, entry.raw, entry.error or "not a quantity")
        for entry in ctx.resource_entries
        if entry.value is None
    ]


def reject_negative_resource_quantities(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectNegativeResourceQuantities: strictly negative entries; zero is admitted."""
    return [
        invalid(entry.path, entry.raw, "must be greater than or equal to 0")
        for entry in ctx.resource_entries
        if entry.value is not None and entry.value < 0
    ]


def reject_resource_claims(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectResourceClaims: DRA claims until pod-level resourceClaims are rendered."""
    selected = _selected_resources(ctx.parsed)
    if selected is None or not selected[1].claims:
        return []
    base, resources = selected
    names = ", ".join(claim.name for claim in resources.claims or [])
    return [
        forbidden(
            base.child("claims"),
            f"Dynamic Resource Allocation claims ({names}) are not supported yet: the provider "
            f"renderer does not create the matching pod-level spec.resourceClaims",
        )
    ]


def reject_resource_limits_below_requests(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectResourceLimitsBelowRequests: overcommittable limits >= requests;
    hugepages and extended resources limits == requests (when both are set)."""
    judged = ctx.judged_resource_entries
    limits = {e.name: (e, v) for e, _, v in judged if e.which == "limits"}
    errors = []
    for entry, kind, request in judged:
        if entry.which != "requests" or entry.name not in limits:
            continue
        limit_entry, limit = limits[entry.name]
        if kind == "standard":
            if request > limit:
                errors.append(
                    invalid(
                        limit_entry.path,
                        limit_entry.raw,
                        f"must be greater than or equal to {entry.name} request of "
                        f"{entry.raw} (requests[{entry.name}])",
                    )
                )
        elif request != limit:
            errors.append(
                invalid(
                    limit_entry.path,
                    limit_entry.raw,
                    f"must be equal to {entry.name} request of {entry.raw} "
                    f"(requests[{entry.name}]): {kind} resources cannot be overcommitted",
                )
            )
    return errors


def reject_requests_only_for_non_overcommittable_resources(
    ctx: RuleContext,
) -> list[FieldError]:
    """Spec rejectRequestsOnlyForNonOvercommittableResources: hugepages and extended
    resources declare both halves (requests-only is fine for cpu/memory/ephemeral-storage)."""
    selected = _selected_resources(ctx.parsed)
    if selected is None:
        return []
    base, resources = selected
    limits = resources.limits or {}
    errors = []
    for entry in ctx.resource_entries:
        kind = resource_kind(entry.name)
        if (
            entry.which == "requests"
            and kind in ("hugepages", "extended")
            and entry.name not in limits
        ):
            errors.append(
                invalid(
                    entry.path,
                    entry.raw,
                    f"{entry.name} is not overcommittable: it must also be set in "
                    f"{base.child('limits').key(entry.name)} with the same value",
                )
            )
    return errors


def reject_fractional_extended_resources(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectFractionalExtendedResources: extended resources come in whole units."""
    return [
        invalid(entry.path, entry.raw, "must be an integer: extended resources are whole units")
        for entry, kind, value in ctx.judged_resource_entries
        if kind == "extended" and not is_integer(value)
    ]


def reject_misaligned_hugepage_quantities(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectMisalignedHugepageQuantities: a positive quantity is a whole multiple of
    the page size parsed from the name (zero admits; negatives are reported upstream)."""
    errors = []
    for entry, kind, value in ctx.judged_resource_entries:
        if kind != "hugepages" or value == 0:
            continue
        size_text = entry.name[len(HUGEPAGES_PREFIX) :]
        page = parse_quantity(size_text)
        if not is_multiple_of(value, page):
            errors.append(
                invalid(
                    entry.path,
                    entry.raw,
                    f"must be a whole multiple of the {size_text} page size",
                )
            )
    return errors


# --------------------------------------------------------------- autoscaling


def reject_zero_replicas_autoscaling_without_min_replicas(ctx: RuleContext) -> list[FieldError]:
    """Spec "spec.replicas=0 + autoscaling requires explicit minReplicas"."""
    spec = ctx.parsed
    a = spec.autoscaling
    if a is None or a.min_replicas is not None or effective.replicas(spec) != 0:
        return []
    return [
        required(
            AUTOSCALING.child("minReplicas"),
            "spec.replicas is 0, so minReplicas cannot be defaulted from it: set "
            "spec.autoscaling.minReplicas explicitly, or remove spec.autoscaling to scale to "
            "zero unconditionally (otherwise the HPA would silently keep 1 replica)",
        )
    ]


def reject_min_replicas_above_max_replicas(ctx: RuleContext) -> list[FieldError]:
    """Spec autoscaling cross-field validation: minReplicas <= maxReplicas."""
    spec = ctx.parsed
    a = spec.autoscaling
    if a is None or a.min_replicas is None or a.min_replicas <= a.max_replicas:
        return []
    return [
        invalid(
            AUTOSCALING.child("minReplicas"),
            a.min_replicas,
            f"must be less than or equal to spec.autoscaling.maxReplicas ({a.max_replicas})",
        )
    ]


# ---------------------------------------------------------- engine overrides


def leading_flag(arg: str) -> str:
    """The leading flag token: "--kv-transfer-config={...}" and "--kv-transfer-config x"
    both give "--kv-transfer-config"."""
    stripped = arg.strip()
    token = stripped.split(None, 1)[0] if stripped else ""
    return token.split("=", 1)[0]


def reject_reserved_engine_overrides(ctx: RuleContext) -> list[FieldError]:
    """Spec "Reserved declarations and admission hard-reject": engineOverrides.{args,
    suppressArgs} vs ReservedArgs() and {env, suppressEnv} vs ReservedEnv() of the
    selected adapter; the error names the flag/env and the adapter."""
    spec = ctx.parsed
    overrides = spec.integration.engine_overrides if spec.integration else None
    adapter = registry.select_adapter(spec.runtime, effective.cache_type(spec))
    if overrides is None or adapter is None:
        return []
    errors = []

    def reserved(path: FieldPath, what: str, name: str, verb: str) -> FieldError:
        return forbidden(
            path,
            f"{what} {name} is reserved by the {adapter.name} adapter: the cache integration "
            f"cannot function without it, so it cannot be {verb} (to skip injection on a pod "
            f"use the {c.ANNOTATION_SKIP_INJECT} annotation)",
        )

    for i, arg in enumerate(overrides.args or []):
        flag = leading_flag(arg)
        if flag in adapter.reserved_args:
            errors.append(reserved(OVERRIDES.child("args").item(i), "flag", flag, "overridden"))
    for i, arg in enumerate(overrides.suppress_args or []):
        flag = leading_flag(arg)
        if flag in adapter.reserved_args:
            path = OVERRIDES.child("suppressArgs").item(i)
            errors.append(reserved(path, "flag", flag, "suppressed"))
    for i, env in enumerate(overrides.env or []):
        if env.name in adapter.reserved_env:
            path = OVERRIDES.child("env").item(i).child("name")
            errors.append(reserved(path, "env", env.name, "overridden"))
    for i, name in enumerate(overrides.suppress_env or []):
        if name in adapter.reserved_env:
            path = OVERRIDES.child("suppressEnv").item(i)
            errors.append(reserved(path, "env", name, "suppressed"))
    return errors


LMCACHE_EXTRA_CONFIG: Final = "LMCACHE_EXTRA_CONFIG"


def extra_config_error(value: str) -> str | None:
    """Why an LMCACHE_EXTRA_CONFIG value is not a JSON object; None when it is one or is
    empty (LMCache reads an empty value as unset)."""
    if not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if isinstance(parsed, dict):
        return None
    kind = {list: "array", str: "string", bool: "boolean"}.get(type(parsed), "scalar")
    return f"a JSON {kind}, not an object"


def reject_non_object_lmcache_extra_config(ctx: RuleContext) -> list[FieldError]:
    """An engineOverrides.env ``LMCACHE_EXTRA_CONFIG`` must be a JSON object: LMCache
    parses it with json.loads into its extra_config dict, and for a Mooncake binding the
    Pod webhook merges the master address into it (so there it must be a literal value,
    not valueFrom). Reported at the entry's value."""
    spec = ctx.parsed
    overrides = spec.integration.engine_overrides if spec.integration else None
    if overrides is None or effective.cache_type(spec) != c.TYPE_LMCACHE:
        return []
    merged_by_webhook = spec.runtime == c.RUNTIME_VLLM and _mooncake(spec)
    errors = []
    for i, env in enumerate(overrides.env or []):
        if env.name != LMCACHE_EXTRA_CONFIG:
            continue
        path = OVERRIDES.child("env").item(i)
        if env.value is None and env.value_from is not None and merged_by_webhook:
            errors.append(
                invalid(
                    path.child("valueFrom"),
                    "",
                    "must be a literal JSON object value: the Pod webhook merges the Mooncake "
                    "master address into it",
                )
            )
            continue
        problem = extra_config_error(env.value or "")
        if problem:
            errors.append(
                invalid(
                    path.child("value"),
                    env.value,
                    f"{problem}: LMCache reads {LMCACHE_EXTRA_CONFIG} as a JSON object of "
                    'extra_config keys, e.g. {"protocol":"rdma","device_name":"mlx5_0"}',
                )
            )
    return errors


# --------------------------------------------------------------- events-only


def reject_events_only_with_non_lmcache_type(ctx: RuleContext) -> list[FieldError]:
    """Spec "Events-only requires spec.type=LMCache"."""
    spec = ctx.parsed
    cache_type = effective.cache_type(spec)
    if not _events_only(spec) or cache_type == c.TYPE_LMCACHE:
        return []
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
    if not _events_only(spec) or spec.remote_storage is None:
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
    if not _events_only(spec) or spec.autoscaling is None:
        return []
    return [
        forbidden(
            AUTOSCALING,
            "spec.integration.mode EventsOnly provisions no server workload, so there is "
            "nothing to autoscale",
        )
    ]


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


# ------------------------------------------------------------------ Mooncake


def reject_mooncake_multiple_replicas(ctx: RuleContext) -> list[FieldError]:
    """Spec "Mooncake provider configuration": the managed master is a singleton."""
    spec = ctx.parsed
    replicas = effective.replicas(spec)
    if not _mooncake(spec) or replicas <= 1:
        return []
    return [
        invalid(
            SPEC.child("replicas"),
            replicas,
            "the Mooncake master is a singleton on the host network: use 0 or 1 (a second "
            "replica cannot bind its node ports or splits the store)",
        )
    ]


def reject_mooncake_autoscaling(ctx: RuleContext) -> list[FieldError]:
    """Spec "Mooncake provider configuration": spec.autoscaling with provider Mooncake."""
    spec = ctx.parsed
    if spec.autoscaling is None or not _mooncake(spec) or _events_only(spec):
        return []
    return [
        forbidden(
            AUTOSCALING,
            "spec.autoscaling is not supported for remoteStorage.provider Mooncake: the "
            "master is a singleton on the host network and cannot be autoscaled",
        )
    ]


# ---------------------------------------------------------------- managed Redis

MANAGED_REDIS_SINGLETON: Final = (
    "the managed Redis is one non-clustered instance behind a single Service: more "
    "replicas would each hold a separate part of the keyspace, so every engine would see "
    "a different partial cache"
)


def reject_managed_redis_multiple_replicas(ctx: RuleContext) -> list[FieldError]:
    """remoteStorage Redis + Managed provisions one non-clustered instance,
    so spec.replicas is 0 or 1 (0 disables it)."""
    spec = ctx.parsed
    replicas = effective.replicas(spec)
    if not _managed_redis(spec) or replicas <= 1:
        return []
    return [
        invalid(
            SPEC.child("replicas"),
            replicas,
            f"use 0 or 1: {MANAGED_REDIS_SINGLETON}",
        )
    ]


def reject_managed_redis_autoscaling(ctx: RuleContext) -> list[FieldError]:
    """spec.autoscaling with remoteStorage Redis + Managed (scaling out would
    shard the keyspace as it goes)."""
    spec = ctx.parsed
    if spec.autoscaling is None or not _managed_redis(spec) or _events_only(spec):
        return []
    return [
        forbidden(
            AUTOSCALING,
            f"spec.autoscaling is not supported for a Managed Redis remoteStorage: "
            f"{MANAGED_REDIS_SINGLETON}; remove spec.autoscaling",
        )
    ]


def reject_unneeded_engine_host_network(ctx: RuleContext) -> list[FieldError]:
    """Spec: integration.engineHostNetwork is rejected on backends that do not need it
    (only a Mooncake remoteStorage does), so it never sits inert."""
    spec = ctx.parsed
    if not effective.engine_host_network(spec) or _provider(spec) == c.PROVIDER_MOONCAKE:
        return []
    return [
        forbidden(
            INTEGRATION.child("engineHostNetwork"),
            "only a Mooncake remoteStorage needs engine pods on the host network; remove it "
            "(host networking is a privilege it would grant for nothing)",
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
    # Observation.
    Rule(reject_negative_first_event_timeout, ("observation.firstEventTimeout",)),
    Rule(reject_out_of_range_first_event_timeout, ("observation.firstEventTimeout",)),
]


# ==================================================================== validate


def _namespace_of(raw: Mapping[str, Any], namespace: str) -> str:
    """The request namespace, else metadata.namespace, else "default" (as kubectl would)."""
    if namespace:
        return namespace
    meta = raw.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return ns if isinstance(ns, str) and ns else "default"


def _annotations_of(raw: Mapping[str, Any]) -> Mapping[str, str]:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return {}
    return {k: v for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)}


def _without_null_spec_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with null properties under .spec pruned, as the API server does; the
    spec is a fresh deep copy (``drop_nulls``), the rest is shared with ``obj``."""
    out = dict(obj)
    if isinstance(out.get("spec"), dict):
        out["spec"] = drop_nulls(out["spec"])
    return out


def judged_form(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the rules judge: null spec properties pruned, then the schema's defaults
    applied (to the pruned copy, so ``obj`` is never changed, and with one copy of the
    spec instead of two)."""
    return with_spec_defaults(_without_null_spec_fields(obj))


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
    ns = _namespace_of(raw, namespace)
    errors: list[FieldError] = []
    raw_spec = raw.get("spec")
    spec: CacheBackendSpec | None = None
    pruned: list[Loc] = []
    if isinstance(raw_spec, dict):
        spec, schema_errors, pruned = parse_spec(raw_spec)
        errors.extend(schema_errors)
    else:
        errors.append(spec_type_error(raw_spec))
    ctx = RuleContext(spec, raw, ns, _annotations_of(raw))
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

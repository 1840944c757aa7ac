"""shared.validation: one passing and one failing case per rule of the spec's "Validating"
table and the other admission constraints it states, plus schema-level errors and
validate()'s aggregation. Each test's name carries the rule's function name; the
test docstrings cite the spec rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.runtime_adapters import registry
from shared.validation import RULES, ErrorType, FieldError, validate, warnings
from shared.validation.context import RuleContext
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
    FieldPath,
    aggregate_message,
    forbidden,
    invalid,
    not_supported,
    required,
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
    leading_flag,
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
from shared.validation.rules import Rule, RuleCheck
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
from shared.validation.vocabulary import PROVIDER_BLOCKS
from tests.builders import cb, context_for, external, managed
from tests.samples import sample_backends

NS = "team-a"


def run(check: RuleCheck, spec: dict[str, Any], namespace: str = NS, **meta: Any) -> list[str]:
    return [str(e) for e in check(context_for(cb(spec, **meta), namespace))]


VLLM = {"runtime": "VLLM"}
SGLANG = {"runtime": "SGLang"}
HICACHE = {
    "runtime": "SGLang",
    "type": "SGLangHiCache",
    "engineSelector": {"matchLabels": {"app": "sglang"}},
    "hiCache": {"ratio": "2.0"},
}


def with_resources(resources: dict[str, Any], provider: str = "Redis") -> dict[str, Any]:
    """A managed provider whose selected block carries ``resources`` (SGLang dials Redis)."""
    block = PROVIDER_BLOCKS[provider][0]
    runtime = "SGLang" if provider == "Redis" else "VLLM"
    return {
        "runtime": runtime,
        "remoteStorage": managed(provider, **{block: {"resources": resources}}),
    }


# ------------------------------------------------------------------ meta


def test_every_rule_has_an_accepting_and_a_rejecting_test() -> None:
    """The quality bar: for EVERY rule, a passing and a failing case named after it."""
    names = set(globals())
    missing = [
        f"{rule.name}: {kind}"
        for rule in RULES
        for kind in ("accepts", "rejects")
        if not any(n.startswith(f"test_{rule.name}_{kind}") for n in names)
    ]
    assert not missing


def test_rules_are_uniquely_named_functions_in_spec_order() -> None:
    """Architecture: one spec rule, one named function, in an ordered, pluggable list."""
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    assert names[0] == "reject_removed_fields"
    for spec_name in (
        "reject_resource_claims",
        "reject_resource_limits_below_requests",
        "reject_requests_only_for_non_overcommittable_resources",
        "reject_fractional_extended_resources",
        "reject_misaligned_hugepage_quantities",
        "reject_negative_resource_quantities",
        "reject_invalid_resource_names",
        "reject_unsupported_sglang_role",
    ):
        assert spec_name in names


@pytest.mark.parametrize(("name", "doc"), [(n, d) for n, d in sample_backends()])
def test_every_shipped_sample_is_valid(name: str, doc: dict[str, Any]) -> None:
    """Spec: "Default samples in config/samples/ exercise the no-override path"."""
    assert validate(doc, "default") == []


# ----------------------------------------------------------- field errors


def test_field_error_strings_match_kubernetes() -> None:
    """field.Error.Error() / ErrorBody() formats, as kubectl prints them."""
    assert str(invalid("spec.replicas", 0, "must be at least 1")) == (
        "spec.replicas: Invalid value: 0: must be at least 1"
    )
    assert str(invalid("spec.x", 'a"b', "bad")) == 'spec.x: Invalid value: "a\\"b": bad'
    assert str(required("spec.runtime")) == "spec.runtime: Required value"
    assert str(required("spec.hiCache", "need one")) == "spec.hiCache: Required value: need one"
    assert str(forbidden("spec.storage", "removed")) == "spec.storage: Forbidden: removed"
    assert str(not_supported("spec.type", "Mooncake", ["LMCache", "SGLangHiCache"])) == (
        'spec.type: Unsupported value: "Mooncake": supported values: "LMCache", "SGLangHiCache"'
    )
    assert str(invalid("spec.f", True, "no")) == "spec.f: Invalid value: true: no"
    assert str(invalid("spec.f", None, "no")) == "spec.f: Invalid value: null: no"
    assert ErrorType.NOT_SUPPORTED.value == "FieldValueNotSupported"
    assert ErrorType.DUPLICATE.message == "Duplicate value"


def test_field_paths_render_like_field_path() -> None:
    path = FieldPath("spec").child("remoteStorage", "redis").key("nvidia.com/gpu").item(0)
    assert path == "spec.remoteStorage.redis[nvidia.com/gpu][0]"
    assert FieldPath.of(("spec", "env", 2, "name")) == "spec.env[2].name"


def test_aggregate_message_brackets_only_several_errors() -> None:
    """errors.NewAggregate: one message bare, several in brackets, duplicates once."""
    one = required("spec.a")
    two = required("spec.b")
    assert aggregate_message([one]) == "spec.a: Required value"
    assert aggregate_message([one, two, one]) == "[spec.a: Required value, spec.b: Required value]"


# ------------------------------------------------------- schema-level errors


def errors_of(spec: Any, namespace: str = NS, **meta: Any) -> list[str]:
    return [str(e) for e in validate(cb(spec, **meta), namespace)]


def test_schema_rejects_removed_cache_types_as_unsupported_values() -> None:
    """Spec "Cache type validation": type Mooncake / External are not types."""
    for bad in ("Mooncake", "External"):
        assert errors_of({**VLLM, "type": bad}) == [
            f'spec.type: Unsupported value: "{bad}": supported values: "LMCache", "SGLangHiCache", '
            '"VLLMOffloading"'
        ]


def test_schema_requires_runtime_and_still_runs_other_rules() -> None:
    """Spec: runtime is required; the other rules still judge the rest of the object."""
    errors = errors_of({"remoteStorage": managed("Redis", endpoint="r:1")})
    assert errors == [
        "spec.runtime: Required value",
        "spec.remoteStorage.endpoint: Forbidden: ownership Managed publishes the provisioned "
        "Service's address in status.endpoint; remove spec.remoteStorage.endpoint (or set "
        "ownership: External)",
    ]


def test_schema_errors_use_wire_paths_and_kubernetes_wording() -> None:
    """Schema errors come back with alias paths (spec.remoteStorage.provider)."""
    errors = errors_of(
        {
            **VLLM,
            "replicas": "3",
            "remoteStorage": {"provider": "redis", "ownership": "Managed"},
            "autoscaling": {"minReplicas": 0},
            "observation": {"firstEventTimeout": "5 minutes"},
            "integration": {"role": "Reader", "engineOverrides": {"env": [{"value": "x"}]}},
            "lmCache": {"workerPort": 70000},
        }
    )
    assert errors[:8] == [
        "spec.lmCache.workerPort: Invalid value: 70000: spec.lmCache.workerPort in body should "
        "be less than or equal to 65535",
        'spec.remoteStorage.provider: Unsupported value: "redis": supported values: "Redis", '
        '"LMCacheServer", "Mooncake"',
        'spec.observation.firstEventTimeout: Invalid value: "5 minutes": '
        "spec.observation.firstEventTimeout in body should match "
        "'^[-+]?(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$'",
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type '
        'integer: "string"',
        "spec.autoscaling.minReplicas: Invalid value: 0: spec.autoscaling.minReplicas in "
        "body should be greater than or equal to 1",
        "spec.autoscaling.maxReplicas: Required value",
        'spec.integration.role: Unsupported value: "Reader": supported values: "ReadOnly", '
        '"WriteOnly", "ReadWrite"',
        "spec.integration.engineOverrides.env[0].name: Required value",
    ]


def test_schema_int_or_string_quantity_reported_once() -> None:
    """A quantity is an int-or-string: a float or boolean is one type error, not two."""
    spec = with_resources({"limits": {"memory": 0.5, "cpu": True}})
    assert errors_of(spec) == [
        'spec.remoteStorage.redis.resources.limits[memory]: Invalid value: "number": '
        "spec.remoteStorage.redis.resources.limits[memory] in body must be of type integer or "
        'string: "number"',
        'spec.remoteStorage.redis.resources.limits[cpu]: Invalid value: "boolean": '
        "spec.remoteStorage.redis.resources.limits[cpu] in body must be of type integer or "
        'string: "boolean"',
    ]


def test_schema_hicache_enums_and_minimums() -> None:
    """Spec "SGLang native HiCache": sizeGB positive; writePolicy/ioBackend/memoryLayout
    take the SGLang CLI values; ratio is a string."""
    errors = errors_of(
        {
            **HICACHE,
            "hiCache": {
                "sizeGB": 0,
                "writePolicy": "write_around",
                "ioBackend": "mmap",
                "memoryLayout": "page_last",
            },
        }
    )
    assert errors == [
        "spec.hiCache.sizeGB: Invalid value: 0: spec.hiCache.sizeGB in body should be greater "
        "than or equal to 1",
        'spec.hiCache.writePolicy: Unsupported value: "write_around": supported values: '
        '"write_back", "write_through", "write_through_selective"',
        'spec.hiCache.ioBackend: Unsupported value: "mmap": supported values: "direct", '
        '"kernel", "kernel_ascend"',
        'spec.hiCache.memoryLayout: Unsupported value: "page_last": supported values: '
        '"layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"',
    ]
    assert errors_of({**HICACHE, "hiCache": {"ratio": 2}}) == [
        'spec.hiCache.ratio: Invalid value: "integer": spec.hiCache.ratio in body must be of '
        'type string: "integer"'
    ]


def test_schema_spec_missing_or_not_an_object() -> None:
    assert [str(e) for e in validate({"metadata": {"name": "x"}}, NS)] == ["spec: Required value"]
    assert [str(e) for e in validate({"spec": []}, NS)] == [
        'spec: Invalid value: "array": spec in body must be of type object: "array"'
    ]


def test_schema_failure_still_runs_raw_rules() -> None:
    """When the spec cannot be parsed at all, raw-dict rules still report."""
    obj = {
        "metadata": {"annotations": {"inferencecache.io/lmcache-kernel-check": "strcit"}},
        "spec": "nope",
    }
    assert len(validate(obj, NS)) == 2


def test_schema_pruned_fields_do_not_trigger_dependent_rules() -> None:
    """A rule never judges a value the schema already rejected (type: Mooncake here would
    otherwise make the hiCache rule misfire)."""
    errors = errors_of({**SGLANG, "type": "SGLangHicache", "hiCache": {"ratio": "2"}})
    assert errors == [
        'spec.type: Unsupported value: "SGLangHicache": supported values: "LMCache", '
        '"SGLangHiCache", "VLLMOffloading"'
    ]


def test_schema_snake_case_spellings_are_not_wire_fields() -> None:
    """The API server prunes unknown fields: remote_storage is not remoteStorage."""
    assert errors_of({**VLLM, "remote_storage": {"provider": "Bogus"}}) == []


def test_schema_defaults_count_for_omitted_fields() -> None:
    """Omitted fields count as their schema defaults (type LMCache, replicas 1, ...)."""
    assert errors_of({**SGLANG, "integration": {"mode": "EventsOnly"}}) == []
    assert errors_of({**VLLM, "hiCache": {"ratio": "2"}})[0].startswith("spec.hiCache: Forbidden")


# --------------------------------------------------------- object-level rules


def test_reject_removed_fields_accepts_canonical_fields() -> None:
    """Spec "Breaking API cleanup": the canonical fields pass."""
    spec = {**VLLM, "observation": {"firstEventTimeout": "5m"}, "integration": {"mode": "Offload"}}
    assert run(reject_removed_fields, spec) == []


def test_reject_removed_fields_rejects_each_removed_field_naming_its_replacement() -> None:
    """Spec "Breaking API cleanup": integration.engine, integration.firstEventTimeout,
    backendConfig, top-level resources, storage are Forbidden with what replaces them."""
    spec = {
        **VLLM,
        "integration": {"engine": "vllm", "firstEventTimeout": "5m"},
        "backendConfig": {"lmcache": {}},
        "resources": {"limits": {"memory": "1Gi"}},
        "storage": {"pvc": {"size": "10Gi"}},
    }
    errors = reject_removed_fields(context_for(cb(spec), NS))
    assert [e.field for e in errors] == [
        "spec.integration.engine",
        "spec.integration.firstEventTimeout",
        "spec.backendConfig",
        "spec.resources",
        "spec.storage",
    ]
    assert all(e.type is ErrorType.FORBIDDEN and "removed" in e.detail for e in errors)
    assert "spec.runtime" in errors[0].detail
    assert "spec.observation.firstEventTimeout" in errors[1].detail
    assert "spec.remoteStorage.<provider>.resources" in errors[3].detail
    assert "Mooncake" in errors[4].detail


def test_reject_invalid_lmcache_kernel_check_annotation_accepts_every_mode() -> None:
    """Spec "LMCache client kernels": auto | report-only | strict | off (or unset)."""
    assert run(reject_invalid_lmcache_kernel_check_annotation, VLLM) == []
    for mode in ("auto", "report-only", "strict", "off"):
        annotations = {"inferencecache.io/lmcache-kernel-check": mode}
        assert (
            run(reject_invalid_lmcache_kernel_check_annotation, VLLM, annotations=annotations) == []
        )


@pytest.mark.parametrize("value", ["strcit", "Strict", " strict", "true", "auto "])
def test_reject_invalid_lmcache_kernel_check_annotation_rejects_typos(value: str) -> None:
    """Spec: a typo cannot silently relax strict enforcement back to report-only."""
    annotations = {"inferencecache.io/lmcache-kernel-check": value}
    assert run(reject_invalid_lmcache_kernel_check_annotation, VLLM, annotations=annotations) == [
        f"metadata.annotations[inferencecache.io/lmcache-kernel-check]: Invalid value: "
        f'"{value}": must be one of "auto", "report-only", "strict", "off" (or unset, which '
        "means auto); an unrecognised value would silently relax strict enforcement"
    ]


def test_reject_invalid_lmcache_kernel_check_annotation_accepts_empty_as_unset() -> None:
    """Spec: "auto (default / unset)" — an explicit empty value is unset."""
    annotations = {"inferencecache.io/lmcache-kernel-check": ""}
    assert run(reject_invalid_lmcache_kernel_check_annotation, VLLM, annotations=annotations) == []


@pytest.mark.parametrize("value", ["true", "false", "True", " FALSE "])
def test_reject_invalid_skip_network_policy_annotation_accepts_true_and_false(value: str) -> None:
    """The managed tier's NetworkPolicy opt-out (docs/api.md): "true" or "false"."""
    annotations = {"inferencecache.io/skip-network-policy": value}
    assert run(reject_invalid_skip_network_policy_annotation, VLLM) == []
    assert run(reject_invalid_skip_network_policy_annotation, VLLM, annotations=annotations) == []


@pytest.mark.parametrize("value", ["yes", "", "disabled", "1"])
def test_reject_invalid_skip_network_policy_annotation_rejects_anything_else(value: str) -> None:
    """An opt-out is explicit: a typo neither opens the tier nor silently keeps it closed."""
    annotations = {"inferencecache.io/skip-network-policy": value}
    assert run(reject_invalid_skip_network_policy_annotation, VLLM, annotations=annotations) == [
        f"metadata.annotations[inferencecache.io/skip-network-policy]: Invalid value: "
        f'"{value}": must be "true" (no NetworkPolicy isolates the managed cache tier) or '
        '"false"'
    ]


@pytest.mark.parametrize("value", ["team-b", "team-b,team-c", " team-b , team-c "])
def test_reject_invalid_allowed_consumer_namespaces_annotation_accepts_namespace_names(
    value: str,
) -> None:
    """Cross-namespace consent (docs/decisions.md): namespace names, comma-separated."""
    annotations = {"inferencecache.io/allowed-consumer-namespaces": value}
    rule = reject_invalid_allowed_consumer_namespaces_annotation
    assert run(rule, VLLM) == []
    assert run(rule, VLLM, annotations=annotations) == []


@pytest.mark.parametrize("value", ["", "*", "team-b,", "Team-B", "a,a"])
def test_reject_invalid_allowed_consumer_namespaces_annotation_rejects_anything_else(
    value: str,
) -> None:
    """Consent is per namespace: no wildcard, no empty entry; the error is scoped to the
    annotation."""
    annotations = {"inferencecache.io/allowed-consumer-namespaces": value}
    (error,) = run(
        reject_invalid_allowed_consumer_namespaces_annotation, VLLM, annotations=annotations
    )
    assert error.startswith(
        "metadata.annotations[inferencecache.io/allowed-consumer-namespaces]: Invalid value: "
    )


def test_reject_unsupported_runtime_cache_pair_accepts_shipping_pairs() -> None:
    """Spec: VLLM/LMCache, SGLang/LMCache and SGLang/SGLangHiCache ship."""
    assert run(reject_unsupported_runtime_cache_pair, VLLM) == []
    assert run(reject_unsupported_runtime_cache_pair, SGLANG) == []
    assert run(reject_unsupported_runtime_cache_pair, HICACHE) == []


def test_reject_unsupported_runtime_cache_pair_rejects_vllm_hicache_naming_supported_pairs() -> (
    None
):
    """Spec: the registry's SupportedPairs list is included in the field-scoped rejection."""
    errors = run(reject_unsupported_runtime_cache_pair, {**HICACHE, "runtime": "VLLM"})
    pairs = ", ".join(registry.supported_pairs())
    assert errors == [
        'spec.type: Invalid value: "SGLangHiCache": no runtime adapter is installed for the (runtime '
        f"VLLM, type SGLangHiCache) pair VLLM/SGLangHiCache; supported (runtime/type) pairs: "
        f"{pairs}"
    ]


# ------------------------------------------------------------ cache hierarchy


def test_reject_incomplete_remote_storage_accepts_provider_and_ownership() -> None:
    assert run(reject_incomplete_remote_storage, {**VLLM, "remoteStorage": managed("Redis")}) == []
    assert run(reject_incomplete_remote_storage, VLLM) == []


def test_reject_incomplete_remote_storage_rejects_missing_provider_and_ownership() -> None:
    """Spec "Cache hierarchy": provider selects the technology, ownership the lifecycle."""
    errors = run(reject_incomplete_remote_storage, {**VLLM, "remoteStorage": {}})
    assert [e.split(":")[0] for e in errors] == [
        "spec.remoteStorage.provider",
        "spec.remoteStorage.ownership",
    ]


def test_reject_provider_block_mismatch_accepts_the_selected_managed_block() -> None:
    """Spec "Cache hierarchy": provider-specific settings live below their provider."""
    spec = {**VLLM, "remoteStorage": managed("LMCacheServer", lmCacheServer={"image": "x"})}
    assert run(reject_provider_block_mismatch, spec) == []


def test_reject_provider_block_mismatch_rejects_other_provider_block() -> None:
    """Spec: a provider-specific typed block must match remoteStorage.provider."""
    spec = {**VLLM, "remoteStorage": managed("LMCacheServer", redis={"image": "x"})}
    assert run(reject_provider_block_mismatch, spec) == [
        "spec.remoteStorage.redis: Forbidden: spec.remoteStorage.redis configures the Redis "
        "provider, but spec.remoteStorage.provider is LMCacheServer; move these settings to "
        "spec.remoteStorage.lmCacheServer"
    ]


def test_reject_provider_block_mismatch_rejects_block_without_provider() -> None:
    """Brief: a provider block without remoteStorage.provider."""
    spec = {**VLLM, "remoteStorage": {"ownership": "Managed", "mooncake": {"image": "m"}}}
    errors = run(reject_provider_block_mismatch, spec)
    assert errors == [
        "spec.remoteStorage.mooncake: Forbidden: spec.remoteStorage.mooncake configures the "
        "Mooncake provider, but spec.remoteStorage.provider is not set"
    ]


def test_reject_provider_block_mismatch_rejects_block_with_external_ownership() -> None:
    """Spec: the typed block must match ownership too (External provisions no workload)."""
    spec = {**SGLANG, "remoteStorage": external("Redis", "r:6379", redis={"image": "x"})}
    errors = run(reject_provider_block_mismatch, spec)
    assert len(errors) == 1
    assert "ownership External provisions none" in errors[0]


def test_reject_lmcache_block_with_non_lmcache_type_accepts_lmcache() -> None:
    assert run(reject_lmcache_block_with_non_lmcache_type, {**VLLM, "lmCache": {}}) == []


def test_reject_lmcache_block_with_non_lmcache_type_rejects_hicache() -> None:
    """Spec "Cache hierarchy": lmCache is used with a non-LMCache type."""
    errors = run(reject_lmcache_block_with_non_lmcache_type, {**HICACHE, "lmCache": {}})
    assert errors == [
        "spec.lmCache: Forbidden: spec.lmCache configures the LMCache engine cache, but "
        "spec.type is SGLangHiCache (configure it in spec.hiCache)"
    ]


def test_reject_hicache_block_with_non_hicache_type_accepts_hicache() -> None:
    assert run(reject_hicache_block_with_non_hicache_type, HICACHE) == []


def test_reject_hicache_block_with_non_hicache_type_rejects_lmcache() -> None:
    """Spec: hiCache is typed SGLang native HiCache configuration, for SGLangHiCache only."""
    errors = run(reject_hicache_block_with_non_hicache_type, {**SGLANG, "hiCache": {"ratio": "2"}})
    assert len(errors) == 1
    assert errors[0].startswith("spec.hiCache: Forbidden:")


def test_reject_autoscaling_without_managed_workload_accepts_managed() -> None:
    spec = {**VLLM, "remoteStorage": managed("LMCacheServer"), "autoscaling": {"maxReplicas": 3}}
    assert run(reject_autoscaling_without_managed_workload, spec) == []


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({**VLLM, "autoscaling": {"maxReplicas": 3}}, "host-only"),
        ({**HICACHE, "autoscaling": {"maxReplicas": 3}}, "host-only"),
        (
            {
                **VLLM,
                "remoteStorage": external("LMCacheServer", "lm:1"),
                "autoscaling": {"maxReplicas": 3},
            },
            "External",
        ),
    ],
)
def test_reject_autoscaling_without_managed_workload_rejects_host_only_and_external(
    spec: dict[str, Any], reason: str
) -> None:
    """Spec "Cache hierarchy": host-only configuration requests workload autoscaling;
    External ownership has no workload to scale either."""
    errors = run(reject_autoscaling_without_managed_workload, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.autoscaling: Forbidden:")
    assert reason in errors[0]


# ----------------------------------------------------------------- endpoints


def test_reject_external_without_endpoint_accepts_an_endpoint() -> None:
    spec = {**SGLANG, "remoteStorage": external("Redis", "redis:6379")}
    assert run(reject_external_without_endpoint, spec) == []


@pytest.mark.parametrize("endpoint", [None, "", "   "])
def test_reject_external_without_endpoint_rejects_missing_or_whitespace(
    endpoint: str | None,
) -> None:
    """Spec "External remote storage requires an endpoint"; whitespace-only is empty."""
    spec = {**SGLANG, "remoteStorage": external("Redis", endpoint)}
    assert run(reject_external_without_endpoint, spec) == [
        "spec.remoteStorage.endpoint: Required value: ownership External needs the address "
        "of the operator-run Redis storage (host:port)"
    ]


@pytest.mark.parametrize("endpoint", [None, "", "  \t "])
def test_reject_managed_endpoint_accepts_no_or_whitespace_endpoint(endpoint: str | None) -> None:
    """Spec: whitespace-only values are treated as empty."""
    rs = managed("Redis")
    if endpoint is not None:
        rs["endpoint"] = endpoint
    assert run(reject_managed_endpoint, {**SGLANG, "remoteStorage": rs}) == []


def test_reject_managed_endpoint_rejects_user_supplied_endpoint() -> None:
    """Spec "Endpoint ownership is explicit": Managed rejects a user-supplied endpoint."""
    spec = {**SGLANG, "remoteStorage": managed("Redis", endpoint="redis:6379")}
    errors = run(reject_managed_endpoint, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.remoteStorage.endpoint: Forbidden:")


@pytest.mark.parametrize(
    ("runtime", "provider", "endpoint"),
    [
        ("SGLang", "Redis", " redis:6379 "),
        ("VLLM", "LMCacheServer", "lm://lmcache:65432"),
        ("VLLM", "Mooncake", "mooncakestore://10.0.0.1:50051"),
        ("VLLM", "Mooncake", "[fd00::7]:50051"),
    ],
)
def test_reject_invalid_endpoint_shape_accepts_provider_shapes(
    runtime: str, provider: str, endpoint: str
) -> None:
    spec = {"runtime": runtime, "remoteStorage": external(provider, endpoint)}
    assert run(reject_invalid_endpoint_shape, spec) == []


@pytest.mark.parametrize(
    ("provider", "endpoint", "detail"),
    [
        ("Redis", "redis://redis:6379", "scheme redis:// is not accepted"),
        ("Redis", "lm://redis:6379", "belongs to the LMCacheServer provider"),
        ("LMCacheServer", "mooncakestore://m:1", "belongs to the Mooncake provider"),
        ("Mooncake", "lm://m:1", "belongs to the LMCacheServer provider"),
        ("LMCacheServer", "lm://lmcache", "port is required"),
        ("Redis", "redis:99999", "out of range"),
        ("Redis", "redis:6379/0", "path, query or fragment"),
        ("Redis", "::1:6379", "bracketed"),
        ("Redis", "red is:6379", "whitespace"),
    ],
)
def test_reject_invalid_endpoint_shape_rejects_per_provider(
    provider: str, endpoint: str, detail: str
) -> None:
    """Spec "Externally owned remote storage": per-provider shapes, numeric port 1-65535,
    no whitespace/path/query/fragment, bracketed IPv6, no other provider's scheme."""
    spec = {**VLLM, "remoteStorage": external(provider, endpoint)}
    errors = run(reject_invalid_endpoint_shape, spec)
    assert len(errors) == 1
    assert errors[0].startswith(f'spec.remoteStorage.endpoint: Invalid value: "{endpoint}":')
    assert detail in errors[0]


@pytest.mark.parametrize(
    ("endpoint", "allow"),
    [
        ("redis:6379", False),  # unqualified: own namespace
        ("redis.team-a:6379", False),  # two labels: a Service of the own namespace
        ("redis.team-b:6379", True),  # two labels: a Service of team-b, acknowledged
        ("cache.team-b.svc.example.com:6379", False),  # external FQDN with a svc label
        ("redis.team-a.svc.cluster.local:6379", False),
        ("redis.example.com:6379", False),  # external FQDN
        ("10.1.2.3:6379", False),
        ("redis.team-b.svc:6379", True),  # crossing, acknowledged
    ],
)
def test_reject_cross_namespace_endpoint_accepts_same_namespace_external_or_opted_in(
    endpoint: str, allow: bool
) -> None:
    """Spec: bare hostnames, IPs and unqualified names pass; allowCrossNamespace opts in."""
    spec = {**SGLANG, "remoteStorage": external("Redis", endpoint), "allowCrossNamespace": allow}
    assert run(reject_cross_namespace_endpoint, spec) == []


@pytest.mark.parametrize(
    "endpoint",
    [
        "redis.team-b.svc:6379",
        "redis.team-b.svc.cluster.local:6379",
        "redis-0.redis.team-b.svc.cluster.local.:6379",
        "redis.team-b:6379",
    ],
)
def test_reject_cross_namespace_endpoint_rejects_other_namespace_service(endpoint: str) -> None:
    """Spec "Cross-namespace endpoint requires opt-in"."""
    spec = {**SGLANG, "remoteStorage": external("Redis", endpoint)}
    assert run(reject_cross_namespace_endpoint, spec) == [
        f'spec.remoteStorage.endpoint: Invalid value: "{endpoint}": resolves to a Service in '
        'namespace "team-b", not the CacheBackend\'s namespace "team-a"; set '
        "spec.allowCrossNamespace: true to cross that tenancy boundary"
    ]


# ------------------------------------------------------------- engine binding


@pytest.mark.parametrize(
    "spec",
    [
        VLLM,
        {**VLLM, "remoteStorage": managed("LMCacheServer")},
        {**VLLM, "remoteStorage": managed("Mooncake")},
        SGLANG,
        {**SGLANG, "remoteStorage": managed("Redis")},
        HICACHE,
    ],
)
def test_reject_unsupported_binding_accepts_adapter_bindings(spec: dict[str, Any]) -> None:
    """Spec: each (runtime, type) adapter accepts its declared bindings (or host-only)."""
    assert run(reject_unsupported_binding, spec) == []


def test_reject_unsupported_binding_rejects_provider_the_wire_cannot_dial() -> None:
    """Spec "Engine wire must accept the provider binding": vLLM takes lm/mooncakestore,
    SGLang+LMCache takes resp."""
    assert run(reject_unsupported_binding, {**VLLM, "remoteStorage": managed("Redis")}) == [
        'spec.remoteStorage.provider: Invalid value: "Redis": the vLLM+LMCache adapter does '
        "not accept the resp binding of the Redis provider; it accepts LMCacheServer (lm), "
        "Mooncake (mooncakestore) or no spec.remoteStorage (host-only)"
    ]
    errors = run(reject_unsupported_binding, {**SGLANG, "remoteStorage": managed("Mooncake")})
    assert len(errors) == 1
    assert "SGLang+LMCache adapter" in errors[0]


def test_reject_unsupported_binding_rejects_any_remote_storage_for_hicache() -> None:
    """Spec: native SGLang HiCache accepts only the nil host-only binding."""
    spec = {**HICACHE, "remoteStorage": external("Redis", "r:1")}
    assert run(reject_unsupported_binding, spec) == [
        "spec.remoteStorage: Forbidden: the SGLang+SGLangHiCache adapter accepts only the "
        "host-only binding (its cache lives inside the engine pod); remove spec.remoteStorage"
    ]


# --------------------------------------------------------- provider resources


GOOD_RESOURCES = {
    "requests": {"cpu": "250m", "memory": "4Gi", "nvidia.com/gpu": "1", "hugepages-2Mi": "4Mi"},
    "limits": {"memory": "8Gi", "nvidia.com/gpu": 1, "hugepages-2Mi": "4Mi"},
}


def test_reject_invalid_resource_names_accepts_standard_hugepages_and_vendor_names() -> None:
    resources = {
        "limits": {
            "cpu": "1",
            "memory": "1Gi",
            "ephemeral-storage": "1Gi",
            "hugepages-1Gi": "1Gi",
            "nvidia.com/gpu": "1",
            "example.com/foo_bar.baz": "1",
        }
    }
    assert run(reject_invalid_resource_names, with_resources(resources)) == []


@pytest.mark.parametrize(
    "name",
    [
        "foo",
        "",
        "CPU",
        "hugepages-",
        "hugepages-nope",
        "hugepages-0",
        "kubernetes.io/foo",
        "requests.kubernetes.io/foo",
        "requests.example.com/foo",
        "example.com/",
        "Example.com/gpu",
        "a/b/c",
        "example.com/-gpu",
    ],
)
def test_reject_invalid_resource_names_rejects_and_names_the_key(name: str) -> None:
    """Spec rejectInvalidResourceNames: the rejection names the offending key."""
    errors = run(reject_invalid_resource_names, with_resources({"limits": {name: "1"}}))
    assert len(errors) == 1
    assert errors[0].startswith(
        f'spec.remoteStorage.redis.resources.limits[{name}]: Invalid value: "{name}":'
    )


def test_reject_invalid_resource_names_reports_multiple_keys_together() -> None:
    """Spec: multi-key errors surface together."""
    errors = run(
        reject_invalid_resource_names, with_resources({"requests": {"foo": "1", "bar": "1"}})
    )
    assert len(errors) == 2


def test_reject_malformed_resource_quantities_accepts_quantities() -> None:
    assert run(reject_malformed_resource_quantities, with_resources(GOOD_RESOURCES)) == []


def test_reject_malformed_resource_quantities_rejects_non_quantities() -> None:
    """CRD schema: requests/limits entries are resource.Quantity values."""
    errors = run(
        reject_malformed_resource_quantities, with_resources({"limits": {"memory": "8 GB"}})
    )
    assert errors == [
        'spec.remoteStorage.redis.resources.limits[memory]: Invalid value: "8 GB": quantities '
        "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    ]


def test_reject_negative_resource_quantities_accepts_zero() -> None:
    """Spec: zero is admitted (an explicit "no guaranteed minimum")."""
    resources = {"requests": {"memory": "0", "cpu": 0}}
    assert run(reject_negative_resource_quantities, with_resources(resources)) == []


def test_reject_negative_resource_quantities_rejects_negative_entries() -> None:
    """Spec rejectNegativeResourceQuantities: any strictly-negative entry."""
    resources = {"requests": {"memory": "-1Gi"}, "limits": {"cpu": -1}}
    errors = run(reject_negative_resource_quantities, with_resources(resources, "Mooncake"))
    assert errors == [
        'spec.remoteStorage.mooncake.resources.requests[memory]: Invalid value: "-1Gi": must '
        "be greater than or equal to 0",
        "spec.remoteStorage.mooncake.resources.limits[cpu]: Invalid value: -1: must be "
        "greater than or equal to 0",
    ]


def test_reject_resource_claims_accepts_nil_or_empty_claims() -> None:
    """Spec: a nil/empty claims slice admits unchanged."""
    assert run(reject_resource_claims, with_resources({"claims": []})) == []
    assert run(reject_resource_claims, with_resources({})) == []


def test_reject_resource_claims_rejects_non_empty_claims() -> None:
    """Spec rejectResourceClaims: DRA is not wired end-to-end yet."""
    errors = run(
        reject_resource_claims,
        with_resources({"claims": [{"name": "gpu"}]}, "LMCacheServer"),
    )
    assert errors == [
        "spec.remoteStorage.lmCacheServer.resources.claims: Forbidden: Dynamic Resource "
        "Allocation claims (gpu) are not supported yet: the provider renderer does not create "
        "the matching pod-level spec.resourceClaims"
    ]


def test_reject_resource_limits_below_requests_accepts_two_regimes_and_limits_only() -> None:
    """Spec: overcommittable limits >= requests, non-overcommittable equal; limits-only ok."""
    assert run(reject_resource_limits_below_requests, with_resources(GOOD_RESOURCES)) == []
    resources = {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}
    assert run(reject_resource_limits_below_requests, with_resources(resources)) == []
    same = {"requests": {"memory": "1024Mi"}, "limits": {"memory": "1Gi"}}
    assert run(reject_resource_limits_below_requests, with_resources(same)) == []


def test_reject_resource_limits_below_requests_rejects_inverted_and_unequal() -> None:
    """Spec rejectResourceLimitsBelowRequests: memory/cpu limits below requests;
    hugepages and extended resources whose limit differs from the request."""
    resources = {
        "requests": {"memory": "16Gi", "cpu": "2", "nvidia.com/gpu": "1", "hugepages-2Mi": "2Mi"},
        "limits": {"memory": "8Gi", "cpu": "1500m", "nvidia.com/gpu": "2", "hugepages-2Mi": "4Mi"},
    }
    errors = run(reject_resource_limits_below_requests, with_resources(resources))
    base = "spec.remoteStorage.redis.resources.limits"
    assert errors == [
        f'{base}[cpu]: Invalid value: "1500m": must be greater than or equal to cpu request of '
        "2 (requests[cpu])",
        f'{base}[hugepages-2Mi]: Invalid value: "4Mi": must be equal to hugepages-2Mi request '
        "of 2Mi (requests[hugepages-2Mi]): hugepages resources cannot be overcommitted",
        f'{base}[memory]: Invalid value: "8Gi": must be greater than or equal to memory request '
        "of 16Gi (requests[memory])",
        f'{base}[nvidia.com/gpu]: Invalid value: "2": must be equal to nvidia.com/gpu request '
        "of 1 (requests[nvidia.com/gpu]): extended resources cannot be overcommitted",
    ]


def test_reject_requests_only_for_non_overcommittable_resources_accepts_cpu_memory() -> None:
    """Spec: requests-only is admitted for cpu, memory, ephemeral-storage."""
    resources = {"requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}}
    assert (
        run(reject_requests_only_for_non_overcommittable_resources, with_resources(resources)) == []
    )


def test_reject_requests_only_for_non_overcommittable_resources_rejects_gpu_and_hugepages() -> None:
    """Spec rejectRequestsOnlyForNonOvercommittableResources."""
    resources = {"requests": {"nvidia.com/gpu": "1", "hugepages-2Mi": "2Mi"}}
    errors = run(reject_requests_only_for_non_overcommittable_resources, with_resources(resources))
    base = "spec.remoteStorage.redis.resources"
    assert errors == [
        f'{base}.requests[hugepages-2Mi]: Invalid value: "2Mi": hugepages-2Mi is not '
        f"overcommittable: it must also be set in {base}.limits[hugepages-2Mi] with the same "
        "value",
        f'{base}.requests[nvidia.com/gpu]: Invalid value: "1": nvidia.com/gpu is not '
        f"overcommittable: it must also be set in {base}.limits[nvidia.com/gpu] with the same "
        "value",
    ]


def test_reject_fractional_extended_resources_accepts_whole_units_and_fractional_cpu() -> None:
    """Spec: 250m CPU is the canonical kubelet shape; 2000m GPUs is two whole units."""
    resources = {"requests": {"cpu": "250m"}, "limits": {"nvidia.com/gpu": "2000m"}}
    assert run(reject_fractional_extended_resources, with_resources(resources)) == []


def test_reject_fractional_extended_resources_rejects_500m_gpu() -> None:
    """Spec rejectFractionalExtendedResources: nvidia.com/gpu: 500m."""
    resources = {"limits": {"nvidia.com/gpu": "500m"}}
    assert run(reject_fractional_extended_resources, with_resources(resources)) == [
        'spec.remoteStorage.redis.resources.limits[nvidia.com/gpu]: Invalid value: "500m": '
        "must be an integer: extended resources are whole units"
    ]


def test_reject_misaligned_hugepage_quantities_accepts_aligned_and_zero() -> None:
    """Spec: zero quantities admit trivially."""
    resources = {"limits": {"hugepages-2Mi": "6Mi", "hugepages-1Gi": "0"}}
    assert run(reject_misaligned_hugepage_quantities, with_resources(resources)) == []


def test_reject_misaligned_hugepage_quantities_rejects_3mi_of_2mi_pages() -> None:
    """Spec rejectMisalignedHugepageQuantities: hugepages-2Mi: 3Mi."""
    resources = {"limits": {"hugepages-2Mi": "3Mi"}}
    assert run(reject_misaligned_hugepage_quantities, with_resources(resources)) == [
        'spec.remoteStorage.redis.resources.limits[hugepages-2Mi]: Invalid value: "3Mi": must '
        "be a whole multiple of the 2Mi page size"
    ]


def test_resource_rules_judge_only_the_selected_provider_path() -> None:
    """Spec: errors are reported at the selected provider path; a stray block of another
    provider is rejected by the hierarchy rule, not judged for its contents."""
    spec = {
        **SGLANG,
        "remoteStorage": managed(
            "Redis",
            redis={"resources": {"limits": {"memory": "-1"}}},
            mooncake={"resources": {"limits": {"memory": "-1"}}},
        ),
    }
    errors = errors_of(spec)
    assert [e.split(":")[0] for e in errors] == [
        "spec.remoteStorage.mooncake",
        "spec.remoteStorage.redis.resources.limits[memory]",
    ]


def test_resource_rules_do_not_pile_on_a_bad_entry() -> None:
    """A malformed or negative entry is reported once, by its own rule."""
    resources = {
        "requests": {"nvidia.com/gpu": "-1", "memory": "lots"},
        "limits": {"nvidia.com/gpu": "1", "memory": "1Gi"},
    }
    errors = errors_of(with_resources(resources))
    assert len(errors) == 2


# ------------------------------------------------------- replicas/autoscaling


MANAGED_LMCACHE = {**VLLM, "remoteStorage": managed("LMCacheServer")}


def test_reject_zero_replicas_autoscaling_without_min_replicas_accepts_explicit_min() -> None:
    spec = {**MANAGED_LMCACHE, "replicas": 0, "autoscaling": {"maxReplicas": 3, "minReplicas": 1}}
    assert run(reject_zero_replicas_autoscaling_without_min_replicas, spec) == []
    no_autoscaling = {**MANAGED_LMCACHE, "replicas": 0}
    assert run(reject_zero_replicas_autoscaling_without_min_replicas, no_autoscaling) == []


def test_reject_zero_replicas_autoscaling_without_min_replicas_rejects_nil_min() -> None:
    """Spec "spec.replicas=0 + autoscaling requires explicit minReplicas"."""
    spec = {**MANAGED_LMCACHE, "replicas": 0, "autoscaling": {"maxReplicas": 3}}
    errors = run(reject_zero_replicas_autoscaling_without_min_replicas, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.autoscaling.minReplicas: Required value:")
    assert "remove spec.autoscaling" in errors[0]


def test_reject_min_replicas_above_max_replicas_accepts_equal() -> None:
    spec = {**MANAGED_LMCACHE, "autoscaling": {"maxReplicas": 3, "minReplicas": 3}}
    assert run(reject_min_replicas_above_max_replicas, spec) == []


def test_reject_min_replicas_above_max_replicas_rejects_inverted_band() -> None:
    """Spec autoscaling: cross-field validation minReplicas <= maxReplicas."""
    spec = {**MANAGED_LMCACHE, "autoscaling": {"maxReplicas": 2, "minReplicas": 3}}
    assert run(reject_min_replicas_above_max_replicas, spec) == [
        "spec.autoscaling.minReplicas: Invalid value: 3: must be less than or equal to "
        "spec.autoscaling.maxReplicas (2)"
    ]


# ---------------------------------------------------------- engine overrides


def overrides(runtime: str, **block: Any) -> dict[str, Any]:
    return {"runtime": runtime, "integration": {"engineOverrides": block}}


def test_reject_reserved_engine_overrides_accepts_tunables() -> None:
    """Spec: LMCACHE_CHUNK_SIZE, LMCACHE_REMOTE_SERDE, ... are deliberately not reserved."""
    spec = overrides(
        "VLLM",
        args=["--max-model-len=8192", "--enable-lmcache"],  # SGLang's flag is not vLLM's
        suppressArgs=["--disable-log-stats"],
        env=[{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}, {"name": "LMCACHE_USE_EXPERIMENTAL"}],
        suppressEnv=["LMCACHE_REMOTE_SERDE"],
    )
    assert run(reject_reserved_engine_overrides, spec) == []


def test_reject_reserved_engine_overrides_rejects_vllm_reserved_set() -> None:
    """Spec "Reserved declarations and admission hard-reject": names the flag/env and the
    adapter; "--kv-transfer-config=..." and "--kv-transfer-config" both match."""
    spec = overrides(
        "VLLM",
        args=['--kv-transfer-config={"kv_connector":"x"}', "--max-model-len=1"],
        suppressArgs=["--kv-transfer-config"],
        env=[{"name": "PYTHONHASHSEED", "value": "1"}],
        suppressEnv=["VLLM_USE_V1", "LMCACHE_REMOTE_URL", "INFERENCECACHE_FAIL_OPEN"],
    )
    errors = reject_reserved_engine_overrides(context_for(cb(spec), NS))
    assert [e.field for e in errors] == [
        "spec.integration.engineOverrides.args[0]",
        "spec.integration.engineOverrides.suppressArgs[0]",
        "spec.integration.engineOverrides.env[0].name",
        "spec.integration.engineOverrides.suppressEnv[0]",
        "spec.integration.engineOverrides.suppressEnv[1]",
        "spec.integration.engineOverrides.suppressEnv[2]",
    ]
    assert all(e.type is ErrorType.FORBIDDEN for e in errors)
    assert errors[0].detail.startswith(
        "flag --kv-transfer-config is reserved by the vLLM+LMCache adapter"
    )
    assert "env PYTHONHASHSEED is reserved by the vLLM+LMCache adapter" in errors[2].detail


@pytest.mark.parametrize("arg", ["--kv-offloading-size=64", "--kv-offloading-backend"])
def test_reject_reserved_engine_overrides_rejects_vllm_offloading_flags(arg: str) -> None:
    """vLLM's own offloading overwrites the injected connector: engineOverrides.args may
    not add --kv-offloading-size / --kv-offloading-backend; the error names the flag."""
    errors = reject_reserved_engine_overrides(
        context_for(cb(overrides("VLLM", args=[arg, "lmcache"])), NS)
    )
    assert [e.field for e in errors] == ["spec.integration.engineOverrides.args[0]"]
    flag = arg.split("=", 1)[0]
    assert errors[0].detail.startswith(f"flag {flag} is reserved by the vLLM+LMCache adapter")


def test_reject_reserved_engine_overrides_rejects_sglang_reserved_set() -> None:
    """Spec: SGLang+LMCache reserves --enable-lmcache, --lmcache-config-file,
    LMCACHE_USE_EXPERIMENTAL, INFERENCECACHE_FAIL_OPEN (per-adapter reservation)."""
    spec = overrides(
        "SGLang",
        args=["--lmcache-config-file /tmp/x.yaml"],
        suppressArgs=["--enable-lmcache"],
        env=[{"name": "LMCACHE_USE_EXPERIMENTAL", "value": "False"}],
        suppressEnv=["INFERENCECACHE_FAIL_OPEN", "PYTHONHASHSEED"],
    )
    errors = run(reject_reserved_engine_overrides, spec)
    assert len(errors) == 4
    assert all("SGLang+LMCache adapter" in e for e in errors)


def test_reject_non_object_lmcache_extra_config_accepts_a_json_object() -> None:
    """LMCache reads LMCACHE_EXTRA_CONFIG with json.loads into its extra_config dict; an
    empty value is unset there, and other env names are not judged."""
    spec = overrides(
        "VLLM",
        env=[
            {"name": "LMCACHE_EXTRA_CONFIG", "value": '{"protocol":"rdma","device_name":"m"}'},
            {"name": "LMCACHE_EXTRA_CONFIG", "value": ""},
            {"name": "OTHER", "value": "[not an object]"},
        ],
    )
    assert run(reject_non_object_lmcache_extra_config, spec) == []
    hicache = {
        **HICACHE,
        "integration": {
            "engineOverrides": {"env": [{"name": "LMCACHE_EXTRA_CONFIG", "value": "x"}]}
        },
    }
    assert run(reject_non_object_lmcache_extra_config, hicache) == []


def test_reject_non_object_lmcache_extra_config_rejects_non_objects_at_the_value() -> None:
    """LMCache cannot load a non-JSON value, has no keys in a JSON non-object, and the
    Pod webhook merges the Mooncake master address into the object: field-scoped."""
    spec = overrides(
        "VLLM",
        env=[
            {"name": "LMCACHE_CHUNK_SIZE", "value": "512"},
            {"name": "LMCACHE_EXTRA_CONFIG", "value": "protocol=rdma"},
            {"name": "LMCACHE_EXTRA_CONFIG", "value": '["rdma"]'},
        ],
    )
    errors = reject_non_object_lmcache_extra_config(context_for(cb(spec), NS))
    assert [e.field for e in errors] == [
        "spec.integration.engineOverrides.env[1].value",
        "spec.integration.engineOverrides.env[2].value",
    ]
    assert all(e.type is ErrorType.INVALID for e in errors)
    assert "not JSON" in errors[0].detail
    assert "a JSON array, not an object" in errors[1].detail


def test_reject_non_object_lmcache_extra_config_rejects_value_from_on_mooncake() -> None:
    """The webhook can merge the master address only into a literal value."""
    spec = {
        "runtime": "VLLM",
        "remoteStorage": managed("Mooncake"),
        "integration": {
            "engineOverrides": {
                "env": [
                    {
                        "name": "LMCACHE_EXTRA_CONFIG",
                        "valueFrom": {"configMapKeyRef": {"name": "mc", "key": "extra"}},
                    }
                ]
            }
        },
    }
    errors = reject_non_object_lmcache_extra_config(context_for(cb(spec), NS))
    assert [e.field for e in errors] == ["spec.integration.engineOverrides.env[0].valueFrom"]
    spec["remoteStorage"] = managed("LMCacheServer")
    assert run(reject_non_object_lmcache_extra_config, spec) == []


def test_leading_flag_token() -> None:
    assert leading_flag("--kv-transfer-config={}") == "--kv-transfer-config"
    assert leading_flag("  --kv-transfer-config {} ") == "--kv-transfer-config"
    assert leading_flag("--kv-transfer-config") == "--kv-transfer-config"
    assert leading_flag("") == ""


# --------------------------------------------------------------- events-only


EVENTS_ONLY = {**VLLM, "integration": {"mode": "EventsOnly"}}


def test_reject_events_only_with_non_lmcache_type_accepts_lmcache() -> None:
    assert run(reject_events_only_with_non_lmcache_type, EVENTS_ONLY) == []


def test_reject_events_only_with_non_lmcache_type_rejects_hicache() -> None:
    """Spec "Events-only requires spec.type=LMCache"."""
    spec = {**HICACHE, "integration": {"mode": "EventsOnly"}}
    errors = run(reject_events_only_with_non_lmcache_type, spec)
    assert errors == [
        'spec.type: Invalid value: "SGLangHiCache": spec.integration.mode EventsOnly requires '
        "spec.type LMCache, not SGLangHiCache: events-only wires no KV connector, and LMCache "
        "supplies the kvevent-subscriber the routing tier needs"
    ]


def test_reject_events_only_with_remote_storage_accepts_offload_remote_storage() -> None:
    assert run(reject_events_only_with_remote_storage, MANAGED_LMCACHE) == []
    assert run(reject_events_only_with_remote_storage, EVENTS_ONLY) == []


@pytest.mark.parametrize(
    "rs", [managed("LMCacheServer"), external("LMCacheServer", "lmcache:65432")]
)
def test_reject_events_only_with_remote_storage_rejects_managed_and_external(
    rs: dict[str, Any],
) -> None:
    """Spec "Events-only mode": spec.remoteStorage is forbidden (Managed or External)."""
    errors = run(reject_events_only_with_remote_storage, {**EVENTS_ONLY, "remoteStorage": rs})
    assert len(errors) == 1
    assert errors[0].startswith("spec.remoteStorage: Forbidden:")


def test_reject_events_only_with_autoscaling_accepts_offload_autoscaling() -> None:
    spec = {**MANAGED_LMCACHE, "autoscaling": {"maxReplicas": 2}}
    assert run(reject_events_only_with_autoscaling, spec) == []


def test_reject_events_only_with_autoscaling_rejects_field_scoped() -> None:
    """Spec "Events-only forbids spec.autoscaling": field-scoped to spec.autoscaling."""
    spec = {**EVENTS_ONLY, "autoscaling": {"maxReplicas": 2}}
    errors = run(reject_events_only_with_autoscaling, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.autoscaling: Forbidden:")


# -------------------------------------------------------------------- SGLang


def test_reject_unsupported_sglang_role_accepts_read_write_and_vllm_roles() -> None:
    """Spec: ReadWrite (the default) for SGLang; vLLM maps every role onto kv_role."""
    assert run(reject_unsupported_sglang_role, SGLANG) == []
    assert (
        run(reject_unsupported_sglang_role, {**SGLANG, "integration": {"role": "ReadWrite"}}) == []
    )
    assert run(reject_unsupported_sglang_role, {**VLLM, "integration": {"role": "ReadOnly"}}) == []


@pytest.mark.parametrize("role", ["ReadOnly", "WriteOnly"])
def test_reject_unsupported_sglang_role_rejects_read_only_and_write_only(role: str) -> None:
    """Spec rejectUnsupportedSGLangRole: (sglang, LMCache) supports only ReadWrite."""
    errors = run(reject_unsupported_sglang_role, {**SGLANG, "integration": {"role": role}})
    assert len(errors) == 1
    assert errors[0].startswith(f'spec.integration.role: Invalid value: "{role}":')
    assert "only ReadWrite is supported" in errors[0]


# ------------------------------------------------------------------ Mooncake


MOONCAKE = {
    **VLLM,
    "remoteStorage": managed("Mooncake"),
    "integration": {"engineHostNetwork": True},
}


@pytest.mark.parametrize("replicas", [0, 1, None])
def test_reject_mooncake_multiple_replicas_accepts_zero_and_one(replicas: int | None) -> None:
    """Spec: spec.replicas: 0 (disabled) and 1 remain valid."""
    spec = dict(MOONCAKE) if replicas is None else {**MOONCAKE, "replicas": replicas}
    assert run(reject_mooncake_multiple_replicas, spec) == []


def test_reject_mooncake_multiple_replicas_rejects_two() -> None:
    """Spec: the master is a singleton; spec.replicas > 1 is rejected."""
    errors = run(reject_mooncake_multiple_replicas, {**MOONCAKE, "replicas": 2})
    assert len(errors) == 1
    assert errors[0].startswith("spec.replicas: Invalid value: 2:")


def test_reject_mooncake_multiple_replicas_rejects_any_mooncake_provider() -> None:
    """Spec: "spec.replicas > 1 and spec.autoscaling are rejected at admission when
    remoteStorage.provider: Mooncake" — the sentence does not restrict it to Managed."""
    spec = {
        **VLLM,
        "remoteStorage": external("Mooncake", "mooncakestore://m:50051"),
        "integration": {"engineHostNetwork": True},
        "replicas": 3,
    }
    errors = run(reject_mooncake_multiple_replicas, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.replicas: Invalid value: 3:")
    assert run(reject_mooncake_autoscaling, {**spec, "autoscaling": {"maxReplicas": 2}})


def test_reject_mooncake_autoscaling_accepts_without_autoscaling() -> None:
    assert run(reject_mooncake_autoscaling, MOONCAKE) == []


def test_reject_mooncake_autoscaling_rejects_autoscaling() -> None:
    """Spec: spec.autoscaling is rejected when remoteStorage.provider: Mooncake."""
    errors = run(reject_mooncake_autoscaling, {**MOONCAKE, "autoscaling": {"maxReplicas": 2}})
    assert len(errors) == 1
    assert errors[0].startswith("spec.autoscaling: Forbidden:")


# --------------------------------------------------------------- observation


@pytest.mark.parametrize("value", ["0", "0s", "1h30m", "1.5h", "90s", "+5m", "-0", "5m"])
def test_reject_negative_first_event_timeout_accepts_zero_and_positive(value: str) -> None:
    """Go's duration grammar; 0 is a valid zero duration."""
    spec = {**VLLM, "observation": {"firstEventTimeout": value}}
    assert run(reject_negative_first_event_timeout, spec) == []
    assert validate(cb(spec), NS) == []


@pytest.mark.parametrize("value", ["-1s", "-1h30m", "-.5s"])
def test_reject_negative_first_event_timeout_rejects_negative(value: str) -> None:
    """A negative window means nothing, though "-1s" is grammatical Go."""
    spec = {**VLLM, "observation": {"firstEventTimeout": value}}
    errors = run(reject_negative_first_event_timeout, spec)
    assert errors == [
        f'spec.observation.firstEventTimeout: Invalid value: "{value}": must not be negative: '
        "it is how long the KV-event gate waits for the first event once the backend is up "
        '("0" reports NoKVEventsObserved at once)'
    ]


def test_reject_out_of_range_first_event_timeout_accepts_the_int64_maximum() -> None:
    spec = {**VLLM, "observation": {"firstEventTimeout": "2562047h47m16.854775807s"}}
    assert run(reject_out_of_range_first_event_timeout, spec) == []


@pytest.mark.parametrize("value", ["2562047h47m16.854775808s", "9223372036854775808ns", "3000000h"])
def test_reject_out_of_range_first_event_timeout_rejects_overflow(value: str) -> None:
    """Go's time.ParseDuration rejects a duration past int64 nanoseconds."""
    errors = validate(cb({**VLLM, "observation": {"firstEventTimeout": value}}), NS)
    assert [(e.field, e.bad_value) for e in errors] == [
        ("spec.observation.firstEventTimeout", value)
    ]
    assert "not a Go duration" in errors[0].detail


@pytest.mark.parametrize(
    ("value", "admitted"),
    [
        ("0", True),
        ("0s", True),
        ("1h30m", True),
        ("1.5h", True),
        ("90s", True),
        ("-1s", False),
        ("1d", False),
        ("5 m", False),
    ],
)
def test_first_event_timeout_accepts_exactly_go_durations(value: str, admitted: bool) -> None:
    """Go's duration grammar, through validate(): schema pattern plus rules."""
    errors = validate(cb({**VLLM, "observation": {"firstEventTimeout": value}}), NS)
    if admitted:
        assert errors == []
    else:
        assert [e.field for e in errors] == ["spec.observation.firstEventTimeout"]


# ------------------------------------------------------------- managed Redis


MANAGED_REDIS = {**SGLANG, "remoteStorage": managed("Redis")}


@pytest.mark.parametrize("replicas", [None, 0, 1])
def test_reject_managed_redis_multiple_replicas_accepts_zero_and_one(
    replicas: int | None,
) -> None:
    """One instance (or 0, disabled) is what a managed Redis is."""
    spec = dict(MANAGED_REDIS) if replicas is None else {**MANAGED_REDIS, "replicas": replicas}
    assert run(reject_managed_redis_multiple_replicas, spec) == []


def test_reject_managed_redis_multiple_replicas_accepts_external_redis_and_other_providers() -> (
    None
):
    """The rule is about the Redis the controller provisions (Managed): an External
    Redis runs no workload of ours; LMCacheServer scales out as before."""
    external_redis = {**SGLANG, "remoteStorage": external("Redis", "r:6379"), "replicas": 3}
    assert run(reject_managed_redis_multiple_replicas, external_redis) == []
    assert run(reject_managed_redis_multiple_replicas, {**MANAGED_LMCACHE, "replicas": 3}) == []


def test_reject_managed_redis_multiple_replicas_rejects_two_at_spec_replicas() -> None:
    """Replicas > 1 behind one Service shard the keyspace; the error is on
    spec.replicas and says why."""
    errors = run(reject_managed_redis_multiple_replicas, {**MANAGED_REDIS, "replicas": 2})
    assert len(errors) == 1
    assert errors[0].startswith("spec.replicas: Invalid value: 2: use 0 or 1")
    assert "non-clustered" in errors[0]
    assert "partial cache" in errors[0]


def test_reject_managed_redis_autoscaling_accepts_without_autoscaling() -> None:
    assert run(reject_managed_redis_autoscaling, MANAGED_REDIS) == []
    spec = {**MANAGED_LMCACHE, "autoscaling": {"maxReplicas": 3}}
    assert run(reject_managed_redis_autoscaling, spec) == []


def test_reject_managed_redis_autoscaling_rejects_autoscaling_at_spec_autoscaling() -> None:
    """spec.autoscaling shards a managed Redis's keyspace as it scales."""
    spec = {**MANAGED_REDIS, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}
    errors = run(reject_managed_redis_autoscaling, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.autoscaling: Forbidden:")
    assert "non-clustered" in errors[0]


def test_managed_redis_replicas_and_autoscaling_each_get_exactly_one_error() -> None:
    """One managed Redis instance, through validate(): both fields reported, once each
    (the host-only / External autoscaling rule stays out of it)."""
    spec = {**MANAGED_REDIS, "replicas": 3, "autoscaling": {"maxReplicas": 4}}
    errors = validate(cb(spec), NS)
    assert [e.field for e in errors] == ["spec.replicas", "spec.autoscaling"]
    events_only = {**spec, "integration": {"mode": "EventsOnly"}}
    fields = [e.field for e in validate(cb(events_only), NS)]
    assert fields.count("spec.autoscaling") == 1


def test_reject_unneeded_engine_host_network_accepts_mooncake_and_false() -> None:
    """Spec: engineHostNetwork is for Mooncake; false is inert anywhere."""
    assert run(reject_unneeded_engine_host_network, MOONCAKE) == []
    external_mooncake = {
        **VLLM,
        "remoteStorage": external("Mooncake", "mooncakestore://m:50051"),
        "integration": {"engineHostNetwork": True},
    }
    assert run(reject_unneeded_engine_host_network, external_mooncake) == []
    spec = {**MANAGED_LMCACHE, "integration": {"engineHostNetwork": False}}
    assert run(reject_unneeded_engine_host_network, spec) == []


@pytest.mark.parametrize(
    "base", [VLLM, MANAGED_LMCACHE, HICACHE, {**SGLANG, "remoteStorage": managed("Redis")}]
)
def test_reject_unneeded_engine_host_network_rejects_elsewhere(base: dict[str, Any]) -> None:
    """Spec: the flag is rejected on backend types that do not need it."""
    spec = {**base, "integration": {"engineHostNetwork": True}}
    errors = run(reject_unneeded_engine_host_network, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.integration.engineHostNetwork: Forbidden:")


# ------------------------------------------------------------------- HiCache


def test_reject_missing_hicache_block_accepts_present_block() -> None:
    assert run(reject_missing_hicache_block, HICACHE) == []


def test_reject_missing_hicache_block_rejects_absent_block() -> None:
    """Spec "SGLang native HiCache": hiCache is required for type SGLangHiCache."""
    errors = run(reject_missing_hicache_block, {**SGLANG, "type": "SGLangHiCache"})
    assert len(errors) == 1
    assert errors[0].startswith("spec.hiCache: Required value")


def test_reject_unsupported_hicache_role_accepts_read_write() -> None:
    assert run(reject_unsupported_hicache_role, HICACHE) == []
    spec = {**HICACHE, "integration": {"role": "ReadWrite"}}
    assert run(reject_unsupported_hicache_role, spec) == []
    # Other pairs are judged by their own rules.
    vllm = {**VLLM, "integration": {"role": "ReadOnly"}}
    assert run(reject_unsupported_hicache_role, vllm) == []


@pytest.mark.parametrize("role", ["ReadOnly", "WriteOnly"])
def test_reject_unsupported_hicache_role_rejects_read_only_and_write_only(role: str) -> None:
    """HiCache has no producer/consumer split, as for SGLang+LMCache."""
    errors = run(reject_unsupported_hicache_role, {**HICACHE, "integration": {"role": role}})
    assert len(errors) == 1
    assert errors[0].startswith(f'spec.integration.role: Invalid value: "{role}":')
    assert "only ReadWrite is supported" in errors[0]


def test_reject_hicache_fail_closed_accepts_fail_open_true_and_default() -> None:
    assert run(reject_hicache_fail_closed, HICACHE) == []
    spec = {**HICACHE, "integration": {"failOpen": True}}
    assert run(reject_hicache_fail_closed, spec) == []
    assert run(reject_hicache_fail_closed, {**VLLM, "integration": {"failOpen": False}}) == []


def test_reject_hicache_fail_closed_rejects_false_naming_the_supported_value() -> None:
    """HiCache: no remote tier could close serving; the flag would be a silent no-op."""
    errors = run(reject_hicache_fail_closed, {**HICACHE, "integration": {"failOpen": False}})
    assert len(errors) == 1
    assert errors[0].startswith("spec.integration.failOpen: Invalid value: false:")
    assert "supports only failOpen: true" in errors[0]


def test_reject_hicache_without_engine_selector_accepts_labels() -> None:
    assert run(reject_hicache_without_engine_selector, HICACHE) == []
    # Only HiCache requires one: other backends may be wired by selector later.
    assert run(reject_hicache_without_engine_selector, VLLM) == []


@pytest.mark.parametrize("selector", [None, {}, {"matchLabels": {}}, {"matchLabels": None}])
def test_reject_hicache_without_engine_selector_rejects_missing_or_empty(
    selector: dict[str, Any] | None,
) -> None:
    """A HiCache backend must select engine pods (empty matches none)."""
    spec = {k: v for k, v in HICACHE.items() if k != "engineSelector"}
    if selector is not None:
        spec["engineSelector"] = selector
    errors = run(reject_hicache_without_engine_selector, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.engineSelector.matchLabels: Required value:")


@pytest.mark.parametrize("block", [{"ratio": "2.0"}, {"sizeGB": 64}])
def test_reject_ambiguous_hicache_capacity_accepts_exactly_one(block: dict[str, Any]) -> None:
    assert run(reject_ambiguous_hicache_capacity, {**HICACHE, "hiCache": block}) == []


@pytest.mark.parametrize(
    ("block", "start"),
    [
        ({"ratio": "2", "sizeGB": 64}, "spec.hiCache.sizeGB: Forbidden:"),
        ({"writePolicy": "write_back"}, "spec.hiCache: Required value:"),
    ],
)
def test_reject_ambiguous_hicache_capacity_rejects_both_or_neither(
    block: dict[str, Any], start: str
) -> None:
    """Spec "SGLang native HiCache": exactly one of ratio and sizeGB."""
    errors = run(reject_ambiguous_hicache_capacity, {**HICACHE, "hiCache": block})
    assert len(errors) == 1
    assert errors[0].startswith(start)


@pytest.mark.parametrize("ratio", ["2.0", "2", "0.5", ".5", "1e1", "3."])
def test_reject_invalid_hicache_ratio_accepts_finite_positive(ratio: str) -> None:
    assert run(reject_invalid_hicache_ratio, {**HICACHE, "hiCache": {"ratio": ratio}}) == []


@pytest.mark.parametrize(
    "ratio", ["nan", "NaN", "inf", "Infinity", "0", "0.0", "-1", "abc", "", " 2", "1_0", "1e999"]
)
def test_reject_invalid_hicache_ratio_rejects_non_finite_or_non_positive(ratio: str) -> None:
    """Spec: ratio is a string containing a finite number greater than zero."""
    errors = run(reject_invalid_hicache_ratio, {**HICACHE, "hiCache": {"ratio": ratio}})
    assert errors == [
        f'spec.hiCache.ratio: Invalid value: "{ratio}": must be a finite decimal number '
        'greater than zero, such as "2.0"'
    ]


# ------------------------------------------------------------------- LMCache


@pytest.mark.parametrize("capacity", ["32Gi", 1, "500M"])
def test_reject_non_positive_host_memory_capacity_accepts_positive(capacity: Any) -> None:
    spec = {**VLLM, "lmCache": {"hostMemory": {"capacity": capacity}}}
    assert run(reject_non_positive_host_memory_capacity, spec) == []


@pytest.mark.parametrize(
    ("capacity", "detail"),
    [("0", "positive"), ("-1Gi", "positive"), (0, "positive"), ("32 GiB", "regular expression")],
)
def test_reject_non_positive_host_memory_capacity_rejects(capacity: Any, detail: str) -> None:
    """Spec "SGLang LMCache MP mode": lmCache.hostMemory.capacity is a positive quantity."""
    spec = {**SGLANG, "lmCache": {"hostMemory": {"capacity": capacity}}}
    errors = run(reject_non_positive_host_memory_capacity, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.lmCache.hostMemory.capacity: Invalid value:")
    assert detail in errors[0]


# ------------------------------------------------------------ precedence


def test_unusable_autoscaling_is_reported_by_exactly_one_rule() -> None:
    """Module precedence: one error on spec.autoscaling per unusable block; the rules about
    the block's own fields state their own conditions and still judge it."""
    for base, reason in (
        ({**EVENTS_ONLY}, "EventsOnly"),
        ({**VLLM}, "host-only"),
        ({**VLLM, "remoteStorage": external("LMCacheServer", "lmcache:1")}, "External"),
        (dict(MOONCAKE), "Mooncake"),
        (
            {
                **VLLM,
                "remoteStorage": external("Mooncake", "m:1"),
                "integration": {"engineHostNetwork": True},
            },
            "Mooncake",
        ),
    ):
        for autoscaling in (
            {"replicas": 0, "autoscaling": {"maxReplicas": 1}},
            {"autoscaling": {"maxReplicas": 1, "minReplicas": 2}},
        ):
            errors = errors_of({**base, **autoscaling})
            fields = sorted(e.split(": ")[0] for e in errors)
            assert fields == ["spec.autoscaling", "spec.autoscaling.minReplicas"], (base, fields)
            [forbidden_block] = [e for e in errors if e.startswith("spec.autoscaling: ")]
            assert reason in forbidden_block


# ------------------------------------------------------------ validate()


def test_validate_aggregates_every_violation_in_rule_order_without_duplicates() -> None:
    """Spec "Validating": multiple violations on a single spec are aggregated."""
    spec = {
        **SGLANG,
        "integration": {
            "role": "ReadOnly",
            "engineHostNetwork": True,
            "engineOverrides": {"args": ["--enable-lmcache"]},
        },
        "remoteStorage": external("Redis", "lm://redis.team-b.svc:6379"),
        "backendConfig": {},
    }
    errors = validate(cb(spec, annotations={"inferencecache.io/lmcache-kernel-check": "x"}), NS)
    assert [e.field for e in errors] == [
        "spec.backendConfig",
        "metadata.annotations[inferencecache.io/lmcache-kernel-check]",
        "spec.remoteStorage.endpoint",
        "spec.integration.engineOverrides.args[0]",
        "spec.integration.role",
        "spec.integration.engineHostNetwork",
    ]
    again = validate(cb(spec, annotations={"inferencecache.io/lmcache-kernel-check": "x"}), NS)
    assert [e.key() for e in again] == [e.key() for e in errors]


def test_validate_is_pure() -> None:
    """Rules are pure: the input object is not modified."""
    obj = cb({**VLLM, "autoscaling": {"maxReplicas": 2}})
    before = copy.deepcopy(obj)
    validate(obj, NS)
    assert obj == before


def test_validate_uses_metadata_namespace_then_default() -> None:
    """Decision: without a request namespace, metadata.namespace, else "default"."""
    spec = {**SGLANG, "remoteStorage": external("Redis", "redis.team-a.svc:6379")}
    assert validate(cb(spec), "") == []  # metadata.namespace is team-a
    obj = cb(spec)
    del obj["metadata"]["namespace"]
    assert len(validate(obj, "")) == 1  # judged from "default"


def test_validate_rules_are_pluggable() -> None:
    """The rule list is pluggable: validate() takes another ordered list."""
    spec = {**VLLM, "autoscaling": {"maxReplicas": 2}}

    def reject_everything(ctx: RuleContext) -> list[FieldError]:
        return [forbidden("spec", "no")]

    assert [str(e) for e in validate(cb(spec), NS, rules=[Rule(reject_everything)])] == [
        "spec: Forbidden: no"
    ]


# ---------------------------------------------------------------- warnings


def test_warnings_mooncake_without_engine_host_network() -> None:
    """Spec "Mooncake provider configuration": until engineHostNetwork is set, admission
    warns on every Mooncake remoteStorage apply (pods stay on the overlay, zero KV)."""
    spec = {**VLLM, "remoteStorage": managed("Mooncake")}
    notes = warnings(cb(spec))
    assert len(notes) == 1
    assert "spec.integration.engineHostNetwork=true" in notes[0]
    assert "zero KV" in notes[0]
    assert "roll" in notes[0]
    assert len(notes[0]) < 256  # the API server may truncate longer warnings
    assert validate(cb(spec), NS) == []  # admitted, with the warning


def test_warnings_none_with_engine_host_network_or_other_providers() -> None:
    assert warnings(cb(MOONCAKE)) == []
    assert warnings(cb(MANAGED_LMCACHE)) == []
    assert warnings({"spec": "garbage"}) == []


def test_hostile_sizes_are_judged_not_crashed() -> None:
    """Very long digit strings and huge exponents stay cheap field errors."""
    long_gpu = "1" * 5000 + ".5"
    resources = {
        "limits": {"nvidia.com/gpu": long_gpu, "memory": "1e999999999", "hugepages-1e99": "0"}
    }
    errors = errors_of(with_resources(resources, "LMCacheServer"))
    base = "spec.remoteStorage.lmCacheServer.resources.limits"
    assert [e.split(": ")[0] for e in errors] == [
        f"{base}[hugepages-1e99]",
        f"{base}[memory]",
        f"{base}[nvidia.com/gpu]",
    ]
    assert "too large" in errors[1]
    assert errors[2].endswith("quantity has more than 1000 digits")


def test_schema_error_in_a_provider_block_does_not_hide_endpoint_errors() -> None:
    """A pruned value only blocks the rules that read it: a bad quantity type in the
    resources still lets the endpoint rules judge the endpoint (and vice versa the
    resource rules stay quiet about the rejected half of a request/limit pair)."""
    spec = {
        **VLLM,
        "remoteStorage": managed(
            "LMCacheServer",
            endpoint="lm://x:1",
            lmCacheServer={
                "resources": {
                    "requests": {"nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": 1.0},
                }
            },
        ),
    }
    errors = errors_of(spec)
    assert [e.split(":")[0] for e in errors] == [
        "spec.remoteStorage.lmCacheServer.resources.limits[nvidia.com/gpu]",
        "spec.remoteStorage.endpoint",
    ]


# ------------------------------------------------------ vLLM built-in offloading

OFFLOADING = {
    "runtime": "VLLM",
    "type": "VLLMOffloading",
    "engineSelector": {"matchLabels": {"app": "vllm"}},
    "vllmOffloading": {"cpu": {"capacity": "64Gi"}, "evictionPolicy": "LRU"},
}


def test_vllm_offloading_backend_is_valid_whole() -> None:
    """The issue's CacheBackend passes every rule, and ARC is a policy too."""
    assert errors_of(OFFLOADING) == []
    arc = {**OFFLOADING, "vllmOffloading": {"cpu": {"capacity": "64Gi"}, "evictionPolicy": "ARC"}}
    assert errors_of(arc) == []


def test_reject_vllm_offloading_without_vllm_runtime_accepts_vllm() -> None:
    assert run(reject_vllm_offloading_without_vllm_runtime, OFFLOADING) == []


def test_reject_vllm_offloading_without_vllm_runtime_rejects_sglang() -> None:
    """runtime must be VLLM; reported once, at spec.runtime (not by the pair rule)."""
    errors = errors_of({**OFFLOADING, "runtime": "SGLang"})
    assert len(errors) == 1
    assert errors[0].startswith('spec.runtime: Invalid value: "SGLang": type VLLMOffloading')


def test_reject_events_only_vllm_offloading_accepts_offload() -> None:
    assert run(reject_events_only_vllm_offloading, OFFLOADING) == []
    offload = {**OFFLOADING, "integration": {"mode": "Offload"}}
    assert run(reject_events_only_vllm_offloading, offload) == []


def test_reject_events_only_vllm_offloading_rejects_events_only() -> None:
    """EventsOnly cannot carry a connector; reported once, at spec.integration.mode."""
    errors = errors_of({**OFFLOADING, "integration": {"mode": "EventsOnly"}})
    assert len(errors) == 1
    assert errors[0].startswith('spec.integration.mode: Invalid value: "EventsOnly"')


def test_reject_vllm_offloading_block_with_other_type_accepts_its_type() -> None:
    assert run(reject_vllm_offloading_block_with_other_type, OFFLOADING) == []


def test_reject_vllm_offloading_block_with_other_type_rejects_lmcache() -> None:
    spec = {**VLLM, "vllmOffloading": {"cpu": {"capacity": "1Gi"}}}
    errors = run(reject_vllm_offloading_block_with_other_type, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.vllmOffloading: Forbidden")


def test_reject_missing_vllm_offloading_capacity_accepts_capacity() -> None:
    assert run(reject_missing_vllm_offloading_capacity, OFFLOADING) == []


def test_reject_missing_vllm_offloading_capacity_rejects_absent_capacity() -> None:
    spec = {k: v for k, v in OFFLOADING.items() if k != "vllmOffloading"}
    errors = run(reject_missing_vllm_offloading_capacity, spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.vllmOffloading.cpu.capacity: Required value")


def test_reject_non_positive_vllm_offloading_capacity_accepts_positive() -> None:
    assert run(reject_non_positive_vllm_offloading_capacity, OFFLOADING) == []


@pytest.mark.parametrize("capacity", ["0", 0, "0Gi", "-1Gi"])
def test_reject_non_positive_vllm_offloading_capacity_rejects_zero_and_negative(
    capacity: Any,
) -> None:
    spec = {**OFFLOADING, "vllmOffloading": {"cpu": {"capacity": capacity}}}
    errors = errors_of(spec)
    assert len(errors) == 1
    assert errors[0].startswith("spec.vllmOffloading.cpu.capacity: Invalid value")


def test_vllm_offloading_refuses_remote_storage_lmcache_hicache_and_unknown_policy() -> None:
    """The rules that already cover the type judge it: one error each, field-scoped."""
    remote = {**OFFLOADING, "remoteStorage": external("Redis", "redis:6379")}
    assert [e.split(":")[0] for e in errors_of(remote)] == ["spec.remoteStorage"]
    lm = {**OFFLOADING, "lmCache": {"chunkSizeTokens": 256}}
    assert [e.split(":")[0] for e in errors_of(lm)] == ["spec.lmCache"]
    hi = {**OFFLOADING, "hiCache": {"ratio": "2.0"}}
    assert [e.split(":")[0] for e in errors_of(hi)] == ["spec.hiCache"]
    policy = {
        **OFFLOADING,
        "vllmOffloading": {"cpu": {"capacity": "1Gi"}, "evictionPolicy": "FIFO"},
    }
    assert errors_of(policy) == [
        'spec.vllmOffloading.evictionPolicy: Unsupported value: "FIFO": supported values: '
        '"LRU", "ARC"'
    ]

"""shared.defaulting: spec "Defaulting (mutating)" — the webhook's context-dependent defaults."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.defaulting import default_cachebackend
from tests.builders import cb, with_schema_defaults
from tests.samples import sample_backends

MANAGED = {"provider": "LMCacheServer", "ownership": "Managed"}


def test_materialises_integration_with_its_marker_defaults() -> None:
    """Spec Contract Notes: spec.integration is materialised so mode/role/failOpen land."""
    out = default_cachebackend(cb({"runtime": "VLLM"}), "CREATE", None)
    assert out["spec"]["integration"] == {"mode": "Offload", "role": "ReadWrite", "failOpen": True}


def test_materialises_observation_with_first_event_timeout() -> None:
    """Spec Defaulting table: firstEventTimeout 5m when spec.observation is omitted."""
    out = default_cachebackend(cb({"runtime": "VLLM"}), "CREATE", None)
    assert out["spec"]["observation"] == {"firstEventTimeout": "5m"}
    partial = default_cachebackend(
        cb({"runtime": "VLLM", "observation": {"modelID": "m"}}), "UPDATE"
    )
    assert partial["spec"]["observation"] == {"modelID": "m", "firstEventTimeout": "5m"}


def test_never_clobbers_operator_values() -> None:
    """Spec: operator-set values are never clobbered."""
    spec = {
        "runtime": "VLLM",
        "integration": {"mode": "EventsOnly", "role": "ReadOnly", "failOpen": False},
        "observation": {"firstEventTimeout": "15m"},
        "remoteStorage": MANAGED,
        "replicas": 3,
        "autoscaling": {"maxReplicas": 5, "minReplicas": 2},
    }
    obj = cb(spec)
    assert default_cachebackend(obj, "CREATE", None) == obj


def test_explicit_null_blocks_count_as_absent() -> None:
    """A JSON null means absent (the API server drops it), so it is materialised."""
    out = default_cachebackend(cb({"runtime": "VLLM", "integration": None}), "CREATE")
    assert out["spec"]["integration"]["mode"] == "Offload"


def test_min_replicas_defaults_to_replicas_on_create() -> None:
    """Spec: autoscaling.minReplicas = spec.replicas on FIRST APPLY when unset."""
    spec = {
        "runtime": "VLLM",
        "remoteStorage": MANAGED,
        "replicas": 3,
        "autoscaling": {"maxReplicas": 6},
    }
    out = default_cachebackend(cb(spec), "CREATE", None)
    assert out["spec"]["autoscaling"] == {"maxReplicas": 6, "minReplicas": 3}


def test_min_replicas_defaults_to_post_default_replicas_of_one() -> None:
    """Spec: = spec.replicas post-marker-default, i.e. 1 when replicas is unset."""
    spec = {"runtime": "VLLM", "remoteStorage": MANAGED, "autoscaling": {"maxReplicas": 6}}
    out = default_cachebackend(cb(spec), "CREATE", None)
    assert out["spec"]["autoscaling"]["minReplicas"] == 1


def test_min_replicas_not_computed_on_update() -> None:
    """Spec: first-apply-only — a later edit to spec.replicas does not move the floor, and
    an UPDATE never computes it."""
    spec = {
        "runtime": "VLLM",
        "remoteStorage": MANAGED,
        "replicas": 4,
        "autoscaling": {"maxReplicas": 6},
    }
    old = cb({**spec, "replicas": 2})
    out = default_cachebackend(cb(spec), "UPDATE", old)
    assert "minReplicas" not in out["spec"]["autoscaling"]


def test_min_replicas_not_computed_from_zero_replicas() -> None:
    """Spec: skipped when spec.replicas is 0 (Minimum=1); validation rejects instead."""
    spec = {
        "runtime": "VLLM",
        "remoteStorage": MANAGED,
        "replicas": 0,
        "autoscaling": {"maxReplicas": 6},
    }
    out = default_cachebackend(cb(spec), "CREATE", None)
    assert "minReplicas" not in out["spec"]["autoscaling"]


def test_autoscaling_is_not_materialised() -> None:
    """Spec: other optional nested specs (autoscaling, template, engineSelector) stay absent."""
    out = default_cachebackend(cb({"runtime": "VLLM"}), "CREATE", None)
    assert set(out["spec"]) == {"runtime", "integration", "observation"}


@pytest.mark.parametrize(
    "spec",
    [
        {"runtime": "VLLM", "replicas": "3", "autoscaling": {"maxReplicas": 6}},
        {"runtime": "VLLM", "replicas": True, "autoscaling": {"maxReplicas": 6}},
        {"runtime": "VLLM", "integration": "Offload", "observation": []},
    ],
)
def test_wrong_types_are_left_for_validation(spec: dict[str, Any]) -> None:
    """Defaulting never guesses at a malformed value; the validating webhook rejects it."""
    out = default_cachebackend(cb(spec), "CREATE", None)
    assert out["spec"].get("autoscaling", {}).get("minReplicas") is None
    for key in ("integration", "observation"):
        if not isinstance(spec.get(key, {}), dict):
            assert out["spec"][key] == spec[key]


def test_no_spec_is_returned_unchanged() -> None:
    obj = {"metadata": {"name": "x"}}
    assert default_cachebackend(obj, "CREATE", None) == obj
    assert default_cachebackend({"spec": "x"}, "CREATE", None) == {"spec": "x"}


def test_input_is_not_mutated() -> None:
    """Pure: the returned object is a copy."""
    obj = cb({"runtime": "VLLM", "remoteStorage": MANAGED, "autoscaling": {"maxReplicas": 2}})
    before = copy.deepcopy(obj)
    default_cachebackend(obj, "CREATE", None)
    assert obj == before


@pytest.mark.parametrize(("name", "doc"), sample_backends())
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_idempotent_on_every_sample(name: str, doc: dict[str, Any], operation: str) -> None:
    """Defaulting a defaulted object changes nothing (re-admission yields an empty patch)."""
    once = default_cachebackend(doc, operation, None)
    assert default_cachebackend(once, operation, None) == once


@pytest.mark.parametrize(("name", "doc"), sample_backends())
def test_agrees_with_api_server_markers(name: str, doc: dict[str, Any]) -> None:
    """Filling mode/role/failOpen/firstEventTimeout explicitly is harmless: the API
    server's markers stamp the same values, so marker-defaulting our output is a no-op
    on those blocks."""
    out = default_cachebackend(doc, "CREATE", None)
    stamped = with_schema_defaults(out)
    assert stamped["spec"]["integration"] == out["spec"]["integration"]
    assert stamped["spec"]["observation"] == out["spec"]["observation"]


def test_every_schema_default_is_under_spec() -> None:
    """with_spec_defaults defaults .spec only: right only while the CRD schema has no
    default anywhere else (this fails the day one is added elsewhere)."""
    from shared.api.crd import spec_openapi_schema

    def defaults_outside_spec(node: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found: list[tuple[str, ...]] = []
        if isinstance(node, dict):
            if "default" in node and path[:2] != ("properties", "spec"):
                found.append(path)
            for key, child in node.items():
                found += defaults_outside_spec(child, (*path, str(key)))
        elif isinstance(node, list):
            for i, child in enumerate(node):
                found += defaults_outside_spec(child, (*path, str(i)))
        return found

    schema = spec_openapi_schema()
    assert defaults_outside_spec(schema, ()) == []
    assert "default" not in schema["properties"]["spec"]


@pytest.mark.parametrize(("name", "obj"), sample_backends())
def test_judged_form_is_pruned_then_schema_defaulted_and_leaves_obj_alone(
    name: str, obj: dict[str, Any]
) -> None:
    """rules.judged_form (one spec copy) == with_schema_defaults of the null-pruned
    object (two copies), and the caller's object is untouched."""
    from shared.validation.context import judged_form
    from shared.validation.schema import drop_nulls

    sparse = copy.deepcopy(obj)
    sparse["spec"] = {**sparse["spec"], "replicas": None, "autoscaling": None}
    before = copy.deepcopy(sparse)
    expected = with_schema_defaults({**sparse, "spec": drop_nulls(sparse["spec"])})
    assert judged_form(sparse) == expected, name
    assert sparse == before


def test_vllm_offloading_eviction_policy_defaults_to_lru() -> None:
    """Issue 41 defaulting: spec.vllmOffloading.evictionPolicy is LRU when omitted (a CRD
    default, so the API server stamps it wherever the block is present); a set value stays."""
    spec = {
        "runtime": "VLLM",
        "type": "VLLMOffloading",
        "vllmOffloading": {"cpu": {"capacity": "64Gi"}},
    }
    out = with_schema_defaults(cb(spec))
    assert out["spec"]["vllmOffloading"] == {"cpu": {"capacity": "64Gi"}, "evictionPolicy": "LRU"}
    arc = {**spec, "vllmOffloading": {"cpu": {"capacity": "64Gi"}, "evictionPolicy": "ARC"}}
    assert with_schema_defaults(cb(arc))["spec"]["vllmOffloading"]["evictionPolicy"] == "ARC"

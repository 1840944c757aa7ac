"""webhook_svc.cachebackend_admission: spec "Admission" — the defaulting and validating
webhooks for CacheBackend, as AdmissionReview in / AdmissionReview out."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest

from shared.defaulting import default_cachebackend
from shared.validation.rules import MOONCAKE_HOST_NETWORK_WARNING
from tests.builders import cachebackend_review, cb
from tests.samples import EXAMPLES_DIR as EXAMPLES
from tests.samples import EXPECTED_CACHEBACKEND_EXAMPLES as EXPECTED_EXAMPLES
from tests.samples import sample_backends
from webhook_svc import cachebackend_admission as admission
from webhook_svc.admission_review import AdmissionRequest, parse_review
from webhook_svc.cachebackend_admission import mutate_cachebackend, validate_cachebackend

NS = "team-a"


def request(
    operation: str,
    obj: Any = None,
    old: Any = None,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    **extra: Any,
) -> AdmissionRequest:
    """The parsed request of a sparse CacheBackend review (no user, no requestKind)."""
    return parse_review(cachebackend_review(operation, obj, old, uid=uid, sparse=True, **extra))


def response(review: dict[str, Any]) -> dict[str, Any]:
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    out: dict[str, Any] = review["response"]
    return out


def decoded_patch(resp: dict[str, Any]) -> list[dict[str, Any]]:
    assert resp["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(resp["patch"]))
    return patch


VALID = {"runtime": "SGLang", "remoteStorage": {"provider": "Redis", "ownership": "Managed"}}
EXTERNAL_REDIS = {
    "runtime": "SGLang",
    "remoteStorage": {"provider": "Redis", "ownership": "External", "endpoint": "redis:6379"},
}


# ------------------------------------------------------------------ mutating


def test_mutate_patch_is_base64_json_patch_and_minimal() -> None:
    """Spec "Defaulting (mutating)": only what the webhook adds is in the patch."""
    obj = cb({**VALID, "replicas": 2, "autoscaling": {"maxReplicas": 4}})
    resp = response(mutate_cachebackend(request("CREATE", obj)))
    assert resp["allowed"] is True
    assert decoded_patch(resp) == [
        {
            "op": "add",
            "path": "/spec/integration",
            "value": {"mode": "Offload", "role": "ReadWrite", "failOpen": True},
        },
        {"op": "add", "path": "/spec/observation", "value": {"firstEventTimeout": "5m"}},
        {"op": "add", "path": "/spec/autoscaling/minReplicas", "value": 2},
    ]


def test_mutate_patch_applies_to_the_defaulted_object() -> None:
    obj = cb({**VALID, "integration": {"role": "ReadWrite"}, "autoscaling": {"maxReplicas": 4}})
    resp = response(mutate_cachebackend(request("CREATE", obj)))
    patched = jsonpatch.apply_patch(obj, decoded_patch(resp))
    assert patched == default_cachebackend(obj, "CREATE", None)
    # only the missing leaves are added inside an existing block
    assert {op["path"] for op in decoded_patch(resp)} == {
        "/spec/integration/mode",
        "/spec/integration/failOpen",
        "/spec/observation",
        "/spec/autoscaling/minReplicas",
    }


def test_mutate_of_an_api_server_defaulted_object_adds_only_context_defaults() -> None:
    """Against a real API server the markers already stamped mode/role/failOpen and the
    nested defaults: the patch is then only what the markers cannot do."""
    obj = cb(
        {
            **VALID,
            "integration": {"mode": "Offload", "role": "ReadWrite", "failOpen": True},
            "observation": {"firstEventTimeout": "5m"},
            "autoscaling": {"maxReplicas": 3},
            "replicas": 1,
        }
    )
    resp = response(mutate_cachebackend(request("CREATE", obj)))
    assert decoded_patch(resp) == [
        {"op": "add", "path": "/spec/autoscaling/minReplicas", "value": 1}
    ]


def test_mutate_of_a_defaulted_object_has_no_patch() -> None:
    """Idempotent: re-admitting a defaulted object yields an empty patch."""
    obj = default_cachebackend(cb({**VALID, "autoscaling": {"maxReplicas": 3}}), "CREATE", None)
    resp = response(mutate_cachebackend(request("CREATE", obj)))
    assert resp == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_mutate_update_never_computes_min_replicas() -> None:
    """Spec: minReplicas is defaulted on FIRST APPLY only."""
    obj = default_cachebackend(cb({**VALID, "autoscaling": {"maxReplicas": 3}}), "UPDATE", None)
    assert "minReplicas" not in obj["spec"]["autoscaling"]
    resp = response(mutate_cachebackend(request("UPDATE", obj, old=obj)))
    assert "patch" not in resp


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_mutate_delete_and_connect_allowed_without_patch(operation: str) -> None:
    resp = response(mutate_cachebackend(request(operation, old=cb(VALID))))
    assert resp == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


@pytest.mark.parametrize("obj", [None, ["not", "an", "object"], "text"])
def test_mutate_undecodable_object_allowed_without_patch(obj: Any) -> None:
    """Validation rejects it; the defaulter has nothing to patch."""
    resp = response(mutate_cachebackend(request("CREATE", obj)))
    assert resp["allowed"] is True
    assert "patch" not in resp


def test_mutate_object_with_malformed_spec_allowed_without_patch() -> None:
    resp = response(mutate_cachebackend(request("CREATE", cb("garbage"))))
    assert resp["allowed"] is True
    assert "patch" not in resp


def test_mutate_echoes_uid() -> None:
    resp = response(mutate_cachebackend(request("CREATE", cb(VALID), uid="abc-123")))
    assert resp["uid"] == "abc-123"


# ---------------------------------------------------------------- validating


def test_validate_create_valid_is_allowed_and_echoes_uid() -> None:
    resp = response(validate_cachebackend(request("CREATE", cb(VALID), uid="uid-1")))
    assert resp == {"uid": "uid-1", "allowed": True}


@pytest.mark.parametrize(("name", "doc"), sample_backends())
def test_validate_every_sample_is_allowed(name: str, doc: dict[str, Any]) -> None:
    resp = response(validate_cachebackend(request("CREATE", doc)))
    assert resp["allowed"] is True, resp


def test_validate_aggregates_several_errors_into_one_invalid_status() -> None:
    """Spec "Validating": multiple violations are aggregated into one Invalid status, the
    API server's own shape (reason Invalid, code 422, one cause per field error)."""
    obj = cb(
        {
            "runtime": "SGLang",
            "integration": {"role": "ReadOnly"},
            "remoteStorage": {
                "provider": "Redis",
                "ownership": "External",
                "endpoint": "redis://r:1",
            },
            "autoscaling": {"maxReplicas": 2},
        }
    )
    resp = response(validate_cachebackend(request("CREATE", obj, uid="u-agg")))
    assert resp["uid"] == "u-agg"
    assert resp["allowed"] is False
    status = resp["status"]
    causes = status["details"]["causes"]
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'CacheBackend.inferencecache.io "cache" is invalid: ['
        + ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        + "]",
        "reason": "Invalid",
        "details": {
            "name": "cache",
            "group": "inferencecache.io",
            "kind": "CacheBackend",
            "causes": causes,
        },
        "code": 422,
    }
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueForbidden", "spec.autoscaling"),
        ("FieldValueInvalid", "spec.remoteStorage.endpoint"),
        ("FieldValueInvalid", "spec.integration.role"),
    ]
    assert causes[1]["message"] == (
        'Invalid value: "redis://r:1": scheme redis:// is not accepted; the Redis provider '
        "accepts bare host:port"
    )


def test_validate_single_error_message_has_no_brackets() -> None:
    """k8s ToAggregate: a single error is printed bare."""
    obj = cb({"runtime": "SGLang", "integration": {"role": "WriteOnly"}})
    status = response(validate_cachebackend(request("CREATE", obj)))["status"]
    assert status["message"] == (
        'CacheBackend.inferencecache.io "cache" is invalid: spec.integration.role: Invalid '
        'value: "WriteOnly": SGLang\'s LMCache integration has no kv_role split (it always '
        "both stores and retrieves); only ReadWrite is supported"
    )
    assert len(status["details"]["causes"]) == 1


def test_validate_schema_errors_are_field_errors() -> None:
    """Spec "Cache type validation": type Mooncake is rejected with the enum's values."""
    obj = cb({"type": "Mooncake"})
    status = response(validate_cachebackend(request("CREATE", obj)))["status"]
    assert status["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.runtime"},
        {
            "reason": "FieldValueNotSupported",
            "message": 'Unsupported value: "Mooncake": supported values: "LMCache", '
            '"SGLangHiCache", "VLLMOffloading"',
            "field": "spec.type",
        },
    ]


def test_validate_replayed_raw_manifest_is_judged_as_if_defaulted() -> None:
    """Without the mutating webhook and the API server's markers in front (curl replay),
    the object is judged as if both had run: here minReplicas defaults to replicas 3 on
    CREATE, which exceeds maxReplicas 2."""
    raw = cb(
        {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            "replicas": 3,
            "autoscaling": {"maxReplicas": 2},
        }
    )
    status = response(validate_cachebackend(request("CREATE", raw)))["status"]
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.autoscaling.minReplicas"]
    assert "Invalid value: 3" in status["details"]["causes"][0]["message"]
    # ... and a raw events-only manifest (type omitted -> LMCache) is valid.
    events_only = cb({"runtime": "VLLM", "integration": {"mode": "EventsOnly"}})
    assert response(validate_cachebackend(request("CREATE", events_only)))["allowed"] is True


def test_validate_update_label_edit_on_pre_existing_invalid_object_is_allowed() -> None:
    """Spec: ValidateUpdate only rejects violations the update introduces; an unrelated
    edit on a CR admitted under a laxer rule set is not suddenly un-updatable."""
    invalid_spec = {
        "runtime": "SGLang",
        "integration": {"role": "ReadOnly"},
        "remoteStorage": {"provider": "Redis", "ownership": "External", "endpoint": "lm://r:1"},
    }
    old = cb(invalid_spec)
    new = cb(copy.deepcopy(invalid_spec), labels={"team": "infra"})
    resp = response(validate_cachebackend(request("UPDATE", new, old=old)))
    assert resp["allowed"] is True


def test_validate_update_changing_one_bad_endpoint_to_another_is_a_fresh_violation() -> None:
    """Spec: errors are compared by (Type, Field, BadValue, Detail), so a different bad
    endpoint on the same field counts as a fresh violation."""

    def spec(endpoint: str) -> dict[str, Any]:
        return {
            "runtime": "SGLang",
            "remoteStorage": {"provider": "Redis", "ownership": "External", "endpoint": endpoint},
        }

    old = cb(spec("lm://redis:6379"))
    new = cb(spec("redis://redis:6379"))
    resp = response(validate_cachebackend(request("UPDATE", new, old=old)))
    assert resp["allowed"] is False
    assert [c["field"] for c in resp["status"]["details"]["causes"]] == [
        "spec.remoteStorage.endpoint"
    ]
    assert '"redis://redis:6379"' in resp["status"]["message"]


def test_validate_update_that_flips_a_valid_field_invalid_is_rejected() -> None:
    """Spec: a kubectl edit that flips a previously-valid field into an invalid one is
    still rejected — and only the new violation is reported."""
    old = cb({"runtime": "SGLang", "integration": {"role": "WriteOnly"}})
    new = cb(
        {
            "runtime": "SGLang",
            "integration": {"role": "WriteOnly"},
            "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
        }
    )
    resp = response(validate_cachebackend(request("UPDATE", new, old=old)))
    assert resp["allowed"] is False
    assert [c["field"] for c in resp["status"]["details"]["causes"]] == [
        "spec.remoteStorage.provider"
    ]


def test_validate_update_does_not_default_min_replicas() -> None:
    """First-apply-only: an UPDATE judges minReplicas as written (no CREATE default)."""
    spec = {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        "replicas": 3,
        "autoscaling": {"maxReplicas": 2},
    }
    resp = response(validate_cachebackend(request("UPDATE", cb(spec), old=cb(spec))))
    assert resp["allowed"] is True


def test_validate_update_without_old_object_is_judged_in_full() -> None:
    obj = cb({"runtime": "SGLang", "integration": {"role": "ReadOnly"}})
    assert response(validate_cachebackend(request("UPDATE", obj)))["allowed"] is False


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_validate_delete_allowed(operation: str) -> None:
    """Spec: the webhooks judge CREATE and UPDATE; DELETE is always allowed."""
    old = cb({"runtime": "SGLang", "integration": {"role": "ReadOnly"}})
    resp = response(validate_cachebackend(request(operation, old=old, uid="del-1")))
    assert resp == {"uid": "del-1", "allowed": True}


def test_validate_status_subresource_update_allowed() -> None:
    """Status writes cannot change the spec; they are not judged."""
    obj = cb({"runtime": "SGLang", "integration": {"role": "ReadOnly"}})
    resp = response(validate_cachebackend(request("UPDATE", obj, old=obj, subResource="status")))
    assert resp["allowed"] is True


def test_validate_warning_on_allowed_mooncake_without_engine_host_network() -> None:
    """Spec "Mooncake provider configuration": admission warns on every Mooncake
    remoteStorage apply until engineHostNetwork is set."""
    obj = cb({"runtime": "VLLM", "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"}})
    resp = response(validate_cachebackend(request("CREATE", obj)))
    assert resp["allowed"] is True
    assert resp["warnings"] == [MOONCAKE_HOST_NETWORK_WARNING]
    update = response(validate_cachebackend(request("UPDATE", obj, old=obj)))
    assert update["warnings"] == [MOONCAKE_HOST_NETWORK_WARNING]


def test_validate_warning_also_on_denial() -> None:
    obj = cb(
        {
            "runtime": "VLLM",
            "replicas": 2,
            "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
        }
    )
    resp = response(validate_cachebackend(request("CREATE", obj)))
    assert resp["allowed"] is False
    assert resp["warnings"] == [MOONCAKE_HOST_NETWORK_WARNING]


def test_validate_no_warning_with_engine_host_network() -> None:
    obj = cb(
        {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
            "integration": {"engineHostNetwork": True},
        }
    )
    assert "warnings" not in response(validate_cachebackend(request("CREATE", obj)))


def test_validate_undecodable_object_denied_as_bad_request() -> None:
    resp = response(validate_cachebackend(request("CREATE", ["x"])))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 400
    assert resp["status"]["reason"] == "BadRequest"


def test_validate_uses_generate_name_request_name_when_metadata_name_missing() -> None:
    obj = cb({"runtime": "SGLang", "integration": {"role": "ReadOnly"}}, name="")
    status = response(validate_cachebackend(request("CREATE", obj)))["status"]
    assert status["message"].startswith('CacheBackend.inferencecache.io "cache" is invalid: ')


def test_validate_cross_namespace_uses_request_namespace() -> None:
    """Spec "Cross-namespace endpoint requires opt-in": judged against the request's
    namespace."""
    spec: dict[str, Any] = {
        "runtime": "SGLang",
        "remoteStorage": {
            "provider": "Redis",
            "ownership": "External",
            "endpoint": "r.team-b.svc:1",
        },
    }
    assert response(validate_cachebackend(request("CREATE", cb(spec))))["allowed"] is False
    spec["allowCrossNamespace"] = True
    assert response(validate_cachebackend(request("CREATE", cb(spec))))["allowed"] is True


def test_unexpected_exception_becomes_a_500_denial(monkeypatch: pytest.MonkeyPatch) -> None:
    """Must never raise: an unexpected error is a denial with a clear message."""

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(admission, "validate", boom)
    monkeypatch.setattr(admission, "default_cachebackend", boom)
    for handler in (validate_cachebackend, mutate_cachebackend):
        resp = response(handler(request("CREATE", cb(VALID), uid="u-500")))
        assert resp["uid"] == "u-500"
        assert resp["allowed"] is False
        assert resp["status"]["code"] == 500
        assert resp["status"]["reason"] == "InternalError"
        assert "RuntimeError: kaboom" in resp["status"]["message"]


@pytest.mark.parametrize(
    "spec",
    [
        {"runtime": ["x"], "type": {"a": 1}, "remoteStorage": "x", "hiCache": 5},
        {"runtime": "VLLM", "remoteStorage": {"redis": {"resources": {"limits": []}}}},
        {"runtime": "VLLM", "integration": {"engineOverrides": {"env": "x", "args": [1]}}},
        {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": {"x": 1}}}},
        {
            "runtime": "VLLM",
            "remoteStorage": {
                "provider": "Mooncake",
                "mooncake": {"resources": {"limits": {"hugepages-1e999999999": "1e999999999"}}},
            },
        },
        {"runtime": None, "replicas": None, "autoscaling": {"maxReplicas": None}},
    ],
)
def test_hostile_objects_are_denied_not_crashed(spec: Any) -> None:
    """Designed so the 500 path does not happen: malformed input is a 422 with causes."""
    for op in ("CREATE", "UPDATE"):
        resp = response(validate_cachebackend(request(op, cb(spec), old=cb({"runtime": "VLLM"}))))
        assert resp["allowed"] is False
        assert resp["status"]["code"] == 422, resp
        assert response(mutate_cachebackend(request(op, cb(spec))))["allowed"] is True


# ------------------------------------------------------- curl replay examples


def test_every_example_is_listed() -> None:
    cachebackend_examples = [
        p.name for p in EXAMPLES.glob("*.json") if not p.name.startswith("pod-")
    ]
    assert sorted(cachebackend_examples) == sorted(EXPECTED_EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXPECTED_EXAMPLES))
def test_example_replays_as_documented(name: str) -> None:
    """examples/admission/README.md: each replay file's documented outcome."""
    allowed, causes, patched, warned = EXPECTED_EXAMPLES[name]
    req = parse_review(json.loads((EXAMPLES / name).read_text()))
    valid = response(validate_cachebackend(req))
    assert valid["uid"] == req.uid
    assert valid["allowed"] is allowed, valid
    assert len(valid.get("status", {}).get("details", {}).get("causes", [])) == causes
    assert len(valid.get("warnings", [])) == warned
    mutated = response(mutate_cachebackend(req))
    assert mutated["allowed"] is True
    assert ("patch" in mutated) is patched


def test_resource_example_reports_kubernetes_map_key_paths() -> None:
    """Spec "Resources": errors at the selected provider path, map keys as [key]; the
    limit that is below (or unequal to) its request is the offending field, and a
    non-overcommittable request without a limit is reported at that request."""
    req = parse_review(json.loads((EXAMPLES / "create-invalid-resources.json").read_text()))
    causes = response(validate_cachebackend(req))["status"]["details"]["causes"]
    base = "spec.remoteStorage.redis.resources"
    assert [c["field"] for c in causes] == [
        f"{base}.limits[hugepages-2Mi]",
        f"{base}.limits[memory]",
        f"{base}.requests[nvidia.com/gpu]",
    ]

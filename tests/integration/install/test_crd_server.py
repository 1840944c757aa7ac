"""The generated CRD on a real kube-apiserver: schema, defaults, status, printer columns."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.samples import sample_backends, sample_documents

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"


def _create(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created: Any = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, body, field_validation="Strict"
    )
    return created


def _minimal(name: str = "cb") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CacheBackend",
        "metadata": {"name": name},
        "spec": {"runtime": "VLLM"},
    }


def _error(exc: ApiException) -> dict[str, Any]:
    assert exc.body is not None
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_crd_becomes_established(cachebackend_crd: dict[str, Any]) -> None:
    assert cachebackend_crd["metadata"]["name"] == "cachebackends.inferencecache.io"


@pytest.mark.parametrize(
    ("name", "doc"), sample_documents(), ids=[n for n, _ in sample_documents()]
)
def test_every_sample_applies(
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    namespace: str,
    name: str,
    doc: dict[str, Any],
) -> None:
    """Every document in manifests/samples/ is accepted by the real API server (strict)."""
    if doc["kind"] == "CacheBackend":
        created = _create(kube_api_client, namespace, copy.deepcopy(doc))
        assert created["spec"]["runtime"] == doc["spec"]["runtime"]
    else:
        assert doc["kind"] == "Deployment"
        # The client serialises a plain manifest dict as the body.
        deployment: Any = doc
        client.AppsV1Api(kube_api_client).create_namespaced_deployment(
            namespace, deployment, field_validation="Strict"
        )


def test_schema_defaults_appear_on_read_back(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    """Spec "Defaulting": the API server stamps type, deploymentKind, replicas and, under a
    present parent, integration.{mode,role,failOpen} and observation.firstEventTimeout."""
    body = _minimal()
    body["spec"]["integration"] = {}
    body["spec"]["observation"] = {"modelID": "m"}
    _create(kube_api_client, namespace, body)
    got: Any = client.CustomObjectsApi(kube_api_client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "cb"
    )
    spec = got["spec"]
    assert spec["type"] == "LMCache"
    assert spec["deploymentKind"] == "Deployment"
    assert spec["replicas"] == 1
    assert spec["integration"] == {"mode": "Offload", "role": "ReadWrite", "failOpen": True}
    assert spec["observation"] == {"modelID": "m", "firstEventTimeout": "5m"}
    # Optional objects stay absent.
    assert "autoscaling" not in spec
    assert "remoteStorage" not in spec


@pytest.mark.parametrize("bad_type", ["Mooncake", "External"])
def test_removed_type_spellings_are_rejected_by_the_schema(
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    namespace: str,
    bad_type: str,
) -> None:
    """Spec "Cache type validation": type: Mooncake / External are rejected before admission."""
    body = _minimal()
    body["spec"]["type"] = bad_type
    with pytest.raises(ApiException) as info:
        _create(kube_api_client, namespace, body)
    assert info.value.status == 422
    err = _error(info.value)
    assert any(c["field"] == "spec.type" for c in err["details"]["causes"])
    assert "Unsupported value" in err["message"]


@pytest.mark.parametrize(
    ("removed", "field"),
    [
        ({"backendConfig": {"x": "y"}}, "spec.backendConfig"),
        ({"resources": {"limits": {"memory": "1Gi"}}}, "spec.resources"),
        ({"integration": {"engine": "vllm"}}, "spec.integration.engine"),
        ({"integration": {"firstEventTimeout": "5m"}}, "spec.integration.firstEventTimeout"),
        ({"storage": {"pvc": {}}}, "spec.storage"),
    ],
)
def test_removed_fields_are_not_served(
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    namespace: str,
    removed: dict[str, Any],
    field: str,
) -> None:
    """Spec "Breaking API cleanup": removed fields are not part of the served schema, so a
    strict apply (kubectl's default) is rejected naming the field."""
    body = _minimal()
    body["spec"].update(removed)
    with pytest.raises(ApiException) as info:
        _create(kube_api_client, namespace, body)
    assert info.value.status in (400, 422)
    assert info.value.body is not None
    assert field in info.value.body
    assert "unknown field" in info.value.body


def test_minimums_are_enforced_with_the_field_named(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    body = _minimal()
    body["spec"]["replicas"] = -1
    body["spec"]["autoscaling"] = {"maxReplicas": 0, "targetCPUUtilizationPercent": 101}
    with pytest.raises(ApiException) as info:
        _create(kube_api_client, namespace, body)
    fields = {c["field"] for c in _error(info.value)["details"]["causes"]}
    assert {
        "spec.replicas",
        "spec.autoscaling.maxReplicas",
        "spec.autoscaling.targetCPUUtilizationPercent",
    } <= fields


def test_runtime_is_required(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    body = _minimal()
    del body["spec"]["runtime"]
    with pytest.raises(ApiException) as info:
        _create(kube_api_client, namespace, body)
    assert any(c["field"] == "spec.runtime" for c in _error(info.value)["details"]["causes"])


def test_status_subresource_and_printer_columns(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    """Status is written only through the status subresource; the Table response carries
    the spec's printer columns (Ready, Endpoint, Matched, Prefixes, LastEvent)."""
    custom = client.CustomObjectsApi(kube_api_client)
    created = _create(kube_api_client, namespace, _minimal())
    # A status in the main resource is ignored...
    created["status"] = {"endpoint": "ignored:1"}
    updated: Any = custom.replace_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "cb", created
    )
    assert "status" not in updated or "endpoint" not in updated.get("status", {})
    # ...and written through /status.
    status = {
        "endpoint": "cb.ns.svc:65432",
        "matchedEnginePods": 3,
        "indexParticipation": {"prefixCount": 42, "lastEventAt": "2026-11-30T06:00:00Z"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "BackendReady",
                "message": "ok",
                "lastTransitionTime": "2026-11-30T06:00:00Z",
            }
        ],
    }
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "cb", {"status": status}
    )
    got: Any = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "cb")
    assert got["status"]["endpoint"] == "cb.ns.svc:65432"

    method, url, headers, _, _ = kube_api_client.param_serialize(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/cb",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    raw = kube_api_client.call_api(method, url, header_params=headers)
    raw.read()
    # RESTResponse.data starts as None; read() fills it with the response bytes.
    data: Any = raw.data
    table = json.loads(data)
    names = [col["name"] for col in table["columnDefinitions"]]
    assert names[:6] == ["Name", "Ready", "Endpoint", "Matched", "Prefixes", "LastEvent"]
    cells = table["rows"][0]["cells"]
    assert cells[1:5] == ["True", "cb.ns.svc:65432", 3, 42]


def test_samples_cover_every_configuration_of_the_spec() -> None:
    """manifests/samples/ holds one sample per configuration the spec describes."""
    names = {doc["metadata"]["name"] for _, doc in sample_backends()}
    assert len(names) == len(sample_backends()) >= 13


# observation.firstEventTimeout: the CRD pattern is Go's time.ParseDuration grammar (sign
# included: the webhook, not the schema, rejects a negative timeout with a message
# saying why).
GO_DURATIONS = ["0", "0s", "1h30m", "1.5h", "90s", "-1s", "+5m", ".5s", "1μs", "1µs"]
NOT_GO_DURATIONS = ["1d", "5 m", "", ".", "5", "m", "1h 30m", "five minutes"]


def test_first_event_timeout_pattern_accepts_go_durations(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    for i, value in enumerate(GO_DURATIONS):
        body = _minimal(f"dur-ok-{i}")
        body["spec"]["observation"] = {"firstEventTimeout": value}
        created = _create(kube_api_client, namespace, body)
        assert created["spec"]["observation"]["firstEventTimeout"] == value


def test_first_event_timeout_pattern_rejects_what_go_rejects(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    for i, value in enumerate(NOT_GO_DURATIONS):
        body = _minimal(f"dur-bad-{i}")
        body["spec"]["observation"] = {"firstEventTimeout": value}
        with pytest.raises(ApiException) as info:
            _create(kube_api_client, namespace, body)
        fields = {c["field"] for c in _error(info.value)["details"]["causes"]}
        assert fields == {"spec.observation.firstEventTimeout"}, (value, fields)

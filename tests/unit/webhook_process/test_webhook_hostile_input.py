"""No 5xx, ever, on any route — the inputs that returned HTTP 500.

Every answer is 200 with an AdmissionReview echoing the uid, or a 400 whose error
names the problem; the Pod route always admits.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shared.runtime_adapters.base import InjectContext
from tests.builders import admission_review as _review
from tests.fakes import raise_unexpected
from tests.samples import SAMPLES_DIR
from webhook_svc.app import PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB, create_app
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource
from webhook_svc.http.codec import BadBodyError, decode_body, encode_json

ROUTES = [PATH_MUTATE_CB, PATH_VALIDATE_CB, PATH_MUTATE_POD]


@pytest.fixture(scope="module")
def client() -> TestClient:
    source = FileBackendSource(SAMPLES_DIR, load_backends)
    app = create_app(source, InjectContext("ghcr.io/inference-cache/kvevent-subscriber:0.1.0"))
    return TestClient(app, raise_server_exceptions=False)


def _engine_pod(annotations: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "engine", "labels": {"app": "vllm-llama"}, "annotations": annotations},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
    }


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deeply_nested_json_is_a_400_naming_the_nesting(
    client: TestClient, path: str, depth: int
) -> None:
    """RecursionError is not a ValueError: it used to escape as a 500."""
    body = b'{"request":' + b"[" * depth + b"]" * depth + b"}"
    response = client.post(path, content=body)
    assert response.status_code == 400
    assert "nests too deeply" in response.json()["error"]


@pytest.mark.parametrize("path", ROUTES)
def test_lone_surrogate_uid_is_a_400_naming_it(client: TestClient, path: str) -> None:
    """A uid of "\\ud800" parsed fine and then failed to encode in the response (500)."""
    body = json.dumps(_review(_engine_pod({}), uid="\ud800")).encode()
    assert b"\\ud800" in body
    response = client.post(path, content=body)
    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_valid_surrogate_pair_is_fine(client: TestClient, path: str) -> None:
    body = json.dumps(_review(_engine_pod({"note": "\U0001f600"}), uid="uid-\U0001f600")).encode()
    response = client.post(path, content=body)
    assert response.status_code == 200
    assert response.json()["response"]["uid"] == "uid-\U0001f600"


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("constant", "words"),
    [
        (b"NaN", "not a JSON value"),
        (b"Infinity", "not a JSON value"),
        (b"-Infinity", "not a JSON value"),
        (b"1e400", "out of range"),
        (b"-2.5E+999", "out of range"),
    ],
)
def test_non_json_constants_are_a_400(
    client: TestClient, path: str, constant: bytes, words: str
) -> None:
    """Python's json accepts NaN (and turns 1e400 into inf); echoing either would be a
    body, or a patch, the API server cannot read."""
    body = b'{"request":{"uid":"u","operation":"CREATE","object":{"x":' + constant + b"}}}"
    response = client.post(path, content=body)
    assert response.status_code == 400
    assert words in response.json()["error"]


@pytest.mark.parametrize("annotations", [["a"], "annotations", 3, 1.5, True, [{"a": "b"}]])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_pod_route_fails_open_on_non_object_annotations(
    client: TestClient, annotations: Any, operation: str
) -> None:
    """Metadata.annotations a list/string/number crashed before the fail-open guard."""
    review = _review(_engine_pod(annotations))
    review["request"]["operation"] = operation
    response = client.post(PATH_MUTATE_POD, json=review)
    assert response.status_code == 200
    answer = response.json()["response"]
    # CREATE fails open on the bad pod; UPDATE is never wired, so it is skipped first.
    decision = (
        {"outcome": "fail_open", "reason": "decode_error"}
        if operation == "CREATE"
        else {"outcome": "skipped", "reason": "operation_not_create"}
    )
    assert answer == {"uid": "uid-1", "allowed": True, "auditAnnotations": decision}


@pytest.mark.parametrize("metadata", [["a"], "m", 7])
def test_pod_route_fails_open_on_non_object_metadata_for_any_operation(
    client: TestClient, metadata: Any
) -> None:
    pod = {"kind": "Pod", "metadata": metadata, "spec": {"containers": [{"name": "c"}]}}
    for operation in ("CREATE", "UPDATE", "DELETE"):
        review = _review(pod)
        review["request"]["operation"] = operation
        response = client.post(PATH_MUTATE_POD, json=review)
        assert response.status_code == 200
        assert response.json()["response"]["allowed"] is True


def test_pod_route_fails_open_when_anything_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line of defence: an exception anywhere in the Pod route admits."""
    import webhook_svc.pod_admission as pod_admission

    monkeypatch.setattr(pod_admission, "pod_facts", raise_unexpected)
    monkeypatch.setattr(pod_admission, "wire_facts", raise_unexpected)
    client = TestClient(
        create_app(FileBackendSource(SAMPLES_DIR, load_backends), InjectContext()),
        raise_server_exceptions=False,
    )
    response = client.post(PATH_MUTATE_POD, json=_review(_engine_pod({})))
    assert response.status_code == 200
    assert response.json()["response"] == {
        "uid": "uid-1",
        "allowed": True,
        "auditAnnotations": {"outcome": "fail_open", "reason": "internal_error"},
    }
    assert 'reason="internal_error"' in client.get("/metrics").text


def test_decode_body_names_each_failure() -> None:
    cases = {
        b"\xff": "not UTF-8",
        b"[" * 5000: "nests too deeply",
        b'{"a": NaN}': "NaN is not a JSON value",
        b'"\\udc00"': "surrogate",
        b"{": "not JSON",
    }
    for raw, words in cases.items():
        with pytest.raises(BadBodyError) as err:
            decode_body(raw)
        assert words in err.value.detail, (raw[:20], err.value.detail)


def test_encode_json_escapes_a_lone_surrogate_instead_of_failing() -> None:
    assert json.loads(encode_json({"uid": "\ud800"})) == {"uid": "\ud800"}
    assert encode_json({"a": "é"}) == '{"a":"é"}'.encode()

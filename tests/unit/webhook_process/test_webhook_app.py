"""The FastAPI app: routing, bad bodies, size limit, health, metrics, embedded backends.

docs/architecture.md "Contracts": admission paths, /healthz, /readyz, /metrics; malformed
bodies get a 400 (never a 500); the Pod route always admits.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from shared.runtime_adapters.base import InjectContext
from tests.builders import admission_review, pod
from tests.fakes import raise_unexpected
from tests.samples import SAMPLES_DIR
from webhook_svc.app import PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB, create_app
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource


@pytest.fixture
def app_client() -> TestClient:
    source = FileBackendSource(SAMPLES_DIR, load_backends)
    return TestClient(create_app(source, InjectContext(), max_body_bytes=64 * 1024))


def _review(
    obj: dict[str, Any], kind: str = "CacheBackend", operation: str = "CREATE"
) -> dict[str, Any]:
    name = obj.get("metadata", {}).get("name", "")
    return admission_review(obj, kind=kind, operation=operation, name=name)


def test_health_and_readiness(app_client: TestClient) -> None:
    assert app_client.get("/healthz").status_code == 200
    assert app_client.get("/readyz").status_code == 200


@pytest.mark.parametrize("path", [PATH_MUTATE_CB, PATH_VALIDATE_CB, PATH_MUTATE_POD])
@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"request": {}}', b"\xff\xfe"])
def test_malformed_bodies_get_400_never_500(app_client: TestClient, path: str, body: bytes) -> None:
    response = app_client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "error" in response.json()
    bad = {"endpoint": path, "reason": "malformed"}
    assert sample(app_client, "inferencecache_webhook_bad_requests_total", bad) == 1.0


def test_oversized_body_gets_413(app_client: TestClient) -> None:
    big = json.dumps(_review({"metadata": {"name": "x" * 70_000}, "spec": {}})).encode()
    response = app_client.post(PATH_VALIDATE_CB, content=big)
    assert response.status_code == 413
    bad = {"endpoint": PATH_VALIDATE_CB, "reason": "too_large"}
    assert sample(app_client, "inferencecache_webhook_bad_requests_total", bad) == 1.0


def test_validate_route_echoes_uid_and_denies_with_status(app_client: TestClient) -> None:
    obj = {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {"name": "bad"},
        "spec": {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "Redis", "ownership": "External"},
        },
    }
    response = app_client.post(PATH_VALIDATE_CB, json=_review(obj)).json()["response"]
    assert response["uid"] == "uid-1"
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"


def test_mutate_route_returns_a_base64_json_patch(app_client: TestClient) -> None:
    obj = {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {"name": "ok"},
        "spec": {"runtime": "VLLM"},
    }
    response = app_client.post(PATH_MUTATE_CB, json=_review(obj)).json()["response"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {op["path"] for op in ops} >= {"/spec/integration", "/spec/observation"}


def test_pod_route_wires_from_embedded_backends(app_client: TestClient) -> None:
    """Embedded mode: backends come from manifests/samples (vllm-host-only selects app=vllm-llama)."""
    response = app_client.post(
        PATH_MUTATE_POD,
        json=_review(pod(labels={"app": "vllm-llama"}, namespace="default"), kind="Pod"),
    ).json()["response"]
    assert response["allowed"] is True
    ops = json.loads(base64.b64decode(response["patch"]))
    annotation_ops = [op for op in ops if "annotations" in op["path"]]
    assert annotation_ops, ops


def sample(client: TestClient, name: str, labels: dict[str, str]) -> float | None:
    """The value of one sample of the app's own /metrics (None: not exposed)."""
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


def test_pod_route_fails_open_and_counts_the_reason(app_client: TestClient) -> None:
    """The counter of this app, for this reason, goes 0 -> 1 (a
    substring match on a process-global registry passed on other tests' leftovers)."""
    labels = {"outcome": "fail_open", "reason": "no_match"}
    name = "inferencecache_pod_webhook_decisions_total"
    assert sample(app_client, name, labels) == 0.0  # created at zero
    response = app_client.post(
        PATH_MUTATE_POD,
        json=_review(pod(labels={"app": "nothing-matches"}, namespace="default"), kind="Pod"),
    ).json()["response"]
    assert response["allowed"] is True
    assert "patch" not in response
    assert sample(app_client, name, labels) == 1.0


def test_pod_route_reads_a_request_once_for_the_list_and_the_wiring(
    monkeypatch: pytest.MonkeyPatch, app_client: TestClient
) -> None:
    """One Pod admission decodes its object and reads the skip-inject opt-out once: the
    same classification decides the CacheBackend LIST and drives the wiring."""
    from shared import pod_wiring
    from webhook_svc import pod_admission

    calls: list[str] = []

    def counted(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(pod_admission, "_decode_pod", counted("decode", pod_admission._decode_pod))
    skip = counted("skip_inject", pod_wiring.skip_inject_requested)
    monkeypatch.setattr(pod_wiring, "skip_inject_requested", skip)
    # Where an importer holds its own reference to the rule, count that one too.
    monkeypatch.setattr(pod_admission, "skip_inject_requested", skip, raising=False)
    response = app_client.post(
        PATH_MUTATE_POD,
        json=_review(pod(labels={"app": "vllm-llama"}, namespace="default"), kind="Pod"),
    ).json()["response"]
    assert response["auditAnnotations"] == {"outcome": "injected", "reason": "injected"}
    assert sorted(calls) == ["decode", "skip_inject"]


def test_each_app_has_its_own_metrics_registry() -> None:
    """Two apps in one process do not share counters, so a test's
    metrics are its own app's (and /metrics shows one app's traffic)."""
    source = FileBackendSource(SAMPLES_DIR, load_backends)
    first = TestClient(create_app(source, InjectContext()))
    second = TestClient(create_app(source, InjectContext()))
    first.post(
        PATH_MUTATE_POD,
        json=_review(pod(labels={"app": "nothing-matches"}, namespace="default"), kind="Pod"),
    )
    labels = {"outcome": "fail_open", "reason": "no_match"}
    assert sample(first, "inferencecache_pod_webhook_decisions_total", labels) == 1.0
    assert sample(second, "inferencecache_pod_webhook_decisions_total", labels) == 0.0


def test_an_app_can_be_given_a_registry() -> None:
    registry = CollectorRegistry()
    client = TestClient(
        create_app(
            FileBackendSource(SAMPLES_DIR, load_backends), InjectContext(), registry=registry
        )
    )
    client.post(
        PATH_MUTATE_POD,
        json=_review(pod(labels={"app": "nothing-matches"}, namespace="default"), kind="Pod"),
    )
    assert (
        registry.get_sample_value(
            "inferencecache_pod_webhook_decisions_total",
            {"outcome": "fail_open", "reason": "no_match"},
        )
        == 1.0
    )


def test_pod_route_admits_when_listing_backends_fails(tmp_path: Path) -> None:
    """Spec "Fail-open": a list error admits the pod unchanged."""

    class Broken:
        async def list(self, namespace: str) -> list[dict[str, Any]]:
            raise RuntimeError("apiserver unreachable")

    client = TestClient(create_app(Broken(), InjectContext()))
    response = client.post(
        PATH_MUTATE_POD, json=_review(pod(labels={"app": "x"}, namespace="default"), kind="Pod")
    )
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is True


def test_metrics_count_admissions_by_endpoint_and_outcome(app_client: TestClient) -> None:
    obj = {"metadata": {"name": "m"}, "spec": {"runtime": "VLLM"}}
    count = "inferencecache_webhook_admission_duration_seconds_count"
    assert sample(app_client, count, {"endpoint": PATH_VALIDATE_CB}) == 0.0
    app_client.post(PATH_VALIDATE_CB, json=_review(obj))
    admissions = {"endpoint": PATH_VALIDATE_CB, "outcome": "allowed"}
    assert sample(app_client, "inferencecache_webhook_admissions_total", admissions) == 1.0
    assert sample(app_client, count, {"endpoint": PATH_VALIDATE_CB}) == 1.0


# (what raises) for each route: an error before judging, and a judge and its own
# safe answer both failing.
UNEXPECTED = [
    (PATH_MUTATE_POD, ["parse_body"]),
    (PATH_MUTATE_CB, ["parse_body"]),
    (PATH_VALIDATE_CB, ["parse_body"]),
    (PATH_MUTATE_POD, ["admit_pod", "pod_fail_open"]),
    (PATH_MUTATE_CB, ["mutate_cachebackend", "internal_denial"]),
    (PATH_VALIDATE_CB, ["validate_cachebackend", "internal_denial"]),
]


@pytest.mark.parametrize(("path", "broken"), UNEXPECTED)
def test_an_unexpected_exception_in_a_route_is_a_503_with_retry_after_never_a_500(
    monkeypatch: pytest.MonkeyPatch, path: str, broken: list[str]
) -> None:
    """Rule "never a 500": whatever a route raises past its own safe answer is the
    JSON 503 with Retry-After, through the ASGI app (a server exception would fail
    the TestClient)."""
    import webhook_svc.app as webhook_app

    for name in broken:
        monkeypatch.setattr(webhook_app, name, raise_unexpected)
    client = TestClient(create_app(FileBackendSource(SAMPLES_DIR, load_backends), InjectContext()))
    obj = pod(labels={"app": "vllm-llama"}, namespace="default")
    review = _review(obj, kind="Pod") if path == PATH_MUTATE_POD else _review({"spec": {}})
    response = client.post(path, json=review)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": "webhook error: retry shortly"}

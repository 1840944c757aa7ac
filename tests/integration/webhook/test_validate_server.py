"""`icache validate` gives the verdict, the message and the warnings the real API server
gives, calling the real `icache webhook` over TLS (kubectl apply --dry-run=server).

Each manifest of the corpus (the shipped samples and broken ones, one per kind of
failure: strict decoding, schema, webhook rules, warnings) is sent to the API server
with dryRun=All and fieldValidation=Strict, and judged offline; the two must agree on
allowed/denied, the Status message, reason and causes, and the warnings.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kubeio.client import Kube
from tests.builders import spec_only_cb
from tests.harness.controlplane import ControlPlane, wait_until
from tests.samples import sample_backends
from tests.webhook_process import TEST_NAMESPACE_LABEL, labelled_namespace, registered, run_webhook
from webhook_svc.offline.manifest_input import Document
from webhook_svc.offline.validate_cli import INVALID, VALID, judge

SUFFIX = "validate"
COLLECTION = "/apis/inferencecache.io/v1alpha1/namespaces/{ns}/cachebackends"


VLLM = {"runtime": "VLLM"}
BROKEN: list[dict[str, Any]] = [
    spec_only_cb(
        "aggregated",
        **VLLM,
        remoteStorage={"provider": "Redis", "ownership": "External", "endpoint": "redis://r:6379"},
        replicas=0,
        autoscaling={"maxReplicas": 2},
    ),
    spec_only_cb("wrong-type", **VLLM, replicas="3"),
    spec_only_cb("old-type", **VLLM, type="Mooncake"),
    spec_only_cb("no-runtime", replicas=1),
    spec_only_cb("typo", **VLLM, engineSelectr={"matchLabels": {"app": "x"}}),
    spec_only_cb("moon", **VLLM, remoteStorage={"provider": "Mooncake", "ownership": "Managed"}),
    spec_only_cb(
        "reserved",
        **VLLM,
        integration={"engineOverrides": {"env": [{"name": "PYTHONHASHSEED", "value": "1"}]}},
    ),
    spec_only_cb(
        "ext-no-endpoint",
        **VLLM,
        remoteStorage={"provider": "LMCacheServer", "ownership": "External"},
    ),
    spec_only_cb(
        "events-remote",
        **VLLM,
        integration={"mode": "EventsOnly"},
        remoteStorage={"provider": "LMCacheServer", "ownership": "Managed"},
    ),
    spec_only_cb(
        "negative",
        **VLLM,
        remoteStorage={
            "provider": "LMCacheServer",
            "ownership": "Managed",
            "lmCacheServer": {"resources": {"requests": {"memory": "-1Gi"}}},
        },
    ),
    {
        **spec_only_cb("kernel-typo", **VLLM),
        "metadata": {
            "name": "kernel-typo",
            "annotations": {"inferencecache.io/lmcache-kernel-check": "strcit"},
        },
    },
    spec_only_cb("sglang-role", runtime="SGLang", integration={"role": "ReadOnly"}),
]
CORPUS = [doc for _, doc in sample_backends()] + BROKEN


@pytest.fixture(scope="module")
def validate_ns(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[str]:
    with (
        run_webhook(control_plane.kubeconfig_path) as hook,
        registered(kube_api_client, hook, SUFFIX),
    ):
        ns = labelled_namespace(kube_api_client, f"val-{uuid.uuid4().hex[:6]}", SUFFIX)

        def both_webhooks_answer() -> bool:
            allowed, status, _ = _live(kube_api_client, "POST", ns, spec_only_cb("probe", **VLLM))
            probe = spec_only_cb(
                "p", **VLLM, remoteStorage={"provider": "Redis", "ownership": "External"}
            )
            denied, _, _ = _live(kube_api_client, "POST", ns, probe)
            return allowed and "integration" in status.get("spec", {}) and not denied

        wait_until(
            both_webhooks_answer, timeout=30, description="the API server calls both webhooks"
        )
        yield ns


_WARNING_RE = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def _live(
    api: client.ApiClient, method: str, ns: str, body: dict[str, Any], name: str = ""
) -> tuple[bool, dict[str, Any], list[str]]:
    """(allowed, response body, warnings) of a dry-run write as kubectl sends it."""
    kube = Kube(api)
    path = COLLECTION.format(ns=ns) + (f"/{name}" if name else "")
    url, headers, data = kube._prepare(
        method, path, {"dryRun": "All", "fieldValidation": "Strict"}, body, None
    )
    resp = api.call_api(method, url, header_params=headers, body=data, _request_timeout=30)
    payload = json.loads(resp.read() or b"{}")
    warnings = []
    for value in resp.headers.getlist("Warning"):
        match = _WARNING_RE.match(value)
        if match:
            warnings.append(match.group(1).replace('\\"', '"').replace("\\\\", "\\"))
    return 200 <= resp.status < 300, payload, warnings


def _causes(status: dict[str, Any]) -> list[tuple[str, str]]:
    causes = (status.get("details") or {}).get("causes") or []
    return [(c.get("field", ""), c.get("message", "")) for c in causes if c.get("field")]


@pytest.mark.parametrize("doc", CORPUS, ids=[d["metadata"]["name"] for d in CORPUS])
def test_validate_agrees_with_the_api_server(
    kube_api_client: client.ApiClient, validate_ns: str, doc: dict[str, Any]
) -> None:
    """Spec "Admission": the offline verdict is the API server's, word for word."""
    body = json.loads(json.dumps(doc))
    body["metadata"]["namespace"] = validate_ns
    allowed, answer, warnings = _live(kube_api_client, "POST", validate_ns, body)
    verdict = judge(Document("corpus", 1, body), namespace=None)
    assert verdict.result == (VALID if allowed else INVALID), (answer, verdict.message)
    assert verdict.warnings == warnings
    if allowed:
        # The stored object: what the defaulting webhook and the schema made of it.
        assert verdict.defaulted is not None
        assert verdict.defaulted["spec"] == answer["spec"]
    else:
        assert verdict.message == answer["message"]
        assert verdict.reason == answer["reason"]
        if verdict.causes:
            assert [(c["field"], c["message"]) for c in verdict.causes if c["field"]] == _causes(
                answer
            )


def test_validate_update_counts_only_introduced_violations(
    kube_api_client: client.ApiClient, validate_ns: str, namespace: str
) -> None:
    """Spec "Validating": ValidateUpdate. An object stored before the rule existed can be
    edited; changing its bad value to another bad value is a fresh violation."""
    custom = client.CustomObjectsApi(kube_api_client)
    core = client.CoreV1Api(kube_api_client)
    legacy = spec_only_cb(
        "legacy",
        **VLLM,
        remoteStorage={"provider": "Redis", "ownership": "External", "endpoint": "lm://r:1"},
    )
    legacy["metadata"]["namespace"] = namespace
    # Stored while no webhook covers the namespace, then brought under it.
    custom.create_namespaced_custom_object(
        "inferencecache.io", "v1alpha1", namespace, "cachebackends", legacy
    )
    core.patch_namespace(namespace, {"metadata": {"labels": {TEST_NAMESPACE_LABEL: SUFFIX}}})
    probe = spec_only_cb("p", **VLLM, remoteStorage={"provider": "Redis", "ownership": "External"})
    wait_until(
        lambda: not _live(kube_api_client, "POST", namespace, probe)[0],
        timeout=30,
        description="the webhook covers the namespace",
    )
    stored: Any = custom.get_namespaced_custom_object(
        "inferencecache.io", "v1alpha1", namespace, "cachebackends", "legacy"
    )
    old = Document("old", 1, legacy)
    for endpoint, expect_allowed in (("lm://r:1", True), ("http://r:2", False)):
        edited = json.loads(json.dumps(stored))
        edited["metadata"].setdefault("labels", {})["edited"] = "yes"
        edited["spec"]["remoteStorage"]["endpoint"] = endpoint
        allowed, answer, _ = _live(kube_api_client, "PUT", namespace, edited, "legacy")
        assert allowed is expect_allowed, answer
        new = json.loads(json.dumps(legacy))
        new["metadata"]["labels"] = {"edited": "yes"}
        new["spec"]["remoteStorage"]["endpoint"] = endpoint
        verdict = judge(Document("new", 1, new), namespace=None, old=old)
        assert verdict.operation == "UPDATE"
        assert verdict.result == (VALID if allowed else INVALID)
        if not allowed:
            assert verdict.message == answer["message"]

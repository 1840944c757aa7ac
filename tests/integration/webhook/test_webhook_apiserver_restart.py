"""The webhook's event-loop API client survives a kube-apiserver restart (the Pod
route's CacheBackend LIST and the validating route's SubjectAccessReviews go through
it; a restarted API server loses nothing).

A live-mode webhook answers a pod CREATE (wired) and a managed backend written by a user
outside system:masters (reviewed, allowed), so both keep pooled connections to the API
server. The API server is then killed and started again on the same port: the first
admissions after it is ready must be answered exactly as before, with no list_error and
no "could not verify" denial from a dead pooled connection, and no list_error from
the 429 a freshly started API server gives while its storage initialises.
"""

from __future__ import annotations

import copy
import json
import ssl
import urllib.request
import uuid
from typing import Any

from kubernetes import client

from tests.builders import example_review
from tests.harness.controlplane import ControlPlane
from tests.samples import ROOT, sample_backends
from tests.webhook_process import run_webhook

EXAMPLES = ROOT / "examples" / "admission"
NS = f"apiserver-restart-{uuid.uuid4().hex[:6]}"
WRITER = f"writer-{uuid.uuid4().hex[:6]}"


def post(url: str, body: bytes, ca_pem: bytes) -> dict[str, Any]:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, context=ctx, timeout=10) as reply:
        answer: dict[str, Any] = json.loads(reply.read())["response"]
    return answer


def setup_namespace(api: client.ApiClient) -> None:
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": NS}))
    for file_name, doc in sample_backends():
        if file_name == "vllm-lmcache-host-only.yaml":  # the one the pod example matches
            body = copy.deepcopy(doc)
            body["metadata"]["namespace"] = NS
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "inferencecache.io", "v1alpha1", NS, "cachebackends", body
            )
    rbac: Any = client.RbacAuthorizationV1Api(api)  # takes plain dicts at run time
    # A managed backend's writer may create its workload and the engine pods it shapes
    # (decision "Engine-shaping needs engine-level permission").
    rules = [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
    ]
    rbac.create_namespaced_role(NS, {"metadata": {"name": "deployers"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        NS,
        {
            "metadata": {"name": "deployers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployers"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": WRITER}],
        },
    )  # fmt: skip


def test_admissions_right_after_an_apiserver_restart_are_answered_as_before(
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
) -> None:
    setup_namespace(kube_api_client)
    writer = {"username": WRITER, "groups": ["system:authenticated"]}
    pod = json.dumps(example_review(EXAMPLES / "pod-vllm-host-only.json", NS)).encode()
    managed = json.dumps(
        example_review(EXAMPLES / "create-vllm-lmcacheserver-managed.json", NS, writer)
    ).encode()
    with run_webhook(control_plane.kubeconfig_path) as hook:
        pod_url = hook.url + "/mutate--v1-pod"
        validate_url = hook.url + "/validate-inferencecache-io-v1alpha1-cachebackend"
        before = post(pod_url, pod, hook.ca_pem)
        assert before["auditAnnotations"]["outcome"] == "injected", before
        assert post(validate_url, managed, hook.ca_pem)["allowed"] is True

        control_plane.restart_apiserver(kill=True)  # returns once it is ready again

        after = post(pod_url, pod, hook.ca_pem)
        # The API server answers 429 "storage is (re)initializing" (Retry-After: 1) for a
        # moment after it reports ready: waited out inside the list budget.
        assert after["auditAnnotations"] == before["auditAnnotations"], after
        assert after["patch"] == before["patch"]
        allowed = post(validate_url, managed, hook.ca_pem)
        assert allowed["allowed"] is True, allowed

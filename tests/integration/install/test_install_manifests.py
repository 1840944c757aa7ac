"""The install manifests on a real kube-apiserver: every object is accepted by a
server-side dry run (strict field validation), and every pod the Deployments would
create passes Pod Security "restricted" in the install namespace.

The namespace, its ServiceAccounts and the CRD are created for real (a dry run
needs the namespace to exist; Pod admission needs the ServiceAccount); everything
else is a dry run. cert-manager's kinds are not served here, so the cert-manager
variant's Issuers and Certificates are checked statically (tests/unit/install/test_manifests.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from icache_install.manifests_cli import render_manifests
from kubeio.client import ApiError
from tests.harness.controlplane import wait_until
from tests.integration.manifest_apply import Applier, kind_and_name
from tests.samples import ROOT

MANIFESTS = ROOT / "manifests"
NAMESPACE = "inference-cache-system"
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}


DEFAULT = render_manifests()
CERT_MANAGER = [
    d
    for d in render_manifests("cert-manager")
    if d["kind"] not in CERT_MANAGER_KINDS and d not in DEFAULT
]


@pytest.fixture(scope="module")
def install_namespace(applier: Applier, cachebackend_crd: dict[str, Any]) -> str:
    """The install namespace and ServiceAccounts, for real (idempotent: server-side apply)."""
    for doc in DEFAULT:
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            applier.apply(doc, dry_run=False)
    wait_until(
        lambda: applier.kube.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
        ),
        timeout=30,
        description="the namespace's default ServiceAccount",
    )
    return NAMESPACE


def test_variants_render_something() -> None:
    assert len(DEFAULT) > 20
    # The cert-manager variant differs from the default only in the webhook
    # configurations' inject-ca-from annotations (and its own kinds).
    assert sorted(d["kind"] for d in CERT_MANAGER) == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]


@pytest.mark.parametrize("doc", DEFAULT + CERT_MANAGER, ids=kind_and_name)
def test_every_manifest_applies_with_a_server_side_dry_run(
    applier: Applier, install_namespace: str, doc: dict[str, Any]
) -> None:
    applied = applier.apply(doc, dry_run=True)
    assert applied["kind"] == doc["kind"]
    assert applied["metadata"]["name"] == doc["metadata"]["name"]
    if doc["kind"] in ("Deployment", "Service", "ConfigMap"):
        assert applied["metadata"]["namespace"] == install_namespace


def _pod_from(deployment: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(deployment["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{deployment['metadata']['name']}-dry-run",
            "namespace": deployment["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }


@pytest.mark.parametrize(
    "deployment", [d for d in DEFAULT if d["kind"] == "Deployment"], ids=kind_and_name
)
def test_every_pod_is_admitted_under_pod_security_restricted(
    applier: Applier, install_namespace: str, deployment: dict[str, Any]
) -> None:
    pod = applier.create(_pod_from(deployment), dry_run=True)
    spec = pod["spec"]
    if deployment["metadata"]["name"] == "inference-cache-worker":
        # The API server kept the projected, audience-bound token volume as written.
        (volume,) = [v for v in spec["volumes"] if v["name"] == "controller-token"]
        (source,) = volume["projected"]["sources"]
        assert source["serviceAccountToken"]["audience"] == "inference-cache-server"


def test_pod_security_restricted_is_enforced_in_the_install_namespace(
    applier: Applier, install_namespace: str
) -> None:
    """The control for the test above: a root, privileged-escalation pod is refused."""
    (webhook,) = [d for d in DEFAULT if kind_and_name(d) == "Deployment/inference-cache-webhook"]
    pod = _pod_from(webhook)
    del pod["spec"]["securityContext"]
    del pod["spec"]["containers"][0]["securityContext"]
    with pytest.raises(ApiError) as refused:
        applier.create(pod, dry_run=True)
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.body


@pytest.mark.parametrize(
    ("mutation", "status", "expected"),
    [
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
                containerPort=70000
            ),
            422,
            "containerPort",
        ),
        (
            lambda d: d["spec"]["template"]["spec"].update(serviceAcountName="typo"),
            # Server-side apply reports a field outside the schema as a 500 ("failed
            # to create typed patch object"), whatever fieldValidation says.
            500,
            "serviceAcountName: field not declared in schema",
        ),
    ],
    ids=["invalid-port", "unknown-field"],
)
def test_the_dry_run_catches_a_broken_manifest(
    applier: Applier, install_namespace: str, mutation: Any, status: int, expected: str
) -> None:
    """The control for the dry runs above: they do validate."""
    (webhook,) = [
        copy.deepcopy(d)
        for d in DEFAULT
        if kind_and_name(d) == "Deployment/inference-cache-webhook"
    ]
    mutation(webhook)
    with pytest.raises(ApiError) as refused:
        applier.apply(webhook, dry_run=True)
    assert refused.value.status == status
    assert expected in refused.value.body

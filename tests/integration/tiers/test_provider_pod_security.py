"""Against a real kube-apiserver (its PodSecurity admission plugin is on by default):
the pods of the managed tiers we render are admitted in a namespace enforcing
``restricted`` (decision "Managed tiers restricted by default"), and a template
override asking for root is refused with the message the backend then reports
(decision "A tier that cannot start says why")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from shared import constants as c
from shared.storage_providers.render import render_managed_objects
from tests.builders import managed_spec, rendered_backend

ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def restricted_ns(kube_api_client: client.ApiClient) -> Iterator[str]:
    name = f"restricted-tier-{uuid.uuid4().hex[:6]}"
    body: Any = {"metadata": {"name": name, "labels": {ENFORCE: "restricted"}}}
    core = client.CoreV1Api(kube_api_client)
    core.create_namespace(body)
    yield name
    core.delete_namespace(name)


def provider_pod(provider: str, **spec: Any) -> dict[str, Any]:
    """A Pod made from the rendered workload's pod template."""
    objs = render_managed_objects(rendered_backend(managed_spec(provider, **spec)))
    (workload,) = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    template = workload["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"tier-{uuid.uuid4().hex[:6]}",
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }


def create(api: client.ApiClient, ns: str, pod: dict[str, Any]) -> None:
    """A server-side dry run: every admission plugin judges it, nothing is stored."""
    body: Any = pod
    client.CoreV1Api(api).create_namespaced_pod(ns, body, dry_run="All")


@pytest.mark.parametrize("provider", [c.PROVIDER_REDIS, c.PROVIDER_LMCACHE_SERVER])
def test_the_rendered_tier_pod_is_admitted_under_restricted(
    kube_api_client: client.ApiClient, restricted_ns: str, provider: str
) -> None:
    create(kube_api_client, restricted_ns, provider_pod(provider))


def test_a_template_asking_for_root_is_refused_with_a_message(
    kube_api_client: client.ApiClient, restricted_ns: str
) -> None:
    pod = provider_pod(c.PROVIDER_REDIS, template={"securityContext": {"runAsUser": 0}})
    with pytest.raises(ApiException) as info:
        create(kube_api_client, restricted_ns, pod)
    assert info.value.status == 403
    message = json.loads(info.value.body or "{}")["message"]
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "runAsUser=0" in message


def test_mooncake_needs_a_privileged_namespace(
    kube_api_client: client.ApiClient, restricted_ns: str
) -> None:
    """Documented: the host network is refused by restricted (and baseline); the rest
    of the Mooncake pod is what restricted asks where the image allows."""
    with pytest.raises(ApiException) as info:
        create(kube_api_client, restricted_ns, provider_pod(c.PROVIDER_MOONCAKE))
    assert "hostNetwork" in str(info.value.body)
    assert "allowPrivilegeEscalation" not in str(info.value.body)
    assert "seccompProfile" not in str(info.value.body)

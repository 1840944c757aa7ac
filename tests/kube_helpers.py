"""Small helpers for tests against the real API server: install the CRD, namespaces."""

from __future__ import annotations

import uuid
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.harness.controlplane import wait_until
from tests.samples import CRD_PATH


def install_crd(api: client.ApiClient, timeout: float = 60.0) -> dict[str, Any]:
    """Create (or replace) the CacheBackend CRD and wait until it is Established."""
    ext = client.ApiextensionsV1Api(api)
    body = yaml.safe_load(CRD_PATH.read_text())
    name = body["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        assert current.metadata is not None
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(name, body)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        assert crd.status is not None
        conds = crd.status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    wait_until(established, timeout=timeout, description=f"CRD {name} Established")
    # The API server can report Established a moment before discovery serves the kind.
    custom = client.CustomObjectsApi(api)
    wait_until(
        lambda: (
            custom.list_namespaced_custom_object(
                "inferencecache.io", "v1alpha1", "default", "cachebackends"
            )
            is not None
        ),
        timeout=timeout,
        description="cachebackends served",
    )
    return body


def create_namespace(api: client.ApiClient, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    return name

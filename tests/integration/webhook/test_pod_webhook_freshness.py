"""The Pod route's live read is exactly as fresh as a LIST.

The live source lists through the webhook's API client (kubeio/async_client.py,
kubernetes.aio) without the generated methods; these tests hold it to the same
answers, the same auth (client certificate, bearer token) and the same freshness as a
fresh LIST.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kubeio import access as kubeaccess
from kubeio.async_client import ApiServer
from tests.builders import new_cb
from tests.freshness import GROUP, PLURAL, VERSION, fresh_backend_wires_next_pod
from tests.harness.controlplane import ControlPlane, wait_until
from tests.webhook_process import labelled_namespace, registered, run_webhook
from webhook_svc.backend_source import ApiBackendSource, ListFailedError


def _source(configuration: client.Configuration) -> ApiBackendSource:
    loaded = kubeaccess.Loaded(configuration, "test")
    return ApiBackendSource(ApiServer(lambda: kubeaccess.async_client_for(loaded)))


def _listed(source: ApiBackendSource, namespace: str) -> list[dict[str, Any]]:
    """One LIST on a fresh event loop (the client is made for one loop)."""

    async def once() -> list[dict[str, Any]]:
        try:
            return await source.list(namespace)
        finally:
            await source._api.close()

    return asyncio.run(once())


# 1,000 rounds in a row; ICACHE_FRESHNESS_ROUNDS changes it.
ROUNDS = int(os.environ.get("ICACHE_FRESHNESS_ROUNDS", "1000"))
SUFFIX = "fresh"


def test_live_source_returns_the_api_servers_list_as_raw_dicts(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    custom = client.CustomObjectsApi(kube_api_client)
    assert _listed(_source(kube_api_client.configuration), namespace) == []
    for name in ("b", "a"):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, new_cb(name, {"app": name}, labels={"team": "a"})
        )
    expected: Any = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    got = _listed(_source(kube_api_client.configuration), namespace)
    assert got == expected["items"]
    assert [b["metadata"]["name"] for b in got] == ["a", "b"]
    assert all(b["metadata"]["namespace"] == namespace for b in got)


def test_live_source_reads_with_a_bearer_token_as_in_cluster(
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    namespace: str,
) -> None:
    """In a cluster the webhook authenticates with its ServiceAccount token; the
    cheaper read must send it, and RBAC must still apply."""
    core = client.CoreV1Api(kube_api_client)
    # Plain manifest dicts: the typed client sends them as they are.
    rbac: Any = client.RbacAuthorizationV1Api(kube_api_client)
    client.CustomObjectsApi(kube_api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, new_cb("only", {"app": "x"}, labels={"team": "a"})
    )

    def token_for(sa: str) -> str:
        core.create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa))
        )
        request = core.create_namespaced_service_account_token(
            sa, namespace, client.AuthenticationV1TokenRequest(spec={"audiences": []})
        )
        assert request.status is not None
        return str(request.status.token)

    def source_with(token: str) -> ApiBackendSource:
        cfg = client.Configuration()
        cfg.host = control_plane.server_url
        cfg.ssl_ca_cert = control_plane.configuration().ssl_ca_cert
        cfg.api_key = {"authorization": f"Bearer {token}"}
        return _source(cfg)

    allowed, denied = token_for("reader"), token_for("nobody")
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-cachebackends"},
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-cachebackends",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    assert [b["metadata"]["name"] for b in _listed(source_with(allowed), namespace)] == ["only"]
    with pytest.raises(ListFailedError, match="HTTP 403"):
        _listed(source_with(denied), namespace)


@pytest.fixture(scope="module")
def fresh_ns(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[str]:
    with (
        run_webhook(control_plane.kubeconfig_path) as hook,
        registered(kube_api_client, hook, SUFFIX),
    ):
        ns = labelled_namespace(kube_api_client, f"fresh-{uuid.uuid4().hex[:6]}", SUFFIX)
        # The API server picks up new webhook configurations shortly after they are
        # created: wait until a round passes before counting rounds.
        wait_until(
            lambda: fresh_backend_wires_next_pod(kube_api_client, ns, 1) is not None,
            timeout=60,
            description="the webhooks called by the API server",
        )
        yield ns


def test_a_backend_wires_the_pod_created_right_after_it_1000_times_in_a_row(
    kube_api_client: client.ApiClient, fresh_ns: str
) -> None:
    """No stale view; every round's pod is wired by its backend."""
    seconds = fresh_backend_wires_next_pod(kube_api_client, fresh_ns, ROUNDS)
    print(f"{ROUNDS} rounds in {seconds:.1f} s")

"""CacheBackend admission through a real kube-apiserver calling `icache webhook` over TLS.

Checks that field-scoped, aggregated errors and warnings reach the Kubernetes client,
that defaults are stored, and the UPDATE semantics of the spec's "Validating" section.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from icache_install.manifests_cli import render_manifests
from tests.builders import new_cb
from tests.harness.controlplane import ControlPlane, free_port, wait_until
from tests.webhook_process import TEST_NAMESPACE_LABEL, labelled_namespace, registered, run_webhook

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
SUFFIX = "admission"


def _external_without_endpoint(name: str) -> dict[str, Any]:
    return new_cb(name, remoteStorage={"provider": "LMCacheServer", "ownership": "External"})


@pytest.fixture(scope="module")
def admission_ns(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[str]:
    """A namespace our registered webhooks apply to, once the API server calls them."""
    with (
        run_webhook(control_plane.kubeconfig_path) as hook,
        registered(kube_api_client, hook, SUFFIX),
    ):
        ns = labelled_namespace(kube_api_client, f"adm-{uuid.uuid4().hex[:6]}", SUFFIX)
        custom = client.CustomObjectsApi(kube_api_client)

        def webhook_answers() -> bool:
            # The API server picks up new webhook configurations asynchronously.
            try:
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, _external_without_endpoint("probe"), dry_run="All"
                )
            except ApiException as exc:
                return (
                    exc.status == 422
                    and exc.body is not None
                    and "spec.remoteStorage.endpoint" in exc.body
                )
            return False

        wait_until(webhook_answers, timeout=30, description="API server calling the webhook")

        def mutating_webhook_answers() -> bool:
            # The mutating configuration reaches the API server through an informer of
            # its own: the validating webhook answering says nothing about it. Only the
            # webhook materialises spec.integration (the schema defaults under it).
            probe: Any = custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, new_cb("probe"), dry_run="All"
            )
            return "integration" in probe["spec"]

        wait_until(mutating_webhook_answers, timeout=30, description="the mutating webhook")
        yield ns


def _causes(exc: ApiException) -> list[dict[str, Any]]:
    assert exc.body is not None
    causes: list[dict[str, Any]] = json.loads(exc.body)["details"]["causes"]
    return causes


def test_aggregated_field_scoped_errors_reach_the_client(
    kube_api_client: client.ApiClient, admission_ns: str
) -> None:
    """Spec "Validating": multiple violations on one spec come back together, each scoped."""
    body = new_cb(
        "bad",
        remoteStorage={"provider": "Redis", "ownership": "External", "endpoint": "redis://r:6379"},
        replicas=0,
        autoscaling={"maxReplicas": 2},
        integration={"engineOverrides": {"env": [{"name": "PYTHONHASHSEED", "value": "1"}]}},
    )
    with pytest.raises(ApiException) as info:
        client.CustomObjectsApi(kube_api_client).create_namespaced_custom_object(
            GROUP, VERSION, admission_ns, PLURAL, body
        )
    assert info.value.status == 422
    fields = {c["field"] for c in _causes(info.value)}
    assert "spec.remoteStorage.endpoint" in fields
    assert any(f.startswith("spec.autoscaling") for f in fields)
    assert any(f.startswith("spec.integration.engineOverrides.env") for f in fields)
    assert info.value.body is not None
    message = json.loads(info.value.body)["message"]
    assert "PYTHONHASHSEED" in message
    assert "spec.remoteStorage.endpoint" in message


def test_defaults_are_stored(kube_api_client: client.ApiClient, admission_ns: str) -> None:
    """Spec "Defaulting": integration and observation are materialised (then stamped by the
    schema), and autoscaling.minReplicas = spec.replicas on first apply."""
    body = new_cb(
        "defaults",
        replicas=3,
        remoteStorage={"provider": "LMCacheServer", "ownership": "Managed"},
        autoscaling={"maxReplicas": 5},
    )
    client.CustomObjectsApi(kube_api_client).create_namespaced_custom_object(
        GROUP, VERSION, admission_ns, PLURAL, body
    )
    got: Any = client.CustomObjectsApi(kube_api_client).get_namespaced_custom_object(
        GROUP, VERSION, admission_ns, PLURAL, "defaults"
    )
    spec = got["spec"]
    assert spec["integration"]["mode"] == "Offload"
    assert spec["integration"]["role"] == "ReadWrite"
    assert spec["integration"]["failOpen"] is True
    assert spec["observation"]["firstEventTimeout"] == "5m"
    assert spec["autoscaling"]["minReplicas"] == 3

    # First apply only: a later replicas edit does not move the floor.
    got["spec"]["replicas"] = 4
    updated: Any = client.CustomObjectsApi(kube_api_client).replace_namespaced_custom_object(
        GROUP, VERSION, admission_ns, PLURAL, "defaults", got
    )
    assert updated["spec"]["autoscaling"]["minReplicas"] == 3


def test_mooncake_without_engine_host_network_is_admitted_with_a_warning(
    kube_api_client: client.ApiClient, admission_ns: str
) -> None:
    """Spec "Mooncake provider configuration": admission warns on every Mooncake apply
    until integration.engineHostNetwork is set."""
    body = new_cb("moon", remoteStorage={"provider": "Mooncake", "ownership": "Managed"})
    _, _, headers = client.CustomObjectsApi(
        kube_api_client
    ).create_namespaced_custom_object_with_http_info(GROUP, VERSION, admission_ns, PLURAL, body)
    warning = (headers or {}).get("Warning", "")
    assert "engineHostNetwork" in warning


def test_update_rejects_only_violations_it_introduces(
    kube_api_client: client.ApiClient,
    admission_ns: str,
    namespace: str,
) -> None:
    """Spec "Validating": ValidateUpdate filters errors the old object already had, so an
    unrelated edit passes; changing a bad value to another bad value is a fresh violation."""
    custom = client.CustomObjectsApi(kube_api_client)
    core = client.CoreV1Api(kube_api_client)
    # Store an invalid object while no webhook covers the namespace (as if stored before
    # the webhook was installed), then bring the namespace under the webhook.
    legacy = new_cb(
        "legacy",
        remoteStorage={"provider": "Redis", "ownership": "External", "endpoint": "lm://r:1"},
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, legacy)
    core.patch_namespace(namespace, {"metadata": {"labels": {TEST_NAMESPACE_LABEL: SUFFIX}}})

    def webhook_covers_namespace() -> bool:
        # Namespace labels reach the webhook's namespaceSelector asynchronously.
        try:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, _external_without_endpoint("p"), dry_run="All"
            )
        except ApiException as exc:
            return exc.status == 422
        return False

    wait_until(webhook_covers_namespace, timeout=30, description="webhook covers the namespace")

    # An unrelated edit of the pre-existing invalid object is allowed.
    current: Any = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "legacy")
    current["metadata"].setdefault("labels", {})["edited"] = "yes"
    edited: Any = custom.replace_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "legacy", current
    )
    assert edited["metadata"]["labels"]["edited"] == "yes"

    # Changing the bad endpoint to another bad endpoint is a fresh violation.
    edited["spec"]["remoteStorage"]["endpoint"] = "http://r:2"
    with pytest.raises(ApiException) as info:
        custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "legacy", edited)
    assert any(c["field"] == "spec.remoteStorage.endpoint" for c in _causes(info.value))


def test_update_that_breaks_a_valid_object_is_rejected(
    kube_api_client: client.ApiClient, admission_ns: str
) -> None:
    custom = client.CustomObjectsApi(kube_api_client)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, admission_ns, PLURAL, new_cb("valid", replicas=1)
    )
    current: Any = custom.get_namespaced_custom_object(
        GROUP, VERSION, admission_ns, PLURAL, "valid"
    )
    current["spec"]["integration"]["role"] = "ReadOnly"
    current["spec"]["runtime"] = "SGLang"
    with pytest.raises(ApiException) as info:
        custom.replace_namespaced_custom_object(
            GROUP, VERSION, admission_ns, PLURAL, "valid", current
        )
    assert any(c["field"] == "spec.integration.role" for c in _causes(info.value))


@contextmanager
def _installed_webhooks_pointing_nowhere(api: client.ApiClient, suffix: str) -> Iterator[None]:
    """The install's two webhook configurations (manifests/, failurePolicy Fail for
    CacheBackends), scoped to namespaces labelled ``suffix`` and pointed at a port
    nothing listens on: the webhook is down."""
    dead = f"https://127.0.0.1:{free_port()}"
    adm = client.AdmissionregistrationV1Api(api)
    created: list[tuple[Any, str]] = []
    try:
        for doc in render_manifests():
            if doc["kind"] not in (
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration",
            ):
                continue
            doc["metadata"]["name"] += f"-{suffix}"
            for webhook in doc["webhooks"]:
                path = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {"url": dead + path}
                webhook["namespaceSelector"] = {"matchLabels": {TEST_NAMESPACE_LABEL: suffix}}
                webhook.pop("objectSelector", None)
            # A plain manifest dict: the client serialises it as the request body.
            body: Any = doc
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(body)
                created.append((adm.delete_mutating_webhook_configuration, doc["metadata"]["name"]))
            else:
                adm.create_validating_webhook_configuration(body)
                created.append(
                    (adm.delete_validating_webhook_configuration, doc["metadata"]["name"])
                )
        assert len(created) == 2, "the install has both webhook configurations"
        yield
    finally:
        for delete, name in created:
            delete(name)


def test_delete_succeeds_while_the_installed_webhook_is_down(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> None:
    """The
    installed CacheBackend webhooks are failurePolicy Fail but not registered for
    DELETE, so a backend can still be deleted while the webhook is down (an
    uninstall, a broken rollout). A create in the same namespace is refused first,
    which proves the dead webhook is consulted; registering DELETE in manifests/
    makes the delete fail."""
    suffix = f"down-{uuid.uuid4().hex[:6]}"
    ns = labelled_namespace(kube_api_client, suffix, suffix)
    custom = client.CustomObjectsApi(kube_api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, new_cb("doomed"))
    with _installed_webhooks_pointing_nowhere(kube_api_client, suffix):

        def create_refused() -> bool:
            try:
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, new_cb("other"), dry_run="All"
                )
            except ApiException as exc:
                return exc.status is not None and exc.status >= 500 and "webhook" in str(exc.body)
            return False

        wait_until(
            create_refused, timeout=30, description="the API server calling the dead webhook"
        )
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "doomed")

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "doomed")
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_until(gone, timeout=30, description="the CacheBackend deleted")


def test_issue_11_rules_through_the_real_api_server(
    kube_api_client: client.ApiClient, admission_ns: str
) -> None:
    """Via kube-apiserver -> webhook: firstEventTimeout "0" is admitted, "-1s"
    (grammatical for the CRD pattern) is denied by the webhook on its field, and a
    managed Redis with replicas 2 or autoscaling is denied on those fields."""
    custom = client.CustomObjectsApi(kube_api_client)
    ok = new_cb("timeout-zero", observation={"firstEventTimeout": "0"})
    custom.create_namespaced_custom_object(GROUP, VERSION, admission_ns, PLURAL, ok)
    redis = {"provider": "Redis", "ownership": "Managed"}
    for body, field in (
        (new_cb("timeout-negative", observation={"firstEventTimeout": "-1s"}),
         "spec.observation.firstEventTimeout"),
        (new_cb("redis-two", runtime="SGLang", remoteStorage=redis, replicas=2),
         "spec.replicas"),
        (new_cb("redis-hpa", runtime="SGLang", remoteStorage=redis,
                  autoscaling={"maxReplicas": 3}),
         "spec.autoscaling"),
    ):  # fmt: skip
        with pytest.raises(ApiException) as info:
            custom.create_namespaced_custom_object(GROUP, VERSION, admission_ns, PLURAL, body)
        assert info.value.status == 422
        assert [c["field"] for c in _causes(info.value)] == [field]

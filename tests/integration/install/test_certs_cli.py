"""`icache certs` against the real API server, and the API server calling a real
`icache webhook` over TLS with what it produced.

The webhook configurations are the ones the install renders (manifests/), renamed
per test and limited to the test's namespace so that nothing else in the session
is admitted by them, even if a teardown never runs.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from icache_install.manifests_cli import render_manifests
from kubeio.client import ApiError, Kube
from tests.builders import new_cb, template_pod
from tests.harness.controlplane import (
    ControlPlane,
    free_port,
    terminate_process_group,
    wait_until,
)
from tests.integration.certs_webhook import (
    CONFIG_PATHS,
    WEBHOOK_KINDS,
    cachebackends,
    icache,
    secret_data,
    start_webhook,
)
from tests.samples import sample_documents


@dataclass
class WebhookConfigs:
    mutating: str
    validating: str

    def names(self) -> dict[str, str]:
        return {
            "MutatingWebhookConfiguration": self.mutating,
            "ValidatingWebhookConfiguration": self.validating,
        }

    def read(self, kube: Kube) -> dict[str, dict[str, Any]]:
        return {
            kind: kube.request("GET", f"{CONFIG_PATHS[kind]}/{name}")
            for kind, name in self.names().items()
        }


@pytest.fixture
def webhook_configs(kube: Kube, namespace: str) -> Iterator[WebhookConfigs]:
    """The install's two webhook configurations (rendered for ``namespace``), created
    for real under unique names and scoped to ``namespace``."""
    suffix = uuid.uuid4().hex[:6]
    names = WebhookConfigs(f"icache-test-{suffix}-mutating", f"icache-test-{suffix}-validating")
    docs = [d for d in render_manifests(namespace=namespace) if d["kind"] in WEBHOOK_KINDS]
    assert sorted(d["kind"] for d in docs) == sorted(WEBHOOK_KINDS)
    for doc in docs:
        doc = copy.deepcopy(doc)
        for webhook in doc["webhooks"]:
            webhook["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}
            }
        doc["metadata"]["name"] = names.names()[doc["kind"]]
        kube.request("POST", CONFIG_PATHS[doc["kind"]], body=doc)
    try:
        yield names
    finally:
        for kind, name in names.names().items():
            try:
                kube.request("DELETE", f"{CONFIG_PATHS[kind]}/{name}")
            except ApiError as exc:
                if not exc.not_found:
                    raise


@dataclass
class Webhook:
    port: int
    url_base: str
    process: subprocess.Popen[bytes]
    log_path: Path


INVALID_SPEC: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "External"},
}


def _rejection(kube: Kube, namespace: str, body: dict[str, Any]) -> str | None:
    """The API server's message when creating ``body`` (dry run) fails, else None."""
    try:
        kube.request("POST", cachebackends(namespace), query={"dryRun": "All"}, body=body)
    except ApiError as exc:
        return str(json.loads(exc.body).get("message", exc.body))
    return None


def test_certs_then_api_server_calls_the_webhook_over_tls(
    control_plane: ControlPlane,
    kube: Kube,
    cachebackend_crd: dict[str, Any],
    namespace: str,
    webhook_configs: WebhookConfigs,
    tmp_path: Path,
) -> None:
    port = free_port()
    url_base = f"https://127.0.0.1:{port}"
    cert_dir = tmp_path / "certs"
    certs_args = [
        "certs",
        f"--kubeconfig={control_plane.kubeconfig_path}",
        f"--namespace={namespace}",
        f"--mutating-config={webhook_configs.mutating}",
        f"--validating-config={webhook_configs.validating}",
        f"--url-base={url_base}",
        f"--output-dir={cert_dir}",
    ]

    # -- first run: a CA, a serving certificate, both configurations patched ------
    first = icache(*certs_args)
    assert first.returncode == 0, first.stderr
    tls_type, tls = secret_data(kube, namespace, "inference-cache-webhook-tls")
    assert tls_type == "kubernetes.io/tls"
    assert set(tls) == {"tls.crt", "tls.key", "ca.crt"}
    ca_type, ca = secret_data(kube, namespace, "inference-cache-webhook-tls-ca")
    assert ca_type == "Opaque"
    assert set(ca) == {"ca.crt", "ca.key"}
    bundle = (cert_dir / "ca.crt").read_bytes()
    assert base64.b64decode(tls["ca.crt"]) == bundle
    assert (cert_dir / "tls.key").stat().st_mode & 0o077 == 0

    configs = webhook_configs.read(kube)
    paths = set()
    for config in configs.values():
        for webhook in config["webhooks"]:
            client_config = webhook["clientConfig"]
            assert "service" not in client_config
            assert client_config["url"].startswith(url_base + "/")
            assert base64.b64decode(client_config["caBundle"]) == bundle
            paths.add(client_config["url"][len(url_base) :])
    assert paths == {
        "/mutate-inferencecache-io-v1alpha1-cachebackend",
        "/validate-inferencecache-io-v1alpha1-cachebackend",
        "/mutate--v1-pod",
    }

    # -- the API server calls a real webhook with that certificate --------------
    proc = start_webhook(control_plane, cert_dir, port, tmp_path / "webhook.log")
    try:
        # The API server picks up webhook configurations asynchronously; a dry run
        # persists nothing, so poll it until our webhook is the one answering.
        def our_denial() -> str:
            message = _rejection(kube, namespace, new_cb("bad", **INVALID_SPEC))
            if message is None or "denied the request" not in message:
                # Not yet (or not us): raise so a timeout reports what the API server said.
                raise AssertionError(f"not rejected by our webhook yet: {message}")
            return message

        message = wait_until(
            our_denial,
            timeout=30,
            description="the API server rejecting through vcachebackend.inferencecache.io",
        )
        assert 'admission webhook "vcachebackend.inferencecache.io" denied the request' in message
        assert "spec.remoteStorage.endpoint" in message
        with pytest.raises(ApiError) as denied:
            kube.request("POST", cachebackends(namespace), body=new_cb("bad", **INVALID_SPEC))
        assert denied.value.status in (400, 422)
        assert "vcachebackend.inferencecache.io" in json.loads(denied.value.body)["message"]

        # A valid one is admitted and defaulted by mcachebackend.inferencecache.io: the
        # webhook materialises spec.integration and spec.observation, the API server
        # then stamps their schema defaults.
        good = new_cb("good")

        def our_defaults() -> bool:
            # The mutating configuration reaches the API server through an informer of
            # its own: our validating webhook answering says nothing about it.
            dry_run = kube.request(
                "POST", cachebackends(namespace), query={"dryRun": "All"}, body=good
            )
            return "integration" in dry_run["spec"]

        wait_until(
            our_defaults,
            timeout=30,
            description="the API server defaulting through mcachebackend.inferencecache.io",
        )
        created = kube.request("POST", cachebackends(namespace), body=good)
        assert created["spec"]["integration"]["mode"] == "Offload"
        assert created["spec"]["integration"]["failOpen"] is True
        assert created["spec"]["observation"]["firstEventTimeout"] == "5m"

        # The Pod webhook (mpod.inferencecache.io, failurePolicy Ignore) wires a
        # matching engine Pod; the opt-out label keeps the API server from calling it.
        _wire_engine_pod(kube, namespace)
    finally:
        terminate_process_group(proc)

    # -- second run: nothing to do, nothing written ------------------------------
    since = control_plane.audit_offset()
    second = icache(*certs_args)
    assert second.returncode == 0, second.stderr
    assert "CA: kept" in second.stderr
    assert "serving certificate: kept" in second.stderr
    assert secret_data(kube, namespace, "inference-cache-webhook-tls-ca")[1] == ca
    assert secret_data(kube, namespace, "inference-cache-webhook-tls")[1] == tls
    assert webhook_configs.read(kube) == configs
    control_plane.audit_barrier(since)
    writes = [
        e
        for e in control_plane.write_events(since)
        if e.resource
        in ("secrets", "mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ]
    assert writes == [], [f"{e.verb} {e.resource}/{e.name}" for e in writes]

    # -- forced renewal keeps the CA and the caBundle ----------------------------
    renewed = icache(*certs_args, "--renew")
    assert renewed.returncode == 0, renewed.stderr
    assert secret_data(kube, namespace, "inference-cache-webhook-tls-ca")[1] == ca
    new_tls = secret_data(kube, namespace, "inference-cache-webhook-tls")[1]
    assert new_tls["tls.crt"] != tls["tls.crt"]
    assert new_tls["ca.crt"] == tls["ca.crt"]
    assert webhook_configs.read(kube) == configs


def _wire_engine_pod(kube: Kube, namespace: str) -> None:
    (backend,) = [
        d
        for name, d in sample_documents()
        if name == "vllm-lmcache-host-only.yaml" and d["kind"] == "CacheBackend"
    ]
    (engine,) = [
        d
        for name, d in sample_documents()
        if name == "vllm-lmcache-host-only.yaml" and d["kind"] == "Deployment"
    ]
    kube.request("POST", cachebackends(namespace), body=copy.deepcopy(backend))
    pods = f"/api/v1/namespaces/{namespace}/pods"
    # Pods need the namespace's default ServiceAccount (the harness creates it).
    wait_until(
        lambda: kube.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        timeout=30,
        description="default ServiceAccount",
    )
    template = engine["spec"]["template"]

    wired = kube.request("POST", pods, body=template_pod(template, "engine", {}))
    annotations = wired["metadata"].get("annotations") or {}
    assert (
        annotations.get("inferencecache.io/injected-by")
        == f"{namespace}/{backend['metadata']['name']}"
    )
    opted_out = kube.request(
        "POST",
        pods,
        body=template_pod(template, "opted-out", {"inferencecache.io/pod-webhook": "disabled"}),
    )
    assert not any(
        k.startswith("inferencecache.io/") for k in opted_out["metadata"].get("annotations") or {}
    )


def test_certs_fails_loudly_when_a_configuration_is_missing(
    control_plane: ControlPlane, kube: Kube, namespace: str
) -> None:
    """The Secrets are still written (the next run after `kubectl apply` patches)."""
    result = icache(
        "certs",
        f"--kubeconfig={control_plane.kubeconfig_path}",
        f"--namespace={namespace}",
        "--mutating-config=icache-test-does-not-exist",
        "--validating-config=",
    )
    assert result.returncode == 1
    assert "not found: MutatingWebhookConfiguration icache-test-does-not-exist" in result.stderr
    tls_type, tls = secret_data(kube, namespace, "inference-cache-webhook-tls")
    assert tls_type == "kubernetes.io/tls"
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["tls.crt"]))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"inference-cache-webhook.{namespace}.svc" in san.get_values_for_type(x509.DNSName)


def test_rotate_ca_keeps_the_old_ca_trusted_until_dropped(
    control_plane: ControlPlane, kube: Kube, namespace: str
) -> None:
    base = [
        "certs",
        f"--kubeconfig={control_plane.kubeconfig_path}",
        f"--namespace={namespace}",
        "--mutating-config=",
        "--validating-config=",
    ]
    assert icache(*base).returncode == 0
    _, ca_before = secret_data(kube, namespace, "inference-cache-webhook-tls-ca")
    rotated = icache(*base, "--rotate-ca")
    assert rotated.returncode == 0, rotated.stderr
    _, ca_after = secret_data(kube, namespace, "inference-cache-webhook-tls-ca")
    assert ca_after["ca.crt"] != ca_before["ca.crt"]
    assert ca_after["previous-ca.crt"] == ca_before["ca.crt"]
    _, tls = secret_data(kube, namespace, "inference-cache-webhook-tls")
    bundle = base64.b64decode(tls["ca.crt"])
    assert base64.b64decode(ca_before["ca.crt"]) in bundle
    assert base64.b64decode(ca_after["ca.crt"]) in bundle
    dropped = icache(*base, "--drop-previous-ca")
    assert dropped.returncode == 0, dropped.stderr
    _, tls = secret_data(kube, namespace, "inference-cache-webhook-tls")
    assert base64.b64decode(tls["ca.crt"]) == base64.b64decode(ca_after["ca.crt"])

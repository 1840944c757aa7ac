"""Run a real `icache webhook` over TLS and register it with the test API server.

The API server calls it through URL client configs with a generated CA, exactly as
in a cluster (only the URL replaces the Service reference).
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.harness.controlplane import (
    CertificateAuthority,
    free_port,
    tail,
    terminate_process_group,
    wait_until,
)

ICACHE = str(Path(sys.executable).parent / "icache")
TEST_NAMESPACE_LABEL = "inferencecache.io/webhook-test"


def spawn_webhook(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """`icache webhook ARGS` in its own session, output to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [ICACHE, "webhook", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes], log_path: Path, ctx: ssl.SSLContext | None = None
) -> None:
    """Poll ``url``/healthz until it answers 200; fail early if the process exits."""
    wait_until(
        lambda: urllib.request.urlopen(f"{url}/healthz", context=ctx, timeout=2).status == 200,
        timeout=30,
        description=f"icache webhook {url}/healthz",
        abort=lambda: (
            f"webhook exited {proc.returncode}:\n{tail(log_path)}"
            if proc.poll() is not None
            else None
        ),
    )


@dataclass
class WebhookProcess:
    url: str
    ca_pem: bytes
    log_path: Path
    cert_path: Path
    key_path: Path
    ca: CertificateAuthority
    proc: subprocess.Popen[bytes] | None = None


@contextmanager
def run_webhook(
    kubeconfig: Path | None = None, extra_args: list[str] | None = None
) -> Iterator[WebhookProcess]:
    """Start `icache webhook` with a fresh CA-signed certificate for 127.0.0.1."""
    with tempfile.TemporaryDirectory(prefix="icache-webhook-") as tmp:
        work = Path(tmp)
        ca = CertificateAuthority("icache-webhook-test-ca")
        cert_path, key_path = ca.issue_serving(["127.0.0.1", "localhost"]).write(work, "tls")
        port = free_port()
        log_path = work / "webhook.log"
        args = [
            ICACHE,
            "webhook",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tls-cert-file",
            str(cert_path),
            "--tls-key-file",
            str(key_path),
            "--tls-reload-interval",
            "0.5",
        ]
        if kubeconfig:
            args += ["--kubeconfig", str(kubeconfig)]
        args += extra_args or []
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        url = f"https://127.0.0.1:{port}"
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
        try:
            wait_until(
                lambda: (
                    urllib.request.urlopen(f"{url}/healthz", context=ctx, timeout=2).status == 200
                ),
                timeout=30,
                description="icache webhook /healthz",
                abort=lambda: (
                    f"webhook exited {proc.returncode}:\n{tail(log_path)}"
                    if proc.poll() is not None
                    else None
                ),
            )
            yield WebhookProcess(url, ca.cert_pem, log_path, cert_path, key_path, ca, proc)
        finally:
            terminate_process_group(proc)
            if os.environ.get("ICACHE_SHOW_WEBHOOK_LOG"):
                print(tail(log_path, 200))


@dataclass(frozen=True)
class Endpoint:
    """Where the API server calls the webhook: a base URL and the CA that signed it."""

    url: str
    ca_pem: bytes


def _client_config(hook: Endpoint | WebhookProcess, path: str) -> dict[str, Any]:
    return {"url": hook.url + path, "caBundle": base64.b64encode(hook.ca_pem).decode()}


def _namespace_selector(suffix: str) -> dict[str, Any]:
    # Only namespaces the admission tests label: the session's other tests are unaffected.
    return {"matchLabels": {TEST_NAMESPACE_LABEL: suffix}}


def webhook_configurations(
    hook: Endpoint | WebhookProcess, suffix: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    cb_rules = [
        {
            "apiGroups": ["inferencecache.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["cachebackends"],
        }
    ]
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"icache-test-mutating-{suffix}"},
        "webhooks": [
            {
                "name": "mcachebackend.inferencecache.io",
                "clientConfig": _client_config(
                    hook, "/mutate-inferencecache-io-v1alpha1-cachebackend"
                ),
                "rules": cb_rules,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": _namespace_selector(suffix),
                "timeoutSeconds": 10,
            },
            {
                "name": "mpod.inferencecache.io",
                "clientConfig": _client_config(hook, "/mutate--v1-pod"),
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": _namespace_selector(suffix),
                "timeoutSeconds": 5,
                "reinvocationPolicy": "Never",
            },
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"icache-test-validating-{suffix}"},
        "webhooks": [
            {
                "name": "vcachebackend.inferencecache.io",
                "clientConfig": _client_config(
                    hook, "/validate-inferencecache-io-v1alpha1-cachebackend"
                ),
                "rules": cb_rules,
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": _namespace_selector(suffix),
                "timeoutSeconds": 10,
            }
        ],
    }
    return mutating, validating


@contextmanager
def registered(
    api: client.ApiClient, hook: Endpoint | WebhookProcess, suffix: str
) -> Iterator[None]:
    """Register both webhook configurations; remove them afterwards."""
    adm = client.AdmissionregistrationV1Api(api)
    # Plain manifest dicts: the client serialises them as the request bodies.
    mutating: Any
    validating: Any
    mutating, validating = webhook_configurations(hook, suffix)
    adm.create_mutating_webhook_configuration(mutating)
    adm.create_validating_webhook_configuration(validating)
    try:
        yield
    finally:
        for delete, name in (
            (adm.delete_mutating_webhook_configuration, mutating["metadata"]["name"]),
            (adm.delete_validating_webhook_configuration, validating["metadata"]["name"]),
        ):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def labelled_namespace(api: client.ApiClient, name: str, suffix: str) -> str:
    """A namespace the configurations registered with ``suffix`` apply to."""
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels={TEST_NAMESPACE_LABEL: suffix})
        )
    )
    return name


def served_serial(port: int, ca_pem: bytes) -> int:
    """The serial number of the certificate a TLS server on 127.0.0.1:``port`` serves
    now (a fresh handshake, verified against ``ca_pem``)."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=3) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number

"""The self-signed path's rotation CronJob (manifests/components/cert-rotation), against
the real API server and a real `icache webhook` over TLS.

The job's own command (`icache certs` with the CronJob's args) runs as the job's
ServiceAccount, under the RBAC the install renders, twice: once inside the
certificates' validity, where it must write nothing, and once across a forced
renewal window (`--renew-before` longer than what is left), where it must rotate
the CA with overlap and re-issue the serving certificate. Meanwhile the API server
keeps calling the webhook and the test keeps handshaking with it, trusting whatever
caBundle the configuration holds at that moment: not one may fail. The only
stand-in is the kubelet: ``SecretVolume`` projects the Secret into files exactly as
a Secret volume does (a new timestamped directory, then an atomic ``..data`` symlink
swap), when the test says so, so the overlap is checked on both sides of the swap.

Differences from the cluster, all in how the job reaches things: `--kubeconfig` with
the ServiceAccount's identity (a client certificate) instead of its token, and
`--url-base` (the API server calls the webhook at 127.0.0.1 instead of the Service).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from icache_install.manifests_cli import render_manifests
from kubeio.client import ApiError, Kube
from tests.harness.controlplane import ControlPlane, free_port, terminate_process_group, wait_until
from tests.integration.certs_webhook import (
    CONFIG_PATHS,
    WEBHOOK_KINDS,
    cachebackends,
    icache,
    secret_data,
    start_webhook,
)

ROTATION = "inference-cache-cert-rotation"
TLS_SECRET = "inference-cache-webhook-tls"
CA_SECRET = "inference-cache-webhook-tls-ca"
RBAC_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}
EVENTS_ONLY = {
    "runtime": "VLLM",
    "integration": {"mode": "EventsOnly"},
    "engineSelector": {"matchLabels": {"app": "rotation"}},
}


@dataclass
class Install:
    """The rotation job's objects and the two webhook configurations, rendered for the
    test's namespace and created for real (the configurations scoped to it)."""

    namespace: str
    cronjob: dict[str, Any]
    created: list[str] = field(default_factory=list)


@pytest.fixture
def install(kube: Kube, namespace: str, cachebackend_crd: dict[str, Any]) -> Iterator[Install]:
    docs = render_manifests(namespace=namespace)
    mine = Install(namespace, _one(docs, "CronJob", ROTATION))
    try:
        for doc in docs:
            kind, name = doc["kind"], doc["metadata"]["name"]
            if name == ROTATION and kind in RBAC_PATHS:
                path = RBAC_PATHS[kind].format(ns=namespace)
            elif kind in WEBHOOK_KINDS:
                path = CONFIG_PATHS[kind]
                doc = copy.deepcopy(doc)
                for webhook in doc["webhooks"]:
                    webhook["namespaceSelector"] = {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    }
            else:
                continue
            kube.request("POST", path, body=doc)
            mine.created.append(f"{path}/{name}")
        yield mine
    finally:
        for path in reversed(mine.created):
            try:
                kube.request("DELETE", path)
            except ApiError as exc:
                if not exc.not_found:
                    raise


def _sa_groups(namespace: str) -> tuple[str, ...]:
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


class SecretVolume:
    """A Secret volume as the kubelet keeps it: ``tls.crt -> ..data/tls.crt``, and
    ``..data`` a symlink to a timestamped directory replaced atomically on update."""

    def __init__(self, kube: Kube, namespace: str, directory: Path) -> None:
        self.kube, self.namespace, self.dir = kube, namespace, directory
        directory.mkdir(parents=True, exist_ok=True)

    def sync(self) -> None:
        _, data = secret_data(self.kube, self.namespace, TLS_SECRET)
        stamp = self.dir / f"..{time.time_ns()}"
        stamp.mkdir()
        for key, value in data.items():
            (stamp / key).write_bytes(base64.b64decode(value))
        staging = self.dir / "..data_tmp"
        staging.symlink_to(stamp.name)
        os.replace(staging, self.dir / "..data")
        for key in data:
            link = self.dir / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")


def _bundle(kube: Kube) -> bytes:
    """The caBundle the API server trusts for the validating webhook right now."""
    config = kube.request(
        "GET", f"{CONFIG_PATHS['ValidatingWebhookConfiguration']}/inference-cache-validating"
    )
    return base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])


def _served_fingerprint(port: int, bundle: bytes) -> str:
    """A full TLS handshake with the webhook, trusting only ``bundle``; the SHA-256
    of the certificate it served."""
    ctx = ssl.create_default_context(cadata=bundle.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return hashlib.sha256(tls.getpeercert(binary_form=True) or b"").hexdigest()


def _fingerprint(secret: dict[str, str]) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["tls.crt"]))
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


class Traffic(threading.Thread):
    """Admissions through both CacheBackend webhooks (dry-run creates: failurePolicy
    Fail, so a TLS failure is an error the API server returns) and direct handshakes
    trusting the caBundle of the moment, until stopped; every failure is kept."""

    def __init__(self, kube: Kube, namespace: str, port: int) -> None:
        super().__init__(name="rotation-traffic", daemon=True)
        self.kube, self.namespace, self.port = kube, namespace, port
        self.admitted = 0
        self.handshakes = 0
        self.failures: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        body = {
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": {"name": "probe"},
            "spec": EVENTS_ONLY,
        }
        while not self._halt.is_set():
            try:
                self.kube.request(
                    "POST", cachebackends(self.namespace), query={"dryRun": "All"}, body=body
                )
                self.admitted += 1
            except ApiError as exc:
                self.failures.append(f"admission: {exc.status} {exc.body[:300]}")
            try:
                _served_fingerprint(self.port, _bundle(self.kube))
                self.handshakes += 1
            except (OSError, ssl.SSLError, ApiError) as exc:
                self.failures.append(f"handshake: {exc!r}")
            self._halt.wait(0.05)

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:  # started
            self.join(timeout=30)


def _job_command(install: Install, kubeconfig: Path, url_base: str, *extra: str) -> list[str]:
    """The CronJob's container args, with $(POD_NAMESPACE) expanded as the kubelet
    does, plus how the test reaches the API server and the webhook."""
    (container,) = install.cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = [a.replace("$(POD_NAMESPACE)", install.namespace) for a in container["args"]]
    return [*args, f"--kubeconfig={kubeconfig}", f"--url-base={url_base}", *extra]


def test_the_rotation_job_rotates_with_overlap_and_no_failed_handshake(
    control_plane: ControlPlane, kube: Kube, install: Install, tmp_path: Path
) -> None:
    ns = install.namespace
    port = free_port()
    url_base = f"https://127.0.0.1:{port}"
    job_identity = control_plane.write_kubeconfig(
        tmp_path / "rotation.kubeconfig",
        control_plane.client_keypair(f"system:serviceaccount:{ns}:{ROTATION}", _sa_groups(ns)),
    )

    # -- the install's first run (an administrator; short-lived certificates) -----
    first = icache(
        "certs",
        f"--kubeconfig={control_plane.kubeconfig_path}",
        f"--namespace={ns}",
        f"--url-base={url_base}",
        "--redis-secret=",
        "--days=30",
        "--ca-days=60",
    )
    assert first.returncode == 0, first.stderr
    _, old_ca = secret_data(kube, ns, CA_SECRET)
    _, old_tls = secret_data(kube, ns, TLS_SECRET)
    volume = SecretVolume(kube, ns, tmp_path / "tls")
    volume.sync()
    proc = start_webhook(control_plane, volume.dir, port, tmp_path / "webhook.log")
    traffic = Traffic(kube, ns, port)
    try:
        wait_until(
            lambda: kube.request(
                "POST",
                cachebackends(ns),
                query={"dryRun": "All"},
                body={"apiVersion": "inferencecache.io/v1alpha1", "kind": "CacheBackend",
                      "metadata": {"name": "warm"}, "spec": EVENTS_ONLY},
            ),
            timeout=30,
            description="the API server calling the webhook",
        )  # fmt: skip
        traffic.start()

        # -- the job inside the validity: reads, writes nothing ----------------------
        quiet = icache(*_job_command(install, job_identity, url_base))
        assert quiet.returncode == 0, quiet.stderr
        assert "CA: kept" in quiet.stderr
        assert "serving certificate: kept" in quiet.stderr
        assert secret_data(kube, ns, CA_SECRET)[1] == old_ca
        assert secret_data(kube, ns, TLS_SECRET)[1] == old_tls

        # -- the job across a forced renewal window: CA rotated, overlap kept ----------
        rotated = icache(*_job_command(install, job_identity, url_base, "--renew-before=90d"))
        assert rotated.returncode == 0, rotated.stderr
        _, new_ca = secret_data(kube, ns, CA_SECRET)
        _, new_tls = secret_data(kube, ns, TLS_SECRET)
        assert new_ca["ca.crt"] != old_ca["ca.crt"]
        assert new_ca["previous-ca.crt"] == old_ca["ca.crt"]
        assert new_tls["tls.crt"] != old_tls["tls.crt"]
        bundle = _bundle(kube)
        for ca_pem in (old_ca["ca.crt"], new_ca["ca.crt"]):
            assert base64.b64decode(ca_pem) in bundle
        for kind in WEBHOOK_KINDS:  # both configurations, every webhook
            name = (
                "inference-cache-mutating"
                if kind.startswith("Mutating")
                else "inference-cache-validating"
            )
            config = kube.request("GET", f"{CONFIG_PATHS[kind]}/{name}")
            assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {
                base64.b64encode(bundle).decode()
            }

        # The overlap, on both sides of the kubelet's update: the bundle the API
        # server now holds trusts the certificate still served and the new one.
        assert _served_fingerprint(port, bundle) == _fingerprint(old_tls)
        served_before = traffic.admitted
        volume.sync()
        wait_until(
            lambda: _served_fingerprint(port, bundle) == _fingerprint(new_tls),
            timeout=30,
            description="the webhook serving the rotated certificate",
        )
        wait_until(
            lambda: traffic.admitted >= served_before + 20,
            timeout=60,
            description="admissions after the swap",
        )
    finally:
        try:
            traffic.stop()
        finally:
            terminate_process_group(proc)

    assert traffic.failures == []
    assert traffic.admitted > 20
    assert traffic.handshakes > 20


def test_the_rotation_job_may_touch_nothing_but_its_two_secrets_and_configurations(
    control_plane: ControlPlane, kube: Kube, install: Install
) -> None:
    """Least privilege: get/update on the two certificate Secrets, get/patch on the two
    webhook configurations, by name; no create, no list, no other Secret."""
    ns = install.namespace
    kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/secrets",
        body={"metadata": {"name": "someone-elses"}, "stringData": {"k": "v"}},
    )
    job = Kube(
        control_plane.api_client_for(f"system:serviceaccount:{ns}:{ROTATION}", _sa_groups(ns))
    )
    assert job.request(
        "GET", f"{CONFIG_PATHS['MutatingWebhookConfiguration']}/inference-cache-mutating"
    )
    denied = [
        ("GET", f"/api/v1/namespaces/{ns}/secrets/someone-elses", None),
        ("GET", f"/api/v1/namespaces/{ns}/secrets", None),
        (
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            {"metadata": {"name": f"x-{uuid.uuid4().hex[:6]}"}},
        ),
        ("DELETE", f"/api/v1/namespaces/{ns}/secrets/{TLS_SECRET}", None),
        ("GET", f"{CONFIG_PATHS['MutatingWebhookConfiguration']}", None),
        (
            "DELETE",
            f"{CONFIG_PATHS['ValidatingWebhookConfiguration']}/inference-cache-validating",
            None,
        ),
        ("GET", "/api/v1/namespaces/kube-system/secrets", None),
    ]
    for verb, path, body in denied:
        with pytest.raises(ApiError) as refused:
            job.request(verb, path, body=body)
        assert refused.value.status == 403, (verb, path, refused.value.status)
